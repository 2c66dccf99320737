//! The client subcommands (`ps`, `load`, `models`, `unload`, `status`)
//! against the real `llm-warden serve` binary with the real llama-server
//! and the default model, behind an API key: what each prints, `--json`,
//! `--url` and `WARDEN_URL`, and that every failure (no key, an unknown
//! model, no server at the URL) is a sentence and a non-zero exit.

use crate::support;

use support::*;

const KEY: &str = "cli-test-key";
/// The default model's id (its file name without `.gguf`).
const MODEL: &str = "SmolLM2-135M-Instruct.Q4_1";

/// How the command names its server.
#[derive(Clone, Copy)]
enum Via {
    Flag,
    Env,
}

/// What one run of the binary left.
struct Run {
    ok: bool,
    stdout: String,
    stderr: String,
}

/// Runs `llm-warden args...` against `base`, with `key` as WARDEN_API_KEY
/// (the runner's own WARDEN_* variables never leak in).
async fn cli(base: &str, via: Via, key: Option<&str>, args: &[&str]) -> Run {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_llm-warden"));
    cmd.args(args).env_remove("WARDEN_URL").env_remove("WARDEN_API_KEY");
    match via {
        Via::Flag => {
            cmd.args(["--url", base]);
        }
        Via::Env => {
            cmd.env("WARDEN_URL", base);
        }
    }
    if let Some(k) = key {
        cmd.env("WARDEN_API_KEY", k);
    }
    let out = cmd.output().await.expect("the binary runs");
    let run = Run {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    eprintln!("$ llm-warden {}\n{}{}", args.join(" "), run.stdout, run.stderr);
    run
}

/// The cells of `ps`'s one row.
fn ps_row(r: &Run) -> Vec<String> {
    assert!(r.ok, "ps failed: {}", r.stderr);
    let row = r
        .stdout
        .lines()
        .nth(1)
        .unwrap_or_else(|| panic!("no row: {}", r.stdout));
    row.split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(String::from)
        .collect()
}

/// ps, load (with a keep-alive), ps --json, ps, models, unload, ps and status
/// print what the server holds, through `--url` and `WARDEN_URL` alike.
#[actix_rt::test]
#[ignore = "needs the real llama-server and SmolLM2 (./build-llama.sh); ./test.sh runs it"]
async fn ps_load_models_unload_show_what_the_server_holds() {
    let (server, _) = (real_llama_server(), real_model(SMOLLM2));
    let server = server.display().to_string();
    let (_warden, base) = spawn_warden_binary(&[("WARDEN_API_KEY", KEY), ("WARDEN_LLAMA_SERVER", &server)]).await;
    let key = Some(KEY);

    let row = ps_row(&cli(&base, Via::Env, key, &["ps"]).await);
    assert_eq!(
        (row[0].as_str(), row[3].as_str()),
        ("-", "idle"),
        "nothing loaded yet: {row:?}"
    );

    let r = cli(&base, Via::Flag, key, &["load", MODEL, "--keep-alive", "10m"]).await;
    assert!(r.ok, "load failed: {}", r.stderr);
    assert!(
        r.stdout.starts_with(&format!("loaded {MODEL}: window ")),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("keep-alive 10m"), "{}", r.stdout);

    let json = cli(&base, Via::Env, key, &["ps", "--json"]).await;
    assert!(json.ok, "{}", json.stderr);
    let status: serde_json::Value = serde_json::from_str(&json.stdout).expect("ps --json prints JSON");
    assert_eq!(status["model"], MODEL);
    let window = status["context_tokens"].as_u64().expect("a loaded model has a window");

    let row = ps_row(&cli(&base, Via::Flag, key, &["ps"]).await);
    assert_eq!(row[0], MODEL, "{row:?}");
    assert_eq!(row[1], "chat", "{row:?}");
    assert_eq!(row[3], "ready", "{row:?}");
    assert_eq!(row[4], window.to_string(), "ps shows the window: {row:?}");
    assert_eq!(row[5], "8192", "SmolLM2's trained window: {row:?}");
    assert!(
        row[8].starts_with("in 9m") || row[8] == "in 10m 0s",
        "the reap deadline: {row:?}"
    );
    assert_eq!(row[9], "10m", "the keep-alive load set: {row:?}");

    let r = cli(&base, Via::Env, key, &["models"]).await;
    assert!(r.ok, "{}", r.stderr);
    let line = r
        .stdout
        .lines()
        .find(|l| l.starts_with(MODEL))
        .unwrap_or_else(|| panic!("{}", r.stdout));
    assert!(line.contains("8192") && line.contains("default, loaded"), "{line}");

    let r = cli(&base, Via::Flag, key, &["unload"]).await;
    assert!(
        r.ok && r.stdout.starts_with(&format!("unloaded {MODEL} (")),
        "{}{}",
        r.stdout,
        r.stderr
    );
    let row = ps_row(&cli(&base, Via::Env, key, &["ps"]).await);
    assert_eq!((row[0].as_str(), row[3].as_str()), ("-", "idle"), "unloaded: {row:?}");

    // The summary for a person; every field with --all.
    let r = cli(&base, Via::Env, key, &["status"]).await;
    assert!(
        r.ok && r.stdout.starts_with("cpu engine, no model loaded, "),
        "{}",
        r.stdout
    );
    let r = cli(&base, Via::Env, key, &["status", "--all"]).await;
    assert!(
        r.ok && r.stdout.lines().any(|l| l.starts_with("state") && l.ends_with("idle")),
        "{}",
        r.stdout
    );
}

/// A missing key, an unknown model and a URL with no server each fail with
/// a sentence saying what to do, and a non-zero exit.
#[actix_rt::test]
#[ignore = "needs the real llama-server and SmolLM2 (./build-llama.sh); ./test.sh runs it"]
async fn failures_exit_non_zero_with_a_sentence() {
    let (server, _) = (real_llama_server(), real_model(SMOLLM2));
    let server = server.display().to_string();
    let (_warden, base) = spawn_warden_binary(&[("WARDEN_API_KEY", KEY), ("WARDEN_LLAMA_SERVER", &server)]).await;

    let r = cli(&base, Via::Env, None, &["ps"]).await;
    assert!(!r.ok && r.stderr.contains("set WARDEN_API_KEY"), "{}", r.stderr);
    let r = cli(&base, Via::Flag, Some("wrong"), &["models"]).await;
    assert!(!r.ok && r.stderr.contains("refused the API key"), "{}", r.stderr);

    let r = cli(&base, Via::Flag, Some(KEY), &["load", "no-such-model"]).await;
    assert!(!r.ok && r.stderr.contains("model_not_found"), "{}", r.stderr);

    // A port nobody listens on: bound, then freed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let nowhere = format!("http://127.0.0.1:{port}");
    for args in [&["ps"][..], &["load", MODEL], &["unload"], &["models"], &["status"]] {
        let r = cli(&nowhere, Via::Flag, Some(KEY), args).await;
        assert!(!r.ok, "{args:?} must fail");
        assert!(
            r.stderr
                .contains(&format!("no llm-warden server is running on {nowhere}"))
                && r.stderr.contains("llm-warden serve"),
            "{args:?}: {}",
            r.stderr
        );
    }
}

/// `serve`'s flags that stand for a variable say so in `--help`, and a bad
/// value is refused naming where it came from: the variable or the flag.
#[test]
fn serve_flags_name_their_variables() {
    let run = |args: &[&str], env: &[(&str, &str)]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_llm-warden"))
            .args(args)
            .env_remove("WARDEN_WORKERS")
            .env_remove("WARDEN_CORS_ORIGINS")
            .envs(env.iter().copied())
            .output()
            .expect("the binary runs");
        let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        (out.status.success(), text)
    };
    let (ok, help) = run(&["serve", "--help"], &[]);
    assert!(ok, "{help}");
    for var in ["[env: WARDEN_CORS_ORIGINS=]", "[env: WARDEN_WORKERS=]"] {
        assert!(help.contains(var), "{var} missing from:\n{help}");
    }
    /// (arguments, variables, what the refusal names)
    type Row = (
        &'static [&'static str],
        &'static [(&'static str, &'static str)],
        &'static str,
    );
    let rows: &[Row] = &[
        // why: the variable's value is refused under the variable's name
        (
            &["serve"],
            &[("WARDEN_WORKERS", "10.0.0.2:x")],
            "WARDEN_WORKERS=\"10.0.0.2:x\"",
        ),
        // why: the flag's value under the flag's
        (&["serve", "--worker", "10.0.0.2:x"], &[], "--worker=\"10.0.0.2:x\""),
        (
            &["serve", "--cors-origin", "localhost:3000"],
            &[],
            "--cors-origin=\"localhost:3000\"",
        ),
    ];
    for (i, (args, env, named)) in rows.iter().enumerate() {
        let (ok, text) = run(args, env);
        assert!(!ok && text.contains(named), "row {i}: {text}");
    }
}
