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

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use actix::Recipient;
use tokio::sync::oneshot;

use super::outbox::Outbox;
use crate::catalog::ModelEntry;
use crate::error::{GenerationError, WardenError};
use crate::law::brake::{Action, Point, Readings, WindowFacts};
use crate::law::crash::{EngineCode, ExitInfo};
use crate::law::keep_alive::KeepAlive;
use crate::messages::{Reset, TurnRequest};
use crate::queue::QueueTicket;
use crate::status::EngineStatus;

/// A turn not yet admitted.
#[derive(Debug)]
pub struct Waiting {
    /// The request, whole.
    pub request: TurnRequest,
    /// Its model, resolved by `Warden::submit`.
    pub entry: Arc<ModelEntry>,
    /// Its caller's channel.
    pub out: Outbox,
    /// Its arrival number.
    pub seq: u64,
    /// When it arrived (a wait for another model's memory counts from it).
    pub arrived: tokio::time::Instant,
    /// Its place in the queue's bound.
    pub ticket: Option<QueueTicket>,
    /// `TurnStarted` was said (a turn sent back to wait after its start
    /// sample says it once).
    pub started: bool,
    /// A turn whose child died under it: what it carries to the next
    /// (`resume`); `None` for a new turn.
    pub carry: Option<Box<super::carry::Carry>>,
}

/// What waits, in arrival order.
#[derive(Debug)]
pub enum Pending {
    /// A turn (boxed: it is most of what waits, and the control messages
    /// beside it are a tenth of its size).
    Turn(Box<Waiting>),
    /// The MLX prefix cache's reset, ahead of its turn.
    Reset(Reset),
    /// `Load`, answered when done.
    Load {
        /// The model (`None`: the default).
        model: Option<String>,
        /// The keep-alive to set.
        keep_alive: Option<KeepAlive>,
        /// When it arrived.
        arrived: tokio::time::Instant,
        /// Where the answer goes.
        reply: oneshot::Sender<Result<EngineStatus, WardenError>>,
    },
    /// `Unload`, answered when done.
    Unload(oneshot::Sender<Result<bool, WardenError>>),
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
#[derive(Debug, Default)]
pub struct Intake {
    waiting: VecDeque<Pending>,
    running: usize,
    held_brake: Option<HeldBrake>,
    last_death: Option<(u32, Death)>,
    /// Where a turn's relay task reports its end (the engine's own
    /// address, set when the actor starts).
    ends: Option<Recipient<super::relay::TurnRelayed>>,
    /// Where a load waiting for room is woken (`peers::Wake`; the same).
    wake: Option<Recipient<super::peers::Wake>>,
}

impl Intake {
    /// Where relay tasks report.
    pub fn set_ends(&mut self, to: Recipient<super::relay::TurnRelayed>, wake: Recipient<super::peers::Wake>) {
        self.ends = Some(to);
        self.wake = Some(wake);
    }

    /// Where a waiting load is woken (`None` before the actor started).
    pub fn wake(&self) -> Option<Recipient<super::peers::Wake>> {
        self.wake.clone()
    }

    /// Whether a turn or a load waits (what a load waiting for room is for).
    pub fn wants_load(&self) -> bool {
        self.waiting.iter().any(|p| matches!(p, Pending::Turn(_) | Pending::Load { .. }))
    }

    /// Where relay tasks report (`None` before the actor started: a core
    /// driven without its actor runs no relay).
    pub fn ends(&self) -> Option<Recipient<super::relay::TurnRelayed>> {
        self.ends.clone()
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
    pub fn push(&mut self, p: Pending) {
        self.waiting.push_back(p);
    }

    /// Puts `p` back at the head (it could not start yet).
    pub fn push_front(&mut self, p: Pending) {
        self.waiting.push_front(p);
    }

    /// The next item.
    pub fn pop(&mut self) -> Option<Pending> {
        self.waiting.pop_front()
    }

    /// Everything waiting, taken (shutdown answers each).
    pub fn drain_all(&mut self) -> Vec<Pending> {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every turn on a dead child hears the same coded death; a turn on
    /// another child hears nothing of it.
    #[test]
    fn a_death_is_told_to_every_turn_of_that_child_only() {
        let mut i = Intake::default();
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
        let mut i = Intake::default();
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
