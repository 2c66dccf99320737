//! What the engine publishes without the mailbox: `EngineStatus` on a `watch`
//! channel (the latest snapshot, read by `/warden/status`, the idle timer and
//! embedders) and `WardenEvent`s on a `broadcast` channel (`/warden/events`,
//! tests' observers). The engine sends both after every change; readers never
//! queue behind a turn.

use serde::Serialize;

pub mod split;

/// The engine family (the law's own type: `law::types`).
pub use crate::law::types::EngineKind;
// The law's and the workers' types the status and the events carry,
// nameable where an embedder meets them (the law's own modules are not
// part of the public face).
pub use crate::law::brake::{BrakeDid, BrakeNotice, BrakeState, Episode, Level};
pub use crate::law::cuda::Offload;
pub use crate::law::route::Route;
pub use crate::law::split::{Share, SplitPlan};
pub use crate::law::types::ModelKind;
pub use crate::law::window::Window;
pub use crate::law::worker_status::{DeviceKind, RpcState, WorkerBuild, WorkerDevice, WorkerStatus, WorkerView};
pub use crate::law::workers::Joined;

/// What the engine is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EngineState {
    /// No child.
    #[default]
    Idle,
    /// A child is starting.
    Loading,
    /// A child is up and waiting for work.
    Ready,
    /// A turn is streaming.
    Generating,
    /// The warden is shutting down.
    Stopped,
}

/// The workers part of the status.
#[derive(Debug, Clone, Serialize)]
pub struct WorkersStatus {
    /// Each configured worker as the watch last saw it.
    pub workers: Vec<crate::law::worker_status::WorkerView>,
    /// The live child's split (window, each device's share, who was left out).
    pub split: Option<split::RpcPlan>,
    /// What llama-server says each device was given.
    pub given: Vec<split::Given>,
}

