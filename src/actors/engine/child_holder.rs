//! The child holder: the live child, what the engine is busy with, and the
//! only code that puts a child in place or takes it out. `install` makes a
//! ready child the live one (a load, a brake respawn); `stop` takes it out
//! and stops its process (every retirement and the respawn's old child);
//! `take_dead` takes out one that exited by itself. Everything else reads
//! the child, or writes its own per-child state (`get_mut`), never the
//! slot: one door in and out, so no path (a brake respawn, say) can put a
//! child in place without what `install` does.

use std::time::{Duration, SystemTime};

use crate::child::client::ChildClient;
use crate::child::port::PortLease;
use crate::child::process::{self, ChildProcess, ExitInfo};
use crate::engines::SpawnPlan;
use crate::engines::live::{ChildState, ChildView};

use super::state::Activity;

/// The live child and what the engine knows of it.
#[derive(Debug)]
pub struct LiveChild {
    /// The process.
    pub process: ChildProcess,
    /// The HTTP client to it (holds its key).
    pub client: ChildClient,
    /// How it was planned (model, facts, window).
    pub plan: SpawnPlan,
    /// Its port, leased for its life.
    pub port: PortLease,
    /// The allocated window (`/props` n_ctx, else the `-c` given, else unknown).
    pub allocated: Option<u32>,
    /// When it became ready.
    pub loaded_since: SystemTime,
    /// The cgroup's OOM-kill count when it was spawned.
    pub oom_kills_at_spawn: Option<u64>,
    /// The engine's own state of this child.
    pub engine: ChildState,
    /// Its slots: the conversation whose KV each holds, the turn running
    /// on each (`slots`).
    pub slots: super::slots::Slots,
}

impl LiveChild {
    /// The model id.
    pub fn model_id(&self) -> &str {
        &self.plan.entry.id
    }

    /// What it holds by the law, bytes: weights, KV and compute at its
    /// allocated window (`window::footprint_bytes`) and the compute
    /// intercept the window law set aside for it, `None` without the
    /// header's shape or a known window. The law's count, not the measured
    /// RSS, is what admission and eviction weigh: llama-server touches its
    /// KV pages as the window fills, so a fresh child's RSS undercounts
    /// what it will hold, and mapped weights are not anonymous memory.
    pub fn footprint_bytes(&self) -> Option<u64> {
        let shape = self.plan.shape?;
        let window = self.allocated.or(self.plan.window.ctx())?;
        Some(
            crate::law::window::footprint_bytes(&shape, window)
                + crate::law::window::COMPUTE_INTERCEPT_BYTES
                + crate::law::slots::extra_bytes(self.plan.slots),
        )
    }

    /// The window a turn is admitted against: the working window,
    /// `min(allocated, memory ceiling)` (`law::window::working_window`). Only
    /// an MLX child has a ceiling; it also covers a bound the child did not
    /// take (or a model with no trained window whose bound failed).
    pub fn working_window(&self) -> Option<u32> {
        let ceiling = self.engine.mlx().and_then(|m| m.ceiling);
        crate::law::window::working_window(self.allocated, ceiling)
    }

    /// The read-only face an engine's hook is lent.
    pub(crate) fn view(&self) -> ChildView<'_> {
        self.parts_ref().0
    }

    /// The face and the engine's own state, to write (the MLX release and
    /// bound, the prefix cache's reset).
    pub(crate) fn parts(&mut self) -> (ChildView<'_>, &mut ChildState) {
        let Self {
            process,
            client,
            plan,
            allocated,
            engine,
            ..
        } = self;
        (face(process, client, plan, *allocated), engine)
    }

    fn parts_ref(&self) -> (ChildView<'_>, &ChildState) {
        (
            face(&self.process, &self.client, &self.plan, self.allocated),
            &self.engine,
        )
    }
}

/// The one way a `ChildView` is built.
fn face<'a>(process: &'a ChildProcess, client: &'a ChildClient, plan: &'a SpawnPlan, allocated: Option<u32>) -> ChildView<'a> {
    ChildView {
        pid: process.pid(),
        plan,
        allocated,
        client,
        output: process.output(),
    }
}

/// A child taken out of the slot and stopped.
#[derive(Debug)]
pub struct Stopped {
    /// The child, its process ended (its port lease is freed when dropped).
    pub child: LiveChild,
    /// Its output tail as it was when it was told to stop.
    pub raw: String,
    /// How it ended.
    pub exit: ExitInfo,
}

/// The live child (at most one) and what the engine is busy with.
#[derive(Debug)]
pub struct ChildHolder {
    live: Option<LiveChild>,
    activity: Activity,
}

impl Default for ChildHolder {
    fn default() -> Self {
        Self {
            live: None,
            activity: Activity::Resting,
        }
    }
}

impl ChildHolder {
    /// The live child.
    pub fn get(&self) -> Option<&LiveChild> {
        self.live.as_ref()
    }

    /// The live child, to write its own state (its window, its engine
    /// state, the conversation its slot holds).
    pub fn get_mut(&mut self) -> Option<&mut LiveChild> {
        self.live.as_mut()
    }

    /// Whether a child is live.
    pub fn is_live(&self) -> bool {
        self.live.is_some()
    }

    /// The live child's model.
    pub fn model_id(&self) -> Option<&str> {
        self.live.as_ref().map(LiveChild::model_id)
    }

    /// Whether the live child runs `model`.
    pub fn holds(&self, model: &str) -> bool {
        self.model_id() == Some(model)
    }

    /// What the engine is busy with.
    pub fn activity(&self) -> Activity {
        self.activity
    }

    /// The engine is now busy with `activity` (or at rest).
    pub fn set_activity(&mut self, activity: Activity) {
        self.activity = activity;
    }

    /// Makes a ready child the live one; the engine is at rest.
    pub fn install(&mut self, child: LiveChild) {
        debug_assert!(self.live.is_none(), "a child is installed only in an empty slot");
        self.live = Some(child);
        self.activity = Activity::Resting;
    }

    /// Takes the live child out and stops it (SIGTERM, then SIGKILL after
    /// `grace`); `None` without one.
    pub async fn stop(&mut self, grace: Duration) -> Option<Stopped> {
        let mut child = self.live.take()?;
        let raw = child.process.output().raw_tail();
        let exit = process::terminate(&mut child.process, grace).await;
        Some(Stopped { child, raw, exit })
    }

    /// Takes the live child out when it has exited by itself.
    pub fn take_dead(&mut self) -> Option<(LiveChild, ExitInfo)> {
        let info = self.live.as_ref()?.process.exit()?;
        self.live.take().map(|c| (c, info))
    }
}
