//! Ollama's official Python library, unchanged, against the warden serving
//! the real SmolLM2 through its Ollama API: list, chat streamed (the first
//! request: it loads the model, and its notices ride in the NDJSON) and
//! whole, generate raw streamed and whole, ps, show, keep_alive 0 both as a
//! bare unload and after a turn, refusals raised as the library's
//! `ResponseError` with the status Ollama would give, and `embed` and
//! `embeddings` from the embedding model beside it.

use crate::support;

use support::*;

const SCRIPT: &str = r#"
import sys, time, ollama
o = ollama.Client(host=sys.argv[1])
assert "smollm2" in [m.model for m in o.list().models], o.list()
assert o.ps().models == [], "nothing runs yet"
ask = [{"role": "user", "content": "What is the capital of France?"}]
opts = {"temperature": 0, "num_predict": 12}
parts = list(o.chat(model="smollm2:latest", messages=ask, options=opts, stream=True))
text = "".join(p.message.content or "" for p in parts)
last = parts[-1]
assert text.strip() and last.done and last.done_reason in ("stop", "length"), parts
assert last.eval_count > 0 and last.eval_duration > 0 and last.prompt_eval_count > 0, last
# why: this request loaded the model, and said how long that took
assert last.load_duration > 0 and last.total_duration >= last.load_duration, last
whole = o.chat(model="smollm2", messages=ask, options=opts)
# why: greedy decoding gives the same text streamed and whole; nothing loaded this time
assert whole.message.content == text and whole.done and whole.load_duration == 0, (whole, text)
g = o.generate(model="smollm2", prompt="The capital of France is", raw=True, options={"temperature": 0, "num_predict": 6})
assert g.response.strip() and g.done, g
gs = "".join(p.response for p in o.generate(
    model="smollm2", prompt="The capital of France is", raw=True, options={"temperature": 0, "num_predict": 6}, stream=True))
assert gs == g.response, (gs, g.response)
running = o.ps().models
assert [m.model for m in running] == ["smollm2"] and running[0].context_length > 0, running
info = o.show("smollm2")
assert info.details.format == "gguf" and info.modelinfo["general.architecture"] == "llama", info
assert "completion" in info.capabilities, info
r = o.generate(model="smollm2", keep_alive=0)
assert r.done_reason == "unload", r
assert o.ps().models == [], o.ps()
r = o.generate(model="smollm2")
assert r.done_reason == "load", r
assert [m.model for m in o.ps().models] == ["smollm2"], o.ps()
# why: keep_alive 0 on a turn unloads right after it (bounded wait: the unload follows the answer)
o.chat(model="smollm2", messages=ask, options={"num_predict": 2}, keep_alive=0)
for _ in range(100):
    if o.ps().models == []:
        break
    time.sleep(0.1)
assert o.ps().models == [], o.ps()
# why: a model the warden serves is there: a client that pulls before it uses one goes on
assert o.pull("smollm2").status == "success"
for call, status in [
    (lambda: o.chat(model="nope", messages=ask), 404),
    (lambda: o.chat(model="smollm2", messages=ask, options={"num_predict": -3}), 400),
    (lambda: o.generate(model="smollm2", prompt="x", template="{{ .Prompt }}"), 400),
    # why: a pull names a hub model (hf.co/ORG/NAME); Ollama's registry is refused
    (lambda: o.pull("llama3.2"), 400),
    (lambda: o.delete("smollm2"), 501),
    # why: a chat model does not embed: the client's mistake, said before any load
    (lambda: o.embed(model="smollm2", input="x"), 400),
]:
    try:
        call()
        raise SystemExit(f"expected {status}")
    except ollama.ResponseError as e:
        assert e.status_code == status and e.error, (status, e.status_code, e.error)
# The embedding model beside it, through the library's embed and the legacy embeddings.
e = o.embed(model="all-MiniLM-L6-v2.F16", input=["A cat sits on the mat", "A kitten is resting on a rug"])
assert len(e.embeddings) == 2 and len(e.embeddings[0]) == 384 and e.prompt_eval_count > 0, e
legacy = o.embeddings(model="all-MiniLM-L6-v2.F16", prompt="A cat sits on the mat")
# why: the same model and input: the same vector
assert max(abs(a - b) for a, b in zip(legacy.embedding, e.embeddings[0])) < 1e-4
print("OK", text)
"#;

/// The official library lists, chats, generates, reports and unloads as it should.
#[actix_rt::test]
#[ignore = "needs the real llama-server, SmolLM2 and the embedding model (./build-llama.sh) and the Python clients (./build-llama.sh clients); ./test.sh runs it"]
async fn the_official_ollama_library_works_unchanged() {
    let dir = real_smollm_dir(&real_model(SMOLLM2));
    std::os::unix::fs::symlink(real_model(MINILM), dir.path().join(MINILM)).unwrap();
    let w = TestWarden::real_cpu(real_llama_server(), dir.path())
        .config(test_config())
        .start();
    let base = serve_http(&w);
    client_script_ok(SCRIPT, vec![base]).await;
    w.shutdown().await;
}
