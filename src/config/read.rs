//! `WardenConfig::from_lookup`'s readers, one per theme, each over the same
//! lookup (blank values already count as unset), and the value parsers they
//! share.

use std::path::PathBuf;
use std::time::Duration;

use super::{ConfigError, EnginePreference, ForcedPressure, WardenConfig, bad, cors_origins, workers};

impl WardenConfig {
    pub(super) fn read_engine_and_paths(&mut self, var: &impl Fn(&str) -> Option<String>) -> Result<(), ConfigError> {
        if let Some(v) = var("WARDEN_ENGINE") {
            self.engine = match v.trim().to_ascii_lowercase().as_str() {
                "auto" => EnginePreference::Auto,
                "cpu" => EnginePreference::Cpu,
                "cuda" => EnginePreference::Cuda,
                "mlx" => EnginePreference::Mlx,
                _ => return Err(bad("WARDEN_ENGINE", v, "one of auto, cpu, cuda, mlx")),
            };
        }
        self.force_cpu = var("WARDEN_FORCE_CPU").is_some_and(|v| matches!(v.trim(), "1" | "true" | "yes"));
        self.llama_server = var("WARDEN_LLAMA_SERVER").map(PathBuf::from);
        if let Some(v) = var("WARDEN_CACHE_DIR") {
            self.cache_dir = PathBuf::from(v);
        }
        self.ctx_pin = parse(var, "WARDEN_CTX", "a token count, e.g. 8192")?;
        Ok(())
    }

    pub(super) fn read_timeouts(&mut self, var: &impl Fn(&str) -> Option<String>) -> Result<(), ConfigError> {
        for (name, dst) in [
            ("WARDEN_IDLE_TIMEOUT_S", &mut self.idle_timeout),
            ("WARDEN_IDLE_TICK_S", &mut self.idle_tick),
            ("WARDEN_BRAKE_TICK_S", &mut self.brake_tick),
            ("WARDEN_LOAD_TIMEOUT_S", &mut self.load_timeout),
            ("WARDEN_STARVATION_LIMIT_S", &mut self.starvation_limit),
            ("WARDEN_RESPAWN_TIMEOUT_S", &mut self.respawn_timeout),
            ("WARDEN_FIRST_TOKEN_TIMEOUT_S", &mut self.first_token_timeout),
            ("WARDEN_STALL_TIMEOUT_S", &mut self.stall_timeout),
            ("WARDEN_REQUEST_TIMEOUT_S", &mut self.request_timeout),
            ("WARDEN_CLIENT_STALL_TIMEOUT_S", &mut self.client_stall_timeout),
            ("WARDEN_SSE_KEEPALIVE_S", &mut self.sse_keep_alive),
            ("WARDEN_BODY_TIMEOUT_S", &mut self.body_timeout),
            ("WARDEN_UI_SAMPLE_S", &mut self.ui_sample),
            ("WARDEN_WATCH_S", &mut self.watch_period),
        ] {
            if let Some(d) = secs(var, name)? {
                *dst = d;
            }
        }
        Ok(())
    }

    pub(super) fn read_limits(&mut self, var: &impl Fn(&str) -> Option<String>) -> Result<(), ConfigError> {
        if let Some(n) = parse(var, "WARDEN_MAX_CONNECTIONS", "a positive count")? {
            if n == 0 {
                return Err(bad("WARDEN_MAX_CONNECTIONS", "0", "a positive count"));
            }
            self.max_connections = n;
        }
        if let Some(n) = parse(var, "WARDEN_MAX_QUEUE", "a positive count")? {
            self.max_queue = n;
        }
        if let Some(v) = var("WARDEN_PARALLEL") {
            self.parallel = crate::law::slots::parse(&v)
                .ok_or_else(|| bad("WARDEN_PARALLEL", v, "auto, or a count from 1 to 64"))?;
        }
        let raw = var("WARDEN_MAX_RESIDENT");
        self.max_resident = crate::law::residents::max_resident(raw.as_deref()).map_err(|_| {
            bad(
                "WARDEN_MAX_RESIDENT",
                raw.unwrap_or_default(),
                "a count of 1 or more, or unset",
            )
        })?;
        let raw = var("WARDEN_SCHEDULE");
        self.schedule = crate::law::schedule::Policy::parse(raw.as_deref())
            .map_err(|_| bad("WARDEN_SCHEDULE", raw.unwrap_or_default(), "`weighed` or `arrival`"))?;
        if let Some(n) = parse(var, "WARDEN_RESUME_TURNS", "a count (0 turns resuming off)")? {
            self.resume_turns = n;
        }
        if let Some(n) = parse(var, "WARDEN_MAX_BODY_BYTES", "a byte count")? {
            self.max_body_bytes = n;
        }
        Ok(())
    }

