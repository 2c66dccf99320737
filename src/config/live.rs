//! The settings applied live: `Live`, the cell every reader
//! takes its snapshot from, and `merge`, the rule of what a reload may
//! change in a running warden.
//!
//! A reader takes the whole snapshot (`Live::get`, an `Arc`) and keeps it
//! for the decision at hand, so one load, one turn or one request never
//! sees half an old file and half a new one. A load reads the settings it
//! spawns with (window, slots, arguments) when it plans, so a change
//! reaches a resident model at its next load; what needs no respawn (its
//! idle time, pinned, the sampling defaults and system prompt, a turn's
//! timeouts, the queue's bound) applies to the next decision that reads it.
//!
//! What the warden bound at its start (the engine and its binary, the
//! sensors' clocks, the KV store, the residents' cap, the HTTP server's
//! key, origins and connections, the RPC workers) cannot change under it:
//! a reload keeps the running value and names the variable in
//! `restart_needed`, in the log and in `/warden/status`, instead of
//! pretending it applied.

use std::sync::{Arc, RwLock};

use super::WardenConfig;

/// A value replaced whole while readers hold the snapshot they took.
pub struct Live<T>(Arc<RwLock<Arc<T>>>);

impl<T> Live<T> {
    /// A cell holding `value`.
    pub fn new(value: T) -> Self {
        Self(Arc::new(RwLock::new(Arc::new(value))))
    }

    /// The value now (a poisoned lock still holds a whole value: it is
    /// only ever replaced, never edited in place).
    pub fn get(&self) -> Arc<T> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Replaces it; readers holding the old snapshot keep it.
    pub fn set(&self, value: Arc<T>) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = value;
    }
}

impl<T> Clone for Live<T> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for Live<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.get().fmt(f)
    }
}

/// A reload's configuration: the running one with what may change live
/// taken from the file read, and what would need a restart.
#[derive(Debug)]
pub struct Merged {
    /// What the warden runs with from now on.
    pub config: WardenConfig,
    /// The variables the file changed that apply only at a restart (the
    /// running value is kept).
    pub restart_needed: Vec<&'static str>,
}

