//! `llm-warden pull` against a local stand-in for the Hugging Face hub
//! (`HF_ENDPOINT`; no machine here reaches the hub): the quant the law
//! picks, written into the hub's cache layout where the warden's catalog
//! (and any tool that reads the cache) finds it; a named quant; a quant or
//! a repository that is not there; a gated repository and `HF_TOKEN`; a
//! pull cut short that resumes where it stopped.

use crate::support;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use support::hub::{FakeHub, HubRepo};
use support::*;

const SHA: &str = "0123456789abcdef0123456789abcdef01234567";

/// A valid GGUF of about `mib` MiB, as bytes.
fn gguf_bytes(dir: &Path, name: &str, mib: u64) -> Arc<Vec<u8>> {
    let p = dir.join(name);
    write_small_llama(&p, 8192, true, mib * 1024 * 1024 / 4);
    Arc::new(std::fs::read(p).unwrap())
}

/// The hub: `acme/tiny-GGUF` (a 25 MiB Q4_K_M, a 1 MiB Q8_0, a projector,
/// a README)
/// and `acme/gated-GGUF`, which wants the token `tok`.
fn hub(scratch: &Path) -> (FakeHub, Arc<Vec<u8>>) {
    let q4 = gguf_bytes(scratch, "q4.gguf", 25);
    let q8 = gguf_bytes(scratch, "q8.gguf", 1);
    let tiny = HubRepo {
        sha: SHA.into(),
        files: BTreeMap::from([
            ("README.md".to_string(), Arc::new(b"# tiny".to_vec())),
            ("tiny-Q4_K_M.gguf".to_string(), q4.clone()),
            ("tiny-Q8_0.gguf".to_string(), q8.clone()),
            ("mmproj-tiny-f16.gguf".to_string(), q8.clone()),
        ]),
        token: None,
    };
    let gated = HubRepo {
        sha: SHA.into(),
        files: BTreeMap::from([("g-Q8_0.gguf".to_string(), q8)]),
        token: Some("tok".into()),
    };
    let repos = BTreeMap::from([
        ("acme/tiny-GGUF".to_string(), tiny),
        ("acme/gated-GGUF".to_string(), gated),
    ]);
    (FakeHub::start(repos), q4)
}

/// Runs `llm-warden args...` with the hub at `hub`, its cache under `home`.
async fn cli(hub: &FakeHub, home: &Path, args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_llm-warden"))
        .args(args)
        .env("HF_ENDPOINT", &hub.base)
        .env("HF_HOME", home)
        .env_remove("HF_HUB_CACHE")
        .env_remove("HF_TOKEN")
        .envs(env.iter().copied())
        .output()
        .await
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    eprintln!("$ llm-warden {}\n{stdout}{stderr}", args.join(" "));
    (out.status.success(), stdout, stderr)
}

/// The file `pull` leaves in the snapshot of `acme/tiny-GGUF`.
fn snapshot(home: &Path, repo: &str, file: &str) -> std::path::PathBuf {
    home.join(format!(
        "hub/models--{}/snapshots/{SHA}/{file}",
        repo.replace('/', "--")
    ))
}

#[actix_rt::test]
async fn pull_fetches_the_quant_this_machine_fits_into_the_hub_cache() {
    let scratch = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let (hub, q4) = hub(scratch.path());
    let (ok, out, err) = cli(&hub, home.path(), &["pull", "acme/tiny-GGUF"], &[]).await;
    assert!(ok, "{err}");
    assert!(
        out.starts_with("pulled acme/tiny-GGUF (tiny-Q4_K_M.gguf, 25.0 MiB)"),
        "{out}"
    );
    assert!(out.contains("llm-warden run acme/tiny-GGUF"), "{out}");
    let got = snapshot(home.path(), "acme/tiny-GGUF", "tiny-Q4_K_M.gguf");
    assert_eq!(std::fs::read(&got).unwrap(), *q4, "the file whole");
    // The projector comes with the model.
    assert!(snapshot(home.path(), "acme/tiny-GGUF", "mmproj-tiny-f16.gguf").is_file());
    let main = home.path().join("hub/models--acme--tiny-GGUF/refs/main");
    assert_eq!(std::fs::read_to_string(main).unwrap(), SHA);
    // The catalog reads the hub's cache: the model is there by its repo id.
    let (ok, out, err) = cli(&hub, home.path(), &["inspect", "--json", "acme/tiny-GGUF"], &[]).await;
    assert!(ok, "{err}");
    assert!(out.contains("tiny-Q4_K_M.gguf"), "{out}");
    // A named quant, in Ollama's spelling.
    let (ok, out, err) = cli(&hub, home.path(), &["pull", "hf.co/acme/tiny-GGUF:q8_0"], &[]).await;
    assert!(
        ok && out.starts_with("pulled acme/tiny-GGUF (tiny-Q8_0.gguf"),
        "{out}{err}"
    );
    assert!(snapshot(home.path(), "acme/tiny-GGUF", "tiny-Q8_0.gguf").is_file());
    // The catalog serves the repository's Q4_K_M first: said, not hidden.
    assert!(out.contains("also holds tiny-Q4_K_M.gguf"), "{out}");
}

