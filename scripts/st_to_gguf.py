#!/usr/bin/env python3
"""st_to_gguf.py MODEL_DIR OUT.gguf [--dtype f16|f32] [--name NAME]

Converts a sentence-transformers BERT model directory (the layout Hugging
Face publishes, e.g. all-MiniLM-L6-v2) into a GGUF that llama.cpp b10883
loads as a BERT embedding model (`llama-server --embedding`):

  config.json             BertModel hyper-parameters -> bert.* header keys
  model.safetensors       the weights, under llama.cpp's BERT tensor names
  tokenizer.json          the WordPiece vocabulary (vocab.txt when absent),
                          its special tokens and its BertNormalizer options
  modules.json            which pooling module follows the transformer
  1_Pooling/config.json   its mode -> bert.pooling_type (mean, cls, last)

It is the other direction of gguf_to_mlx.py and, like it, needs only the
`gguf` and `numpy` packages (the safetensors file is read with numpy).

Two things llama.cpp expects that the Hugging Face files do not say:

- Its WordPiece tokenizer marks a word's start, not its continuation: a
  token `play` becomes `\u2581play` and `##ing` becomes `ing`; special tokens
  (`[CLS]`, ...) stay as they are. Two tokens that would meet on one text
  are refused (llama.cpp asserts on a duplicate).
- `bert.attention.causal` is false (every token sees every other) and
  `tokenizer.ggml.token_type_count` is set: llama.cpp refuses a BERT
  without it.

Weights: `f16` (default) stores the matrices of the matmuls and the token
embedding table in f16 and everything one-dimensional (biases, layer norms)
plus the small position and token-type tables in f32, as llama.cpp's
quantizer does; `f32` keeps every tensor in f32, twice the size.

Exit status: 0 done; 1 a missing, unreadable or invalid file (or an I/O
error); 2 a valid model this converter does not handle (not a BertModel,
a pooling other than mean/cls/last, an unknown tensor, ...). OUT is written
to OUT.part first and renamed when complete.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from convert_errors import EXIT_BAD_FILE, EXIT_UNSUPPORTED, ConvertError, bad_file, unsupported  # noqa: E402

# The prefix llama.cpp's WordPiece tokenizer puts before a word's first token
# (U+2581, "lower one eighth block", as SentencePiece does).
PHANTOM_SPACE = "\u2581"

# Largest safetensors header we read: the format's own limit is 100 MB.
MAX_SAFETENSORS_HEADER = 100_000_000


try:
    import numpy as np
    import gguf
except ImportError as e:  # pragma: no cover - depends on the environment
    print(
        f"st_to_gguf.py: error: missing Python package ({e}); run it with a Python that has "
        "gguf and numpy (build-llama.sh makes one: $WARDEN_CACHE_DIR/py-convert)",
        file=sys.stderr,
    )
    sys.exit(EXIT_BAD_FILE)


def log(msg: str) -> None:
    print(f"st_to_gguf: {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------
# The model directory


def read_json(model_dir: str, name: str, required: bool = True):
    path = os.path.join(model_dir, name)
    if not os.path.exists(path):
        if required:
            raise bad_file(f"{path}: no such file")
        return None
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as e:
        raise bad_file(f"{path}: cannot read: {e.strerror}")
    except json.JSONDecodeError as e:
        raise bad_file(f"{path}: invalid JSON ({e})")


def read_safetensors(path: str) -> dict:
    """Every tensor of a safetensors file as a float32 (or int64) numpy array.

    The format: a little-endian u64 header length, a JSON header naming each
    tensor's dtype, shape and byte range, then the bytes. The file is memory
    mapped; floats are widened to float32 here.
    """
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise bad_file(f"{path}: truncated safetensors file ({size} bytes)")
            (n,) = struct.unpack("<Q", head)
            if n > min(MAX_SAFETENSORS_HEADER, size - 8):
                raise bad_file(f"{path}: safetensors header of {n} bytes does not fit the file")
            header = json.loads(f.read(n))
    except OSError as e:
        raise bad_file(f"{path}: cannot read: {e.strerror}")
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise bad_file(f"{path}: invalid safetensors header ({e})")
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    kinds = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16, "I64": np.int64}
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype, shape, (start, end) = info["dtype"], info["shape"], info["data_offsets"]
        if dtype not in kinds:
            raise unsupported(f"{path}: tensor {name} has dtype {dtype} (known: {', '.join(kinds)})")
        if not 0 <= start <= end <= len(data):
            raise bad_file(f"{path}: tensor {name} lies outside the file ({start}..{end})")
        raw = np.frombuffer(data[start:end], dtype=kinds[dtype])
        if raw.size != int(np.prod(shape, dtype=np.int64)):
            raise bad_file(f"{path}: tensor {name}: {raw.size} values for shape {shape}")
        if dtype == "BF16":
            raw = (raw.astype(np.uint32) << 16).view(np.float32)
        elif dtype != "I64":
            raw = raw.astype(np.float32)
        out[name] = raw.reshape(shape)
    return out


def pooling_of(model_dir: str) -> "gguf.PoolingType":
    """The pooling sentence-transformers applies after the transformer
    (modules.json, then the pooling module's config.json)."""
    modules = read_json(model_dir, "modules.json")
    pooling = [m for m in modules if m.get("type", "").endswith(".Pooling")]
    if len(pooling) != 1:
        raise unsupported(f"{model_dir}/modules.json names {len(pooling)} pooling modules, expected one")
    cfg = read_json(model_dir, os.path.join(pooling[0].get("path", ""), "config.json"))
    modes = sorted(k[len("pooling_mode_"):] for k, v in cfg.items() if k.startswith("pooling_mode_") and v)
    known = {
        "mean_tokens": gguf.PoolingType.MEAN,
        "cls_token": gguf.PoolingType.CLS,
        "lasttoken": gguf.PoolingType.LAST,
    }
    if len(modes) != 1 or modes[0] not in known:
        raise unsupported(
            f"pooling {'+'.join(modes) or 'none'} is not supported (llama.cpp pools by mean, cls or last token)"
        )
    return known[modes[0]]


# --------------------------------------------------------------------------
# Vocabulary


def read_vocab(model_dir: str) -> tuple[list[str], set[int], dict]:
    """The WordPiece tokens by id, the ids of the special tokens, and the
    normalizer's options (lowercase, strip_accents)."""
    tok = read_json(model_dir, "tokenizer.json", required=False)
    if tok is not None:
        model = tok.get("model") or {}
        if model.get("type") != "WordPiece":
            raise unsupported(f"tokenizer model {model.get('type')!r} is not WordPiece")
        if model.get("continuing_subword_prefix", "##") != "##":
            raise unsupported("a WordPiece continuation prefix other than '##' is not supported")
        by_id = {i: t for t, i in model["vocab"].items()}
        special = set()
        for added in tok.get("added_tokens") or []:
            by_id[added["id"]] = added["content"]
            if added.get("special"):
                special.add(added["id"])
        norm = tok.get("normalizer") or {}
        if norm.get("type") != "BertNormalizer":
            raise unsupported(f"normalizer {norm.get('type')!r} is not BertNormalizer")
        lowercase = bool(norm.get("lowercase", True))
        strip = norm.get("strip_accents")
        options = {"lowercase": lowercase, "strip_accents": lowercase if strip is None else bool(strip)}
    else:
        path = os.path.join(model_dir, "vocab.txt")
        try:
            with open(path, encoding="utf-8") as f:
                by_id = dict(enumerate(line.rstrip("\n") for line in f))
        except OSError as e:
            raise bad_file(f"{path}: cannot read ({e.strerror}), and there is no tokenizer.json")
        special = {i for i, t in by_id.items() if t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")}
        cfg = read_json(model_dir, "tokenizer_config.json", required=False) or {}
        lowercase = bool(cfg.get("do_lower_case", True))
        strip = cfg.get("strip_accents")
        options = {"lowercase": lowercase, "strip_accents": lowercase if strip is None else bool(strip)}
    n = len(by_id)
    if sorted(by_id) != list(range(n)):
        raise bad_file(f"{model_dir}: the vocabulary's ids are not 0..{n - 1}")
    return [by_id[i] for i in range(n)], special, options


def phantom_vocab(tokens: list[str], special: set[int]) -> list[str]:
    """llama.cpp's spelling of a WordPiece vocabulary: a word-start token
    gets the phantom space, a `##` continuation loses its prefix."""
    out = []
    for i, t in enumerate(tokens):
        if i in special:
            out.append(t)
        elif t.startswith("##"):
            out.append(t[2:])
        else:
            out.append(PHANTOM_SPACE + t)
    seen: dict[str, int] = {}
    for i, t in enumerate(out):
        if not t:
            raise unsupported(f"token {i} ({tokens[i]!r}) is empty once converted")
        if t in seen:
            raise unsupported(f"tokens {seen[t]} ({tokens[seen[t]]!r}) and {i} ({tokens[i]!r}) both become {t!r}")
        seen[t] = i
    return out


def special_id(tokens: list[str], text: str) -> int:
    try:
        return tokens.index(text)
    except ValueError:
        raise unsupported(f"the vocabulary has no {text} token")


# --------------------------------------------------------------------------
# Tensors

_GLOBAL_NAMES = {
    "embeddings.word_embeddings.weight": "token_embd.weight",
    "embeddings.position_embeddings.weight": "position_embd.weight",
    "embeddings.token_type_embeddings.weight": "token_types.weight",
    "embeddings.LayerNorm.weight": "token_embd_norm.weight",
    "embeddings.LayerNorm.bias": "token_embd_norm.bias",
}
_LAYER_NAMES = {
    "attention.self.query": "attn_q",
    "attention.self.key": "attn_k",
    "attention.self.value": "attn_v",
    "attention.output.dense": "attn_output",
    "attention.output.LayerNorm": "attn_output_norm",
    "intermediate.dense": "ffn_up",
    "output.dense": "ffn_down",
    "output.LayerNorm": "layer_output_norm",
}
# Not needed for sentence embeddings: the positions are implicit, the pooler
# is BERT's next-sentence head, and cls.* is the masked-LM head.
_DROPPED = re.compile(r"^(embeddings\.position_ids|pooler\..*|cls\..*)$")
_LAYER = re.compile(r"^encoder\.layer\.(\d+)\.(.+)\.(weight|bias)$")
# Kept in f32 under --dtype f16: small tables that llama.cpp adds to (not
# multiplies by) the activations.
_F32_ALWAYS = ("position_embd.weight", "token_types.weight")


def gguf_name(name: str) -> str | None:
    """llama.cpp's name for a Hugging Face BERT tensor; None to drop it."""
    name = name.removeprefix("bert.")
    name = re.sub(r"\.gamma$", ".weight", re.sub(r"\.beta$", ".bias", name))
    if _DROPPED.match(name):
        return None
    if name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[name]
    m = _LAYER.match(name)
    if m and m.group(2) in _LAYER_NAMES:
        return f"blk.{m.group(1)}.{_LAYER_NAMES[m.group(2)]}.{m.group(3)}"
    raise unsupported(f"unexpected tensor '{name}' for a BERT model")


# --------------------------------------------------------------------------


def convert(model_dir: str, out: str, dtype: str, name: str | None) -> None:
    t0 = time.monotonic()
    if not os.path.isdir(model_dir):
        raise bad_file(f"{model_dir}: not a directory")
    config = read_json(model_dir, "config.json")
    archs = config.get("architectures") or []
    if config.get("model_type") != "bert" or archs not in (["BertModel"], []):
        raise unsupported(
            f"model_type {config.get('model_type')!r} ({', '.join(archs) or 'no architecture'}) is not "
            "supported: this converter handles sentence-transformers BertModel directories only"
        )
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise unsupported(f"position embeddings {config['position_embedding_type']!r} are not supported")
    if config.get("hidden_act", "gelu") != "gelu":
        raise unsupported(f"activation {config['hidden_act']!r} is not supported (llama.cpp's BERT uses gelu)")

    def need(key):
        if key not in config:
            raise bad_file(f"{model_dir}/config.json lacks '{key}'")
        return config[key]

    n_layer = int(need("num_hidden_layers"))
    n_embd = int(need("hidden_size"))
    n_head = int(need("num_attention_heads"))
    n_ff = int(need("intermediate_size"))
    n_ctx = int(need("max_position_embeddings"))
    n_types = int(config.get("type_vocab_size", 2))
    eps = float(config.get("layer_norm_eps", 1e-12))
    pooling = pooling_of(model_dir)

    tokens, special, norm = read_vocab(model_dir)
    if len(tokens) != int(config.get("vocab_size", len(tokens))):
        raise bad_file(f"the vocabulary holds {len(tokens)} tokens, config.json says {config['vocab_size']}")
    gguf_tokens = phantom_vocab(tokens, special)
    types = [gguf.TokenType.CONTROL if i in special else gguf.TokenType.NORMAL for i in range(len(tokens))]
    unk = special_id(tokens, "[UNK]")
    types[unk] = gguf.TokenType.UNKNOWN

    weights = read_safetensors(os.path.join(model_dir, "model.safetensors"))
    renamed = {}
    for hf, w in weights.items():
        g = gguf_name(hf)
        if g is not None:
            renamed[g] = w
    expected = set(_GLOBAL_NAMES.values()) | {
        f"blk.{i}.{t}.{p}" for i in range(n_layer) for t in _LAYER_NAMES.values() for p in ("weight", "bias")
    }
    if set(renamed) != expected:
        missing, extra = sorted(expected - set(renamed)), sorted(set(renamed) - expected)
        raise bad_file(f"tensors missing: {missing[:5]}{' ...' if len(missing) > 5 else ''}; unexpected: {extra[:5]}")
    if renamed["token_embd.weight"].shape != (len(tokens), n_embd):
        raise bad_file(f"token_embd is {renamed['token_embd.weight'].shape}, expected ({len(tokens)}, {n_embd})")
    if renamed["position_embd.weight"].shape != (n_ctx, n_embd):
        raise bad_file(f"position_embd is {renamed['position_embd.weight'].shape}, expected ({n_ctx}, {n_embd})")

    name = name or os.path.basename(os.path.normpath(model_dir))
    log(
        f"{name}: BERT, {n_layer} layers, dim {n_embd}, {n_head} heads, ffn {n_ff}, window {n_ctx}, "
        f"vocab {len(tokens)}, pooling {pooling.name.lower()}, {len(renamed)} tensors -> {dtype}"
    )

    part = out + ".part"
    try:
        writer = gguf.GGUFWriter(part, "bert")
    except OSError as e:
        raise bad_file(f"{part}: cannot create: {e.strerror}")
    writer.add_name(name)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if dtype == "f16" else gguf.LlamaFileType.ALL_F32)
    writer.add_context_length(n_ctx)
    writer.add_embedding_length(n_embd)
    writer.add_feed_forward_length(n_ff)
    writer.add_block_count(n_layer)
    writer.add_head_count(n_head)
    writer.add_layer_norm_eps(eps)
    writer.add_causal_attention(False)
    writer.add_pooling_type(pooling)

    writer.add_tokenizer_model("bert")
    # Only byte-level BPE vocabularies read a pre-tokenizer; WordPiece's
    # splitting is fixed (whitespace, punctuation, CJK characters).
    writer.add_tokenizer_pre("default")
    writer.add_token_list(gguf_tokens)
    writer.add_token_types(types)
    writer.add_token_type_count(n_types)
    writer.add_bos_token_id(special_id(tokens, "[CLS]"))
    writer.add_sep_token_id(special_id(tokens, "[SEP]"))
    writer.add_unk_token_id(unk)
    writer.add_pad_token_id(special_id(tokens, "[PAD]"))
    writer.add_mask_token_id(special_id(tokens, "[MASK]"))
    # [CLS] text [SEP], as the model was trained.
    writer.add_add_bos_token(True)
    writer.add_add_sep_token(True)
    writer.add_add_eos_token(False)
    writer.add_bool("tokenizer.ggml.normalizer.lowercase", norm["lowercase"])
    writer.add_bool("tokenizer.ggml.normalizer.strip_accents", norm["strip_accents"])

    total = 0
    for g in sorted(renamed, key=_tensor_order):
        w = renamed[g]
        if dtype == "f16" and w.ndim == 2 and g not in _F32_ALWAYS:
            w = w.astype(np.float16)
        else:
            w = w.astype(np.float32)
        # numpy's row-major shape is llama.cpp's dims reversed: a Linear
        # weight [out, in] is ggml's {in, out}, which is what llama.cpp wants.
        writer.add_tensor(g, np.ascontiguousarray(w))
        total += w.nbytes

    try:
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        os.replace(part, out)
    except OSError as e:
        raise bad_file(f"{out}: cannot write: {e.strerror}")
    size = os.path.getsize(out)
    log(f"wrote {out} ({size / 1e6:.1f} MB, {total / 1e6:.1f} MB of weights) in {time.monotonic() - t0:.1f} s")


def _tensor_order(name: str):
    """Global tensors first, then the layers in order (as llama.cpp writes)."""
    m = re.match(r"^blk\.(\d+)\.", name)
    return (1, int(m.group(1)), name) if m else (0, 0, name)


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # exit 1, not argparse's 2: 2 means "unsupported model"
        self.print_usage(sys.stderr)
        self.exit(EXIT_BAD_FILE, f"{self.prog}: error: {message}\n")


def main(argv=None) -> int:
    ap = _Parser(
        prog="st_to_gguf.py",
        description="Convert a sentence-transformers BERT directory into a GGUF embedding model for llama.cpp.",
    )
    ap.add_argument("model_dir", metavar="MODEL_DIR")
    ap.add_argument("out", metavar="OUT.gguf")
    ap.add_argument(
        "--dtype", choices=("f16", "f32"), default="f16",
        help="weight type of the matrices (default f16: half the size of f32, and as close to the "
        "float64 reference through llama-server: cosine 0.9999986 against f32's 0.9999991)",
    )
    ap.add_argument("--name", help="general.name (default: the directory's name)")
    args = ap.parse_args(argv)
    try:
        convert(args.model_dir, args.out, args.dtype, args.name)
    except ConvertError as e:
        kind = "unsupported model" if e.code == EXIT_UNSUPPORTED else "error"
        print(f"st_to_gguf.py: {kind}: {e}", file=sys.stderr)
        return e.code
    except OSError as e:
        print(f"st_to_gguf.py: error: {e}", file=sys.stderr)
        return EXIT_BAD_FILE
    return 0


if __name__ == "__main__":
    sys.exit(main())