/// The snapshot `/warden/status` returns. Never holds the child's API key.
#[derive(Debug, Clone, Default, Serialize)]
pub struct EngineStatus {
    /// Which engine runs.
    pub engine: EngineKind,
    /// What it is doing.
    pub state: EngineState,
    /// The loaded model's id.
    pub model: Option<String>,
    /// The loaded model's file or directory.
    pub model_path: Option<String>,
    /// The declared ceiling: `WARDEN_CTX` when pinned, else none. Exists
    /// without a model and never depends on which is loaded.
    pub declared_ceiling: Option<u32>,
    /// The allocated window: what the live child runs with (`/props` n_ctx),
    /// `None` with no child or when unknown.
    pub context_tokens: Option<u32>,
    /// The `-c` the child was given, when it was given one.
    pub requested_context: Option<u32>,
    /// The allocated window when memory, not the trained window, bounds it.
    pub memory_bound_tokens: Option<u32>,
    /// The child's allocation predicted at load when memory-bound (bytes).
    pub memory_bound_footprint_bytes: Option<u64>,
    /// The child's pid.
    pub child_pid: Option<u32>,
    /// The child's port on 127.0.0.1.
    pub port: Option<u16>,
    /// When the child became ready (Unix milliseconds, as every instant of
    /// the status).
    pub loaded_since: Option<u64>,
    /// When the last turn ended (Unix milliseconds).
    pub last_used: Option<u64>,
    /// Turns handled since start.
    pub turns: u64,
    /// The idle timeout in force for the loaded model, in seconds (`None`:
    /// nothing loaded, or never reaped): a request's keep-alive, else
    /// `WARDEN_IDLE_TIMEOUT_S`.
    pub idle_timeout_s: Option<f64>,
    /// When the idle reap unloads the loaded model if nothing uses it
    /// (Unix milliseconds; the reap ticks every `WARDEN_IDLE_TICK_S`, so it
    /// acts up to one tick later). `None`: nothing loaded, or never.
    pub idle_deadline_ms: Option<u64>,
    /// The keep-alive a request set for the loaded model (seconds, `-1`
    /// never), `None` when the configured timeout applies.
    pub keep_alive_s: Option<f64>,
    /// The RAM the loaded child's window was sized against (cgroup-bounded).
    pub memory_total_bytes: Option<u64>,
    /// The saved KV caches (`kv_store`), `None` when the feature is off.
    pub kv_saves: Option<StoreView>,
    /// Whether the loaded model's conversations are kept across reloads,
    /// and why not (`None`: no model).
    pub kv_keep: Option<KvKeepView>,
    /// CPU engine: the share of that RAM the window rule sizes within
    /// (0.75 x RAM, `law::window::CPU_RAM_FRACTION`).
    pub memory_budget_bytes: Option<u64>,
    /// The memory brake's state.
    pub brake: BrakeView,
    /// CUDA: the GPU the child runs on (name and UUID).
    pub gpu: Option<String>,
    /// CUDA: what fit did with the layers.
    pub offload: Option<crate::law::cuda::Offload>,
    /// RPC workers, when configured: what the watch sees of each, and the
    /// live child's split with what each device was given.
    pub workers: Option<WorkersStatus>,
    /// The loaded model's kind (`None`: no model).
    pub kind: Option<crate::law::types::ModelKind>,
    /// What the live child holds by the law, bytes: weights, KV and compute
    /// at its allocated window (what admission and eviction weigh; the
    /// route's `footprint_bytes` is the measured anonymous memory).
    pub held_bytes: Option<u64>,
    /// The live child's slots: one per conversation it can serve at
    /// once; empty without a child.
    pub slots: Vec<SlotStatus>,
    /// The live child's shared KV pool: the cells idle conversations
    /// hold beside those running turns reserve, and what the law moved to
    /// disk to keep it compact; `None` without a child.
    pub pool: Option<PoolStatus>,
    /// Turns waiting in the engine for a slot, for room in the KV pool, or
    /// for a memory action to finish.
    pub waiting_turns: usize,
    /// The loaded model is pinned (its settings): never evicted for another
    /// model, never reaped.
    pub pinned: bool,
    /// The loaded model's weight when models take turns in memory (its
    /// settings; 1 by default, 0 with no model).
    pub weight: f64,
    /// Every resident model, most recently used first (the top-level fields
    /// above are the first one's). Empty on one engine's own snapshot; the
    /// warden's status fills it.
    pub residents: Vec<ResidentView>,
    /// The settings file and the stores as the last reload left them; the
    /// warden's status fills it (`None` on one engine's own snapshot).
    pub settings: Option<SettingsStatus>,
    /// This engine's loads: what a switch to its model costs and how much
    /// of the time went to loading (`law::schedule`).
    pub loads: LoadsView,
    /// Models whose load waits for memory other models' turns hold, in
    /// the line's order, each with why and for how long at most (the
    /// warden's status fills it; empty on one engine's own snapshot).
    pub waiting_models: Vec<WaitingModel>,
    /// Switching between models over the last five minutes
    /// (`law::schedule::THRASH_WINDOW_MS`); the warden's status fills it
    /// (`None` on one engine's own snapshot, and before any load).
    pub switching: Option<SwitchingView>,
}

/// How much of the time went to loading models (`law::schedule`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SwitchingView {
    /// Loads over the window.
    pub loads: u64,
    /// Loads per minute over it.
    pub loads_per_min: f64,
    /// Time spent loading over it, ms.
    pub loading_ms: u64,
    /// That time's share of the window (0 to 1).
    pub loading_share: f64,
    /// More than `law::schedule::THRASH_SHARE` of the time went to loading:
    /// the models asked for do not fit together (a warning is logged).
    pub thrashing: bool,
    /// The window, ms.
    pub window_ms: u64,
}

/// A model's loads and yields (`law::schedule`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct LoadsView {
    /// Loads that succeeded since the start.
    pub count: u64,
    /// The last one, ms (spawn to ready): what a switch to it costs.
    pub last_ms: Option<u64>,
    /// All of them together, ms.
    pub total_ms: u64,
    /// Times it left the memory to a model waiting on its turns.
    pub yields: u64,
    /// Time with at least one of its turns relaying, since the start, ms:
    /// what it spent serving, beside `total_ms` spent loading.
    pub serving_ms: u64,
}

