//! The memory brake's decisions carried out. The llama.cpp engines: the
//! law (`law::brake::llama_step`) on the sample; MLX: `law::mlx::mlx_step`,
//! its release or bound done inside the child by the engine
//! (`MlxChild::act`). Either way the order of carrying it out is the
//! machine's (`braking::Braking`: on llama.cpp held for the running turns,
//! saved, stopped, respawned or gone; on MLX acted inside the child; the
//! controller told before an unload retires the child; the spec's log
//! line; the event); this file only carries its steps out. The actor alone respawns and unloads; what each
//! came to is told to the brake controller (`Brake::finish_llama`/
//! `finish_mlx`: `Carried`), which keeps the order of its own bookkeeping.
//! Part of `EngineCore`; runs inside an atomic handler. With several slots
//! a decision that stops the child (a respawn, an unload) may come while
//! other turns run: it is held in the intake (`intake::HeldBrake`), new
//! turns wait, and it is carried out when the last running turn ended (the
//! brake never cuts a running turn).

use tokio::time::Instant;

use super::brake_state::{Carried, Decided};
use super::braking::{Braking, Decision, Does, Outcome, Step, Told, View};
use super::child_holder::Stopped;
use super::core::EngineCore;
use super::intake::HeldBrake;
use super::leaving::Retire;
use crate::engines::live::Acted;
use crate::error::ModelLoadError;
use crate::law::brake::{Action, BrakeDid, Level, Point, Readings, WindowFacts};
use crate::law::mlx::{MlxAction, MlxFacts, MlxReadings};
use crate::sensors::footprint;
use crate::status::WardenEvent;

/// What a llama.cpp respawn came to, kept between its steps.
enum Respawn {
    /// Not stopped yet.
    Ahead,
    /// The old child of `model` stopped at `started`; the plan of its
    /// successor (or why there is none).
    Stopped {
        model: String,
        started: Instant,
        plan: Box<Result<crate::engines::plan::SpawnPlan, ModelLoadError>>,
    },
    /// The new child is up, not installed yet.
    Spawned { child: Box<super::child_holder::LiveChild>, started: Instant },
    /// The new child is installed at `to`, `ms` after the stop began.
    Up { to: u32, ms: u64 },
    /// No new child came up, for this reason (its code).
    Failed { model: String, code: String },
}

impl EngineCore {
    /// Runs the law on a llama.cpp engine's sample and carries out its action.
    pub(crate) async fn llama_brake(&mut self, point: Point, readings: Readings, facts: WindowFacts) {
        self.brake.saw(readings.level);
        // Beside other residents an idle one may answer first (`room`).
        if self.brake_over_residents(point, &readings, &facts).await {
            return;
        }
        let decided = self.brake.llama_step(point, &readings, &facts);
        // The footprint only feeds the log line: read once there is one.
        let mut readings = readings;
        if decided.action != Action::None && readings.footprint_bytes.is_none() {
            readings.footprint_bytes = self.child.get().and_then(|c| footprint::anon_bytes(c.process.pid()));
        }
        self.carry_out_brake(HeldBrake {
            point,
            readings,
            facts,
            decided,
        })
        .await;
    }

