//! Embedding the warden in an actix-web application: the app mounts the
//! warden's OpenAI routes beside a route of its own, `/ask`, which asks
//! through `Warden::chat` (the same queue and bound as the HTTP routes; the
//! answer comes back as typed chunks, no SSE to parse) and returns the
//! answer as plain text.
//!
//!     cargo run --example embed            # then:
//!     curl -s 'http://127.0.0.1:8099/ask?q=What+is+the+capital+of+France%3F'

use actix_web::{App, HttpResponse, HttpServer, web};
use llm_warden::{Catalog, TurnRequest, Warden, WardenConfig};
use serde::Deserialize;

#[derive(Deserialize)]
struct Ask {
    q: String,
}

/// The app's own route: one turn, its text gathered into a string.
async fn ask(warden: web::Data<Warden>, query: web::Query<Ask>) -> HttpResponse {
    let body = serde_json::json!({
        "messages": [{"role": "user", "content": query.q}],
        "max_tokens": 64,
        "temperature": 0,
    });
    let turn = warden.chat(TurnRequest {
        body: body.as_object().cloned().unwrap_or_default().into(),
        stream: true,
        ..Default::default()
    });
    let answer = match turn {
        Ok(chunks) => chunks.text().await,
        Err(e) => return HttpResponse::ServiceUnavailable().body(format!("{}: {e}", e.code())),
    };
    let answer = match answer {
        Ok(a) => a,
        Err(e) => return HttpResponse::BadGateway().body(format!("{}: {e}", e.code())),
    };
    HttpResponse::Ok()
        .content_type("text/plain; charset=utf-8")
        .body(answer)
}

#[actix_web::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt().with_env_filter("warn,llm_warden=info").init();
    let config = WardenConfig::from_env()?;
    let mut catalog = Catalog::scan(&config.models_dir());
    catalog.set_default("SmolLM2-135M-Instruct.Q4_1");
    let warden = Warden::start(config, catalog)?;
    let data = web::Data::new(warden.clone());
    println!("listening on http://127.0.0.1:8099 (try /ask?q=hello, or the OpenAI routes under /v1)");
    let server = HttpServer::new(move || {
        App::new()
            .app_data(data.clone())
            .configure(llm_warden::http::configure)
            .route("/ask", web::get().to(ask))
    })
    .bind(("127.0.0.1", 8099))?
    // The app stops the child itself on Ctrl-C (actix-server's own signal
    // handling would stop the System first, taking the engine with it).
    .disable_signals()
    .run();
    let handle = server.handle();
    actix_web::rt::spawn(server);
    actix_web::rt::signal::ctrl_c().await?;
    handle.stop(false).await;
    warden.shutdown().await;
    Ok(())
}