    pub(super) fn read_qa_seams(&mut self, var: &impl Fn(&str) -> Option<String>) -> Result<(), ConfigError> {
        self.ram_override_bytes = parse::<f64>(var, "WARDEN_RAM_OVERRIDE_GB", "GiB, e.g. 2 or 0.5")?.map(gib);
        self.vram_override_bytes = parse::<f64>(var, "WARDEN_VRAM_OVERRIDE_GB", "GiB, e.g. 8")?.map(gib);
        if let Some(v) = var("WARDEN_FORCE_MEMORY_PRESSURE") {
            self.force_pressure = Some(match v.trim() {
                "warning" => ForcedPressure::Warning,
                "critical" => ForcedPressure::Critical,
                "vram-warning" => ForcedPressure::VramWarning,
                "vram-critical" => ForcedPressure::VramCritical,
                _ => {
                    return Err(bad(
                        "WARDEN_FORCE_MEMORY_PRESSURE",
                        v,
                        "one of warning, critical, vram-warning, vram-critical",
                    ));
                }
            });
        }
        self.pretend_spill_platform = var("WARDEN_TEST_SPILL_PLATFORM").is_some_and(|v| v.trim() == "1");
        Ok(())
    }

    /// After `read_engine_and_paths`: the worker key's fallback file lives
    /// in the cache directory.
    pub(super) fn read_clients_and_workers(
        &mut self,
        var: &impl Fn(&str) -> Option<String>,
    ) -> Result<(), ConfigError> {
        self.api_key = var("WARDEN_API_KEY").map(crate::secret::ApiKey::from_secret);
        if let Some(v) = var("WARDEN_WORKERS") {
            self.workers = workers("WARDEN_WORKERS", v.split(','))?;
        }
        self.worker_key = var("WARDEN_WORKER_KEY")
            .or_else(|| {
                std::fs::read_to_string(self.cache_dir.join("worker.key"))
                    .ok()
                    .map(|k| k.trim().to_string())
                    .filter(|k| !k.is_empty())
            })
            .map(crate::secret::ApiKey::from_secret);
        if let Some(v) = var("WARDEN_CORS_ORIGINS") {
            self.cors_origins = cors_origins("WARDEN_CORS_ORIGINS", v.split(','))?;
        }
        Ok(())
    }

    pub(super) fn read_child_and_kv(&mut self, var: &impl Fn(&str) -> Option<String>) -> Result<(), ConfigError> {
        self.mlx_python = var("WARDEN_MLX_PYTHON").map(PathBuf::from);
        self.kv_save = var("WARDEN_KV_SAVE").is_none_or(|v| v.trim() != "0");
        self.kv_save_dir = var("WARDEN_KV_SAVE_DIR").map(PathBuf::from);
        if let Some(g) = parse::<f64>(var, "WARDEN_KV_SAVE_MAX_GB", "a size in GiB, e.g. 2")? {
            self.kv_save_max_bytes = Some(gib(g.max(0.0)));
        }
        if let Some(d) = secs(var, "WARDEN_KV_SAVE_AHEAD_S")? {
            self.kv_save_ahead = d;
        }
        if let Some(n) = parse(var, "WARDEN_CHILD_VERBOSITY", "0 to 5")? {
            self.child_verbosity = n;
        }
        self.cuda_visible_devices = var("CUDA_VISIBLE_DEVICES");
        let off = |name: &str| var(name).is_some_and(|v| v.trim() == "0");
        self.stores = super::StoreSwitches {
            ollama: !off("WARDEN_STORE_OLLAMA"),
            hugging_face: !off("WARDEN_STORE_HF"),
            lm_studio: !off("WARDEN_STORE_LMSTUDIO"),
            llama_cache: !off("WARDEN_STORE_LLAMA_CACHE"),
        };
        Ok(())
    }
}

fn parse<T: std::str::FromStr>(
    var: &impl Fn(&str) -> Option<String>,
    name: &'static str,
    expected: &'static str,
) -> Result<Option<T>, ConfigError> {
    match var(name) {
        None => Ok(None),
        Some(v) => v.trim().parse().map(Some).map_err(|_| bad(name, v, expected)),
    }
}

fn secs(var: &impl Fn(&str) -> Option<String>, name: &'static str) -> Result<Option<Duration>, ConfigError> {
    let Some(s) = parse::<f64>(var, name, "seconds, e.g. 30 or 0.5")? else {
        return Ok(None);
    };
    // try_from: a value past Duration's range (1e20) is refused, not a panic.
    Duration::try_from_secs_f64(s)
        .map(Some)
        .map_err(|_| bad(name, s.to_string(), "a non-negative number of seconds"))
}

fn gib(g: f64) -> u64 {
    (g * 1024.0 * 1024.0 * 1024.0) as u64
}
