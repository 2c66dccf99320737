//! Bad model files, each a clear error with a code, from the API (the warden
//! keeps serving the next request) and from `inspect` (exit status 2):
//! missing, zero bytes, not GGUF, truncated header, truncated tensor data, a
//! directory with no GGUF, a split family missing a part.

use crate::support;

use std::path::Path;
use std::process::Command;

use support::*;

/// `inspect --json PATH`: (exit status, the error code).
fn inspect(path: &Path) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_llm-warden"))
        .args(["inspect", "--json"])
        .arg(path)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    (
        out.status.code().unwrap_or(-1),
        v["error"]["code"].as_str().unwrap_or("").to_string(),
    )
}

/// Writes every kind of bad model into `dir`, next to a good fake one.
fn bad_files(dir: &Path) -> Vec<(&'static str, &'static str)> {
    let good = fake_model(dir, "good", serde_json::json!({}));
    let bytes = std::fs::read(&good).unwrap();
    std::fs::write(dir.join("empty.gguf"), b"").unwrap();
    std::fs::write(dir.join("text.gguf"), b"<html>not a model</html>\n").unwrap();
    // Cut inside the key/value section.
    std::fs::write(dir.join("cut-header.gguf"), &bytes[..40]).unwrap();
    // Header whole, tensor data cut short.
    std::fs::write(dir.join("cut-data.gguf"), &bytes[..bytes.len() - 100]).unwrap();
    // A split family whose second part is missing.
    write_gguf(
        &dir.join("fam-00001-of-00002.gguf"),
        &[
            Kv::Str("general.architecture", "llama".into()),
            Kv::U32("llama.block_count", 2),
            Kv::U32("llama.context_length", 8192),
            Kv::U32("llama.embedding_length", 64),
            Kv::U32("llama.attention.head_count", 4),
            Kv::U32("split.count", 2),
        ],
        64,
    );
    vec![
        ("empty", "model_empty"),
        ("text", "not_gguf"),
        ("cut-header", "gguf_truncated"),
        ("cut-data", "model_truncated"),
        ("fam", "split_part_missing"),
    ]
}

/// Every bad file through the API: a 422 with its code, no child spawned,
/// and the good model answers right after each.
#[actix_rt::test]
async fn the_api_names_each_bad_file_and_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let rows = bad_files(dir.path());
    let doomed = dir.path().join("gone.gguf");
    write_llama_gguf(&doomed, 8192);
    let w = TestWarden::fake(dir.path()).start();
    // A file deleted after the catalog was built is "missing" at load.
    std::fs::remove_file(&doomed).unwrap();
    let mut rows = rows;
    rows.push(("gone", "model_missing"));
    for (i, (id, code)) in rows.iter().enumerate() {
        let t = collect(w.submit(chat(Some(id), 2, true)).unwrap()).await;
        let e = t.error.unwrap_or_else(|| panic!("row {i} ({id}) should fail"));
        assert_eq!((e.status, e.code.as_str()), (422, *code), "row {i} ({id}): {e:?}");
        assert!(!e.message.is_empty());
        assert_eq!(w.status().child_pid, None, "row {i}: nothing was spawned");
        let ok = collect(w.submit(chat(Some("good"), 2, true)).unwrap()).await;
        assert!(ok.done, "row {i}: the warden keeps serving");
        w.unload().await.unwrap();
    }
    w.shutdown().await;
}

/// The same files through `inspect`: exit 2 and the same codes; a directory
/// with no GGUF and a missing path are errors too.
#[test]
fn inspect_names_each_bad_file() {
    let dir = tempfile::tempdir().unwrap();
    let rows = bad_files(dir.path());
    for (i, (id, code)) in rows.iter().enumerate() {
        let name = if *id == "fam" {
            "fam-00001-of-00002.gguf".to_string()
        } else {
            format!("{id}.gguf")
        };
        assert_eq!(inspect(&dir.path().join(name)), (2, code.to_string()), "row {i} ({id})");
    }
    let empty_dir = dir.path().join("nothing-here");
    std::fs::create_dir(&empty_dir).unwrap();
    std::fs::write(empty_dir.join("README.md"), b"no model").unwrap();
    assert_eq!(inspect(&empty_dir), (2, "no_model_in_directory".into()));
    assert_eq!(inspect(&dir.path().join("absent.gguf")), (2, "model_missing".into()));
    let (code, _) = inspect(&dir.path().join("good.gguf"));
    assert_eq!(code, 0);
}

/// `serve --model DIR` with no GGUF in it refuses to start with a reason.
#[test]
fn serve_refuses_a_directory_without_a_model() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_llm-warden"))
        .args(["serve", "--port", "0", "--model"])
        .arg(dir.path())
        .env("WARDEN_LLAMA_SERVER", fake_server())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("holds no model"), "{err}");
}

/// `serve --model` naming a file no load could take (not a GGUF, an MLX
/// directory on the CPU engine) refuses the start with the reason and what
/// to do, instead of starting and failing the first request; a default the
/// warden chose itself is only warned of, and the start goes on.
#[test]
fn serve_refuses_a_named_model_that_cannot_load() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.gguf"), "just some text, not a model").unwrap();
    let mlx = dir.path().join("mlxm");
    std::fs::create_dir(&mlx).unwrap();
    std::fs::write(mlx.join("config.json"), "{}").unwrap();
    std::fs::write(mlx.join("model.safetensors"), "x").unwrap();
    let serve = |model: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_llm-warden"))
            .args(["serve", "--port", "0", "--models-dir"])
            .arg(dir.path())
            .args(["--model", model])
            .env("WARDEN_LLAMA_SERVER", fake_server())
            .env_remove("WARDEN_ENGINE")
            .env("WARDEN_FORCE_CPU", "1")
            .output()
            .unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let rows = [
        // (model, what the refusal says, why)
        // why: a text file named .gguf: its header's code, at the start
        ("notes", "the default model 'notes' cannot load"),
        // why: the same named by its path
        (&*dir.path().join("notes.gguf").display().to_string(), "(not_gguf)"),
        // why: an MLX directory the CPU engine does not run
        ("mlxm", "is an MLX model directory, which the cpu engine does not run"),
    ];
    for (i, (model, said)) in rows.iter().enumerate() {
        let (ok, err) = serve(model);
        assert!(!ok, "row {i}: started with {model}");
        assert!(err.contains(said) && err.contains("--model"), "row {i}: {err}");
    }
}

/// `inspect` finds a model by the alias the settings file gives it, as a
/// request would name it.
#[test]
fn inspect_takes_an_alias() {
    let dir = tempfile::tempdir().unwrap();
    fake_model(dir.path(), "m", serde_json::json!({}));
    let settings = dir.path().join("config.toml");
    std::fs::write(&settings, "[models.m]\naliases = [\"smol\"]\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_llm-warden"))
        .args(["inspect", "--json", "smol", "--models-dir"])
        .arg(dir.path())
        .env("WARDEN_CONFIG", &settings)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert!(text.contains("m.gguf"), "{v}");
}
