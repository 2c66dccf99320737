//! OpenAI's official Python client library, unchanged, against the warden
//! serving the real SmolLM2: a streamed and a non-streamed chat completion
//! and raw completion (`completions.create`), the model list, and refusals
//! raised as the library's own error types; and its Responses API
//! (`responses.stream`, `responses.create` streamed and whole, the input
//! token counter, a refusal).
//! The warden's notices (SSE comments) must not disturb the library.

use crate::support;

use support::*;

const SCRIPT: &str = r#"
import sys, openai
client = openai.OpenAI(base_url=sys.argv[1] + "/v1", api_key="unused")
models = client.models.list()
assert any(m.id == "smollm2" for m in models.data), models
stream = client.chat.completions.create(
    model="smollm2", stream=True, max_tokens=12, temperature=0,
    messages=[{"role": "user", "content": "What is the capital of France?"}])
parts = [c.choices[0].delta.content or "" for c in stream if c.choices]
assert "".join(parts).strip(), parts
whole = client.chat.completions.create(
    model="smollm2", max_tokens=12, temperature=0,
    messages=[{"role": "user", "content": "What is the capital of France?"}])
assert whole.choices[0].message.content.strip()
assert whole.model == "smollm2", whole.model
try:
    client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
    raise SystemExit("an unknown model must raise")
except openai.NotFoundError as e:
    assert e.body["code"] == "model_not_found", e.body
done = client.completions.create(
    model="smollm2", prompt="The capital of France is", max_tokens=8, temperature=0)
assert done.object == "text_completion" and done.choices[0].text.strip(), done
assert done.usage.completion_tokens > 0, done.usage
pieces = [c.choices[0].text for c in client.completions.create(
    model="smollm2", prompt="The capital of France is", max_tokens=8, temperature=0, stream=True)
    if c.choices]
# why: greedy decoding gives the same text streamed and whole
assert "".join(pieces) == done.choices[0].text, (pieces, done.choices[0].text)
try:
    client.completions.create(model="smollm2", prompt=["a", "b"], max_tokens=2)
    raise SystemExit("several prompts must be refused")
except openai.BadRequestError as e:
    assert e.body["code"] == "unsupported_value", e.body
print("OK", "".join(parts))
"#;

const RESPONSES: &str = r#"
import sys, openai
client = openai.OpenAI(base_url=sys.argv[1] + "/v1", api_key="unused", max_retries=0)
ask = "What is the capital of France?"
# The first request loads the model: its notices ride in this stream.
with client.responses.stream(model="smollm2", input=ask, max_output_tokens=12, temperature=0) as s:
    kinds = [e.type for e in s]
    final = s.get_final_response()
assert kinds[0] == "response.created" and kinds[-1] == "response.completed", kinds
assert "response.output_text.delta" in kinds, kinds
assert final.output_text.strip(), final
raw = [e for e in client.responses.create(model="smollm2", input=ask, max_output_tokens=12, temperature=0, stream=True)]
deltas = "".join(e.delta for e in raw if e.type == "response.output_text.delta")
whole = client.responses.create(
    model="smollm2", instructions=None, max_output_tokens=12, temperature=0,
    input=[{"role": "user", "content": ask}])
# why: greedy decoding gives the same text streamed and whole
assert whole.output_text == final.output_text == deltas, (whole.output_text, final.output_text, deltas)
# why: max_output_tokens is the generation's bound (folded into n_predict)
assert 0 < whole.usage.output_tokens <= 12, whole.usage
n = client.responses.input_tokens.count(model="smollm2", input=ask)
assert n.input_tokens == whole.usage.input_tokens, (n, whole.usage)
try:
    client.responses.create(model="smollm2", input=ask, max_output_tokens=-1)
    raise SystemExit("a negative max_output_tokens must be refused")
except openai.BadRequestError as e:
    assert e.body["param"] == "max_output_tokens", e.body
try:
    client.responses.create(model="smollm2", input=ask, previous_response_id="resp_1")
    raise SystemExit("previous_response_id must be refused")
except openai.BadRequestError as e:
    assert e.body["code"] == "unsupported_value", e.body
print("OK", whole.output_text)
"#;

/// Runs `script` with the client Python against a fresh real warden.
async fn run(script: &'static str) {
    let (w, _dir) = real_smollm_warden(test_config());
    let base = serve_http(&w);
    client_script_ok(script, vec![base]).await;
    w.shutdown().await;
}

/// The official client's Responses API streams, creates, counts and raises.
#[actix_rt::test]
#[ignore = "needs the real llama-server and SmolLM2 (./build-llama.sh) and the Python clients (./build-llama.sh clients); ./test.sh runs it"]
async fn the_official_openai_client_speaks_responses() {
    run(RESPONSES).await;
}

/// The official client streams, completes, lists and raises as it should.
#[actix_rt::test]
#[ignore = "needs the real llama-server and SmolLM2 (./build-llama.sh) and the Python clients (./build-llama.sh clients); ./test.sh runs it"]
async fn the_official_openai_client_works_unchanged() {
    run(SCRIPT).await;
}