    /// Carries out the law's action on a llama.cpp child, in the order
    /// `braking` keeps: held while turns run on a child it stops (then
    /// carried out from `turn::settle` once none runs), else at once.
    pub(crate) async fn carry_out_brake(&mut self, held: HeldBrake) {
        let (point, r, facts, action) = (held.point, held.readings, held.facts, held.decided.action);
        let running = self.intake.running();
        let mut braking = Braking::new(Decision {
            does: Does::llama(action),
            in_child: false,
            waits: action.waits_for(running),
        });
        let mut held = Some(held);
        let cap = match action {
            Action::DeferShrink { cap } | Action::Shrink { cap } | Action::Grow { cap } => cap,
            _ => facts.allocated,
        };
        let mut respawn = Respawn::Ahead;
        let tag = self.backend.kind().tag();
        while let Some(step) = braking.next(self.braking_view()) {
            match step {
                Step::Hold => {
                    // Never cut a running turn: new turns wait, the running
                    // ones end (bounded by the watchdogs), then it acts.
                    tracing::info!(
                        "[{tag}] Memory brake: point={}, level={}, action={} waits for {running} running turn(s); new turns wait meanwhile",
                        point.as_str(),
                        r.level.as_str(),
                        action.did().map_or("none".to_string(), |d| d.to_string()),
                    );
                    self.intake.hold_brake(held.take().expect("held once"));
                }
                Step::Save => {
                    if let Some(c) = self.child.get_mut() {
                        self.kv.save_all(c, "memory brake").await;
                    }
                }
                Step::Stop => {
                    let started = Instant::now();
                    let Some(Stopped { child: old, .. }) = self.child.stop(self.cfg().stop_grace).await else {
                        braking.took(Outcome::Stopped(false));
                        continue;
                    };
                    // Over workers the split is planned again, from the watch.
                    let plan = self.replan_from_views(&old.plan, self.backend.respawn_plan(&self.cfg(), &old.plan, cap));
                    let model = old.plan.entry.id.clone();
                    drop(old); // frees its port lease for the new child
                    respawn = Respawn::Stopped {
                        model,
                        started,
                        plan: Box::new(plan),
                    };
                    braking.took(Outcome::Stopped(true));
                }
                Step::Spawn => {
                    let Respawn::Stopped { model, started, plan } = std::mem::replace(&mut respawn, Respawn::Ahead) else {
                        unreachable!("a spawn follows its stop")
                    };
                    let spawned = match *plan {
                        Ok(plan) => self.spawn_ready(plan, self.cfg().respawn_timeout, true).await,
                        Err(e) => Err(e),
                    };
                    braking.took(Outcome::Spawned(spawned.is_ok()));
                    respawn = match spawned {
                        Ok(child) => Respawn::Spawned {
                            child: Box::new(child),
                            started,
                        },
                        Err(e) => Respawn::Failed {
                            model,
                            code: e.code().to_string(),
                        },
                    };
                }
                Step::Install => {
                    let Respawn::Spawned { child, started } = std::mem::replace(&mut respawn, Respawn::Ahead) else {
                        unreachable!("an install follows its spawn")
                    };
                    let to = child.allocated.unwrap_or(cap);
                    // The idle clock is kept: a respawn is not a use.
                    self.child.install(*child);
                    let ms = started.elapsed().as_millis() as u64;
                    respawn = Respawn::Up { to, ms };
                }
                Step::Tell(told) => {
                    let decided = held.take().expect("told once").decided;
                    let pinned = facts.pinned;
                    let unloading = self.child.model_id().map(str::to_string);
                    let carried = match (told, &respawn) {
                        (Told::Respawned, _) => Carried::Respawned { cap, pinned },
                        (Told::RespawnFailed, Respawn::Failed { model, .. }) => Carried::RespawnFailed { cap, pinned, model },
                        (Told::Unloading, _) => Carried::Unloading {
                            model: unloading.as_deref().unwrap_or_default(),
                        },
                        _ => Carried::Said,
                    };
                    self.finish_llama(decided, carried);
                }
                Step::Retire => {
                    self.retire(Retire::Brake).await;
                }
                Step::Gone => {
                    if let Respawn::Failed { model, .. } = &respawn {
                        // The old child is stopped and no new one runs: it
                        // is gone as a retirement's is.
                        self.gone(model, Retire::Brake, None);
                    }
                }
                Step::Say => match (action, &respawn) {
                    (Action::DeferShrink { .. }, _) => self.say_brake(point, &r, BrakeDid::ShrinkDeferred, facts.allocated, cap, None),
                    (Action::ArmUnload, _) => self.say_brake(point, &r, BrakeDid::ArmUnload, cap, cap, None),
                    (_, Respawn::Up { to, ms }) => {
                        let did = action.did().unwrap_or(BrakeDid::ShrinkRespawn);
                        self.say_brake(point, &r, did, facts.allocated, *to, Some(*ms));
                    }
                    (_, Respawn::Failed { code, .. }) => tracing::warn!(
                        "[{tag}] Memory brake: point={}, level={}, action=respawn-failed ({code}), window={}->{cap}, footprint_mib={}; the model reloads at the next message",
                        point.as_str(),
                        r.level.as_str(),
                        facts.allocated,
                        footprint_mib(&r)
                    ),
                    (Action::Unload, _) => tracing::warn!(
                        "[{tag}] Memory brake: point={}, level={}, action=unload, window={}->0, footprint_mib={}; lasting critical memory pressure while idle: the model reloads at the next message",
                        point.as_str(),
                        r.level.as_str(),
                        facts.allocated,
                        footprint_mib(&r)
                    ),
                    _ => {}
                },
                Step::Event => {
                    let (did, to) = match (action, &respawn) {
                        (Action::DeferShrink { .. }, _) => (BrakeDid::ShrinkDeferred, Some(cap)),
                        (Action::ArmUnload, _) => (BrakeDid::ArmUnload, Some(cap)),
                        (_, Respawn::Up { to, .. }) => (action.did().unwrap_or(BrakeDid::ShrinkRespawn), Some(*to)),
                        (_, Respawn::Failed { .. }) => (BrakeDid::RespawnFailed, None),
                        _ => (BrakeDid::Unload, None),
                    };
                    self.brake_event(point, r.level, did, facts.allocated, to);
                }
                Step::Act => unreachable!("a llama.cpp child is not asked to act inside itself"),
            }
        }
    }

