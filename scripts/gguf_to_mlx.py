#!/usr/bin/env python3
"""gguf_to_mlx.py GGUF OUTDIR [--dtype float32|float16|bfloat16]

Converts a llama-architecture GGUF into a Hugging Face style directory that
mlx_vlm.server (and transformers) can load:

  config.json             LlamaForCausalLM, from the GGUF metadata
  model.safetensors       every tensor dequantized, under HF llama names
                          (model-0000i-of-0000n.safetensors + index when large)
  tokenizer.json          byte-level BPE rebuilt with the `tokenizers` library
  tokenizer_config.json   bos/eos/pad tokens and the GGUF's chat template
  special_tokens_map.json
  generation_config.json

llama.cpp's converter permutes the rows of the Q and K projections (it
interleaves the two rotary halves of each head); that permutation is undone
here, with the KV head count for K. Without it the model answers garbage.

Exit status: 0 done; 1 a missing, unreadable or invalid file (or an I/O
error); 2 a valid GGUF this converter does not handle (an architecture other
than llama, a SentencePiece tokenizer, rope scaling it cannot express, ...).
OUTDIR must not exist or be empty; files are written there directly.

Needs: gguf, numpy, tokenizers, safetensors (setup-mlx.sh pins them).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from convert_errors import EXIT_BAD_FILE, EXIT_UNSUPPORTED, ConvertError, bad_file, unsupported  # noqa: E402

# A shard is written once this many bytes of converted tensors accumulate, so
# memory stays bounded for large models.
SHARD_BYTES = 2 << 30


try:
    import numpy as np
    import gguf
    from gguf.quants import dequantize
    from safetensors.numpy import save_file
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, Regex
except ImportError as e:  # pragma: no cover - depends on the environment
    print(
        f"gguf_to_mlx.py: error: missing Python package ({e}); run it with the MLX venv's "
        "python (scripts/setup-mlx.sh prints it as WARDEN_MLX_PYTHON)",
        file=sys.stderr,
    )
    sys.exit(EXIT_BAD_FILE)


def log(msg: str) -> None:
    print(f"gguf_to_mlx: {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------
# GGUF metadata


class Meta:
    def __init__(self, reader: "gguf.GGUFReader"):
        self.reader = reader

    def has(self, key: str) -> bool:
        return key in self.reader.fields

    def get(self, key: str, default=None):
        field = self.reader.fields.get(key)
        if field is None:
            return default
        types = field.types
        if not types:
            return default
        if types[0] == gguf.GGUFValueType.ARRAY:
            if types[-1] == gguf.GGUFValueType.STRING:
                return [bytes(field.parts[i]).decode("utf-8", errors="replace") for i in field.data]
            return [field.parts[i].tolist()[0] for i in field.data]
        if types[0] == gguf.GGUFValueType.STRING:
            return bytes(field.parts[field.data[0]]).decode("utf-8")
        value = field.parts[field.data[0]].tolist()[0]
        return value

    def require(self, key: str):
        value = self.get(key)
        if value is None:
            raise bad_file(f"the GGUF lacks the metadata key '{key}'")
        return value


def open_gguf(path: str) -> "gguf.GGUFReader":
    if not os.path.exists(path):
        raise bad_file(f"{path}: no such file")
    if not os.path.isfile(path):
        raise bad_file(f"{path}: not a regular file")
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as e:
        raise bad_file(f"{path}: cannot read: {e.strerror}")
    if magic != b"GGUF":
        raise bad_file(f"{path}: not a GGUF file (magic {magic!r}, expected b'GGUF')")
    try:
        return gguf.GGUFReader(path, "r")
    except Exception as e:  # truncated, corrupt header, bad offsets, ...
        raise bad_file(f"{path}: invalid or truncated GGUF ({type(e).__name__}: {e})")


# --------------------------------------------------------------------------
# Tensors

_LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_v.bias": "self_attn.v_proj.bias",
    "attn_output.weight": "self_attn.o_proj.weight",
    "attn_output.bias": "self_attn.o_proj.bias",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_gate.bias": "mlp.gate_proj.bias",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_up.bias": "mlp.up_proj.bias",
    "ffn_down.weight": "mlp.down_proj.weight",
    "ffn_down.bias": "mlp.down_proj.bias",
}
_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_BLK = re.compile(r"^blk\.(\d+)\.(.+)$")


def hf_name(name: str) -> str:
    if name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[name]
    m = _BLK.match(name)
    if m and m.group(2) in _LAYER_NAMES:
        return f"model.layers.{m.group(1)}.{_LAYER_NAMES[m.group(2)]}"
    if name == "rope_freqs.weight":
        raise unsupported(
            "the GGUF carries rope_freqs.weight (Llama-3.1 style rope scaling); its parameters "
            "are not in the metadata, so the converted model would be wrong"
        )
    if m and "_exps" in m.group(2):
        raise unsupported(f"mixture-of-experts tensors ({name}) are not supported")
    raise unsupported(f"unexpected tensor '{name}' for a llama model")


def unpermute(w: "np.ndarray", n_head: int) -> "np.ndarray":
    """Undo llama.cpp's rotary row permutation of a Q or K projection (or bias)."""
    rows = w.shape[0]
    if rows % (2 * n_head):
        raise bad_file(f"Q/K tensor with {rows} rows does not split into {n_head} heads")
    half = rows // n_head // 2
    return w.reshape(n_head, half, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def convert_tensor(t, n_head: int, n_kv: int) -> "np.ndarray":
    try:
        w = dequantize(t.data, t.tensor_type)
    except NotImplementedError:
        raise unsupported(f"tensor {t.name}: quantization type {t.tensor_type.name} cannot be dequantized")
    # GGUF lists dimensions fastest-first; numpy wants them slowest-first.
    shape = tuple(int(d) for d in reversed(t.shape.tolist()))
    try:
        w = np.asarray(w, dtype=np.float32).reshape(shape)
    except ValueError:
        raise bad_file(f"tensor {t.name}: data does not match its shape {shape}")
    if t.name.endswith(("attn_q.weight", "attn_q.bias")):
        w = unpermute(w, n_head)
    elif t.name.endswith(("attn_k.weight", "attn_k.bias")):
        w = unpermute(w, n_kv)
    return w


# --------------------------------------------------------------------------
# Tokenizer

# llama.cpp's token types
TT_NORMAL, TT_UNKNOWN, TT_CONTROL, TT_USER_DEFINED, TT_UNUSED, TT_BYTE = 1, 2, 3, 4, 5, 6

LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def pre_tokenizer_for(pre: str):
    """The HF pre-tokenizer matching llama.cpp's tokenizer.ggml.pre."""
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    if pre in ("smollm", "starcoder", "refact", "codeshell"):
        # individual digits, then GPT-2 byte-level (SmolLM / StarCoder tokenizers)
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    if pre in ("gpt2", "gpt-2", "default", "olmo", "jais"):
        return byte_level
    if pre in ("llama-bpe", "llama3", "smaug-bpe"):
        return pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated", invert=False),
                pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
            ]
        )
    raise unsupported(f"pre-tokenizer '{pre}' is not supported (known: smollm, gpt2, llama-bpe)")


