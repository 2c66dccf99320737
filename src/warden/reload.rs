//! The settings and the model stores applied live.
//!
//! A reload reads the configuration and the catalog again the way the
//! start built them (the embedder's `WardenBuilder::reload_from`; the
//! binary's reads the environment, the settings file and every store),
//! every `WARDEN_WATCH_S` and on `Warden::reload` (the binary: SIGHUP). A
//! reading that changes nothing is dropped without a word. Otherwise:
//!
//! - a reading refused (a file that does not parse, an unknown key, a
//!   refused flag, a bad value) changes nothing: the last good settings
//!   keep serving, and why (with the line and column) is said once in the
//!   log, in `/warden/status` (`settings.error`), on the dashboard and as a
//!   `settings_refused` event, until a reading is good again;
//! - the configuration becomes `config::live::merge`'s: what applies live
//!   does (a window, slots or arguments at the model's next load; an idle
//!   time, pinned, sampling defaults or a system prompt at once), what was
//!   bound at start keeps its running value and is named in
//!   `settings.restart_needed`;
//! - a model that appeared gets its engine (no child until a request);
//! - a model that left is refused to new requests at once (404), and its
//!   engine unloads its child once the turns it holds have ended (a
//!   running turn is never cut), then stops;
//! - a model whose id now names another file unloads once idle, so its
//!   next load reads the new one.
//!
//! Polled, not watched through the OS: see `WardenConfig::watch_period`.
//! The watch reads a new refusal once more after `SETTLE` before saying
//! it (a file read mid-write is whole a moment later).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;

use super::Warden;
use crate::catalog::Catalog;
use crate::config::{SettingsError, WardenConfig, live};
use crate::engines::Backend;
use crate::status::{SettingsProblem, SettingsStatus, WardenEvent};

/// Where a reload reads the configuration and the catalog.
pub(super) type Sources = Arc<dyn Fn() -> Result<(WardenConfig, Catalog), SettingsProblem> + Send + Sync>;

/// What a reload changed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Applied {
    /// Models that appeared.
    pub added: Vec<String>,
    /// Models that left (each unloads once its turns end).
    pub removed: Vec<String>,
    /// Models whose file or settings changed.
    pub changed: Vec<String>,
    /// Variables that apply only at a restart (the running value is kept).
    pub restart_needed: Vec<String>,
}

/// The reload's own state.
pub(super) struct Reload {
    sources: Option<Sources>,
    /// One reload at a time (the watch and a SIGHUP may meet).
    one: tokio::sync::Mutex<()>,
    /// What `/warden/status` shows of the settings.
    state: Mutex<SettingsStatus>,
}

