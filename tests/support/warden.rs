//! The one way a test starts a warden: `TestWarden`, over the fake
//! llama-server run as a real process (`fake-llama-server`), the in-process fake (`child::fake`, on
//! the test's own runtime, so paused time governs the engine), the real
//! llama-server, or any backend; and the test configuration.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use llm_warden::Warden;
use llm_warden::catalog::Catalog;
use llm_warden::child::fake::FakeLlama;
use llm_warden::child::launch::Launcher;
use llm_warden::config::WardenConfig;
use llm_warden::engines::{Backend, CpuEngine};
use llm_warden::sensors::view::PressureView;

use super::models::fake_server;
use super::real::{SMOLLM2, real_llama_server, real_model};

/// A config for tests: no timers unless asked (the idle reap, the brake's
/// idle samples, the KV save ahead), a short stop grace,
/// watchdogs generous enough for a loaded 2-core machine (tests of the
/// watchdogs themselves set theirs), and the KV saves in a directory of
/// its own (`test_kv_dir`).
pub fn test_config() -> WardenConfig {
    WardenConfig {
        kv_save_dir: Some(test_kv_dir()),
        idle_tick: Duration::ZERO,
        brake_tick: Duration::ZERO,
        kv_save_ahead: Duration::ZERO,
        load_timeout: Duration::from_secs(120),
        first_token_timeout: Duration::from_secs(120),
        stall_timeout: Duration::from_secs(60),
        request_timeout: Duration::from_secs(120),
        stop_grace: Duration::from_secs(2),
        ..WardenConfig::default()
    }
}

