//! The warden's configuration: every `WARDEN_*` environment variable is read
//! here, once, at start, into plain values the rest of the crate is handed.
//! Nothing else reads the environment (the law cannot; the actors must not,
//! so a test can build a config by hand). The binary's client commands
//! (`cli::client`) read `WARDEN_URL` and `WARDEN_API_KEY` themselves: they
//! configure a client of some warden, not this one.

use std::path::PathBuf;
use std::time::Duration;

pub use crate::law::schedule::Policy as SchedulePolicy;
pub use crate::law::slots::Parallel;
pub use file::{FileError, ModelSettings, SettingsFile};

pub mod file;
pub mod live;
/// Which engine the user asked for (the law's own type: `law::types`).
pub use crate::law::types::EnginePreference;
pub use live::Live;
// The types the config carries, nameable where an embedder meets them.
pub use crate::law::worker_status::WorkerAddr;
pub use crate::secret::ApiKey;

/// The QA seam that forces a memory-pressure reading (never set in normal use).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ForcedPressure {
    /// RAM level warning, with paging evidence (CPU and MLX engines).
    Warning,
    /// RAM level critical (CPU and MLX engines).
    Critical,
    /// A VRAM spill at the warning tier (CUDA engine).
    VramWarning,
    /// A VRAM spill at the critical tier (CUDA engine).
    VramCritical,
}

