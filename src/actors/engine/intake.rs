//! The engine's intake: what waits to be admitted, in arrival order
//! (turns, prefix-cache resets, loads and unloads that must not cut a
//! running turn), how many turns run, the brake action held until they
//! end, and the last death of a child, which every turn that ran on it is
//! told. The intake alone writes these; the admission (`turn`) and the
//! turn's end (`turn_end`) call its methods.
//!
//! Why a queue of its own and not the mailbox: the mailbox is where turns
//! *end* now (`TurnRelayed`), so it can never be closed for a turn's whole
//! length as it was at one slot; every decision (admit, reset, load,
//! unload, brake, reap, evict) still runs one at a time in it, and what
//! cannot act yet waits here, first come first served.
//!
//! No I/O inside: what waits is held as the `Held` types say. The engine's
//! own (`waiting::Live`) carry each caller's channel and answer, which the
//! engine uses; the intake only orders and counts them, so the simulator
//! (`warden::arbiter_sim`) runs this very type over plain values.

use std::collections::VecDeque;
use std::fmt::Debug;
use std::time::Duration;

use crate::error::GenerationError;
use crate::law::brake::{Action, Point, Readings, WindowFacts};
use crate::law::crash::{EngineCode, ExitInfo};

/// What the intake holds of each kind of waiting item.
pub trait Held {
    /// A turn not yet admitted.
    type Turn: Debug;
    /// The MLX prefix cache's reset.
    type Reset: Debug;
    /// A load asked outside a turn.
    type Load: Debug;
    /// An unload asked while turns run.
    type Unload: Debug;
}

/// What waits, in arrival order.
#[derive(Debug)]
pub enum Pending<H: Held> {
    /// A turn.
    Turn(H::Turn),
    /// The MLX prefix cache's reset, ahead of its turn.
    Reset(H::Reset),
    /// `Load`, answered when done.
    Load(H::Load),
    /// `Unload`, answered when done.
    Unload(H::Unload),
}

/// A brake action that needs the child stopped (a respawn, an unload),
/// decided while other turns ran: it waits for them.
#[derive(Debug, Clone)]
pub struct HeldBrake {
    /// Where it was sampled.
    pub point: Point,
    /// What was read.
    pub readings: Readings,
    /// The window's facts it decided on.
    pub facts: WindowFacts,
    /// What the law decided, for the brake to finish once carried out.
    pub decided: super::brake_state::Decided<Action>,
}

/// How a child ended, kept so every turn that ran on it gets the same
/// coded error, not only the first to notice.
#[derive(Debug, Clone)]
enum Death {
    Died { code: EngineCode, exit: ExitInfo, raw: String },
    Hung { stage: &'static str, after: Duration, raw: String },
    Lost { worker: String, why: String, raw: String },
}

/// The intake.
#[derive(Debug)]
pub struct Intake<H: Held> {
    waiting: VecDeque<Pending<H>>,
    running: usize,
    held_brake: Option<HeldBrake>,
    last_death: Option<(u32, Death)>,
}

impl<H: Held> Default for Intake<H> {
    fn default() -> Self {
        Self {
            waiting: VecDeque::new(),
            running: 0,
            held_brake: None,
            last_death: None,
        }
    }
}

impl<H: Held> Intake<H> {
    /// Whether a turn or a load waits (what a load waiting for room is for).
    pub fn wants_load(&self) -> bool {
        self.waiting.iter().any(|p| matches!(p, Pending::Turn(_) | Pending::Load(_)))
    }

    /// Turns running now.
    pub fn running(&self) -> usize {
        self.running
    }

    /// Turns waiting (not counting resets and control messages).
    pub fn waiting_turns(&self) -> usize {
        self.waiting.iter().filter(|p| matches!(p, Pending::Turn(_))).count()
    }

    /// Whether nothing runs and nothing waits: the model is idle.
    pub fn idle(&self) -> bool {
        self.running == 0 && self.waiting.is_empty()
    }

    /// Queues `p` behind what waits.
    pub fn push(&mut self, p: Pending<H>) {
        self.waiting.push_back(p);
    }

    /// Puts `p` back at the head (it could not start yet).
    pub fn push_front(&mut self, p: Pending<H>) {
        self.waiting.push_front(p);
    }

    /// The next item, left in place (the simulator reads its head's
    /// deadline; the engine pops it and puts it back when it cannot act).
    #[cfg(test)]
    pub fn head(&self) -> Option<&Pending<H>> {
        self.waiting.front()
    }

    /// The next item.
    pub fn pop(&mut self) -> Option<Pending<H>> {
        self.waiting.pop_front()
    }

    /// Everything waiting, taken (shutdown answers each).
    pub fn drain_all(&mut self) -> Vec<Pending<H>> {
        self.waiting.drain(..).collect()
    }

    /// A turn was handed to its relay.
    pub fn started(&mut self) {
        self.running += 1;
    }

    /// A turn's relay ended.
    pub fn ended(&mut self) {
        self.running = self.running.saturating_sub(1);
    }

    /// Holds a brake action until the running turns end.
    pub fn hold_brake(&mut self, b: HeldBrake) {
        self.held_brake = Some(b);
    }