/// A variable bound at start, and whether two configurations differ in it.
type Bound = (&'static str, fn(&WardenConfig, &WardenConfig) -> bool);

/// Every variable bound at start. A field not here and not copied by
/// `merge` is caught by its last check ("other start-time settings").
const BOUND_AT_START: &[Bound] = &[
    ("WARDEN_ENGINE", |a, b| a.engine != b.engine),
    ("WARDEN_FORCE_CPU", |a, b| a.force_cpu != b.force_cpu),
    ("WARDEN_LLAMA_SERVER", |a, b| a.llama_server != b.llama_server),
    ("WARDEN_CACHE_DIR", |a, b| a.cache_dir != b.cache_dir),
    ("WARDEN_IDLE_TICK_S", |a, b| a.idle_tick != b.idle_tick),
    ("WARDEN_BRAKE_TICK_S", |a, b| a.brake_tick != b.brake_tick),
    ("WARDEN_UI_SAMPLE_S", |a, b| a.ui_sample != b.ui_sample),
    ("WARDEN_WATCH_S", |a, b| a.watch_period != b.watch_period),
    ("WARDEN_KV_SAVE", |a, b| a.kv_save != b.kv_save),
    ("WARDEN_KV_SAVE_DIR", |a, b| a.kv_save_dir != b.kv_save_dir),
    ("WARDEN_KV_SAVE_MAX_GB", |a, b| {
        a.kv_save_max_bytes != b.kv_save_max_bytes
    }),
    // Its deadline is kept by the engine's idle timer, started with it.
    ("WARDEN_KV_SAVE_AHEAD_S", |a, b| a.kv_save_ahead != b.kv_save_ahead),
    ("WARDEN_MAX_CONNECTIONS", |a, b| a.max_connections != b.max_connections),
    ("WARDEN_MAX_RESIDENT", |a, b| a.max_resident != b.max_resident),
    ("WARDEN_RAM_OVERRIDE_GB", |a, b| {
        a.ram_override_bytes != b.ram_override_bytes
    }),
    ("WARDEN_VRAM_OVERRIDE_GB", |a, b| {
        a.vram_override_bytes != b.vram_override_bytes
    }),
    ("WARDEN_FORCE_MEMORY_PRESSURE", |a, b| {
        a.force_pressure != b.force_pressure
    }),
    ("WARDEN_API_KEY", |a, b| a.api_key != b.api_key),
    ("WARDEN_WORKERS", |a, b| a.workers != b.workers),
    ("WARDEN_WORKER_KEY", |a, b| a.worker_key != b.worker_key),
    ("WARDEN_CORS_ORIGINS", |a, b| a.cors_origins != b.cors_origins),
    ("WARDEN_MLX_PYTHON", |a, b| a.mlx_python != b.mlx_python),
    ("CUDA_VISIBLE_DEVICES", |a, b| {
        a.cuda_visible_devices != b.cuda_visible_devices
    }),
    ("WARDEN_TEST_SPILL_PLATFORM", |a, b| {
        a.pretend_spill_platform != b.pretend_spill_platform
    }),
];

/// `running` with every live setting of `read` (the per-model settings,
/// the stores, the window and slot defaults, the idle time, the turn and
/// load timeouts, the queue and body bounds, the child's verbosity), and
/// the start-time ones it changed named.
pub fn merge(running: &WardenConfig, read: WardenConfig) -> Merged {
    // What no variable sets (an embedder's or a test's own values) is
    // never the file's to change.
    let mut read = read;
    read.artifact_roots = running.artifact_roots.clone();
    read.sensor_period = running.sensor_period;
    read.stop_grace = running.stop_grace;
    let mut c = running.clone();
    c.models = read.models.clone();
    c.settings_file = read.settings_file.clone();
    c.stores = read.stores;
    c.ctx_pin = read.ctx_pin;
    c.parallel = read.parallel;
    c.idle_timeout = read.idle_timeout;
    c.load_timeout = read.load_timeout;
    c.starvation_limit = read.starvation_limit;
    c.schedule = read.schedule;
    c.resume_turns = read.resume_turns;
    c.respawn_timeout = read.respawn_timeout;
    c.first_token_timeout = read.first_token_timeout;
    c.stall_timeout = read.stall_timeout;
    c.request_timeout = read.request_timeout;
    c.client_stall_timeout = read.client_stall_timeout;
    c.sse_keep_alive = read.sse_keep_alive;
    c.body_timeout = read.body_timeout;
    c.max_queue = read.max_queue;
    c.max_body_bytes = read.max_body_bytes;
    c.child_verbosity = read.child_verbosity;
    let mut restart_needed: Vec<&'static str> = BOUND_AT_START
        .iter()
        .filter(|(_, differs)| differs(running, &read))
        .map(|(name, _)| *name)
        .collect();
    if restart_needed.is_empty() && c != read {
        restart_needed.push("other start-time settings");
    }
    Merged {
        config: c,
        restart_needed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    type Edit = fn(&mut WardenConfig);

    /// What a reload applies and what it keeps for a restart, one edit a row.
    #[test]
    fn merge_table() {
        let rows: &[(Edit, Option<&str>, &str)] = &[
            // why: the per-model settings are what the file is for: live
            (
                |c| {
                    c.models.insert("m".into(), Default::default());
                },
                None,
                "models",
            ),
            // why: a window or slot default is read by the next load's plan
            (|c| c.ctx_pin = Some(4096), None, "ctx"),
            (|c| c.parallel = crate::law::slots::Parallel::Fixed(2), None, "parallel"),
            // why: the idle time is read at each publish: applies at once
            (|c| c.idle_timeout = Duration::from_secs(5), None, "idle"),
            // why: a turn's bounds are read when the turn starts
            (|c| c.stall_timeout = Duration::from_secs(5), None, "stall"),
            (|c| c.max_queue = 3, None, "queue"),
            // why: the stores are rescanned by the same reload
            (|c| c.stores.ollama = false, None, "stores"),
            // why: the engine and its binary were chosen at start
            (|c| c.force_cpu = true, Some("WARDEN_FORCE_CPU"), "engine"),
            // why: the HTTP server checks the key it started with
            (
                |c| c.api_key = Some(crate::secret::ApiKey::from_secret("k".into())),
                Some("WARDEN_API_KEY"),
                "key",
            ),
            // why: the residents' cap is held by the residency made at start
            (
                |c| c.max_resident = Some(1),
                Some("WARDEN_MAX_RESIDENT"),
                "resident cap",
            ),
            // why: the KV store was opened at start
            (|c| c.kv_save = false, Some("WARDEN_KV_SAVE"), "kv"),
            // why: the watch's own period is its loop's, set at start
            (|c| c.watch_period = Duration::ZERO, Some("WARDEN_WATCH_S"), "watch"),
            // why: a field no variable sets is the embedder's: kept, nothing to restart
            (|c| c.stop_grace = Duration::from_secs(1), Some(""), "no variable"),
        ];
        for (edit, restart, why) in rows {
            let running = WardenConfig::default();
            let mut read = running.clone();
            edit(&mut read);
            let m = merge(&running, read.clone());
            match restart {
                None => {
                    assert!(m.restart_needed.is_empty(), "{why}: {:?}", m.restart_needed);
                    assert!(m.config == read, "{why}: the read value applies");
                }
                Some("") => {
                    assert!(m.restart_needed.is_empty(), "{why}: {:?}", m.restart_needed);
                    assert!(m.config == running, "{why}: the running value is kept");
                }
                Some(name) => {
                    assert_eq!(m.restart_needed, vec![*name], "{why}");
                    assert!(m.config == running, "{why}: the running value is kept");
                }
            }
        }
    }

    /// A reader's snapshot is whole: a set after it does not change it.
    #[test]
    fn a_snapshot_outlives_a_set() {
        let live = Live::new(1);
        let before = live.get();
        live.set(Arc::new(2));
        assert_eq!((*before, *live.get()), (1, 2));
    }
}
