//! No orphan survives the warden: SIGKILL (the parent-death signal takes the
//! child), SIGTERM and SIGINT (the warden stops the child itself), each
//! repeated; no llama-server left behind and no port left bound. A child
//! killed with its warden is reparented to init, which reaps it; where init
//! does not (some sandboxes), it stays a zombie, which holds no memory and no
//! socket, so a zombie counts as gone. One test
//! function per signal, run one after another (a shared lock), so that no
//! other test's child can hold the ports being checked.

use crate::support;

use std::time::Duration;

use nix::sys::signal::Signal;
use support::*;
use tokio::sync::Mutex;

/// Serializes the tests of this file.
static SERIAL: Mutex<()> = Mutex::const_new(());

/// Trials per signal in the default run; `WARDEN_SOAK=1` runs the 20 of
/// RELIABILITY.md.
fn trials() -> usize {
    soak(3, 20)
}

/// One trial: a warden with a loaded model receives `sig`; afterwards its
/// child is gone and the child's port binds again.
async fn trial(sig: Signal, i: usize) {
    let (mut warden, base) = spawn_warden_binary(&[]).await;
    let http = llm_warden::child::client::shared_http_client();
    let s: serde_json::Value = json_of(http.post(format!("{base}/warden/load"))).await;
    let pid = s["child_pid"]
        .as_u64()
        .unwrap_or_else(|| panic!("trial {i}: no child: {s}")) as u32;
    let port = s["port"].as_u64().unwrap() as u16;
    assert!(alive(pid), "trial {i}");
    let wpid = nix::unistd::Pid::from_raw(warden.id().unwrap() as i32);
    nix::sys::signal::kill(wpid, sig).unwrap();
    let status = tokio::time::timeout(Duration::from_secs(20), warden.wait())
        .await
        .expect("the warden exits");
    assert!(
        wait_gone(pid, 10).await,
        "trial {i}: llama-server {pid} outlived the warden ({sig:?}, {status:?})"
    );
    // A killed multi-threaded process shows as a zombie while its last
    // threads still exit and release its sockets: wait for that.
    poll_until(
        &format!("trial {i}: port {port} free after {sig:?}"),
        Duration::from_secs(5),
        || !listening(port),
        || format!("port {port} still listened on"),
    )
    .await;
    if sig != Signal::SIGKILL {
        assert!(status.unwrap().success(), "trial {i}: a {sig:?} stop exits cleanly");
    }
}

/// SIGKILL of the warden: the parent-death signal takes the child.
#[actix_rt::test]
#[ignore = "needs the real llama-server and SmolLM2 (./build-llama.sh); ./test.sh runs it"]
async fn sigkill_leaves_no_child() {
    // The binary finds them itself: fail here, naming what is missing.
    real_llama_server();
    real_model(SMOLLM2);
    let _g = SERIAL.lock().await;
    for i in 0..trials() {
        trial(Signal::SIGKILL, i).await;
    }
}

/// SIGTERM: the warden stops the child (SIGTERM, grace, SIGKILL) and exits 0.
#[actix_rt::test]
#[ignore = "needs the real llama-server and SmolLM2 (./build-llama.sh); ./test.sh runs it"]
async fn sigterm_leaves_no_child() {
    // The binary finds them itself: fail here, naming what is missing.
    real_llama_server();
    real_model(SMOLLM2);
    let _g = SERIAL.lock().await;
    for i in 0..trials() {
        trial(Signal::SIGTERM, i).await;
    }
}

/// SIGINT (Ctrl-C): the child is in its own process group, so the terminal's
/// Ctrl-C never reaches it; the warden stops it.
#[actix_rt::test]
#[ignore = "needs the real llama-server and SmolLM2 (./build-llama.sh); ./test.sh runs it"]
async fn sigint_leaves_no_child() {
    // The binary finds them itself: fail here, naming what is missing.
    real_llama_server();
    real_model(SMOLLM2);
    let _g = SERIAL.lock().await;
    for i in 0..trials() {
        trial(Signal::SIGINT, i).await;
    }
}