/// Everything configurable, with the defaults a desktop user gets.
#[derive(Debug, Clone, PartialEq)]
pub struct WardenConfig {
    /// `WARDEN_ENGINE`: the engine wanted (cpu, cuda, mlx; unset = auto).
    pub engine: EnginePreference,
    /// `WARDEN_FORCE_CPU=1`: the CPU engine whatever the hardware (wins over all).
    pub force_cpu: bool,
    /// `WARDEN_LLAMA_SERVER`: an explicit llama-server binary, tried first.
    pub llama_server: Option<PathBuf>,
    /// `WARDEN_CACHE_DIR`: where build-llama.sh keeps llama.cpp builds and models.
    pub cache_dir: PathBuf,
    /// Directories whose `artifacts/llama-cpp/<flavour>/bin` may hold the
    /// binary (the current directory and the repo the binary was built in).
    pub artifact_roots: Vec<PathBuf>,
    /// `WARDEN_CTX`: the window pinned by the user (the declared ceiling).
    pub ctx_pin: Option<u32>,
    /// `WARDEN_IDLE_TIMEOUT_S`: a model idle this long (from the end of its
    /// last turn) is unloaded. The spec's 300 s.
    pub idle_timeout: Duration,
    /// `WARDEN_IDLE_TICK_S`: how often the idle timer looks. The spec's 30 s.
    pub idle_tick: Duration,
    /// `WARDEN_BRAKE_TICK_S`: the memory brake's idle sample period. 60 s.
    pub brake_tick: Duration,
    /// How often the sensor refreshes its latest reading, which a turn's
    /// start and end read (250 ms: a reading's age stays far below the 10 s
    /// the pressure level averages over, at ~0.1 % of a core, a Linux
    /// sample parsed by procfs taking ~0.3 ms; zero: only at each idle
    /// sample). No environment variable: a tuning knob for embedders and
    /// tests.
    pub sensor_period: Duration,
    /// `WARDEN_LOAD_TIMEOUT_S`: a child not ready after this is stopped and
    /// reported `load_timeout`. Long enough for a big model from a slow disk.
    pub load_timeout: Duration,
    /// `WARDEN_STARVATION_LIMIT_S`: the longest a model's load waits for
    /// another model's turns before that model yields its memory
    /// (`law::schedule`; never less than two switches). 30 s.
    pub starvation_limit: Duration,
    /// `WARDEN_SCHEDULE`: how models take turns in memory (`weighed`, the
    /// default, or `arrival`: first come, first served).
    pub schedule: SchedulePolicy,
    /// `WARDEN_RESUME_TURNS`: how many times a turn whose child died under
    /// it goes on on the next child (`law::resume`); 0 turns it off. 1.
    pub resume_turns: u32,
    /// The readiness bound of a brake respawn (the spec's 30 s,
    /// LLAMA_RESPAWN_PROBE_TIMEOUT_S); `WARDEN_RESPAWN_TIMEOUT_S` for tests.
    pub respawn_timeout: Duration,
    /// `WARDEN_FIRST_TOKEN_TIMEOUT_S`: from sending a streamed request to its
    /// first event; covers prompt processing of a long prompt on a slow CPU.
    pub first_token_timeout: Duration,
    /// `WARDEN_STALL_TIMEOUT_S`: the longest gap between two stream events
    /// once tokens flow (a SIGSTOPped or wedged child).
    pub stall_timeout: Duration,
    /// `WARDEN_REQUEST_TIMEOUT_S`: the whole of a non-streamed request (its
    /// progress cannot be seen, so only a total bound applies).
    pub request_timeout: Duration,
    /// `WARDEN_CLIENT_STALL_TIMEOUT_S`: the longest a turn waits for its
    /// client to take the next piece of its answer. Past it the turn is
    /// abandoned as if the client had disconnected, so one client that
    /// stops reading holds the engine for at most this long. 30 s: far above
    /// any reading client's pause (a browser tab in the background still
    /// reads), short enough that the next person's turn is not lost.
    pub client_stall_timeout: Duration,
    /// `WARDEN_SSE_KEEPALIVE_S`: a streamed answer silent this long (a long
    /// prompt read, a resumed turn waiting for its new child) gets an SSE
    /// comment, so clients and proxies with idle timeouts keep the stream;
    /// 0 sends none. 15 s: under the 30 to 60 s idle timeouts of common
    /// proxies (nginx's `proxy_read_timeout` is 60 s).
    pub sse_keep_alive: Duration,
    /// `WARDEN_BODY_TIMEOUT_S`: the whole of reading a request body; a body
    /// trickled in slower is refused with 408 before any turn exists.
    /// 30 s: a 16 MiB body at 0.5 MiB/s; a chat body is a few KiB.
    pub body_timeout: Duration,
    /// `WARDEN_UI_SAMPLE_S`: the period of the dashboard's memory history
    /// (`sensors::history`; 5 s, 360 samples = 30 minutes; 0: none).
    pub ui_sample: Duration,
    /// `WARDEN_WATCH_S`: how often the warden looks at its settings file
    /// and its model stores for a change (`config::live`; 0: never, only
    /// SIGHUP). 2 s: an edit is serving before the person has switched
    /// back to their client, for a few directory reads and one small file
    /// read each time (a file watcher would save those reads but not work
    /// alike on every platform and network filesystem).
    pub watch_period: Duration,
    /// `WARDEN_KV_SAVE` (`0` turns it off): keep conversations' KV caches on
    /// disk across the warden's own interruptions (`law::kv_save`).
    pub kv_save: bool,
    /// `WARDEN_KV_SAVE_DIR`: where (default `<cache>/kv-saves`).
    pub kv_save_dir: Option<PathBuf>,
    /// `WARDEN_KV_SAVE_MAX_GB`: the store's cap (default 5 % of the free
    /// disk, at most 8 GiB).
    pub kv_save_max_bytes: Option<u64>,
    /// `WARDEN_KV_SAVE_AHEAD_S` (`0` turns it off): once a model has been
    /// idle this long, the idle conversations the law would move to disk
    /// before a new conversation's turn (`law::compact`), or that such a
    /// turn would take the slot of, are saved ahead, so that turn's first
    /// token waits for an erase only. 2 s: a person reading an answer
    /// pauses longer, while a client sending turns back to back (an agent)
    /// never waits for a save it did not need.
    pub kv_save_ahead: Duration,
    /// `WARDEN_MAX_CONNECTIONS`: open client connections the HTTP server
    /// serves at once (more wait in the listen backlog). 4096: far above
    /// any desktop's tools, and within the file descriptors the server
    /// raises its own soft limit to.
    pub max_connections: usize,
    /// SIGTERM-to-SIGKILL grace of every stop.
    pub stop_grace: Duration,
    /// `WARDEN_MAX_QUEUE`: turns waiting or running past which a new request
    /// is refused with 503 `queue_full` instead of waiting without bound.
    pub max_queue: usize,
    /// `WARDEN_PARALLEL`: conversations one generating llama-server child
    /// serves at once (`auto`, the default: `law::slots::AUTO_SLOTS`; `1`:
    /// one turn at a time per model).
    pub parallel: Parallel,
    /// `WARDEN_MAX_RESIDENT`: at most this many models resident at once
    /// (`None`, the default: memory alone decides; `law::residents`).
    pub max_resident: Option<usize>,
    /// `WARDEN_MAX_BODY_BYTES`: the largest request body accepted.
    pub max_body_bytes: usize,
    /// `WARDEN_RAM_OVERRIDE_GB` (QA only): stands in for the RAM total.
    pub ram_override_bytes: Option<u64>,
    /// `WARDEN_VRAM_OVERRIDE_GB` (QA only): stands in for the free VRAM.
    pub vram_override_bytes: Option<u64>,
    /// `WARDEN_FORCE_MEMORY_PRESSURE` (QA only).
    pub force_pressure: Option<ForcedPressure>,
    /// `WARDEN_API_KEY`: when set, a bearer token the warden's own routes
    /// require (redacted in this struct's `Debug`).
    pub api_key: Option<crate::secret::ApiKey>,
    /// `WARDEN_WORKERS` (comma-separated `HOST:PORT`, or `serve --worker`):
    /// llama.cpp RPC workers (`llm-warden worker`) the CPU engine splits
    /// models over.
    pub workers: Vec<crate::law::worker_status::WorkerAddr>,
    /// `WARDEN_WORKER_KEY`: the key that reads the workers' status; unset,
    /// the key file a worker on this machine wrote (`<cache>/worker.key`).
    pub worker_key: Option<crate::secret::ApiKey>,
    /// `WARDEN_CORS_ORIGINS` (comma-separated; `serve --cors-origin` replaces
    /// it): the web origins (`http://host:port`) whose pages may call the
    /// warden from a browser. Empty, the default: no CORS headers at all, so
    /// browsers keep every other site's pages out. `*` admits any origin.
    pub cors_origins: Vec<String>,
    /// `WARDEN_MLX_PYTHON`: the Python of the MLX environment.
    pub mlx_python: Option<PathBuf>,
    /// `WARDEN_CHILD_VERBOSITY`: llama-server's `-lv` (default 3, its own).
    pub child_verbosity: u8,
    /// `CUDA_VISIBLE_DEVICES` as the user set it (empty = unset): restricts
    /// the CUDA engine's choice of GPU and is never overridden.
    pub cuda_visible_devices: Option<String>,
    /// `WARDEN_TEST_SPILL_PLATFORM=1` (tests only): pretend this platform
    /// can spill VRAM into RAM (as Windows' WDDM does), so the CUDA spill
    /// brake runs on Linux, driven by `WARDEN_FORCE_MEMORY_PRESSURE=vram-*`.
    pub pretend_spill_platform: bool,
    /// Which other tools' model stores are read (`catalog::stores`).
    pub stores: StoreSwitches,
    /// The settings file read (`file`), if any.
    pub settings_file: Option<PathBuf>,
    /// Per-model settings from the file, by catalog id.
    pub models: std::collections::BTreeMap<String, ModelSettings>,
}