/// A model whose load waits in the line (`law::schedule`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WaitingModel {
    /// The model.
    pub model: String,
    /// How long its load has waited, ms.
    pub waited_ms: u64,
    /// The residents in a turn it waits for.
    pub behind: Vec<String>,
    /// Turns routed to it, waiting.
    pub queue_depth: usize,
    /// At most how much longer before it goes next, ms, plus the end of
    /// the turns then running (`None`: not estimated yet, or never: a
    /// pinned holder).
    pub at_most_ms: Option<u64>,
    /// Why it waits, as a sentence ("gemma waits: switching costs 1.8 s,
    /// smol's turns go first, at most 12.0 s more").
    pub why: String,
}

/// The settings as applied live (`warden::reload`), in `/warden/status`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SettingsStatus {
    /// The settings file read, if any.
    pub file: Option<String>,
    /// Reloads that changed something since the start.
    pub reloads: u64,
    /// Why the last reading was refused: the last good configuration is
    /// serving until the file is mended.
    pub error: Option<SettingsProblem>,
    /// Variables the file changed that apply only at a restart (their
    /// running value is kept).
    pub restart_needed: Vec<String>,
    /// Models gone from the catalog whose engine is still finishing its
    /// turns before it unloads.
    pub leaving: Vec<String>,
}

/// Why a reading of the settings (or the stores) was refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SettingsProblem {
    /// What is wrong, as a person reads it.
    pub message: String,
    /// The file, when the fault is in one.
    pub file: Option<String>,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// 1-based column, when known.
    pub column: Option<usize>,
}

impl std::fmt::Display for SettingsProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(file) = &self.file {
            write!(f, "{file}: ")?;
        }
        if let (Some(l), Some(c)) = (self.line, self.column) {
            write!(f, "line {l}, column {c}: ")?;
        }
        f.write_str(&self.message)
    }
}

/// One slot of the live child in `/warden/status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SlotStatus {
    /// The slot's number (llama-server's `id_slot`).
    pub id: u32,
    /// A turn runs on it.
    pub busy: bool,
    /// That turn's arrival number (its `seq` in events and logs).
    pub turn: Option<u64>,
    /// The conversation whose KV it holds (its key), if any.
    pub conversation: Option<String>,
    /// The tokens its cells hold, by the child's count at its last turn's
    /// end (an estimate from the request's size before that).
    pub tokens: u32,
    /// What the running turn reserved of the shared KV pool (prompt plus
    /// answer bound).
    pub reserved_tokens: Option<u32>,
}

/// The live child's shared KV pool in `/warden/status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PoolStatus {
    /// Its cells (the allocated window).
    pub window: Option<u32>,
    /// Cells idle conversations hold, by the child's count: every decoded
    /// token of a running turn attends them.
    pub idle_cells: u32,
    /// Cells running turns reserved (prompt plus answer bound).
    pub busy_cells: u32,
    /// Whether idle conversations are moved to disk when they cost the
    /// running turns more than a move (off with `WARDEN_KV_SAVE=0`, or for
    /// a model whose saves do not restore).
    pub compacting: bool,
    /// Idle conversations the law moved to disk for the turns beside them.
    pub moved: u64,
    /// Cells those held.
    pub moved_cells: u64,
    /// Conversations whose cells left their slot without their save
    /// written (a failed write, and the cells had to go: room for a turn,
    /// a slot changing hands, a stop): they re-read what their last save,
    /// if any, did not hold.
    pub unsaved: u64,
    /// Saves removed at a return because they no longer fit the window (a
    /// brake shrank it) or the child refused them: those conversations
    /// re-read.
    pub dropped: u64,
    /// The decode time one attended cell adds to a token, ns: this child's
    /// fit when `decode_measured`, else the prior.
    pub cell_decode_ns: u64,
    /// Whether `cell_decode_ns` is fitted from this model's lone turns.
    pub decode_measured: bool,
    /// Time to save one cell to the store, ns (measured once one was).
    pub save_ns_per_cell: u64,
    /// Time to restore one cell, ns (measured once one was).
    pub restore_ns_per_cell: u64,
    /// How long this model's answers run (tokens, the child's counts).
    pub typical_answer_tokens: u32,
}

