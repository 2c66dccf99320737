//! Several residents, the engine's part: one engine per resident model
//! (`warden::residency` starts them and routes turns by model), and what
//! each asks of the others through `Peers`:
//!
//! - **A load makes room first** (`make_room`): the model's needs at the
//!   floor and full window (`engines::plan::newcomer`) go to
//!   `law::residents::admit` over the other residents. Idle ones it names
//!   are evicted, least recently used first, each awaited (its KV saved,
//!   its child stopped) before this child spawns, so two children never
//!   overlap in memory the law did not grant. While residents in a turn
//!   hold what it needs it waits in the line of waiting loads
//!   (`Peers::wait_in_line`), asking again whenever any engine publishes (a
//!   turn's end, a child gone, a reservation settled: an event, not a
//!   poll), until the load timeout; then 503 `model_does_not_fit` naming
//!   each resident. The plan is then sized beside the residents that stay
//!   (`law::plan::Readings::beside_bytes`).
//! - **A busy resident yields to a load that waited long enough**
//!   (`law::schedule`, carried out in `schedule`): at its next turn
//!   admission it starts no new turn; when its running turns end it leaves
//!   (its KV saved), its own turns queued in order; its next load lets the
//!   model it yielded to go first (`Peers::behind`).
//! - **An eviction is refused when a turn was routed here** since the
//!   decision (`evict`): the asker's law runs again with this resident busy.
//! - **The brake weighs every resident** (`brake_over_residents`): at a
//!   sample that calls for memory, with another resident idle, the least
//!   recently used idle one is evicted (fire-and-forget: one action per
//!   sample, the next sample takes the next) instead of shrinking the
//!   window in use; otherwise this model's own law acts, as for a lone one.
//!   An idle sample reaches every resident's engine: each reaches the same
//!   decision, and only the resident chosen acts (it evicts itself), so
//!   one sample is one eviction and one log line.
//!
//! Part of `EngineCore`; each decision runs inside an atomic handler, and
//! only an eviction's answer is awaited there (bounded; `Evict` awaits
//! nothing but its own child).

use std::sync::Arc;
use std::time::Duration;

use actix::Recipient;
use tokio::sync::watch;
use tokio::time::Instant;

use super::core::EngineCore;
use super::peers::{Patience, Peers, Room, RoomWait, Wake};
use super::outbox::Outbox;
use crate::engines::SpawnPlan;
use crate::error::ModelLoadError;
use crate::warden::arbiter::{LoadAsk, LoadStep, Waits};
use crate::law::brake::{BrakeDid, Point, Readings, WindowFacts};
use crate::law::residents::{Memory, ModelKind, Newcomer, Resident, ResidentsBrake, Sample, brake_over};
use crate::messages::Evict;
use crate::status::WardenEvent;

/// The least an eviction is given before the law decides again.
const EVICT_FLOOR: Duration = Duration::from_millis(250);

/// Sends `Evict` to `engine` (the resident `model`) and waits for its
/// answer, or until `model` is no longer resident (it left by itself: it
/// yielded its memory, and its handler may be busy with this very load's
/// turn, with the `Evict` queued behind it: waiting for the answer alone
/// would hold both until the deadline: measured, a 300 s stall and a
/// refusal with three models taking turns), or until `until`. Whether its
/// memory is free.
async fn evicted(
    peers: &dyn Peers,
    engine: Recipient<Evict>,
    model: &str,
    changes: &mut watch::Receiver<u64>,
    until: Instant,
) -> bool {
    let answer = engine.send(Evict);
    tokio::pin!(answer);
    loop {
        tokio::select! {
            r = &mut answer => return matches!(r, Ok(Some(_))),
            _ = next_change(changes, until) => {
                if !peers.others("").iter().any(|r| r.model == model) {
                    // Its memory is free either way.
                    return true;
                }
                if Instant::now() >= until {
                    return false;
                }
            }
        }
    }
}

