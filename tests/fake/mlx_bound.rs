//! The MLX memory bound's applier against a scripted `/v1/settings` (a test
//! double of mlx_vlm.server's settings routes): a confirmed PATCH; an
//! unconfirmed one settled by the read-back in the child's favour or not;
//! both calls failing. Every case is one answer, never a panic; the load
//! path turns each into one record (the real server's success path is in
//! `tests/real/real_mlx.rs`).

use std::sync::{Arc, Mutex};

use actix_web::{App, HttpResponse, HttpServer, web};
use llm_warden::child::client::{ChildClient, shared_http_client};
use llm_warden::engines::mlx::{BoundAnswer, apply_bound};
use llm_warden::secret::ApiKey;
use serde_json::json;

/// How the fake answers: (PATCH status and body, GET status and body).
#[derive(Clone)]
struct Script {
    patch: (u16, serde_json::Value),
    get: (u16, serde_json::Value),
    calls: Arc<Mutex<Vec<String>>>,
}

async fn patch(s: web::Data<Script>, body: web::Json<serde_json::Value>) -> HttpResponse {
    s.calls.lock().unwrap().push(format!("PATCH {}", body.0));
    HttpResponse::build(actix_web::http::StatusCode::from_u16(s.patch.0).unwrap()).json(&s.patch.1)
}

async fn get(s: web::Data<Script>) -> HttpResponse {
    s.calls.lock().unwrap().push("GET".into());
    HttpResponse::build(actix_web::http::StatusCode::from_u16(s.get.0).unwrap()).json(&s.get.1)
}

/// Serves `script` on a free port; returns a client for it.
fn serve(script: Script) -> ChildClient {
    let data = web::Data::new(script);
    let server = HttpServer::new(move || {
        App::new()
            .app_data(data.clone())
            .route("/v1/settings", web::patch().to(patch))
            .route("/v1/settings", web::get().to(get))
    })
    .workers(1)
    .disable_signals()
    .bind(("127.0.0.1", 0))
    .unwrap();
    let port = server.addrs()[0].port();
    actix_rt::spawn(server.run());
    ChildClient::new(shared_http_client(), port, ApiKey::mint())
}

fn script(patch: (u16, serde_json::Value), get: (u16, serde_json::Value)) -> Script {
    Script {
        patch,
        get,
        calls: Arc::default(),
    }
}

/// Every answer of the settings routes (confirmed, settled by the read-back,
/// failed) is one `BoundAnswer`, never a panic.
#[actix_rt::test]
async fn every_answer_of_the_settings_routes() {
    let applied = json!({"applied": {"max_kv_size": 6000}, "rejected": [], "current": {"max_kv_size": 6000}});
    let current = |n: u64| json!({"current": {"max_kv_size": n}});
    let rows: Vec<(&str, Script, Result<BoundAnswer, ()>, usize)> = vec![
        // why: confirmed by the PATCH answer itself: no read-back
        (
            "confirmed",
            script((200, applied.clone()), (200, current(6000))),
            Ok(BoundAnswer::Applied(6000)),
            1,
        ),
        // why: an error status, but the child applied it: the read-back settles it
        (
            "lost answer",
            script((500, json!({})), (200, current(6000))),
            Ok(BoundAnswer::Enforces(6000)),
            2,
        ),
        // why: rejected (HTTP 200 with a rejected entry): the child keeps its value
        (
            "rejected",
            script(
                (200, json!({"applied": {}, "rejected": ["max_kv_size"]})),
                (200, current(8192)),
            ),
            Ok(BoundAnswer::Enforces(8192)),
            2,
        ),
        // why: both calls fail: an error, never a panic
        ("both fail", script((500, json!({})), (503, json!({}))), Err(()), 2),
        // why: a read-back without the field
        (
            "no field",
            script((500, json!({})), (200, json!({"current": {}}))),
            Err(()),
            2,
        ),
    ];
    for (i, (name, s, want, calls)) in rows.into_iter().enumerate() {
        let log = s.calls.clone();
        let client = serve(s);
        let got = apply_bound(&client, 6000).await.map_err(|_| ());
        assert_eq!(got, want, "row {i} ({name})");
        assert_eq!(
            log.lock().unwrap().len(),
            calls,
            "row {i} ({name}): {:?}",
            log.lock().unwrap()
        );
    }
}
