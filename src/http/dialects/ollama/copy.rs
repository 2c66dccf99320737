//! `POST /api/copy` `{"source", "destination"}`: Ollama copies a model
//! under a new name; here the new name is an alias of the same model,
//! written into the settings file in force (`config::file::add_alias`, its
//! comments and layout kept) and applied by a reload at once, so it lasts
//! across restarts as an alias written by hand would. No file is ever
//! created: without a settings file in force the answer is a 501 saying how
//! to have one. Nothing in any model store is touched.

use actix_web::{HttpResponse, web};
use serde_json::Value;

use super::error_response;
use crate::error::{ApiError, WardenError};
use crate::warden::Warden;

/// One copy at a time: two would read and write the same file.
static ONE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// `POST /api/copy`.
pub async fn copy(warden: web::Data<Warden>, body: web::Bytes) -> HttpResponse {
    match copied(&warden, &body).await {
        Ok(()) => HttpResponse::Ok().finish(),
        Err(e) => error_response(&e),
    }
}

async fn copied(warden: &Warden, body: &[u8]) -> Result<(), ApiError> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::invalid("invalid_json", format!("the request body is not valid JSON: {e}"), None))?;
    let name = |key: &str| {
        v.get(key)
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .ok_or_else(|| ApiError::invalid("invalid_value", format!("'{key}' must be a model name"), Some(key)))
    };
    let (source, destination) = (name("source")?, name("destination")?);
    let _one = ONE.lock().await;
    let catalog = warden.catalog();
    let source = super::reply::catalog_name(&source, |n| catalog.get(n).is_some()).to_string();
    let entry = catalog
        .get(&source)
        .ok_or_else(|| WardenError::ModelNotFound(source.clone()).to_api())?;
    if let Some(taken) = catalog.get(&destination) {
        if taken.id == entry.id {
            return Ok(()); // already a name of this model
        }
        return Err(ApiError::invalid(
            "invalid_value",
            format!("'{destination}' already names the model '{}'", taken.id),
            Some("destination"),
        ));
    }
    let Some(file) = warden.config().settings_file.clone() else {
        return Err(ApiError {
            status: 501,
            message: format!(
                "llm-warden keeps a copy as an alias in its settings file, and none is in use: create ~/.config/llm-warden/config.toml (or start with --config FILE), or add aliases = [\"{destination}\"] under [models.\"{}\"] there",
                entry.id
            ),
            kind: "invalid_request_error",
            code: "unsupported_route".into(),
            param: None,
            raw: None,
        });
    };
    let (id, alias) = (entry.id.clone(), destination.clone());
    let path = file.clone();
    tokio::task::spawn_blocking(move || crate::config::file::add_alias(&path, &id, &alias))
        .await
        .map_err(|e| ApiError::invalid("settings_refused", format!("writing the settings failed: {e}"), None))?
        .map_err(|e| ApiError {
            status: 422,
            ..ApiError::invalid("settings_refused", format!("the alias was not written: {e}"), None)
        })?;
    let _ = warden.reload().await;
    if warden.catalog().get(&destination).is_none() {
        return Err(ApiError {
            status: 500,
            message: format!(
                "the alias '{destination}' was written to {} but the settings there are not applied (see settings.error in /warden/status)",
                file.display()
            ),
            kind: "server_error",
            code: "settings_refused".into(),
            param: None,
            raw: None,
        });
    }
    Ok(())
}