/// Which other tools' model stores the catalog reads: each on unless its
/// `WARDEN_STORE_*` is `0`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreSwitches {
    /// `WARDEN_STORE_OLLAMA`.
    pub ollama: bool,
    /// `WARDEN_STORE_HF`.
    pub hugging_face: bool,
    /// `WARDEN_STORE_LMSTUDIO`.
    pub lm_studio: bool,
    /// `WARDEN_STORE_LLAMA_CACHE`.
    pub llama_cache: bool,
}

impl Default for StoreSwitches {
    fn default() -> Self {
        Self {
            ollama: true,
            hugging_face: true,
            lm_studio: true,
            llama_cache: true,
        }
    }
}

/// Why the settings were refused: a variable, the file, or a variable the
/// file set.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// A variable of the environment.
    #[error(transparent)]
    Variable(#[from] ConfigError),
    /// The file does not parse, or names what the warden does not know.
    #[error(transparent)]
    File(#[from] FileError),
    /// A value the file set is unusable.
    #[error("{file}: {error}", file = file.display())]
    InFile {
        /// What is wrong.
        error: ConfigError,
        /// The file.
        file: PathBuf,
    },
}

/// A variable that is set but unusable: the warden refuses to start rather
/// than silently ignore what the user asked for.
#[derive(Debug, thiserror::Error)]
#[error("{name}={value:?} is not valid: {expected}")]
pub struct ConfigError {
    /// The variable's name.
    pub name: &'static str,
    /// What it held.
    pub value: String,
    /// What it should hold.
    pub expected: &'static str,
}

impl Default for WardenConfig {
    fn default() -> Self {
        Self {
            engine: EnginePreference::Auto,
            force_cpu: false,
            llama_server: None,
            cache_dir: default_cache_dir(),
            artifact_roots: default_artifact_roots(),
            ctx_pin: None,
            idle_timeout: Duration::from_secs(300),
            idle_tick: Duration::from_secs(30),
            brake_tick: crate::law::brake::BRAKE_IDLE_INTERVAL,
            sensor_period: Duration::from_millis(250),
            load_timeout: Duration::from_secs(300),
            starvation_limit: crate::law::schedule::STARVATION_LIMIT_DEFAULT,
            schedule: crate::law::schedule::Policy::Weighed,
            resume_turns: crate::law::resume::RESUME_TURNS_DEFAULT,
            respawn_timeout: Duration::from_secs(30),
            first_token_timeout: Duration::from_secs(300),
            stall_timeout: Duration::from_secs(60),
            request_timeout: Duration::from_secs(900),
            client_stall_timeout: Duration::from_secs(30),
            sse_keep_alive: Duration::from_secs(15),
            body_timeout: Duration::from_secs(30),
            ui_sample: Duration::from_secs(5),
            watch_period: Duration::from_secs(2),
            kv_save: true,
            kv_save_dir: None,
            kv_save_max_bytes: None,
            kv_save_ahead: Duration::from_secs(2),
            max_connections: 4096,
            stop_grace: Duration::from_secs(5),
            max_queue: 256,
            parallel: Parallel::Auto,
            max_resident: crate::law::residents::MAX_RESIDENT_DEFAULT,
            max_body_bytes: 16 * 1024 * 1024,
            ram_override_bytes: None,
            vram_override_bytes: None,
            force_pressure: None,
            api_key: None,
            workers: Vec::new(),
            worker_key: None,
            cors_origins: Vec::new(),
            mlx_python: None,
            child_verbosity: 3,
            cuda_visible_devices: None,
            pretend_spill_platform: false,
            stores: StoreSwitches::default(),
            settings_file: None,
            models: Default::default(),
        }
    }
}

impl WardenConfig {
    /// The defaults, overridden by every `WARDEN_*` variable that is set.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// As `from_env`, over any lookup (tests pass a map). The readers run in
    /// this order, so the first unusable variable named is always the same.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let var = |name: &str| get(name).filter(|v| !v.trim().is_empty());
        let mut c = Self::default();
        c.read_engine_and_paths(&var)?;
        c.read_timeouts(&var)?;
        c.read_limits(&var)?;
        c.read_qa_seams(&var)?;
        c.read_clients_and_workers(&var)?;
        c.read_child_and_kv(&var)?;
        Ok(c)
    }

    /// The environment and the settings file (`file`: `explicit`, the
    /// `--config` flag, else `WARDEN_CONFIG`, else the default path), the
    /// environment first: what `serve`, `chat` and `inspect` run with. A
    /// named file that cannot be read, or a file that does not parse,
    /// refuses the start.
    pub fn load(explicit: Option<&std::path::Path>) -> Result<Self, SettingsError> {
        let env = |name: &str| std::env::var(name).ok();
        let path = explicit
            .map(std::path::Path::to_path_buf)
            .or_else(|| file::find(env).map(|(p, _)| p));
        let file = match path {
            Some(path) => Some((file::load(&path)?, path)),
            None => None,
        };
        Self::from_sources(env, file)
    }

    /// As `load`, over a lookup and a file already read.
    pub fn from_sources(
        env: impl Fn(&str) -> Option<String>,
        file: Option<(SettingsFile, PathBuf)>,
    ) -> Result<Self, SettingsError> {
        let (vars, models, path) = match file {
            Some((f, p)) => (f.variables, f.models, Some(p)),
            None => Default::default(),
        };
        let from_file = |name: &str| env(name).filter(|v| !v.trim().is_empty()).is_none() && vars.contains_key(name);
        let mut c = Self::from_lookup(|name| {
            env(name)
                .filter(|v| !v.trim().is_empty())
                .or_else(|| vars.get(name).cloned())
        })
        .map_err(|e| match &path {
            Some(p) if from_file(e.name) => SettingsError::InFile {
                error: e,
                file: p.clone(),
            },
            _ => SettingsError::Variable(e),
        })?;
        c.models = models;
        c.settings_file = path;
        Ok(c)
    }

    /// Conversations `model`'s child serves at once: its own setting, else
    /// `WARDEN_PARALLEL`.
    pub fn parallel_for(&self, model: &str) -> Parallel {
        self.models.get(model).and_then(|m| m.parallel).unwrap_or(self.parallel)
    }

    /// `model`'s pinned window: its own, else `WARDEN_CTX`.
    pub fn ctx_pin_for(&self, model: &str) -> Option<u32> {
        self.models.get(model).and_then(|m| m.ctx).or(self.ctx_pin)
    }

    /// `model`'s weight against the others when they take turns in memory
    /// (`law::schedule`): its own setting, else 1.
    pub fn weight(&self, model: &str) -> f64 {
        self.models
            .get(model)
            .and_then(|m| m.weight)
            .unwrap_or(crate::law::schedule::WEIGHT_DEFAULT)
    }

    /// Whether `model` is pinned: never evicted for another, never reaped.
    pub fn pinned(&self, model: &str) -> bool {
        self.models.get(model).is_some_and(|m| m.pinned)
    }

    /// Whether `model`'s settings name a chat template (a file, or one of
    /// llama.cpp's built-in names) for its child to render chats with.
    pub fn names_chat_template(&self, model: &str) -> bool {
        self.models
            .get(model)
            .is_some_and(|m| m.chat_template_file.is_some() || m.chat_template.is_some())
    }

    /// The llama-server arguments `model`'s settings add: its chat template
    /// file and its own `args` (the owned flags were refused at parse).
    pub fn extra_args(&self, model: &str) -> Vec<String> {
        let Some(m) = self.models.get(model) else {
            return Vec::new();
        };
        let mut a = Vec::new();
        if let Some(t) = &m.chat_template_file {
            a.push("--chat-template-file".to_string());
            a.push(t.display().to_string());
        }
        if let Some(name) = &m.chat_template {
            a.push("--chat-template".to_string());
            a.push(name.clone());
        }
        a.extend(m.args.iter().cloned());
        a
    }

    /// `model`'s idle unload: its own, else `WARDEN_IDLE_TIMEOUT_S`.
    pub fn idle_timeout_for(&self, model: &str) -> Duration {
        self.models
            .get(model)
            .and_then(|m| m.idle_timeout_s)
            .and_then(|s| Duration::try_from_secs_f64(s).ok())
            .unwrap_or(self.idle_timeout)
    }

    /// The models directory build-llama.sh fills.
    pub fn models_dir(&self) -> PathBuf {
        self.cache_dir.join("models")
    }
}

