#!/usr/bin/env python3
"""Writes the two GGUF models of the GPU proof (random weights, llama
architecture, a byte-fallback SentencePiece-style vocabulary so llama-server
loads them):

  big.gguf    16 layers, 16 KV heads of 128: 128 KiB of KV per token and a
              2,097,152-token trained window, so the VRAM budget of a
              139 GiB card (about 1M tokens) binds the window;
  small.gguf  4 layers of 512: fits whole at its 8192-token trained window.

usage: gen_gpu_models.py OUTDIR   (needs the gguf package and numpy)
"""
import os
import sys

import numpy as np
import gguf


def vocab():
    # Every byte must exist for the tokenizer's byte fallback (the prompt's
    # "\u2581" is three bytes), but random weights generate anything: the
    # bytes that would print invalid UTF-8 (and control bytes) are typed
    # CONTROL, which llama.cpp renders as nothing, so every answer parses.
    printable = set([0x09, 0x0A, 0x0D] + list(range(0x20, 0x7F)))
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    words = ["\u2581the", "\u2581a", "\u2581of", "\u2581and", "\u2581to", "\u2581is", "\u2581Paris", "\u2581France"]
    tokens += words
    scores = [0.0] * (3 + 256) + [-float(i) for i in range(len(words))]
    # unknown, control, then BYTE (6) or CONTROL (3) per byte, then normal words
    types = [2, 3, 3] + [6 if b in printable else 3 for b in range(256)] + [1] * len(words)
    return tokens, scores, types



def add_tokenizer(w):
    """Writes the byte-fallback vocabulary, its special tokens and a plain
    chat template into `w`; the tokens, for the embedding and output sizes."""
    tokens, scores, types = vocab()
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    # A plain template: random weights print anything, and llama-server's
    # default (chatml with tool-call parsing) can refuse to parse it.
    w.add_chat_template("{% for m in messages %}{{ m['content'] }}\n{% endfor %}")
    return tokens

def write(path, n_layer, n_embd, n_head, n_head_kv, n_ff, ctx):
    w = gguf.GGUFWriter(path, "llama")
    head_dim = n_embd // n_head
    w.add_name(os.path.basename(path))
    w.add_context_length(ctx)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_rope_dimension_count(head_dim)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    tokens = add_tokenizer(w)
    rng = np.random.default_rng(0)

    def t(name, *shape):
        w.add_tensor(name, (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float16))

    n_vocab = len(tokens)
    t("token_embd.weight", n_vocab, n_embd)
    w.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    t("output.weight", n_vocab, n_embd)
    kv = n_head_kv * head_dim
    for i in range(n_layer):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        t(f"blk.{i}.attn_q.weight", n_embd, n_embd)
        t(f"blk.{i}.attn_k.weight", kv, n_embd)
        t(f"blk.{i}.attn_v.weight", kv, n_embd)
        t(f"blk.{i}.attn_output.weight", n_embd, n_embd)
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
        t(f"blk.{i}.ffn_gate.weight", n_ff, n_embd)
        t(f"blk.{i}.ffn_up.weight", n_ff, n_embd)
        t(f"blk.{i}.ffn_down.weight", n_embd, n_ff)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    write(os.path.join(out, "big.gguf"), 16, 2048, 16, 16, 512, 2_097_152)
    write(os.path.join(out, "small.gguf"), 4, 512, 8, 8, 1024, 8192)
    print("models written to", out)