/// A fresh directory for one configuration's KV saves: never the user's
/// own cache (a test must not leave a conversation there), and never
/// another test's (a test must not restore a conversation an earlier test,
/// run, build or CPU left: the same opening question is asked by many).
/// A test that restarts a warden over the same saves clones its config or
/// names the directory itself. Under the target's scratch directory, per
/// process; the saves of processes gone are removed on first use.
pub fn test_kv_dir() -> PathBuf {
    static ROOT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let root = ROOT.get_or_init(|| {
        let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("kv-saves");
        let me = std::process::id().to_string();
        for e in std::fs::read_dir(&root).into_iter().flatten().flatten() {
            let pid = e.file_name().to_string_lossy().into_owned();
            let alive = Path::new("/proc").join(&pid).exists();
            if pid != me && !alive {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
        root.join(me)
    });
    let dir = root.join(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed).to_string());
    std::fs::create_dir_all(&dir).expect("the tests' KV directory");
    dir
}

/// A warden to start: its catalog directory, backend, configuration and
/// default model. Start it inside an actix `System` (`#[actix_rt::test]`).
pub struct TestWarden {
    dir: PathBuf,
    backend: Backend,
    cfg: WardenConfig,
    launcher: Launcher,
    default_model: Option<String>,
    /// On the test's own arbiter (the in-process fake), else on a thread of
    /// the engine's own, as in production.
    here: bool,
    /// The brake's readings from a script instead of the OS (no sensor
    /// clock: the test sends the idle samples).
    sensor: Option<Box<dyn PressureView>>,
    /// Other tools' model stores read beside the directory.
    stores: Option<llm_warden::catalog::stores::Stores>,
    /// A settings file read at start and at every reload.
    settings: Option<PathBuf>,
    /// Set: the next reading of the settings file sees its first half only
    /// (an editor's in-place write, read mid-way).
    tear: Option<Arc<std::sync::atomic::AtomicBool>>,
}

impl TestWarden {
    /// Over `backend`, serving the models in `dir`, with `test_config()`.
    pub fn backend(backend: Backend, dir: &Path) -> Self {
        Self {
            dir: dir.to_path_buf(),
            backend,
            cfg: test_config(),
            launcher: Launcher::Process,
            default_model: None,
            here: false,
            sensor: None,
            stores: None,
            settings: None,
            tear: None,
        }
    }

    /// Over the fake llama-server run as a process (`fake_model` scripts it), a real
    /// process: for what only a process shows (signals, exit statuses,
    /// process groups).
    pub fn fake(dir: &Path) -> Self {
        Self::backend(cpu(fake_server()), dir)
    }

    /// Over the in-process fake `fake`, with the engine on the test's own
    /// runtime: call `tokio::time::pause()` first and every timer of the
    /// engine and the fake runs on virtual time.
    pub fn in_process(fake: &Arc<FakeLlama>, dir: &Path) -> Self {
        Self {
            launcher: fake.launcher(),
            here: true,
            // The program is never run: the launcher serves the fake instead.
            ..Self::backend(cpu(PathBuf::from("llama-server")), dir)
        }
    }

    /// Over the real llama-server `server` on the CPU, `smollm2` the
    /// default model.
    pub fn real_cpu(server: PathBuf, dir: &Path) -> Self {
        Self::backend(cpu(server), dir).default_model("smollm2")
    }

    /// With `cfg` instead of `test_config()` (the launcher stays).
    pub fn config(mut self, cfg: WardenConfig) -> Self {
        self.cfg = cfg;
        self
    }

    /// With the brake's readings from `view` (a script).
    pub fn sensor(mut self, view: impl PressureView + 'static) -> Self {
        self.sensor = Some(Box::new(view));
        self
    }

    /// With `id` as the default model.
    pub fn default_model(mut self, id: &str) -> Self {
        self.default_model = Some(id.to_string());
        self
    }

    /// With the models of other tools' `stores` beside the directory's.
    pub fn stores(mut self, stores: llm_warden::catalog::stores::Stores) -> Self {
        self.stores = Some(stores);
        self
    }

    /// With the settings file `path`, read at start and at every reload
    /// (the watch, every `cfg.watch_period`, and `Warden::reload`), with the
    /// directory and the stores scanned again each time, as the binary does.
    pub fn settings(mut self, path: &Path) -> Self {
        self.settings = Some(path.to_path_buf());
        self
    }

    /// With `tear`: while it is set, the next reading of the settings file
    /// sees its first half only, once (then the flag is cleared).
    pub fn tearing(mut self, tear: &Arc<std::sync::atomic::AtomicBool>) -> Self {
        self.tear = Some(tear.clone());
        self
    }

    /// Starts it.
    pub fn start(self) -> Warden {
        let read = Reading {
            dir: self.dir.clone(),
            stores: self.stores.clone(),
            default_model: self.default_model.clone(),
            settings: self.settings.clone(),
            base: self.cfg.clone(),
            tear: self.tear.clone(),
        };
        let (cfg, catalog) = read.read().expect("the test's settings file parses");
        let mut b = Warden::builder(cfg, catalog)
            .backend(self.backend)
            .launcher(self.launcher);
        if self.settings.is_some() {
            b = b.reload_from(move || read.read());
        }
        if self.here {
            b = b.on_this_arbiter();
        }
        if let Some(view) = self.sensor {
            b = b.sensor(view);
        }
        b.start().expect("a warden over a given backend starts")
    }
}

/// What a test warden reads at start and at each reload.
struct Reading {
    dir: PathBuf,
    stores: Option<llm_warden::catalog::stores::Stores>,
    default_model: Option<String>,
    settings: Option<PathBuf>,
    /// The test's configuration: what the binary gets from its environment.
    base: WardenConfig,
    /// `TestWarden::tearing`.
    tear: Option<Arc<std::sync::atomic::AtomicBool>>,
}

impl Reading {
    /// The file's settings over the test's configuration, and the catalog.
    fn read(&self) -> Result<(WardenConfig, Catalog), llm_warden::status::SettingsProblem> {
        let cfg = match &self.settings {
            None => self.base.clone(),
            Some(path) => {
                if let Some(tear) = &self.tear
                    && tear.swap(false, std::sync::atomic::Ordering::SeqCst)
                {
                    return Err(torn(path));
                }
                let file = llm_warden::config::file::load(path).map_err(|e| {
                    llm_warden::status::SettingsProblem::from(&llm_warden::config::SettingsError::File(e))
                })?;
                let read = WardenConfig::from_sources(|_| None, Some((file, path.clone())))
                    .map_err(|e| llm_warden::status::SettingsProblem::from(&e))?;
                llm_warden::config::live::merge(&self.base, read).config
            }
        };
        let mut catalog = Catalog::scan(&self.dir);
        if let Some(s) = &self.stores {
            catalog.add_stores(s);
        }
        catalog.add_aliases(&cfg.models);
        if let Some(id) = &self.default_model {
            catalog.set_default(id);
        }
        Ok((cfg, catalog))
    }
}

/// The refusal of a reading of `path` that saw its first half only.
fn torn(path: &Path) -> llm_warden::status::SettingsProblem {
    let text = std::fs::read_to_string(path).unwrap();
    let half = text.char_indices().nth(text.chars().count() / 2).map_or(0, |(i, _)| i);
    let e = llm_warden::config::file::parse(&text[..half]).expect_err("half of the test's settings file is not TOML");
    let e = llm_warden::config::file::FileError {
        path: Some(path.to_path_buf()),
        ..e
    };
    llm_warden::status::SettingsProblem::from(&llm_warden::config::SettingsError::File(e))
}

/// The CPU engine over `server`.
fn cpu(server: PathBuf) -> Backend {
    Backend::Cpu(CpuEngine {
        server,
        verbosity: 3,
        workers: None,
    })
}

/// A warden over the real llama-server serving the real SmolLM2 (as model
/// `smollm2`, the default), with `cfg`; fails the test when build-llama.sh
/// has not run (see `real_llama_server`). The directory lives as long as
/// the warden.
#[track_caller]
pub fn real_smollm_warden(cfg: WardenConfig) -> (Warden, tempfile::TempDir) {
    let (server, model) = (real_llama_server(), real_model(SMOLLM2));
    let dir = real_smollm_dir(&model);
    let w = TestWarden::real_cpu(server, dir.path()).config(cfg).start();
    (w, dir)
}

/// A catalog directory holding the real SmolLM2 as `smollm2.gguf` (a symlink),
/// for tests that add files of their own beside it.
pub fn real_smollm_dir(smollm: &Path) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(smollm, dir.path().join("smollm2.gguf")).unwrap();
    dir
}

/// Loads the default model now, and the status after it.
pub async fn load_default(w: &Warden) -> llm_warden::status::EngineStatus {
    w.load(None, None).await.expect("the default model loads")
}