/// The worker addresses of a list (`WARDEN_WORKERS`, `serve --worker`);
/// blank items are skipped, repeats dropped, a bad one refuses the start.
pub fn workers<'a>(
    name: &'static str,
    items: impl IntoIterator<Item = &'a str>,
) -> Result<Vec<crate::law::worker_status::WorkerAddr>, ConfigError> {
    let mut out = Vec::new();
    for item in items.into_iter().map(str::trim).filter(|i| !i.is_empty()) {
        let a = item.parse().map_err(|_| {
            bad(
                name,
                item.to_string(),
                "HOST:PORT of an llm-warden worker, e.g. 10.0.0.2:50053",
            )
        })?;
        if !out.contains(&a) {
            out.push(a);
        }
    }
    Ok(out)
}

/// The origins of a list (`WARDEN_CORS_ORIGINS`, `serve --cors-origin`),
/// each normalised to what a browser sends (`http::cors::normalise_origin`);
/// one no browser could send refuses the start instead of never matching.
/// Blank items (`a,,b`, a trailing comma) are skipped, repeats dropped.
pub fn cors_origins<'a>(
    name: &'static str,
    items: impl IntoIterator<Item = &'a str>,
) -> Result<Vec<String>, ConfigError> {
    const EXPECTED: &str =
        "origins like http://localhost:5173 or https://app.example.com (scheme, host, optional port; no path), or *";
    let mut out = Vec::new();
    for item in items.into_iter().map(str::trim).filter(|i| !i.is_empty()) {
        let o = normalise_origin(item).ok_or_else(|| bad(name, item, EXPECTED))?;
        if !out.contains(&o) {
            out.push(o);
        }
    }
    Ok(out)
}