/// Waits for what the residents' law reads to change, at most until
/// `until` (a residency gone changes nothing more: then until `until`).
async fn next_change(changes: &mut watch::Receiver<u64>, until: Instant) {
    let change = async {
        if changes.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    let _ = tokio::time::timeout_at(until, change).await;
}

impl EngineCore {
    /// Makes room for the model of `alone` (its plan with nothing beside
    /// it) among the residents: evicts, waits or refuses as the law decides
    /// (see the module docs). `Made` carries what the residents that stay
    /// hold, bytes, which the plan sizes beside (0 without peers: one
    /// engine for every model, MLX, RPC workers). `Waits` leaves the load
    /// waiting (`RoomWait`); `gone`, the waiting request's channel, wakes
    /// it when its client leaves.
    pub(crate) async fn make_room(
        &mut self,
        alone: &SpawnPlan,
        patience: Patience,
        gone: Option<&Outbox>,
    ) -> Result<Room, ModelLoadError> {
        let Some(peers) = self.outlets.peers.clone() else {
            return Ok(Room::Made(0));
        };
        let Some((new, memory)) = crate::engines::plan::newcomer(alone, &self.cfg()) else {
            // No header shape to size it by (llama-server sizes its own
            // window): weighed by its file, on the RAM total, so it still
            // takes its turn in the count and the memory of the others.
            let file = std::fs::metadata(&alone.entry.path).map_or(0, |m| m.len());
            let unsized_need = Newcomer {
                model: alone.entry.id.clone(),
                kind: ModelKind::of(alone.facts.as_deref()),
                weights_bytes: file,
                floor_bytes: file,
                full_bytes: Some(file),
                waited_out: false,
            };
            let ram = alone.ram.map_or(0, |r| r.bytes);
            return self.room_step(peers, unsized_need, Memory::Ram(ram), patience, gone).await;
        };
        self.room_step(peers, new, memory, patience, gone).await
    }

    /// Says once per wait why the load waits.
    fn say_once(&mut self, model: &str, why: impl FnOnce() -> String) {
        if let Some(r) = self.room.as_mut()
            && !r.said
        {
            r.said = true;
            tracing::info!(model, "{}", why());
        }
    }

    /// One decision of the residents' law for the load of `new`: room made
    /// (idle residents evicted), a wait armed, or a refusal.
    async fn room_step(
        &mut self,
        peers: Arc<dyn Peers>,
        mut new: Newcomer,
        memory: Memory,
        patience: Patience,
        gone: Option<&Outbox>,
    ) -> Result<Room, ModelLoadError> {
        let timeout = self.cfg().load_timeout;
        if self.room.as_ref().is_some_and(|r| r.model != new.model) {
            self.room = None;
        }
        let now = Instant::now();
        let began = self
            .room
            .get_or_insert_with(|| RoomWait {
                model: new.model.clone(),
                began: now,
                said: false,
                alone: None,
                peers: peers.clone(),
                watcher: None,
            })
            .began;
        // A request that bounded its wait (`Prefer: wait=N`) is refused
        // sooner, told when to ask again.
        let bounded = patience.at_most.filter(|w| *w < timeout);
        let deadline = patience.since + bounded.unwrap_or(timeout);
        // Subscribed before the decision: a change after it wakes the wait.
        let mut changes = peers.changes();
        let load_ms = self.load_cost_ms(new.weights_bytes);
        new.waited_out = now >= deadline;
        let cfg = self.cfg();
        let ask = LoadAsk {
            weight: cfg.weight(&new.model),
            new,
            memory,
            max_resident: None,
            load_ms,
            queued: self.outlets.queue.depth() as u32,
            waited_ms: now.duration_since(began).as_millis() as u64,
            policy: cfg.schedule,
            limit: cfg.starvation_limit,
        };
        let model = ask.new.model.clone();
        let until = match peers.load_step(&ask) {
            LoadStep::Go { evict, kept_bytes, .. } => {
                let mut all_gone = true;
                for held in evict {
                    let Some(engine) = peers.engine_of(&held.model) else { continue };
                    tracing::info!(
                        model = %held.model,
                        frees_mib = held.bytes >> 20,
                        "evicting the idle resident {} for {model}",
                        held.model,
                    );
                    let until = deadline.max(Instant::now() + EVICT_FLOOR);
                    if !evicted(&*peers, engine, &held.model, &mut changes, until).await {
                        // Busy since the decision, gone by itself, or
                        // slow: the law decides again with what is true now.
                        all_gone = false;
                    }
                }
                if all_gone {
                    // Out of the line; its reservation stays until the
                    // child is published (`settle_admission`).
                    self.room = None;
                    self.admitted = Some(model);
                    return Ok(Room::Made(kept_bytes));
                }
                peers.settled(&model);
                // A resident refuses because a turn was routed to it since
                // the decision: the law decides again at once and sees it
                // busy (its queue counts), so the load waits on it, in the
                // line, instead of waiting for a change that may have come
                // while the eviction was asked. One more decision, no loop.
                changes.mark_changed();
                deadline
            }
            LoadStep::Wait { grace, why, .. } => {
                match why {
                    Waits::Behind(first) => {
                        self.say_once(&model, || format!("waiting: {first} goes first (this model yielded the memory to it)"))
                    }
                    Waits::Turns(short) => self.say_once(&model, || format!("waiting for a turn to end: {short}")),
                    // Its client is sending back to back: weighed as busy
                    // until its grace is over.
                    Waits::Grace { held, why } => {
                        tracing::debug!(model = %model, "{}", crate::law::schedule::explain(&held, &model, why))
                    }
                }
                grace.map_or(deadline, |g| (now + g).min(deadline))
            }
            LoadStep::Refuse(short) => {
                self.room = None;
                let Some(w) = bounded else {
                    tracing::warn!(model = %model, "refused: {short}");
                    return Err(ModelLoadError::NoRoom {
                        id: model,
                        detail: short.to_string(),
                        retry_after_s: None,
                    });
                };
                let at_most = peers.estimate(&model);
                let retry = crate::law::schedule::retry_after_s(at_most, load_ms);
                tracing::info!(model = %model, retry_after_s = retry, "refused after the {} s the request would wait: {short}", w.as_secs());
                return Err(ModelLoadError::NoRoom {
                    id: model,
                    detail: format!("{short}; the request would wait at most {} s (Prefer: wait)", w.as_secs()),
                    retry_after_s: Some(retry),
                });
            }
        };
        self.arm(changes, until, gone);
        Ok(Room::Waits)
    }

    /// Arms the waiting load's wake-up: the next change the law reads, its
    /// deadline, or its client leaving, whichever comes first. One watcher
    /// at a time: a new decision replaces the last one's.
    fn arm(&mut self, mut changes: watch::Receiver<u64>, until: Instant, gone: Option<&Outbox>) {
        let Some(wake) = self.own.as_ref().map(|o| o.wake.clone()) else { return };
        let Some(room) = self.room.as_mut() else { return };
        let gone = gone.map(Outbox::on_close);
        let task = actix::spawn(async move {
            let left = async move {
                match gone {
                    Some(g) => g.await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = next_change(&mut changes, until) => {}
                _ = left => {}
            }
            wake.do_send(Wake);
        });
        if let Some(old) = room.watcher.replace(task) {
            old.abort();
        }
    }

    /// Whether a load of `model` waits for room (a turn for it took its
    /// start when the wait began).
    pub(crate) fn waits_for_room(&self, model: &str) -> bool {
        self.room.as_ref().is_some_and(|r| r.model == model)
    }

    /// The waiting load goes when no request wants it any more: every
    /// client that asked for it left (their turns were skipped), so it
    /// leaves the line instead of loading a model nobody waits for.
    pub(crate) fn drop_unwanted_room(&mut self) {
        if self.intake.wants_load() {
            return;
        }
        if let Some(r) = self.room.take() {
            tracing::info!(model = %r.model, "stopped waiting for room: no request waits for this model any more");
        }
    }

    /// The admitted load is over (its child published, it failed, or its
    /// handler panicked): its reservation goes.
    pub(crate) fn settle_admission(&mut self) {
        if let (Some(model), Some(peers)) = (self.admitted.take(), &self.outlets.peers) {
            peers.settled(&model);
        }
    }

    /// `Evict`: stops the idle child for another model (its KV saved
    /// first); the bytes it held, or `None` when there was no child or a
    /// turn was routed here since the decision.
    pub(crate) async fn evict(&mut self) -> Option<u64> {
        let pinned = self.child.model_id().is_some_and(|m| self.cfg().pinned(m));
        if crate::warden::arbiter::refuses_eviction(self.outlets.queue.depth(), pinned) {
            return None;
        }
        let bytes = self.child.get()?.footprint_bytes().unwrap_or(0);
        self.retire(super::leaving::Retire::Evicted).await.map(|_| bytes)
    }

    /// This model as the residents' law sees it at a brake sample (not in
    /// flight: the sample is at its own turn's start or end, or idle).
    fn as_resident(&self, facts: &WindowFacts) -> Option<Resident> {
        let c = self.child.get()?;
        Some(Resident {
            model: c.model_id().to_string(),
            kind: ModelKind::of(c.plan.facts.as_deref()),
            footprint_bytes: c.footprint_bytes().unwrap_or(0),
            last_used_ms: self
                .usage
                .last()
                .map_or(0, |u| super::publish::unix_millis(u.wall).unwrap_or(0)),
            in_flight: self.intake.running() > 0,
            pinned: self.cfg().pinned(c.model_id()),
            reload_ms: self.load_cost_ms(c.plan.shape.map_or(0, |s| s.weights_bytes)),
            queued: 0,
            window: *facts,
            brake: self.brake.state(),
        })
    }

    /// The brake over every resident at a sample that calls for memory:
    /// `true` when an eviction answered it (this sample is done), `false`
    /// when this model's own law decides, as for a lone model.
    pub(crate) async fn brake_over_residents(&mut self, point: Point, readings: &Readings, facts: &WindowFacts) -> bool {
        let Some(peers) = self.outlets.peers.clone() else { return false };
        if !crate::law::residents::presses(point, readings) {
            return false;
        }
        let Some(me) = self.as_resident(facts) else { return false };
        let mut all = peers.others(&me.model);
        if all.is_empty() {
            return false;
        }
        all.push(me.clone());
        // The residents' last uses are Unix milliseconds; the ranking of
        // their rebuild costs does not depend on now (`rebuild_cost`), so
        // every engine reaches the same choice at the same sample.
        let now_ms = super::publish::unix_millis(std::time::SystemTime::now()).unwrap_or(0);
        let sample = Sample {
            model: &me.model,
            point,
            readings: *readings,
            now_ms,
        };
        let ResidentsBrake::Evict { model, frees_bytes } = brake_over(&sample, &all) else {
            return false;
        };
        if point == Point::Idle && model != me.model {
            // Every resident's engine gets the idle sample and reaches the
            // same decision; the one chosen carries it out on its own
            // sample, and this one takes no step of its own at this one.
            return true;
        }
        let chosen = all.iter().find(|r| r.model == model);
        let (reload_ms, idle_s) = chosen.map_or((0, 0), |r| (r.reload_ms, now_ms.saturating_sub(r.last_used_ms) / 1000));
        tracing::info!(
            "[{}] Memory brake: point={}, level={}, action={}, model={model}, frees_mib={} (an idle resident before the window in use: the cheapest to rebuild for what it frees, reloading in {:.1} s, idle {idle_s} s)",
            self.backend.kind().tag(),
            point.as_str(),
            readings.level.as_str(),
            BrakeDid::Evict,
            frees_bytes >> 20,
            reload_ms as f64 / 1000.0
        );
        self.emit(WardenEvent::Brake {
            point: point.as_str(),
            level: readings.level.as_str(),
            action: BrakeDid::Evict,
            window_from: None,
            window_to: None,
        });
        self.brake.said(BrakeDid::Evict);
        if model == me.model {
            self.retire(super::leaving::Retire::Evicted).await;
        } else if let Some(engine) = peers.engine_of(&model) {
            // Fire-and-forget: a brake awaits no other engine.
            engine.do_send(Evict);
        }
        true
    }
}