/// One resident model in `/warden/status`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ResidentView {
    /// The model id.
    pub model: String,
    /// Chat or embedding.
    pub kind: Option<crate::law::types::ModelKind>,
    /// Loading, ready or generating.
    pub state: EngineState,
    /// Its child's pid.
    pub child_pid: Option<u32>,
    /// Its child's port on 127.0.0.1.
    pub port: Option<u16>,
    /// Its allocated window.
    pub context_tokens: Option<u32>,
    /// What it holds by the law, bytes: weights, KV and compute at its
    /// window (a loading one: what its admission reserved).
    pub footprint_bytes: Option<u64>,
    /// When the idle reap unloads it (Unix milliseconds; `None`: never).
    pub idle_deadline_ms: Option<u64>,
    /// When its last turn ended (Unix milliseconds).
    pub last_used: Option<u64>,
    /// Turns routed to it, waiting or running.
    pub queue_depth: usize,
    /// Turns it handled.
    pub turns: u64,
    /// Its child's slots.
    pub slots: usize,
    /// Those a turn runs on now.
    pub busy_slots: usize,
    /// Its shared KV pool (`None`: no child).
    pub pool: Option<PoolStatus>,
    /// Its loads and yields.
    pub loads: LoadsView,
}

/// Whether the loaded model's conversation cache is kept across the
/// warden's reloads (`law::kv_keep`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KvKeepView {
    /// Its saves are written and restored.
    pub kept: bool,
    /// How: `plain`, `swa_full` (its child holds a full-size sliding-window
    /// cache); or why not: `recurrent`, `hybrid`, `off` (`WARDEN_KV_SAVE=0`),
    /// `no_slot_files` (mlx_vlm.server).
    pub how: &'static str,
    /// Why not, in words.
    pub reason: Option<&'static str>,
}

crate::law::names::named! {
    /// How a turn ended.
    TurnOutcome {
        /// The child finished its answer.
        Completed => "completed",
        /// The client went away; the upstream request was dropped.
        Abandoned => "abandoned",
        /// The client stopped taking its answer for the stall bound.
        Stalled => "stalled",
        /// It ended with an error.
        Failed => "failed",
        /// The client was gone before it began.
        Skipped => "skipped",
    }
}

crate::law::names::named! {
    /// Why a child was stopped.
    UnloadReason {
        /// `/warden/unload`, `keep_alive: 0`, an Ollama unload.
        Request => "request",
        /// The idle reap.
        Idle => "idle",
        /// Another model was asked for.
        Switch => "switch",
        /// The warden is stopping.
        Shutdown => "shutdown",
        /// The memory brake (its unload, or a respawn that failed).
        Brake => "brake",
        /// It stopped answering (a watchdog).
        Hung => "hung",
        /// An RPC worker it used was lost.
        WorkerLost => "worker_lost",
        /// An engine handler panicked with it live.
        Panicked => "panicked",
        /// Another model needed its memory, or the brake over all residents
        /// chose it, idle and least recently used (`law::residents`).
        Evicted => "evicted",
    }
}

/// How fast a streamed turn's child answered (see `metrics`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TurnTimings {
    /// From the relay of the request to the child's first event.
    pub ttft_s: Option<f64>,
    /// Decode tokens over decode time: the child's own (llama-server's
    /// `predicted_n` over `predicted_ms`), else the events after the first
    /// over the time they took.
    pub decode_tokens_per_s: Option<f64>,
    /// Events relayed (tokens, for llama-server and mlx_vlm.server).
    pub events: u32,
    /// A turn that went on after its child died: from the death to the
    /// next child's first event, seconds (`law::resume`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paused_s: Option<f64>,
}

