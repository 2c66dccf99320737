#!/usr/bin/env python3
"""mlx_runner.py: the MLX engine's child process.

The warden starts it with the MLX venv's python:

    python /path/mlx_runner.py --model DIR --host 127.0.0.1 --port N

and every argument goes unchanged to mlx_vlm.server's CLI (mlx-vlm 0.7.10).
Before the server is imported it:

  * on Linux, re-executes itself once (same pid) with LD_PRELOAD naming the
    OpenBLAS that opencv-python ships in the venv, unless LD_PRELOAD already
    carries an OpenBLAS: the mlx-cpu wheel links the reference BLAS, and the
    preload makes the CPU path about 10x faster. The marker variable
    WARDEN_MLX_RUNNER_REEXEC stops a second re-exec. No OpenBLAS found: it
    carries on without.
  * sets MLX_VLM_MAX_NUM_SEQS=1 and HF_HUB_OFFLINE=1 unless already set.
  * bounds MLX's buffer cache to 0 (mx.set_cache_limit(0)), so freed buffers
    go back to the system; if that is unavailable it logs one WARNING line to
    stderr and keeps MLX's default.

The API key comes in the environment as MLX_VLM_SERVER_API_KEY, never in
argv: mlx-vlm 0.7.10 reads that variable itself (mlx_vlm/server/app.py,
_server_api_key(), on every request); its --api-key flag only copies its
value into the same variable.
"""

import glob
import os
import sys

REEXEC_MARKER = "WARDEN_MLX_RUNNER_REEXEC"


def _find_openblas():
    """The OpenBLAS bundled by opencv-python in this interpreter's site-packages."""
    import site
    import sysconfig

    dirs = []
    for key in ("platlib", "purelib"):
        path = sysconfig.get_paths().get(key)
        if path and path not in dirs:
            dirs.append(path)
    try:
        for path in site.getsitepackages():
            if path not in dirs:
                dirs.append(path)
    except AttributeError:  # some embedded interpreters lack it
        pass
    for d in dirs:
        hits = sorted(glob.glob(os.path.join(d, "opencv_python.libs", "libopenblas*.so*")))
        if hits:
            return hits[0]
    return None


def _preload_openblas():
    """Re-exec once with the venv's OpenBLAS in LD_PRELOAD (Linux only)."""
    if not sys.platform.startswith("linux") or os.environ.get(REEXEC_MARKER):
        return
    current = os.environ.get("LD_PRELOAD", "")
    entries = [e for e in current.replace(" ", ":").split(":") if e]
    if any("openblas" in os.path.basename(e).lower() for e in entries):
        return
    lib = _find_openblas()
    if lib is None:
        return
    env = dict(os.environ)
    env["LD_PRELOAD"] = ":".join([lib] + entries)
    env[REEXEC_MARKER] = "1"
    sys.stdout.flush()
    sys.stderr.flush()
    # execve keeps the pid (and the parent-death signal), so the warden's
    # child stays the same process.
    # sys.orig_argv keeps the interpreter's own flags (-u, -X ...).
    argv = list(getattr(sys, "orig_argv", None) or [sys.executable, os.path.abspath(__file__)] + sys.argv[1:])
    try:
        os.execve(sys.executable, argv, env)
    except OSError as e:
        print(f"WARNING: could not re-exec with the OpenBLAS preload ({e}); continuing without", file=sys.stderr)


def _bound_mlx_cache():
    try:
        import mlx.core as mx

        mx.set_cache_limit(0)
    except Exception as e:  # ImportError, AttributeError, a runtime error ...
        print(
            f"WARNING: mlx buffer cache limit unavailable ({type(e).__name__}); using MLX's default",
            file=sys.stderr,
            flush=True,
        )


def main():
    _preload_openblas()
    os.environ.setdefault("MLX_VLM_MAX_NUM_SEQS", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    _bound_mlx_cache()

    from mlx_vlm.server import main as server_main

    # mlx_vlm.server's CLI parses sys.argv itself.
    sys.argv = ["mlx_vlm.server"] + sys.argv[1:]
    server_main()


if __name__ == "__main__":
    main()