    /// Whether a brake action waits (nothing new is admitted meanwhile).
    pub fn brake_held(&self) -> bool {
        self.held_brake.is_some()
    }

    /// The held brake action, once nothing runs.
    pub fn take_brake(&mut self) -> Option<HeldBrake> {
        if self.running > 0 {
            return None;
        }
        self.held_brake.take()
    }

    /// The held action goes with the child (it died or was retired).
    pub fn forget_brake(&mut self) {
        self.held_brake = None;
    }

    /// Records how child `pid` ended, for every turn that ran on it.
    pub fn record_death(&mut self, pid: u32, e: &GenerationError) {
        let d = match e {
            GenerationError::ChildDied { code, exit, raw } => Death::Died {
                code: *code,
                exit: *exit,
                raw: raw.clone(),
            },
            GenerationError::Hung { stage, after, raw } => Death::Hung {
                stage,
                after: *after,
                raw: raw.clone(),
            },
            GenerationError::WorkerLost { worker, why, raw } => Death::Lost {
                worker: worker.clone(),
                why: why.clone(),
                raw: raw.clone(),
            },
            _ => return,
        };
        self.last_death = Some((pid, d));
    }

    /// The error a turn on child `pid` gets when another turn already
    /// learned how it ended.
    pub fn death_of(&self, pid: u32) -> Option<GenerationError> {
        let (at, d) = self.last_death.as_ref().filter(|(at, _)| *at == pid)?;
        debug_assert_eq!(*at, pid);
        Some(match d.clone() {
            Death::Died { code, exit, raw } => GenerationError::ChildDied { code, exit, raw },
            Death::Hung { stage, after, raw } => GenerationError::Hung { stage, after, raw },
            Death::Lost { worker, why, raw } => GenerationError::WorkerLost { worker, why, raw },
        })
    }
}

/// Plain values where the engine keeps its callers' channels: a turn is
/// its index. The intake's tests and the simulator (`warden::arbiter_sim`)
/// run the intake over these.
#[cfg(test)]
#[derive(Debug)]
pub(crate) struct Plain;

#[cfg(test)]
impl Held for Plain {
    type Turn = usize;
    type Reset = ();
    type Load = ();
    type Unload = ();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Turns and control items keep their arrival order; a turn put back
    /// goes first; a load or a turn waiting is what a waiting load is for.
    #[test]
    fn what_waits_keeps_its_order() {
        let mut i: Intake<Plain> = Intake::default();
        assert!(i.idle() && !i.wants_load());
        i.push(Pending::Unload(()));
        assert!(!i.idle() && !i.wants_load(), "an unload is no load");
        i.push(Pending::Turn(1));
        i.push(Pending::Load(()));
        i.push(Pending::Turn(2));
        assert_eq!(i.waiting_turns(), 2);
        assert!(matches!(i.pop(), Some(Pending::Unload(()))));
        let Some(Pending::Turn(t)) = i.pop() else { panic!("the first turn") };
        i.push_front(Pending::Turn(t));
        assert!(matches!(i.pop(), Some(Pending::Turn(1))));
        assert!(i.wants_load());
        assert_eq!(i.drain_all().len(), 2);
        assert!(i.idle());
    }

    /// Every turn on a dead child hears the same coded death; a turn on
    /// another child hears nothing of it.
    #[test]
    fn a_death_is_told_to_every_turn_of_that_child_only() {
        let mut i: Intake<Plain> = Intake::default();
        let e = GenerationError::ChildDied {
            code: EngineCode::OutOfMemory,
            exit: ExitInfo {
                code: None,
                signal: Some(9),
            },
            raw: "tail".into(),
        };
        i.record_death(41, &e);
        for _ in 0..3 {
            let Some(GenerationError::ChildDied { code, raw, .. }) = i.death_of(41) else {
                panic!("no death for 41")
            };
            assert_eq!((code, raw.as_str()), (EngineCode::OutOfMemory, "tail"));
        }
        assert!(i.death_of(42).is_none());
        i.record_death(41, &GenerationError::Transport("x".into()));
        assert!(i.death_of(41).is_some(), "a transport failure is no death and replaces none");
    }

    /// A held brake action is given only once nothing runs.
    #[test]
    fn a_held_brake_waits_for_the_running_turns() {
        let mut i: Intake<Plain> = Intake::default();
        i.started();
        i.started();
        let readings = Readings {
            level: crate::law::brake::Level::Critical,
            paging: None,
            footprint_bytes: None,
        };
        let facts = WindowFacts {
            allocated: 8192,
            kv_per_token: 1,
            ram_bytes: 1,
            uncapped: 8192,
            pinned: false,
        };
        let decided = super::super::brake_state::Brake::default().llama_step(Point::TurnEnd, &readings, &facts);
        i.hold_brake(HeldBrake {
            point: Point::TurnEnd,
            readings,
            facts,
            decided,
        });
        assert!(i.brake_held() && i.take_brake().is_none());
        i.ended();
        assert!(i.take_brake().is_none());
        i.ended();
        assert!(i.take_brake().is_some());
        assert!(!i.brake_held() && i.idle());
    }
}
