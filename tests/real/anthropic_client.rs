//! Anthropic's official Python SDK, unchanged, against the warden serving the
//! real SmolLM2 through `/v1/messages`: a stream (the first request, so the
//! loading notices ride in it as SSE comments the SDK must skip), a whole
//! message, the token counter, refusals raised as the SDK's own error types
//! with Anthropic's error body, and the warden's key given as `x-api-key`.

use crate::support;

use llm_warden::WardenConfig;
use support::*;

const SCRIPT: &str = r#"
import sys, anthropic
base, key = sys.argv[1], sys.argv[2]
c = anthropic.Anthropic(base_url=base, api_key=key, max_retries=0)
ask = [{"role": "user", "content": "What is the capital of France?"}]
# This SDK has no temperature argument: the body field rides in extra_body.
greedy = {"temperature": 0}
with c.messages.stream(model="smollm2", max_tokens=12, messages=ask, extra_body=greedy) as s:
    streamed = "".join(s.text_stream)
    final = s.get_final_message()
assert streamed.strip(), streamed
assert final.role == "assistant" and final.stop_reason in ("max_tokens", "end_turn"), final
whole = c.messages.create(model="smollm2", max_tokens=12, messages=ask, extra_body=greedy)
assert whole.type == "message" and whole.model == "smollm2", whole
text = "".join(b.text for b in whole.content if b.type == "text")
# why: greedy decoding gives the same text streamed and whole
assert text == streamed, (text, streamed)
# why: max_tokens is the generation's bound (the warden's, given back as max_tokens)
assert 0 < whole.usage.output_tokens <= 12, whole.usage
counted = c.messages.count_tokens(model="smollm2", messages=ask)
seen = whole.usage.input_tokens + (whole.usage.cache_read_input_tokens or 0)
assert counted.input_tokens == seen, (counted, whole.usage)
try:
    c.messages.create(model="smollm2", max_tokens=-1, messages=ask)
    raise SystemExit("a negative max_tokens must be refused")
except anthropic.BadRequestError as e:
    assert e.body["type"] == "error", e.body
    assert e.body["error"]["type"] == "invalid_request_error" and e.body["error"]["param"] == "max_tokens", e.body
try:
    c.messages.create(model="smollm2", max_tokens=4, messages=[{"role": "user", "content": [{"type": "document", "source": {}}]}])
    raise SystemExit("a document block must be refused")
except anthropic.BadRequestError as e:
    assert e.body["error"]["code"] == "unsupported_value", e.body
try:
    c.messages.create(model="nope", max_tokens=4, messages=ask)
    raise SystemExit("an unknown model must raise")
except anthropic.NotFoundError as e:
    assert e.body["error"]["type"] == "not_found_error" and e.body["error"]["code"] == "model_not_found", e.body
try:
    anthropic.Anthropic(base_url=base, api_key="wrong", max_retries=0).messages.create(model="smollm2", max_tokens=4, messages=ask)
    raise SystemExit("a wrong key must be refused")
except anthropic.AuthenticationError as e:
    assert e.body["error"]["type"] == "authentication_error", e.body
print("OK", streamed)
"#;

/// The official SDK streams, creates, counts and raises as it should.
#[actix_rt::test]
#[ignore = "needs the real llama-server and SmolLM2 (./build-llama.sh) and the Python clients (./build-llama.sh clients); ./test.sh runs it"]
async fn the_official_anthropic_sdk_works_unchanged() {
    let key = "sk-warden-test";
    let cfg = WardenConfig {
        api_key: Some(key.into()),
        ..test_config()
    };
    let (w, _dir) = real_smollm_warden(cfg);
    let base = serve_http(&w);
    client_script_ok(SCRIPT, vec![base, key.to_string()]).await;
    w.shutdown().await;
}
