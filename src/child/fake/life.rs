//! A fake child's life: it binds its port (or exits as llama-server does
//! when the port is taken), loads for the script's time, accepts
//! connections, and ends on a stop from the warden or its own scripted
//! death. Every connection closes before the exit is published, as the
//! kernel closes a dead process's sockets before its parent reaps it.
//! `start` lives it as a task beside the engine; `live` is the same life
//! for the fake run as a process (`fake::process`), whose stops are real
//! signals.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::MissedTickBehavior;

use super::{FakeLlama, HEARTBEAT, Script};
use crate::child::output::OutputLog;
use crate::child::process::{self, ChildProcess, ExitInfo, Stop};

/// SIGKILL's number (the exit a kill reports on every Unix).
const SIGKILL: i32 = 9;

/// What one fake child knows, shared by its connections.
#[derive(Debug)]
pub(super) struct Child {
    pub script: Script,
    /// The key every route but `/health` requires.
    pub key: String,
    /// The `-c` it was started with.
    pub ctx: Option<u32>,
    pub model_path: String,
    /// `--slot-save-path`: where slot saves go (none without it).
    pub slot_dir: Option<std::path::PathBuf>,
    /// What slot 0 holds: the last chat request's bytes over 4, as tokens.
    pub slot_tokens: std::sync::atomic::AtomicU32,
    /// Where chat requests are recorded.
    pub fake: Arc<FakeLlama>,
    pub output: Arc<OutputLog>,
    /// Set once the model is "loaded": `/health` says 200 from then on.
    pub ready: AtomicBool,
    /// Run as a process: its lines go to standard error too (the warden
    /// reads them from there), and no heartbeat (there is no paused clock
    /// to pace).
    pub process: bool,
}

impl Child {
    /// Whether the model is loaded.
    pub fn ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// One line of the child's output.
    pub fn say(&self, line: &str) {
        if self.process {
            eprintln!("{line}");
            return;
        }
        tracing::debug!(target: "llm_warden::child", child = "fake llama-server", "{line}");
        self.output.push(line);
    }
}

/// Starts `child` on `port` as a task; its handle.
pub(super) fn start(child: Child, port: u16, pid: u32) -> ChildProcess {
    let child = Arc::new(child);
    let (exit_tx, exit_rx) = watch::channel(None);
    let (stop_tx, stop_rx) = mpsc::unbounded_channel();
    let handle = process::in_process(pid, exit_rx, stop_tx, child.output.clone());
    let life = live(child.clone(), "127.0.0.1", port, stop_rx);
    tokio::spawn(async move {
        let info = life.await;
        if let Some(sig) = info.signal {
            process::record_signal_death(&child.output, sig);
        }
        let _ = exit_tx.send(Some(info));
    });
    handle
}

/// The whole life on `host:port`: binds now (an address taken ends it as
/// llama-server ends), then serves until a stop or the script's death.
pub(super) fn live(
    child: Arc<Child>,
    host: &str,
    port: u16,
    stops: mpsc::UnboundedReceiver<Stop>,
) -> impl std::future::Future<Output = ExitInfo> + use<> {
    child.say(&format!("srv    load_model: loading model '{}'", child.model_path));
    let early = failed_load(&child, host, port);
    let bound = std::net::TcpListener::bind((host, port)).and_then(|l| {
        l.set_nonblocking(true)?;
        TcpListener::from_std(l)
    });
    let host = host.to_string();
    async move {
        if let Some(info) = early {
            return info;
        }
        match bound {
            Ok(listener) => serve(&child, listener, &host, port, stops).await,
            Err(_) => {
                child.say(&format!(
                    "srv          start: couldn't bind HTTP server socket, hostname: {host}, port: {port}"
                ));
                child.say("srv           main: exiting due to HTTP server error");
                ExitInfo {
                    code: Some(1),
                    signal: None,
                }
            }
        }
    }
}

/// What the script makes of the load before the port is bound, as
/// llama-server would print it: the offload line, a death by a signal, a
/// failure line and exit 1; `None`: it goes on.
fn failed_load(child: &Child, host: &str, port: u16) -> Option<ExitInfo> {
    let s = &child.script;
    if let Some(o) = &s.offloaded {
        child.say(&format!("load_tensors: offloaded {o} layers to GPU"));
    }
    if s.flash_attention_off {
        child.say("llama_context: Flash Attention not supported, set to disabled");
    }
    if let Some(sig) = s.signal_on_load {
        return Some(ExitInfo {
            code: None,
            signal: Some(sig),
        });
    }
    let at_ctx = s.exit_on_ctx.iter().find(|(c, _)| Some(*c) == child.ctx).map(|(_, f)| *f);
    let failure = s.exit_on_load.or(at_ctx)?;
    for line in failure.lines(host, port) {
        child.say(&line);
    }
    Some(ExitInfo {
        code: Some(1),
        signal: None,
    })
}

/// Serves until a stop or the script's death; how the child ended. Its
/// connections are closed before it returns.
async fn serve(
    child: &Arc<Child>,
    listener: TcpListener,
    host: &str,
    port: u16,
    mut stops: mpsc::UnboundedReceiver<Stop>,
) -> ExitInfo {
    let (died_tx, mut died_rx) = mpsc::channel::<ExitInfo>(1);
    let mut conns = JoinSet::new();
    // A process has no paused clock to pace: its beat is a long one.
    let beat = if child.process { std::time::Duration::from_secs(3600) } else { HEARTBEAT };
    let mut heartbeat = tokio::time::interval(beat);
    heartbeat.set_missed_tick_behavior(MissedTickBehavior::Skip);
    let loaded = tokio::time::sleep(child.script.load);
    tokio::pin!(loaded);
    let mut announced = child.script.never_ready;
    let info = loop {
        tokio::select! {
            biased;
            stop = stops.recv() => match stop {
                Some(Stop::Term) if child.script.ignore_term => {
                    child.say("fake: ignoring SIGTERM");
                }
                Some(Stop::Term) => break ExitInfo { code: Some(0), signal: None },
                // A dropped handle kills (`ChildProcess`'s backstop).
                Some(Stop::Kill) | None => break ExitInfo { code: None, signal: Some(SIGKILL) },
            },
            Some(info) = died_rx.recv() => break info,
            () = &mut loaded, if !announced => {
                announced = true;
                child.ready.store(true, Ordering::Release);
                child.say("srv    load_model: model loaded");
                child.say(&format!("main: server is listening on http://{host}:{port}"));
            }
            accepted = listener.accept() => {
                if let Ok((sock, _)) = accepted {
                    let _ = sock.set_nodelay(true);
                    conns.spawn(super::routes::connection(sock, child.clone(), died_tx.clone()));
                }
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            _ = heartbeat.tick() => {}
        }
    };
    drop(listener);
    conns.shutdown().await;
    info
}