def build_tokenizer(meta: Meta) -> tuple["Tokenizer", dict]:
    kind = meta.get("tokenizer.ggml.model")
    if kind != "gpt2":
        raise unsupported(
            f"tokenizer model '{kind}' is not supported: only byte-level BPE ('gpt2') is rebuilt "
            "(SentencePiece 'llama' tokenizers are not)"
        )
    tokens = meta.require("tokenizer.ggml.tokens")
    merges = meta.get("tokenizer.ggml.merges") or []
    types = meta.get("tokenizer.ggml.token_type") or [TT_NORMAL] * len(tokens)
    if len(types) != len(tokens):
        raise bad_file("tokenizer.ggml.token_type and tokenizer.ggml.tokens differ in length")
    pre = meta.get("tokenizer.ggml.pre", "default")

    vocab = {}
    for i, tok in enumerate(tokens):
        vocab.setdefault(tok, i)
    pairs = []
    for m in merges:
        parts = m.split(" ")
        if len(parts) != 2:
            raise bad_file(f"malformed merge '{m}' in tokenizer.ggml.merges")
        pairs.append((parts[0], parts[1]))

    tok = Tokenizer(models.BPE(vocab=vocab, merges=pairs, fuse_unk=False, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizer_for(pre)
    tok.decoder = decoders.ByteLevel()

    added = []
    for i, (t, ty) in enumerate(zip(tokens, types)):
        if ty == TT_CONTROL:
            added.append(AddedToken(t, special=True, normalized=False))
        elif ty == TT_USER_DEFINED:
            added.append(AddedToken(t, special=False, normalized=False))
    # add_tokens/add_special_tokens keep the vocabulary ids (they exist already).
    tok.add_tokens([a for a in added if not a.special])
    tok.add_special_tokens([a for a in added if a.special])

    def tok_of(key):
        tid = meta.get(key)
        if tid is None or not (0 <= tid < len(tokens)):
            return None, None
        return tid, tokens[tid]

    bos_id, bos = tok_of("tokenizer.ggml.bos_token_id")
    eos_id, eos = tok_of("tokenizer.ggml.eos_token_id")
    pad_id, pad = tok_of("tokenizer.ggml.padding_token_id")
    unk_id, unk = tok_of("tokenizer.ggml.unknown_token_id")
    add_bos = bool(meta.get("tokenizer.ggml.add_bos_token", False)) and bos is not None
    add_eos = bool(meta.get("tokenizer.ggml.add_eos_token", False)) and eos is not None

    byte_post = processors.ByteLevel(trim_offsets=False)
    if add_bos or add_eos:
        single = (f"{bos} " if add_bos else "") + "$A" + (f" {eos}" if add_eos else "")
        pair = single + " " + ((f"{bos} " if add_bos else "") + "$B:1" + (f" {eos}:1" if add_eos else ""))
        special = []
        if add_bos:
            special.append((bos, bos_id))
        if add_eos and eos != bos:
            special.append((eos, eos_id))
        tok.post_processor = processors.Sequence(
            [byte_post, processors.TemplateProcessing(single=single, pair=pair, special_tokens=special)]
        )
    else:
        tok.post_processor = byte_post

    info = {
        "bos": bos, "bos_id": bos_id, "eos": eos, "eos_id": eos_id,
        "pad": pad, "pad_id": pad_id, "unk": unk, "unk_id": unk_id,
        "add_bos": add_bos, "add_eos": add_eos, "n_vocab": len(tokens), "pre": pre,
    }
    return tok, info


# --------------------------------------------------------------------------


def convert(src: str, out: str, dtype: str) -> None:
    t0 = time.monotonic()
    reader = open_gguf(src)
    meta = Meta(reader)
    arch = meta.get("general.architecture")
    if arch != "llama":
        raise unsupported(
            f"architecture '{arch}' is not supported: this converter handles llama-architecture "
            "GGUFs with a byte-level BPE tokenizer only (e.g. SmolLM2, Llama 3)"
        )

    def need(key):
        return meta.require(f"llama.{key}")

    n_layer = int(need("block_count"))
    n_embd = int(need("embedding_length"))
    n_ff = meta.get("llama.feed_forward_length")
    if any(isinstance(meta.get(f"llama.{k}"), list)
           for k in ("feed_forward_length", "attention.head_count", "attention.head_count_kv")):
        raise unsupported("per-layer head counts / feed-forward sizes are not supported")
    n_head = int(need("attention.head_count"))
    n_kv = int(meta.get("llama.attention.head_count_kv", n_head))
    head_dim = int(meta.get("llama.attention.key_length", n_embd // n_head))
    if meta.get("llama.expert_count", 0):
        raise unsupported("mixture-of-experts llama models are not supported")
    rope_dims = meta.get("llama.rope.dimension_count", head_dim)
    if rope_dims != head_dim:
        raise unsupported(f"partial rotary embeddings (rope dims {rope_dims} of head dim {head_dim}) are not supported")

    rope_scaling = None
    scaling_type = meta.get("llama.rope.scaling.type")
    if scaling_type not in (None, "none"):
        factor = meta.get("llama.rope.scaling.factor")
        if scaling_type == "linear" and factor:
            rope_scaling = {"type": "linear", "factor": f32(factor)}
        else:
            raise unsupported(f"rope scaling '{scaling_type}' is not supported")

    tensors = {t.name: t for t in reader.tensors}
    if "token_embd.weight" not in tensors:
        raise bad_file("the GGUF has no token_embd.weight tensor")
    tied = "output.weight" not in tensors
    for name in tensors:
        hf_name(name)  # refuse unknown / unsupported tensors before writing anything

    tokenizer, tinfo = build_tokenizer(meta)
    emb_rows = int(tensors["token_embd.weight"].shape.tolist()[-1])
    vocab_size = int(meta.get("llama.vocab_size", emb_rows))
    if vocab_size != emb_rows:
        log(f"llama.vocab_size {vocab_size} differs from the embedding rows {emb_rows}; using {emb_rows}")
        vocab_size = emb_rows
    if n_ff is None:
        n_ff = int(tensors["blk.0.ffn_up.weight"].shape.tolist()[-1])

    np_dtype = {"float32": np.float32, "float16": np.float16}.get(dtype)

    if os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
        raise bad_file(f"{out}: exists and is not an empty directory")
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:
        raise bad_file(f"{out}: cannot create: {e.strerror}")

    log(
        f"{os.path.basename(src)}: llama, {n_layer} layers, dim {n_embd}, {n_head} heads "
        f"({n_kv} KV, head dim {head_dim}), vocab {vocab_size}, tied embeddings: {tied}, "
        f"{len(tensors)} tensors -> {dtype}"
    )

    # Tensors, in shards of at most SHARD_BYTES.
    shards: list[dict] = []
    current: dict = {}
    size = 0
    total = 0
    has_bias = {"attn": False, "mlp": False}
    for name, t in tensors.items():
        w = convert_tensor(t, n_head, n_kv)
        key = hf_name(name)
        if key.endswith(".bias"):
            has_bias["mlp" if ".mlp." in key else "attn"] = True
        if dtype == "bfloat16":
            # numpy has no bfloat16: store the top half of float32 words, rounded to nearest even.
            u = np.ascontiguousarray(w, dtype=np.float32).view(np.uint32)
            u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
            w = u
        else:
            w = np.ascontiguousarray(w, dtype=np_dtype)
        current[key] = w
        size += w.nbytes
        total += w.nbytes
        if size >= SHARD_BYTES:
            shards.append(current)
            current, size = {}, 0
    if current or not shards:
        shards.append(current)

    weight_map = {}
    n = len(shards)
    for i, shard in enumerate(shards):
        fname = "model.safetensors" if n == 1 else f"model-{i + 1:05d}-of-{n:05d}.safetensors"
        path = os.path.join(out, fname)
        if dtype == "bfloat16":
            _save_bf16(shard, path)
        else:
            save_file(shard, path, metadata={"format": "pt"})
        os.chmod(path, 0o644)  # safetensors creates it 0600
        for k in shard:
            weight_map[k] = fname
        shards[i] = None  # free memory
    if n > 1:
        write_json(out, "model.safetensors.index.json", {"metadata": {"total_size": total}, "weight_map": weight_map})

    context = int(meta.get("llama.context_length", 4096))
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": n_embd,
        "intermediate_size": int(n_ff),
        "num_hidden_layers": n_layer,
        "num_attention_heads": n_head,
        "num_key_value_heads": n_kv,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "rms_norm_eps": f32(meta.get("llama.attention.layer_norm_rms_epsilon", 1e-5)),
        "rope_theta": f32(meta.get("llama.rope.freq_base", 10000.0)),
        "rope_scaling": rope_scaling,
        "max_position_embeddings": context,
        "vocab_size": vocab_size,
        "tie_word_embeddings": tied,
        "attention_bias": has_bias["attn"],
        "mlp_bias": has_bias["mlp"],
        "bos_token_id": tinfo["bos_id"],
        "eos_token_id": tinfo["eos_id"],
        "pad_token_id": tinfo["pad_id"],
        "torch_dtype": dtype,
        "_converted_from": os.path.basename(src),
    }
    if meta.get("general.name"):
        config["_name"] = meta.get("general.name")
    write_json(out, "config.json", config)

    tokenizer.save(os.path.join(out, "tokenizer.json"))
    tok_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": tinfo["bos"],
        "eos_token": tinfo["eos"],
        "pad_token": tinfo["pad"],
        "unk_token": tinfo["unk"],
        "add_bos_token": tinfo["add_bos"],
        "add_eos_token": tinfo["add_eos"],
        "clean_up_tokenization_spaces": False,
        "model_max_length": context,
    }
    template = meta.get("tokenizer.chat_template")
    if template:
        tok_config["chat_template"] = template
    else:
        log("the GGUF carries no tokenizer.chat_template; chat requests will need one")
    write_json(out, "tokenizer_config.json", tok_config)
    write_json(
        out,
        "special_tokens_map.json",
        {k: v for k, v in (("bos_token", tinfo["bos"]), ("eos_token", tinfo["eos"]),
                            ("pad_token", tinfo["pad"]), ("unk_token", tinfo["unk"])) if v is not None},
    )
    gen = {"bos_token_id": tinfo["bos_id"], "eos_token_id": tinfo["eos_id"]}
    if tinfo["pad_id"] is not None:
        gen["pad_token_id"] = tinfo["pad_id"]
    write_json(out, "generation_config.json", gen)

    log(f"wrote {out} ({total / 1e6:.0f} MB of weights in {n} file(s)) in {time.monotonic() - t0:.1f} s")


def _save_bf16(shard: dict, path: str) -> None:
    """safetensors.numpy cannot write bfloat16; write the format by hand."""
    header = {"__metadata__": {"format": "pt"}}
    offset = 0
    for k, v in shard.items():
        header[k] = {"dtype": "BF16", "shape": list(v.shape), "data_offsets": [offset, offset + v.nbytes]}
        offset += v.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(len(raw).to_bytes(8, "little"))
        f.write(raw)
        for v in shard.values():
            f.write(np.ascontiguousarray(v).tobytes())


def f32(x) -> float:
    """A float32 metadata value as its shortest decimal (1e-05, not 9.99999974e-06)."""
    return float(str(np.float32(x)))


def write_json(out: str, name: str, obj) -> None:
    with open(os.path.join(out, name), "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # exit 1, not argparse's 2: 2 means "unsupported model"
        self.print_usage(sys.stderr)
        self.exit(EXIT_BAD_FILE, f"{self.prog}: error: {message}\n")


def main(argv=None) -> int:
    ap = _Parser(
        prog="gguf_to_mlx.py",
        description="Convert a llama-architecture GGUF into a Hugging Face style directory for mlx_vlm.server.",
    )
    ap.add_argument("gguf", metavar="GGUF")
    ap.add_argument("outdir", metavar="OUTDIR")
    ap.add_argument(
        "--dtype", choices=("float32", "float16", "bfloat16"), default="float32",
        help="weight type in the safetensors (default float32: the fastest on MLX's CPU path)",
    )
    args = ap.parse_args(argv)
    try:
        convert(args.gguf, args.outdir, args.dtype)
    except ConvertError as e:
        kind = "unsupported model" if e.code == EXIT_UNSUPPORTED else "error"
        print(f"gguf_to_mlx.py: {kind}: {e}", file=sys.stderr)
        return e.code
    except OSError as e:
        print(f"gguf_to_mlx.py: error: {e}", file=sys.stderr)
        return EXIT_BAD_FILE
    return 0


if __name__ == "__main__":
    sys.exit(main())
