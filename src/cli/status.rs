//! `llm-warden status`: a running server's `/warden/status`.

use std::process::ExitCode;

use clap::Args;

/// `status`'s options.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The server (default: the first llm-warden found on 27182-27199).
    #[arg(long)]
    url: Option<String>,
}

pub async fn run(a: StatusArgs) -> anyhow::Result<ExitCode> {
    let Some(base) = super::chat::find_server(a.url).await else {
        eprintln!("no llm-warden server is running on 127.0.0.1:27182-27199 (start one with `llm-warden serve`)");
        return Ok(ExitCode::FAILURE);
    };
    let http = llm_warden::child::client::shared_http_client();
    let v: serde_json::Value = http.get(format!("{base}/warden/status")).send().await?.json().await?;
    println!("{}", serde_json::to_string_pretty(&v)?);
    Ok(ExitCode::SUCCESS)
}
