//! The memory brake's decisions carried out. The llama.cpp engines: the
//! law (`law::brake::llama_step`) on the sample, then its action (respawn in
//! place, defer, arm, unload), the window memory written, the spec's log
//! line. MLX: `law::mlx::mlx_step`, its release or bound done inside the
//! child by the engine (`MlxChild::act`), its unload here. The actor alone
//! respawns and unloads; what each came to is said to the brake controller
//! (`Brake::finish_llama`/`finish_mlx`: `Carried`), which keeps the order of
//! its own bookkeeping. Part of `EngineCore`; runs inside an atomic
//! handler. With several slots a decision that stops the child (a respawn,
//! an unload) may come while other turns run: it is held in the intake
//! (`intake::HeldBrake`), new turns wait, and it is carried out when the
//! last running turn ended (the brake never cuts a running turn).

use tokio::time::Instant;

use super::brake_state::{Carried, Decided};
use super::child_holder::Stopped;
use super::core::EngineCore;
use super::intake::HeldBrake;
use super::leaving::Retire;
use crate::engines::live::Acted;
use crate::law::brake::{Action, BrakeDid, Level, Point, Readings, WindowFacts};
use crate::law::mlx::{MlxAction, MlxFacts, MlxReadings};
use crate::sensors::footprint;
use crate::status::WardenEvent;

impl EngineCore {
    /// Runs the law on a llama.cpp engine's sample and carries out its action.
    pub(crate) async fn llama_brake(&mut self, point: Point, readings: Readings, facts: WindowFacts) {
        self.brake.saw(readings.level);
        // Beside other residents an idle one may answer first (`room`).
        if self.brake_over_residents(point, &readings, &facts).await {
            return;
        }
        let decided = self.brake.llama_step(point, &readings, &facts);
        let action = decided.action;
        // The footprint only feeds the log line: read once there is one.
        let mut readings = readings;
        if action != Action::None && readings.footprint_bytes.is_none() {
            readings.footprint_bytes = self.child.get().and_then(|c| footprint::anon_bytes(c.process.pid()));
        }
        let held = HeldBrake {
            point,
            readings,
            facts,
            decided,
        };
        let running = self.intake.running();
        if action.waits_for(running) {
            // Never cut a running turn: new turns wait, the running ones
            // end (bounded by the watchdogs), then it acts (`turn::settle`).
            tracing::info!(
                "[{}] Memory brake: point={}, level={}, action={} waits for {running} running turn(s); new turns wait meanwhile",
                self.backend.kind().tag(),
                point.as_str(),
                held.readings.level.as_str(),
                action.did().map_or("none".to_string(), |d| d.to_string()),
            );
            self.intake.hold_brake(held);
            return;
        }
        self.carry_out_brake(held).await;
    }

    /// Carries out the law's action on a llama.cpp child (at once, or held
    /// until the turns that ran at the decision ended).
    pub(crate) async fn carry_out_brake(&mut self, held: HeldBrake) {
        let HeldBrake {
            point,
            readings,
            facts,
            decided,
        } = held;
        match decided.action {
            Action::None => self.finish_llama(decided, Carried::Said),
            Action::DeferShrink { cap } => {
                self.log_brake(point, &readings, BrakeDid::ShrinkDeferred, facts.allocated, cap, None);
                self.finish_llama(decided, Carried::Said);
            }
            Action::ArmUnload => {
                let at = facts.allocated;
                self.log_brake(point, &readings, BrakeDid::ArmUnload, at, at, None);
                self.finish_llama(decided, Carried::Said);
            }
            Action::Shrink { cap } | Action::Grow { cap } => {
                self.brake_respawn(point, &readings, decided, cap, facts).await
            }
            Action::Unload => self.brake_unload(point, &readings, decided, facts.allocated).await,
        }
    }

    /// Tells the brake what its llama.cpp decision came to, on the child
    /// live now.
    fn finish_llama(&mut self, decided: Decided<Action>, carried: Carried<'_>) {
        let now = self.sensor.now_ms();
        let model = self.child.model_id().map(str::to_string);
        self.brake.finish_llama(decided, carried, model.as_deref(), now);
    }

    /// As `finish_llama`, for an MLX decision.
    fn finish_mlx(&mut self, decided: Decided<MlxAction>, carried: Carried<'_>) {
        let now = self.sensor.now_ms();
        let model = self.child.model_id().map(str::to_string);
        self.brake.finish_mlx(decided, carried, model.as_deref(), now);
    }

