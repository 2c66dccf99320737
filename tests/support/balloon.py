#!/usr/bin/env python3
"""A memory balloon for the real-pressure test: run inside a memory cgroup, it
allocates (and touches) 4 MiB at a time until the group's available memory,
measured as the warden measures it (limit - usage + inactive file pages), is
under TARGET_PCT of the limit, and keeps it there: whatever the group frees,
it takes again, at a bounded rate (a growing application, not an instant
one).

usage: balloon.py CGROUP_DIR LIMIT_BYTES TARGET_PCT SECONDS_PER_CHUNK [once]

With `once` it stops growing when it first reaches the target and holds
what it took: pressure that a smaller window relieves (the worker test).
"""
import os
import sys
import time

group, limit, target_pct, pause = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
once = len(sys.argv) > 5 and sys.argv[5] == "once"
v1 = os.path.exists(os.path.join(group, "memory.usage_in_bytes"))
usage_file = os.path.join(group, "memory.usage_in_bytes" if v1 else "memory.current")
inactive_key = "total_inactive_file" if v1 else "inactive_file"


def available():
    used = int(open(usage_file).read())
    stat = dict(line.split() for line in open(os.path.join(group, "memory.stat")))
    return limit - used + int(stat.get(inactive_key, 0))


chunks = []
while True:
    if available() > limit * target_pct / 100:
        block = bytearray(4 << 20)
        for i in range(0, len(block), 4096):
            block[i] = 1
        chunks.append(block)
        time.sleep(pause)
    elif once:
        while True:
            time.sleep(3600)
    else:
        time.sleep(0.05)