#[actix_rt::test]
async fn pull_says_what_is_missing_and_what_to_do() {
    let scratch = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let (hub, _) = hub(scratch.path());
    /// (arguments, variables, what the refusal says)
    type Row<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);
    let rows: &[Row] = &[
        // why: a quant the repository does not have: the ones it has
        (
            &["pull", "acme/tiny-GGUF:Q2_K"],
            &[],
            "acme/tiny-GGUF has no Q2_K file (it has: Q4_K_M, Q8_0)",
        ),
        (&["pull", "acme/nothing"], &[], "no repository acme/nothing on"),
        // why: gated: the variable to set
        (
            &["pull", "acme/gated-GGUF"],
            &[],
            "needs a token with access to it: set HF_TOKEN",
        ),
        (&["pull", "acme/gated-GGUF"], &[("HF_TOKEN", "wrong")], "set HF_TOKEN"),
        // why: not a hub name at all
        (&["pull", "llama3.2"], &[], "write ORG/NAME or ORG/NAME:QUANT"),
    ];
    for (i, (args, env, said)) in rows.iter().enumerate() {
        let (ok, _, err) = cli(&hub, home.path(), args, env).await;
        assert!(!ok && err.contains(said), "row {i}: {err}");
        assert!(
            err.starts_with("pulling") || err.starts_with("llm-warden: error:"),
            "row {i}: {err}"
        );
    }
    let (ok, out, err) = cli(&hub, home.path(), &["pull", "acme/gated-GGUF"], &[("HF_TOKEN", "tok")]).await;
    assert!(
        ok && out.starts_with("pulled acme/gated-GGUF (g-Q8_0.gguf"),
        "{out}{err}"
    );
}

/// A pull cut short (the hub fails the second 10 MB chunk) keeps what it
/// had; the next pull asks only for the rest.
#[actix_rt::test]
async fn a_pull_cut_short_resumes_where_it_stopped() {
    let scratch = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let (hub, q4) = hub(scratch.path());
    hub.fail_once_from(10_000_000);
    let (ok, _, err) = cli(&hub, home.path(), &["pull", "acme/tiny-GGUF:Q4_K_M"], &[]).await;
    assert!(
        !ok && err.contains("the same pull again resumes"),
        "the hub failed it: {err}"
    );
    assert!(!snapshot(home.path(), "acme/tiny-GGUF", "tiny-Q4_K_M.gguf").exists());
    let before = hub.ranges().len();
    let (ok, _, err) = cli(&hub, home.path(), &["pull", "acme/tiny-GGUF:Q4_K_M"], &[]).await;
    assert!(ok, "{err}");
    // The data asked for since: the first 10 MB never again (the failed
    // pull's last piece may still arrive among them: its process asked
    // before it ended).
    let data: Vec<(u64, u64)> = hub.ranges()[before..]
        .iter()
        .filter(|(f, s, e)| f == "tiny-Q4_K_M.gguf" && e > s)
        .map(|(_, s, e)| (*s, *e))
        .collect();
    assert!(
        data.iter().all(|r| r.0 >= 10_000_000) && data.iter().any(|r| r.0 == 10_000_000),
        "resumed at the first piece not kept: {data:?}"
    );
    let got = snapshot(home.path(), "acme/tiny-GGUF", "tiny-Q4_K_M.gguf");
    assert_eq!(std::fs::read(got).unwrap(), *q4, "the file whole after the resume");
}

/// Ollama's `/api/pull` on `llm-warden serve`: NDJSON progress as Ollama
/// streams it, `success` once the file is whole, and the model served at
/// once; unstreamed, a missing quant is a 404 saying which ones there are.
#[actix_rt::test]
async fn ollamas_api_pull_streams_progress_and_serves_the_model_at_success() {
    let scratch = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let models = tempfile::tempdir().unwrap();
    let (hub, q4) = hub(scratch.path());
    let server = fake_server().display().to_string();
    let home_dir = home.path().display().to_string();
    let models_dir = models.path().display().to_string();
    let (_warden, base) = spawn_warden_binary_with(
        &["--models-dir", &models_dir],
        &[
            ("HF_ENDPOINT", &hub.base),
            ("HF_HOME", &home_dir),
            ("WARDEN_LLAMA_SERVER", &server),
        ],
    )
    .await;
    let text = reqwest::Client::new()
        .post(format!("{base}/api/pull"))
        .json(&serde_json::json!({"model": "hf.co/acme/tiny-GGUF"}))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(
        lines.first().map(|l| &l["status"]),
        Some(&"pulling manifest".into()),
        "{text}"
    );
    assert_eq!(lines.last().map(|l| &l["status"]), Some(&"success".into()), "{text}");
    let progress: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|l| l["status"] == "pulling tiny-Q4_K_M.gguf")
        .collect();
    let last = progress.last().unwrap_or_else(|| panic!("progress lines: {text}"));
    assert_eq!(
        (last["total"].as_u64(), last["completed"].as_u64()),
        (Some(q4.len() as u64), Some(q4.len() as u64)),
        "{text}"
    );
    let listed = json_of(reqwest::Client::new().get(format!("{base}/v1/models"))).await;
    assert!(
        listed["data"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["id"] == "acme/tiny-GGUF"),
        "served at success: {listed}"
    );
    let (status, v) = post(
        &base,
        "/api/pull",
        serde_json::json!({"model": "acme/tiny-GGUF:Q2_K", "stream": false}),
    )
    .await;
    assert_eq!(status, 404, "{v}");
    assert!(
        v["error"].as_str().is_some_and(|e| e.contains("has no Q2_K file")),
        "{v}"
    );
}