fn bad(name: &'static str, value: impl Into<String>, expected: &'static str) -> ConfigError {
    ConfigError {
        name,
        value: value.into(),
        expected,
    }
}

/// `$XDG_CACHE_HOME/llm-warden`, else `~/.cache/llm-warden` (build-llama.sh's rule).
pub fn default_cache_dir() -> PathBuf {
    if let Some(x) = std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(x).join("llm-warden");
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    home.join(".cache").join("llm-warden")
}

/// The current directory and the source tree this binary was built from.
fn default_artifact_roots() -> Vec<PathBuf> {
    let mut roots = Vec::new();
    if let Ok(cwd) = std::env::current_dir() {
        roots.push(cwd);
    }
    let built_in = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    if !roots.contains(&built_in) {
        roots.push(built_in);
    }
    roots
}

mod read;

/// `item` as a browser sends it in `Origin` (`scheme://host[:port]`,
/// lowercase, no path), or `None` when no browser could send it: a trailing
/// slash or a capital would otherwise never match, and the browser would
/// fail the fetch with nothing said. `*` passes as is.
pub fn normalise_origin(item: &str) -> Option<String> {
    let item = item.trim();
    let o = item.strip_suffix('/').unwrap_or(item).to_ascii_lowercase();
    let ok = o == "*"
        || o.split_once("://").is_some_and(|(scheme, rest)| {
            matches!(scheme, "http" | "https")
                && !rest.is_empty()
                && !rest.contains(['/', '?', '#', '@', ' ', '*'])
                && o.bytes().all(|b| b == b'\t' || (32..127).contains(&b))
        });
    ok.then_some(o)
}

#[cfg(test)]
mod tests;