impl Reload {
    pub(super) fn new(sources: Option<Sources>, file: Option<&std::path::Path>) -> Self {
        Self {
            sources,
            one: Default::default(),
            state: Mutex::new(SettingsStatus {
                file: file.map(|f| f.display().to_string()),
                ..Default::default()
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, SettingsStatus> {
        // A poisoned lock still holds a whole status.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// What the settings' refusal says, with the file, line and column when
/// the fault is in the file.
impl From<&SettingsError> for SettingsProblem {
    fn from(e: &SettingsError) -> Self {
        match e {
            SettingsError::File(f) => Self {
                message: f.message.clone(),
                file: f.path.as_ref().map(|p| p.display().to_string()),
                line: Some(f.line),
                column: Some(f.column),
            },
            SettingsError::InFile { error, file } => Self {
                message: error.to_string(),
                file: Some(file.display().to_string()),
                line: None,
                column: None,
            },
            SettingsError::Variable(v) => Self::said(v.to_string()),
        }
    }
}

impl SettingsProblem {
    /// A problem with no place in a file (a variable, an empty catalog).
    pub fn said(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            file: None,
            line: None,
            column: None,
        }
    }
}

/// The part of `catalog` this engine can serve, with the settings'
/// aliases: what the start and every reload route by.
pub(super) fn servable(backend: &Backend, config: &WardenConfig, mut catalog: Catalog) -> Catalog {
    catalog.retain(|e| backend.accepts(e.format));
    catalog.add_aliases(&config.models);
    catalog
}

/// `config` with each store model's own settings (Ollama's system and
/// params layers) under the settings file's: what every reader of
/// `config.models` (a turn's defaults, a load's window) then sees.
pub(super) fn layered(mut config: WardenConfig, catalog: &Catalog) -> WardenConfig {
    for (id, layers) in catalog.layers() {
        config.models.entry(id.clone()).or_default().over(&layers.settings);
    }
    config
}

/// Publishes the settings' status and starts the watch (with sources, and
/// a period that is not zero).
pub(super) fn watch(warden: &Warden, period: Duration) {
    let Some(_) = &warden.inner.reload.sources else {
        return;
    };
    warden.publish_settings();
    if period.is_zero() {
        return;
    }
    // A weak link: the watch must not keep the warden's engines alive.
    let weak = Arc::downgrade(&warden.inner);
    actix::spawn(async move {
        loop {
            tokio::time::sleep(period).await;
            let Some(inner) = weak.upgrade() else { break };
            let _ = Warden { inner }.reread(true).await;
        }
    });
}

/// How long the watch waits before it says a new refusal, and reads once
/// more: an editor that writes the file in place (truncate, then write)
/// can be read half-written, and a reading this much later sees it whole.
/// An asked reload (SIGHUP, `POST /warden/reload`) answers at once.
const SETTLE: Duration = Duration::from_millis(300);

impl Warden {
    /// Reads the settings and the catalog again (`WardenBuilder::reload_from`)
    /// and applies what changed; `Ok(None)` when nothing did, or when the
    /// warden was started without sources. A refused reading changes
    /// nothing and is the error (also in `/warden/status` until mended).
    pub async fn reload(&self) -> Result<Option<Applied>, SettingsProblem> {
        self.reread(false).await
    }

    /// A reload; `settle`: a new refusal is read again after `SETTLE`
    /// before it is said (the watch's readings).
    async fn reread(&self, settle: bool) -> Result<Option<Applied>, SettingsProblem> {
        let reload = &self.inner.reload;
        let Some(sources) = reload.sources.clone() else {
            return Ok(None);
        };
        let _one = reload.one.lock().await;
        let mut read = read_sources(&sources).await;
        if settle
            && let Err(p) = &read
            && reload.state().error.as_ref() != Some(p)
        {
            tokio::time::sleep(SETTLE).await;
            read = read_sources(&sources).await;
        }
        match read {
            Err(p) => Err(self.refused(p)),
            Ok((config, catalog)) => Ok(self.apply(config, catalog)),
        }
    }
}

/// One reading of the sources: directory reads and a file read, off the
/// async threads.
async fn read_sources(sources: &Sources) -> Result<(WardenConfig, Catalog), SettingsProblem> {
    let sources = sources.clone();
    tokio::task::spawn_blocking(move || sources())
        .await
        .unwrap_or_else(|e| Err(SettingsProblem::said(format!("the settings reader failed: {e}"))))
}

impl Warden {
    /// A refused reading: said once per distinct problem.
    fn refused(&self, p: SettingsProblem) -> SettingsProblem {
        let fresh = {
            let mut s = self.inner.reload.state();
            let fresh = s.error.as_ref() != Some(&p);
            s.error = Some(p.clone());
            fresh
        };
        if fresh {
            tracing::warn!("settings refused, the last good ones keep serving: {p}");
            self.emit(WardenEvent::SettingsRefused { problem: p.clone() });
            self.publish_settings();
        }
        p
    }

    /// Applies a good reading; `None` when it changes nothing.
    fn apply(&self, read: WardenConfig, catalog: Catalog) -> Option<Applied> {
        let inner = &self.inner;
        let running = inner.config.get();
        let merged = live::merge(&running, read);
        let catalog = servable(&inner.planner, &merged.config, catalog);
        let config = layered(merged.config, &catalog);
        let old = inner.catalog.get();
        // Only what is new: the same skip every 2 s is said once.
        for note in catalog.notes().iter().filter(|n| !old.notes().contains(n)) {
            tracing::warn!("{note}");
        }
        let restart_needed: Vec<String> = merged.restart_needed.iter().map(|s| s.to_string()).collect();
        let (mended, same_restart) = {
            let s = inner.reload.state();
            (s.error.is_some(), s.restart_needed == restart_needed)
        };
        if config == *running && catalog == *old && same_restart && !mended {
            return None;
        }
        let ids = |c: &Catalog| c.entries().iter().map(|e| e.id.clone()).collect::<BTreeSet<_>>();
        let (before, after) = (ids(&old), ids(&catalog));
        let applied = Applied {
            added: after.difference(&before).cloned().collect(),
            removed: before.difference(&after).cloned().collect(),
            changed: after
                .intersection(&before)
                .filter(|id| old.get(id) != catalog.get(id) || running.models.get(*id) != config.models.get(*id))
                .cloned()
                .collect(),
            restart_needed,
        };
        // Entries whose file changed unload once idle: their next load
        // reads the new file.
        let refiled: Vec<String> = applied
            .changed
            .iter()
            .filter(|id| old.get(id) != catalog.get(id))
            .cloned()
            .collect();
        let file = config.settings_file.as_ref().map(|f| f.display().to_string());
        let changed = config != *running || catalog != *old;
        inner.residency.set_default(catalog.default_id());
        inner.config.set(Arc::new(config));
        inner.catalog.set(Arc::new(catalog));
        self.engines_follow(&applied.added, &applied.removed, &refiled);
        {
            let mut s = inner.reload.state();
            s.error = None;
            s.file = file;
            s.restart_needed = applied.restart_needed.clone();
            s.reloads += u64::from(changed);
        }
        if mended {
            tracing::info!("settings accepted again");
        }
        if !applied.restart_needed.is_empty() && !same_restart {
            tracing::warn!(
                "settings changed that apply only at a restart (the running values are kept): {}",
                applied.restart_needed.join(", ")
            );
        }
        if changed {
            tracing::info!(
                added = %applied.added.join(", "),
                removed = %applied.removed.join(", "),
                changed = %applied.changed.join(", "),
                "settings applied"
            );
        }
        self.emit(WardenEvent::SettingsApplied {
            added: applied.added.clone(),
            removed: applied.removed.clone(),
            changed: applied.changed.clone(),
            restart_needed: applied.restart_needed.clone(),
        });
        self.publish_settings();
        Some(applied)
    }

    /// The engines follow the catalog: one for each model that appeared;
    /// each that left unloads once idle and stops; each that names another
    /// file unloads once idle. With one engine for every model, only its
    /// loaded model is unloaded when it left or changed.
    fn engines_follow(&self, added: &[String], removed: &[String], refiled: &[String]) {
        let inner = &self.inner;
        let Some(residency) = &inner.shell.residency else {
            let Some(slot) = inner.residency.engines().first().cloned() else {
                return;
            };
            let loaded = slot.status.borrow().model.clone();
            if loaded.is_some_and(|m| removed.contains(&m) || refiled.contains(&m)) {
                actix::spawn(async move {
                    let _ = super::control::unload_one(&slot.engine).await;
                });
            }
            return;
        };
        let mut slots: Vec<_> = residency.engines().iter().cloned().collect();
        for id in added {
            // A model that left and came back before its engine stopped
            // keeps that engine.
            if slots.iter().any(|s| s.model.as_deref() == Some(id)) {
                continue;
            }
            let slot = Arc::new(inner.shell.engine(Some(id.clone())));
            super::start::follow(&slot, residency);
            slots.push(slot);
        }
        residency.set_engines(slots);
        for id in refiled {
            if let Some(slot) = residency.engine(Some(id)) {
                actix::spawn(async move {
                    let _ = super::control::unload_one(&slot.engine).await;
                });
            }
        }
        for id in removed {
            self.leave(id);
        }
    }

    /// `id` left the catalog: its engine unloads once the turns routed to
    /// it have ended (each unload waits for the running ones; a turn
    /// routed just before the catalog changed is waited for too), then
    /// stops, unless the model came back meanwhile.
    fn leave(&self, id: &str) {
        let Some(slot) = self.inner.residency.engine(Some(id)) else {
            return;
        };
        self.inner.reload.state().leaving.push(id.to_string());
        let weak = Arc::downgrade(&self.inner);
        let id = id.to_string();
        actix::spawn(async move {
            loop {
                let _ = super::control::unload_one(&slot.engine).await;
                if slot.queue.depth() == 0 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let Some(inner) = weak.upgrade() else { return };
            let w = Warden { inner };
            w.inner.reload.state().leaving.retain(|m| *m != id);
            if w.inner.catalog.get().get(&id).is_none() {
                let rest: Vec<_> = w
                    .inner
                    .residency
                    .engines()
                    .iter()
                    .filter(|s| !Arc::ptr_eq(s, &slot))
                    .cloned()
                    .collect();
                w.inner.residency.set_engines(rest);
                let _ = slot.engine.send(crate::messages::Shutdown).await;
                if let Some(a) = &slot.arbiter {
                    a.stop();
                }
                tracing::info!(model = %id, "model left the catalog: unloaded and its engine stopped");
            }
            w.publish_settings();
        });
    }

    /// Publishes the settings' status.
    fn publish_settings(&self) {
        let s = self.inner.reload.state().clone();
        self.inner.residency.set_settings(s);
    }

    fn emit(&self, event: WardenEvent) {
        self.inner.metrics.observe(&event);
        let _ = self.inner.events.send(event);
    }
}
