#!/usr/bin/env python3
"""Writes a tiny Mamba GGUF (random weights, recurrent memory only) that the
pinned llama-server loads and answers with: the shape whose saved KV cache
the warden cannot use again (law::kv_keep), for the test that says so.

usage: gen_mamba_model.py OUT.gguf   (needs the gguf package and numpy)
"""
import os
import sys

import numpy as np
import gguf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_gpu_models import add_tokenizer  # noqa: E402  (the byte-fallback vocabulary)


def write(path, n_layer=2, n_embd=64, d_state=8, d_conv=4, ctx=8192):
    d_inner = 2 * n_embd
    dt_rank = 4
    w = gguf.GGUFWriter(path, "mamba")
    w.add_name(os.path.basename(path))
    w.add_context_length(ctx)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(0)
    w.add_head_count(0)
    w.add_ssm_conv_kernel(d_conv)
    w.add_ssm_inner_size(d_inner)
    w.add_ssm_state_size(d_state)
    w.add_ssm_time_step_rank(dt_rank)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    tokens = add_tokenizer(w)
    rng = np.random.default_rng(0)

    def t(name, *shape):
        w.add_tensor(name, (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float32))

    n_vocab = len(tokens)
    t("token_embd.weight", n_vocab, n_embd)
    w.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    t("output.weight", n_vocab, n_embd)
    for i in range(n_layer):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        t(f"blk.{i}.ssm_in.weight", 2 * d_inner, n_embd)
        t(f"blk.{i}.ssm_conv1d.weight", d_inner, d_conv)
        w.add_tensor(f"blk.{i}.ssm_conv1d.bias", np.zeros(d_inner, dtype=np.float32))
        t(f"blk.{i}.ssm_x.weight", dt_rank + 2 * d_state, d_inner)
        t(f"blk.{i}.ssm_dt.weight", d_inner, dt_rank)
        w.add_tensor(f"blk.{i}.ssm_dt.bias", np.zeros(d_inner, dtype=np.float32))
        w.add_tensor(f"blk.{i}.ssm_a", -np.ones((d_inner, d_state), dtype=np.float32))
        w.add_tensor(f"blk.{i}.ssm_d", np.ones(d_inner, dtype=np.float32))
        t(f"blk.{i}.ssm_out.weight", n_embd, d_inner)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    write(sys.argv[1])
    print("written", sys.argv[1])