/// A lifecycle event.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum WardenEvent {
    /// A child is being started.
    Loading {
        /// The model id.
        model: String,
        /// The port tried.
        port: u16,
    },
    /// A child is ready.
    Ready {
        /// The model id.
        model: String,
        /// Its pid.
        pid: u32,
        /// Its allocated window.
        context_tokens: Option<u32>,
        /// Spawn to ready, in milliseconds.
        load_ms: u64,
    },
    /// A load failed.
    LoadFailed {
        /// The model id.
        model: String,
        /// The error code.
        code: String,
    },
    /// A turn began (it holds the engine until `TurnEnded`).
    TurnStarted {
        /// Its arrival number.
        seq: u64,
    },
    /// A turn ended.
    TurnEnded {
        /// Its arrival number.
        seq: u64,
        /// The route it took to the child.
        route: crate::law::route::Route,
        /// How it ended.
        outcome: TurnOutcome,
        /// How fast the child answered, for a streamed turn that got events.
        timings: Option<TurnTimings>,
    },
    /// The child was stopped.
    Unloaded {
        /// The model id.
        model: String,
        /// Why.
        reason: UnloadReason,
        /// What its stop gave back, bytes (an eviction's footprint: the
        /// law's weights, KV and compute at its window); `None` otherwise.
        #[serde(skip_serializing_if = "Option::is_none")]
        freed_bytes: Option<u64>,
    },
    /// The child died on its own.
    ChildExited {
        /// The model id.
        model: String,
        /// Its pid.
        pid: u32,
        /// The classified reason.
        code: String,
    },
    /// A turn's client took nothing for the whole client stall bound; the
    /// turn was abandoned and its connection closed.
    ClientStalled {
        /// The turn's arrival number.
        seq: u64,
        /// How long the engine waited for it, in milliseconds.
        waited_ms: u64,
    },
    /// A turn whose child died under it went on on the next child
    /// (`law::resume`): run again (it had sent nothing) or continued from
    /// the text already sent.
    TurnResumed {
        /// The turn's arrival number.
        seq: u64,
        /// Its route.
        route: Route,
        /// The model.
        model: String,
        /// The child that died (its pid).
        pid: u32,
        /// How it ended (its error code: `child_killed`, `child_hung`, ...).
        code: String,
        /// `continued` or `rerun`.
        how: &'static str,
        /// Tokens its client already had.
        sent_tokens: u64,
        /// From the death to the next child's start of the turn, ms.
        paused_ms: u64,
    },
    /// A reap tick was handled.
    ReapChecked {
        /// Whether it unloaded the model.
        reaped: bool,
    },
    /// The memory brake decided something (one per sample that acted).
    Brake {
        /// `turn_start`, `turn_end` or `idle`.
        point: &'static str,
        /// `calm`, `warning` or `critical`.
        level: &'static str,
        /// What it did.
        action: crate::law::brake::BrakeDid,
        /// The window before.
        window_from: Option<u32>,
        /// The window after.
        window_to: Option<u32>,
    },
    /// An idle conversation was moved to the KV store and erased from the
    /// shared pool, so the turns beside it attend fewer cells.
    PoolCompacted {
        /// The model id.
        model: String,
        /// The slot it left.
        slot: u32,
        /// Its key.
        conversation: String,
        /// The cells it held.
        cells: u32,
        /// What keeping it would have cost the turns ahead, ms.
        keep_ms: u64,
        /// What the move costs, now and at its likely return, ms.
        move_ms: u64,
    },
    /// A model left the memory to another whose load waited on its turns
    /// (`law::schedule`); its own turns wait, in order, for its reload.
    Yielded {
        /// The model that left.
        model: String,
        /// The model it yielded to.
        to: String,
        /// Why, as the status says it.
        why: String,
    },
    /// The MLX prefix cache was reset (after a barrier when `barrier`).
    PrefixReset {
        /// `conversation_change`, `arena`, `compaction` or `memory`.
        reason: &'static str,
        /// Whether a barrier went first (the previous turn was abandoned).
        barrier: bool,
    },
    /// A notice was given to a turn.
    Notice {
        /// The notice.
        notice: Notice,
    },
    /// The settings file or the stores changed and the change applies.
    SettingsApplied {
        /// Models that appeared.
        added: Vec<String>,
        /// Models that left (each unloads once its turns end).
        removed: Vec<String>,
        /// Models whose file or settings changed (a window, slots or
        /// arguments apply at the next load).
        changed: Vec<String>,
        /// Variables that apply only at a restart.
        restart_needed: Vec<String>,
    },
    /// A reading of the settings was refused; the last good ones serve.
    SettingsRefused {
        /// Why.
        problem: SettingsProblem,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_engine_names_itself_as_its_status_does() {
        for k in [EngineKind::Cpu, EngineKind::Cuda, EngineKind::Mlx] {
            assert_eq!(serde_json::to_value(k).unwrap(), k.name());
        }
    }
}