    /// The brake's emergency unload of the live child (any engine): the
    /// brake is told first, since its carry is made of the live state the
    /// retirement drops, then the child retires. `false` without a child
    /// (the decision is finished all the same).
    async fn brake_unload_child<A>(&mut self, decided: Decided<A>, finish: fn(&mut Self, Decided<A>, Carried<'_>)) -> bool {
        let Some(id) = self.child.model_id().map(str::to_string) else {
            finish(self, decided, Carried::Said);
            return false;
        };
        finish(self, decided, Carried::Unloading { model: &id });
        self.retire(Retire::Brake).await;
        true
    }

    /// The spec's log line for an action that did not respawn.
    /// `respawn_ms`: a respawn's stop-to-ready time, appended to the line.
    fn log_brake(&self, point: Point, r: &Readings, did: BrakeDid, from: u32, to: u32, respawn_ms: Option<u64>) {
        tracing::info!(
            "[{}] Memory brake: point={}, level={}, action={}, window={from}->{to}, footprint_mib={}{}",
            self.backend.kind().tag(),
            point.as_str(),
            r.level.as_str(),
            did,
            footprint_mib(r),
            respawn_ms.map_or(String::new(), |ms| format!(", respawn_ms={ms}"))
        );
        self.emit(WardenEvent::Brake {
            point: point.as_str(),
            level: r.level.as_str(),
            action: did,
            window_from: Some(from),
            window_to: Some(to),
        });
    }

    /// Respawn in place at `cap`: stop the child, start the same model with
    /// the cap handed to the spawn plan, readiness bounded by the respawn
    /// timeout. The model, the idle clock and the brake state are kept; a
    /// failed respawn degrades into an unload, recorded for the next spawn.
    async fn brake_respawn(&mut self, point: Point, r: &Readings, decided: Decided<Action>, cap: u32, facts: WindowFacts) {
        let action = decided.action;
        if let Some(c) = self.child.get_mut() {
            self.kv.save_all(c, "memory brake").await;
        }
        let started = Instant::now();
        let Some(Stopped { child: old, .. }) = self.child.stop(self.cfg().stop_grace).await else {
            self.finish_llama(decided, Carried::Said);
            return;
        };
        let entry = old.plan.entry.clone();
        // Over workers the split is planned again, from the watch.
        let plan = self.replan_from_views(&old.plan, self.backend.respawn_plan(&self.cfg(), &old.plan, cap));
        drop(old); // frees its port lease for the new child
        let tag = self.backend.kind().tag();
        let spawned = match plan {
            Ok(plan) => self.spawn_ready(plan, self.cfg().respawn_timeout, true).await,
            Err(e) => Err(e),
        };
        // A shrink or a growth: the law's respawning actions.
        let did = action.did().unwrap_or(BrakeDid::ShrinkRespawn);
        match spawned {
            Ok(child) => {
                let to = child.allocated.unwrap_or(cap);
                // The idle clock is kept: a respawn is not a use.
                self.child.install(child);
                let pinned = facts.pinned;
                self.finish_llama(decided, Carried::Respawned { cap, pinned });
                let ms = started.elapsed().as_millis() as u64;
                self.log_brake(point, r, did, facts.allocated, to, Some(ms));
            }
            Err(e) => {
                tracing::warn!(
                    "[{tag}] Memory brake: point={}, level={}, action=respawn-failed ({}), window={}->{cap}, footprint_mib={}; the model reloads at the next message",
                    point.as_str(),
                    r.level.as_str(),
                    e.code(),
                    facts.allocated,
                    footprint_mib(r)
                );
                let (pinned, model) = (facts.pinned, entry.id.as_str());
                self.finish_llama(decided, Carried::RespawnFailed { cap, pinned, model });
                // The old child is stopped and no new one runs: it is gone
                // as a retirement's is.
                self.gone(&entry.id, Retire::Brake, None);
                self.emit(WardenEvent::Brake {
                    point: point.as_str(),
                    level: r.level.as_str(),
                    action: BrakeDid::RespawnFailed,
                    window_from: Some(facts.allocated),
                    window_to: None,
                });
            }
        }
    }

    /// The emergency unload: the child stops; its episode and cap are
    /// carried to the model's next spawn.
    async fn brake_unload(&mut self, point: Point, r: &Readings, decided: Decided<Action>, allocated: u32) {
        if !self.brake_unload_child(decided, Self::finish_llama).await {
            return;
        }
        tracing::warn!(
            "[{}] Memory brake: point={}, level={}, action=unload, window={allocated}->0, footprint_mib={}; lasting critical memory pressure while idle: the model reloads at the next message",
            self.backend.kind().tag(),
            point.as_str(),
            r.level.as_str(),
            footprint_mib(r)
        );
        self.emit(WardenEvent::Brake {
            point: point.as_str(),
            level: r.level.as_str(),
            action: BrakeDid::Unload,
            window_from: Some(allocated),
            window_to: None,
        });
    }

    /// One MLX brake sample: the law on the sensor's reading and the child's
    /// footprint above its base, then its action.
    pub(crate) async fn mlx_brake(&mut self, point: Point, readings: Readings, facts: MlxFacts, base: u64) {
        let Some(pid) = self.child.get().map(|c| c.process.pid()) else {
            return;
        };
        let mut readings = readings;
        if readings.footprint_bytes.is_none() {
            readings.footprint_bytes = footprint::anon_bytes(pid);
        }
        self.brake.saw(readings.level);
        let r = MlxReadings {
            level: readings.level,
            paging: readings.paging,
            above_base: readings.footprint_bytes.map(|b| b.saturating_sub(base)),
        };
        let window = facts.window;
        let decided = self.brake.mlx_step(point, &r, &facts);
        let action = decided.action;
        let excess = |b: Option<u64>| b.map_or("unknown".into(), |b| (b.saturating_sub(base) >> 20).to_string());
        let log = |action: &str, to: u32, excess_mib: String| {
            tracing::info!(
                "[MLX_Engine] Memory brake: point={}, level={}, action={action}, window={window}->{to}, excess_mib={excess_mib}",
                point.as_str(),
                r.level.as_str()
            );
        };
        let cfg = self.cfg();
        let acted = match self.child.get_mut() {
            Some(c) => {
                let (view, engine) = c.parts();
                engine.act_in_child(view, action, point, &cfg).await
            }
            None => None,
        };
        let carried = match (action, acted) {
            (MlxAction::ArmUnload, _) => {
                log("arm-unload", window, excess(readings.footprint_bytes));
                Carried::Said
            }
            (MlxAction::Unload, _) => {
                // Finished there: the brake is told before the child retires.
                self.mlx_unload(point, r.level, window, decided).await;
                self.said_mlx(point, r.level, action, window);
                return;
            }
            (_, Some(Acted::Released { barrier, after })) => {
                self.said_reset("memory", barrier);
                match after {
                    Ok(after) => {
                        let excess_mib = format!("{}->{}", excess(readings.footprint_bytes), excess(after));
                        log("release", window, excess_mib);
                        Carried::Said
                    }
                    Err(why) => release_incomplete(&why),
                }
            }
            (_, Some(Acted::ResetFailed(why))) => {
                self.prefix_failed();
                release_incomplete(&why)
            }
            (_, Some(Acted::Bounded(b))) => {
                if let Some(c) = self.child.get_mut() {
                    c.allocated = Some(b);
                }
                log(action.log_name(), b, excess(readings.footprint_bytes));
                Carried::Bounded { applied: true }
            }
            (_, Some(Acted::NotBounded { bound, why })) => {
                tracing::warn!("[MLX_Engine] the child did not apply the bound {bound} ({why})");
                Carried::Bounded { applied: false }
            }
            (_, None) => Carried::Said,
        };
        self.finish_mlx(decided, carried);
        self.said_mlx(point, r.level, action, window);
    }

    /// The event of an MLX action taken, if it was one.
    fn said_mlx(&self, point: Point, level: Level, action: MlxAction, window: u32) {
        if let Some(did) = action.did() {
            self.emit(WardenEvent::Brake {
                point: point.as_str(),
                level: level.as_str(),
                action: did,
                window_from: Some(window),
                window_to: self.child.get().and_then(|c| c.allocated),
            });
        }
    }

    /// The MLX emergency unload (the CPU engine's carry and records).
    async fn mlx_unload(&mut self, point: Point, level: Level, window: u32, decided: Decided<MlxAction>) {
        if !self.brake_unload_child(decided, Self::finish_mlx).await {
            return;
        }
        tracing::warn!(
            "[MLX_Engine] Memory brake: point={}, level={}, action=unload, window={window}->0; lasting critical memory pressure while idle: the model reloads at the next message",
            point.as_str(),
            level.as_str()
        );
    }
}

/// A release that did not complete: said, and nothing recorded (the next
/// sample decides again).
fn release_incomplete(why: &str) -> Carried<'static> {
    tracing::warn!("[MLX_Engine] the memory release is incomplete ({why})");
    Carried::Incomplete
}

fn footprint_mib(r: &Readings) -> String {
    r.footprint_bytes.map_or("unknown".into(), |b| (b >> 20).to_string())
}