    /// The engine as a brake decision's order reads it.
    fn braking_view(&self) -> View {
        View {
            live: self.child.is_live(),
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

    /// The spec's log line for a llama.cpp action that was said, or a
    /// respawn that came up. `respawn_ms`: a respawn's stop-to-ready time,
    /// appended to the line.
    fn say_brake(&self, point: Point, r: &Readings, did: BrakeDid, from: u32, to: u32, respawn_ms: Option<u64>) {
        tracing::info!(
            "[{}] Memory brake: point={}, level={}, action={}, window={from}->{to}, footprint_mib={}{}",
            self.backend.kind().tag(),
            point.as_str(),
            r.level.as_str(),
            did,
            footprint_mib(r),
            respawn_ms.map_or(String::new(), |ms| format!(", respawn_ms={ms}"))
        );
    }

    /// The `Brake` event of an action carried out.
    fn brake_event(&self, point: Point, level: Level, action: BrakeDid, from: u32, to: Option<u32>) {
        self.emit(WardenEvent::Brake {
            point: point.as_str(),
            level: level.as_str(),
            action,
            window_from: Some(from),
            window_to: to,
        });
    }

    /// One MLX brake sample: the law on the sensor's reading and the child's
    /// footprint above its base, then its action, in the order `braking`
    /// keeps.
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
        let mut decided = Some(self.brake.mlx_step(point, &r, &facts));
        let action = decided.as_ref().map_or(MlxAction::None, |d| d.action);
        let excess = |b: Option<u64>| b.map_or("unknown".into(), |b| (b.saturating_sub(base) >> 20).to_string());
        let log = |action: &str, to: u32, excess_mib: String| {
            tracing::info!(
                "[MLX_Engine] Memory brake: point={}, level={}, action={action}, window={window}->{to}, excess_mib={excess_mib}",
                point.as_str(),
                r.level.as_str()
            );
        };
        let mut braking = Braking::new(Decision {
            does: Does::mlx(action),
            in_child: true,
            waits: false,
        });
        let mut acted = None;
        while let Some(step) = braking.next(self.braking_view()) {
            match step {
                Step::Act => {
                    let cfg = self.cfg();
                    acted = match self.child.get_mut() {
                        Some(c) => {
                            let (view, engine) = c.parts();
                            engine.act_in_child(view, action, point, &cfg).await
                        }
                        None => None,
                    };
                    // What the child did, recorded where it lives.
                    match &acted {
                        Some(Acted::Released { barrier, .. }) => self.said_reset("memory", *barrier),
                        Some(Acted::ResetFailed(_)) => self.prefix_failed(),
                        Some(Acted::Bounded(b)) => {
                            if let Some(c) = self.child.get_mut() {
                                c.allocated = Some(*b);
                            }
                        }
                        _ => {}
                    }
                }
                Step::Say => match (action, &acted) {
                    (MlxAction::ArmUnload, _) => log("arm-unload", window, excess(readings.footprint_bytes)),
                    (MlxAction::Unload, _) => tracing::warn!(
                        "[MLX_Engine] Memory brake: point={}, level={}, action=unload, window={window}->0; lasting critical memory pressure while idle: the model reloads at the next message",
                        point.as_str(),
                        r.level.as_str()
                    ),
                    (_, Some(Acted::Released { after: Ok(after), .. })) => {
                        log("release", window, format!("{}->{}", excess(readings.footprint_bytes), excess(*after)))
                    }
                    (_, Some(Acted::Released { after: Err(why), .. } | Acted::ResetFailed(why))) => {
                        tracing::warn!("[MLX_Engine] the memory release is incomplete ({why})")
                    }
                    (_, Some(Acted::Bounded(b))) => log(action.log_name(), *b, excess(readings.footprint_bytes)),
                    (_, Some(Acted::NotBounded { bound, why })) => {
                        tracing::warn!("[MLX_Engine] the child did not apply the bound {bound} ({why})")
                    }
                    (_, None) => {}
                },
                Step::Tell(told) => {
                    let decided = decided.take().expect("told once");
                    let unloading = self.child.model_id().map(str::to_string);
                    let carried = match (told, &acted) {
                        (Told::Unloading, _) => Carried::Unloading {
                            model: unloading.as_deref().unwrap_or_default(),
                        },
                        // A release that did not complete records nothing
                        // (the next sample decides again).
                        (Told::Acted, Some(Acted::Released { after: Err(_), .. } | Acted::ResetFailed(_))) => {
                            Carried::Incomplete
                        }
                        (Told::Acted, Some(Acted::Bounded(_))) => Carried::Bounded { applied: true },
                        (Told::Acted, Some(Acted::NotBounded { .. })) => Carried::Bounded { applied: false },
                        _ => Carried::Said,
                    };
                    self.finish_mlx(decided, carried);
                }
                Step::Retire => {
                    self.retire(Retire::Brake).await;
                }
                Step::Event => {
                    if let Some(did) = action.did() {
                        let to = self.child.get().and_then(|c| c.allocated);
                        self.brake_event(point, r.level, did, window, to);
                    }
                }
                Step::Hold | Step::Save | Step::Stop | Step::Spawn | Step::Install | Step::Gone => {
                    unreachable!("MLX's brake acts inside its child or unloads it")
                }
            }
        }
    }
}

fn footprint_mib(r: &Readings) -> String {
    r.footprint_bytes.map_or("unknown".into(), |b| (b >> 20).to_string())
}