/// A notice of the warden, carried in the chat stream as an SSE comment
/// (`: warden {json}`) that OpenAI's client libraries skip, and on
/// `/warden/events`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "t", rename_all = "snake_case")]
pub enum Notice {
    /// The model is being loaded for this turn.
    Loading {
        /// The model id.
        model: String,
    },
    /// The model this turn loaded is ready: how long the load took (the
    /// spawn to ready, what Ollama's replies call `load_duration`).
    Loaded {
        /// The model id.
        model: String,
        /// From the `loading` notice to ready, in milliseconds.
        load_ms: u64,
    },
    /// The model is reloading (brake respawn, brake unload, or idle reap).
    MemoryReload {
        /// `brake` or `idle`.
        reason: &'static str,
    },
    /// The memory brake acted, or saw pressure it did not cause.
    MemoryWarning {
        /// `acted` or `external`.
        reason: &'static str,
    },
    /// The model was loaded without some configured RPC workers (they did
    /// not answer, or their rpc-server was down).
    WorkerMissing {
        /// The workers left out.
        workers: Vec<String>,
        /// The window loaded.
        window: Option<u32>,
        /// The window every worker would have given, when larger.
        full_window: Option<u32>,
    },
}

/// What one save holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct SaveRecord {
    /// The file's stem (`kv-<hash>`).
    pub name: String,
    /// The model id.
    pub model: String,
    /// The model file.
    pub model_path: std::path::PathBuf,
    /// The model file's identity when saved (size and mtime).
    pub model_identity: String,
    /// The conversation's key.
    pub conversation: String,
    /// Tokens in the saved slot.
    pub tokens: u32,
    /// Of those, the model's answer in the conversation's last turn (a
    /// client may send it back otherwise; `law::kv_keep::reuse`). Absent
    /// in records of older wardens: 0.
    #[serde(default)]
    pub answer_tokens: u32,
    /// The file's size.
    pub bytes: u64,
    /// When it was saved (Unix ms).
    pub saved_at_ms: u64,
}

/// What `/warden/status` shows of the store.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct StoreView {
    /// Saves held.
    pub count: usize,
    /// Their bytes.
    pub bytes: u64,
    /// The cap.
    pub cap_bytes: u64,
    /// Each, newest first.
    pub saves: Vec<SaveRecord>,
}

/// The brake as status shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct BrakeView {
    /// Whether the brake samples at all.
    pub enabled: bool,
    /// Why it is off, when it is.
    pub off_reason: Option<String>,
    /// The last level read.
    pub level: Option<Level>,
    /// The state.
    pub state: BrakeState,
    /// The last action taken (its log word).
    pub last_action: Option<crate::law::names::BrakeDid>,
    /// An unload's carry waiting for the model's next spawn.
    pub reload_pending: Option<String>,
}
