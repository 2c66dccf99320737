//! A brake decision carried out, as a machine with no I/O: the order every
//! action the law decides (`law::brake::llama_step`, `law::mlx::mlx_step`)
//! keeps, in one place. The executor (`brake_act`) asks it for one `Step`
//! at a time, handing it a `View` of the engine, and carries the step out;
//! the simulator (`warden::arbiter_sim`) runs the same machine over its
//! own world. What the brake keeps between decisions, and the law's side
//! of its protocol, are the controller's (`brake_state`); this is the
//! actor's side: what happens to the child, and when the controller hears.
//!
//! The order, and why:
//! 1. `Hold`, when the action stops the child (a respawn, an unload) and
//!    turns run on it: the brake never cuts a running turn. New turns wait
//!    (`admission`), and the held decision comes back here with no turn
//!    running, once the last one ended (`turn::settle`).
//! 2. MLX acts inside its child first (`Act`: a release, a bound, or
//!    nothing): what the child did is what the line says and what the
//!    controller hears.
//! 3. A respawn: `Save` (the conversations' KV goes to disk while the
//!    child can write it), `Stop`, `Spawn` the same model at the cap.
//!    Up: `Install`, the controller told (`Respawned`), then the line with
//!    the new window and the respawn's time, and its event. Failed: the
//!    line (a warning), the controller told (`RespawnFailed` records the
//!    cap for the next spawn) before the stopped child is `Gone` (which
//!    drops the live brake state that record is made of), then the event.
//! 4. An unload: the controller told first (`Unloading`: its carry is made
//!    of the live state the retirement drops), then `Retire`, the line,
//!    the event.
//! 5. Anything else (a deferred shrink, an armed unload, an MLX release or
//!    bound): the line, the controller told, the event.
//!
//! With no child to act on, the controller is told the decision was only
//! said. The engine decides only on a live child, a held decision goes
//! with its child, and a child that dies stays in its holder until it is
//! taken out, so these rows are the machine's answer to every view rather
//! than a path the engine is known to take. Every decision not held is
//! told to the controller exactly once.

use super::walk::walk;
use crate::law::brake::Action;
use crate::law::broken;
use crate::law::mlx::MlxAction;

/// What the law's action does to the child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Does {
    /// Nothing to carry out (`Action::None`).
    Nothing,
    /// A line only: a deferred shrink, an armed unload; on MLX, whatever
    /// the child did inside itself.
    Say,
    /// Stop the child and start the same model at another window.
    Respawn,
    /// The emergency unload.
    Unload,
}

impl Does {
    /// What a llama.cpp action does to the child.
    pub(crate) fn llama(action: Action) -> Self {
        match action {
            Action::None => Self::Nothing,
            Action::DeferShrink { .. } | Action::ArmUnload => Self::Say,
            Action::Shrink { .. } | Action::Grow { .. } => Self::Respawn,
            Action::Unload => Self::Unload,
        }
    }

    /// What an MLX action does beyond the child's own act (a release, a
    /// bound, or arming the unload: said).
    pub(crate) fn mlx(action: MlxAction) -> Self {
        match action {
            MlxAction::None => Self::Nothing,
            MlxAction::Unload => Self::Unload,
            MlxAction::Release | MlxAction::Shrink { .. } | MlxAction::Grow { .. } | MlxAction::ArmUnload => Self::Say,
        }
    }
}

/// The decision, as its order reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Decision {
    pub does: Does,
    /// The engine acts inside its child first (MLX).
    pub in_child: bool,
    /// Turns run on the child, and the action stops it
    /// (`Action::waits_for`).
    pub waits: bool,
}

/// What the engine holds now, read before each step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct View {
    /// A child is live.
    pub live: bool,
}

/// What the controller is told the decision came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Told {
    /// Said only (or nothing to do, or no child left to do it to).
    Said,
    /// As the child acted (`Act`): released, bounded, or not.
    Acted,
    /// The new child is up at the cap.
    Respawned,
    /// The old child stopped and no new one came up.
    RespawnFailed,
    /// The live child is about to retire.
    Unloading,
}

/// One thing to carry out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Held in the intake until the running turns ended; the machine is
    /// over (the held decision starts a machine of its own).
    Hold,
    /// The engine's act inside its child.
    Act,
    /// The child's conversations saved.
    Save,
    /// The child stopped: answer `took(Stopped(..))`.
    Stop,
    /// The same model spawned at the cap: answer `took(Spawned(..))`.
    Spawn,
    /// The new child installed.
    Install,
    /// The controller told what the decision came to.
    Tell(Told),
    /// The child retired as the brake's.
    Retire,
    /// The stopped child gone as a retirement's (`Retire::gone`).
    Gone,
    /// The spec's log line.
    Say,
    /// The `Brake` event.
    Event,
}

/// What carrying a step out came to, where the order depends on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// A child was there to stop (`true`), or none.
    Stopped(bool),
    /// The respawned child came up (`true`) or not.
    Spawned(bool),
}

/// Where the machine stands: the step it weighs next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum At {
    Holding,
    Acting,
    Choosing,
    /// A respawn.
    Saving,
    Stopping,
    /// A `Stop` step waits for its outcome.
    Stopped,
    Spawning,
    /// A `Spawn` step waits for its outcome.
    Up,
    Installing,
    ToldRespawned,
    FailedSaying,
    ToldFailed,
    Going,
    /// An unload.
    ToldUnloading,
    Retiring,
    /// Anything else.
    Saying,
    Telling,
    /// The tail every way through shares.
    Said,
    Event,
    /// No child left: told it was said.
    Untold,
    Over,
}

/// One decision carried out.
#[derive(Debug)]
pub(crate) struct Braking {
    decision: Decision,
    at: At,
}

impl Braking {
    /// The carrying out of `decision`.
    pub(crate) fn new(decision: Decision) -> Self {
        Self {
            decision,
            at: At::Holding,
        }
    }

    /// The next step, reading `now`; `None` once the decision is carried
    /// out (or held).
    pub(crate) fn next(&mut self, now: View) -> Option<Step> {
        let d = self.decision;
        walk(&mut self.at, &mut None, |at| {
            Some(match at {
                At::Holding if d.waits => (Some(Step::Hold), At::Over),
                At::Holding => (None, At::Acting),
                At::Acting => (Some(Step::Act).filter(|_| d.in_child), At::Choosing),
                At::Choosing => match d.does {
                    Does::Nothing if d.in_child => (None, At::Telling),
                    Does::Nothing => (Some(Step::Tell(Told::Said)), At::Over),
                    Does::Say => (None, At::Saying),
                    Does::Respawn => (None, At::Saving),
                    Does::Unload if now.live && broken!(ToldAfterRetire) => (Some(Step::Retire), At::ToldUnloading),
                    Does::Unload if now.live => (None, At::ToldUnloading),
                    Does::Unload => (None, At::Untold),
                },
                At::Saving if !now.live => (None, At::Untold),
                At::Saving if broken!(RespawnUnsaved) => (None, At::Stopping),
                At::Saving => (Some(Step::Save), At::Stopping),
                // No child to stop: told as said (see the module's end).
                At::Stopping if !now.live => (None, At::Untold),
                At::Stopping => (Some(Step::Stop), At::Stopped),
                At::Spawning => (Some(Step::Spawn), At::Up),
                At::Stopped => {
                    debug_assert!(false, "a Stop step is answered before the next");
                    (None, At::Untold)
                }
                At::Up => {
                    debug_assert!(false, "a Spawn step is answered before the next");
                    (None, At::FailedSaying)
                }
                At::Installing => (Some(Step::Install), At::ToldRespawned),
                At::ToldRespawned => (Some(Step::Tell(Told::Respawned)), At::Said),
                At::FailedSaying => (Some(Step::Say), At::ToldFailed),
                At::ToldFailed => (Some(Step::Tell(Told::RespawnFailed)), At::Going),
                At::Going => (Some(Step::Gone), At::Event),
                At::ToldUnloading if broken!(ToldAfterRetire) => (Some(Step::Tell(Told::Unloading)), At::Said),
                At::ToldUnloading => (Some(Step::Tell(Told::Unloading)), At::Retiring),
                At::Retiring => (Some(Step::Retire), At::Said),
                At::Saying => (Some(Step::Say), At::Telling),
                At::Telling => {
                    let told = if d.in_child { Told::Acted } else { Told::Said };
                    (Some(Step::Tell(told)), At::Event)
                }
                At::Said => (Some(Step::Say), At::Event),
                At::Event => (Some(Step::Event), At::Over),
                At::Untold => (Some(Step::Tell(Told::Said)), At::Over),
                At::Over => return None,
            })
        })
    }

    /// What a step came to.
    pub(crate) fn took(&mut self, outcome: Outcome) {
        match (self.at, outcome) {
            (At::Stopped, Outcome::Stopped(true)) => self.at = At::Spawning,
            (At::Stopped, Outcome::Stopped(false)) => self.at = At::Untold,
            (At::Up, Outcome::Spawned(true)) => self.at = At::Installing,
            (At::Up, Outcome::Spawned(false)) => self.at = At::FailedSaying,
            (at, o) => debug_assert!(false, "{o:?} answers no step at {at:?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Step::*;

    const LIVE: View = View { live: true };
    const GONE: View = View { live: false };

    /// The steps of `decision` carried out, the view read as `view(steps
    /// so far)`, a spawn coming up when `up`.
    fn steps(decision: Decision, up: bool, view: impl Fn(&[Step]) -> View) -> Vec<Step> {
        let mut b = Braking::new(decision);
        let mut done = Vec::new();
        while let Some(s) = b.next(view(&done)) {
            done.push(s);
            match s {
                Stop => b.took(Outcome::Stopped(true)),
                Spawn => b.took(Outcome::Spawned(up)),
                _ => {}
            }
            assert!(done.len() < 20, "a decision never carried out: {done:?}");
        }
        done
    }

    /// A stopped child is gone until a respawn installs the next one; a
    /// retired one is gone.
    fn stops(done: &[Step]) -> View {
        let stopped = done.iter().rposition(|s| matches!(s, Stop | Retire));
        let installed = done.iter().rposition(|s| *s == Install);
        if stopped.is_some() && installed < stopped {
            GONE
        } else {
            LIVE
        }
    }

    fn llama(does: Does) -> Decision {
        Decision {
            does,
            in_child: false,
            waits: false,
        }
    }

    fn mlx(does: Does) -> Decision {
        Decision {
            does,
            in_child: true,
            waits: false,
        }
    }

    /// A row: what it is, the decision, whether a spawn comes up, the
    /// view, the steps.
    type Row = (&'static str, Decision, bool, fn(&[Step]) -> View, Vec<Step>);

    #[test]
    fn each_decision_keeps_its_order() {
        let rows: Vec<Row> = vec![
            ("nothing to do", llama(Does::Nothing), true, stops, vec![Tell(Told::Said)]),
            (
                "a deferred shrink or an armed unload: said, told, its event",
                llama(Does::Say),
                true,
                stops,
                vec![Say, Tell(Told::Said), Event],
            ),
            (
                "a respawn that comes up",
                llama(Does::Respawn),
                true,
                stops,
                vec![Save, Stop, Spawn, Install, Tell(Told::Respawned), Say, Event],
            ),
            (
                "a respawn that fails: told before the child is gone",
                llama(Does::Respawn),
                false,
                stops,
                vec![Save, Stop, Spawn, Say, Tell(Told::RespawnFailed), Gone, Event],
            ),
            (
                "a respawn whose child died before its sample was carried out",
                llama(Does::Respawn),
                true,
                |_| GONE,
                vec![Tell(Told::Said)],
            ),
            (
                "a respawn whose child is gone by its stop",
                llama(Does::Respawn),
                true,
                |done: &[Step]| if done.contains(&Save) { GONE } else { LIVE },
                vec![Save, Tell(Told::Said)],
            ),
            (
                "an unload: told before it retires",
                llama(Does::Unload),
                true,
                stops,
                vec![Tell(Told::Unloading), Retire, Say, Event],
            ),
            ("an unload with no child left", llama(Does::Unload), true, |_| GONE, vec![Tell(Told::Said)]),
            (
                "a stopping action with turns running: held, nothing else",
                Decision {
                    waits: true,
                    ..llama(Does::Respawn)
                },
                true,
                stops,
                vec![Hold],
            ),
            (
                "an MLX release or bound: acted in the child, said, told as acted",
                mlx(Does::Say),
                true,
                stops,
                vec![Act, Say, Tell(Told::Acted), Event],
            ),
            (
                "MLX with nothing to do: the child asked all the same",
                mlx(Does::Nothing),
                true,
                stops,
                vec![Act, Tell(Told::Acted), Event],
            ),
            (
                "an MLX unload",
                mlx(Does::Unload),
                true,
                stops,
                vec![Act, Tell(Told::Unloading), Retire, Say, Event],
            ),
        ];
        for (what, decision, up, view, want) in rows {
            assert_eq!(steps(decision, up, view), want, "{what}");
        }
    }

    /// Whatever it meets, a decision is held and nothing else, or told to
    /// the controller exactly once; a stop is saved first; an unload is
    /// told before it retires; a respawn's child is installed, or gone
    /// and told so first.
    #[test]
    fn every_decision_is_told_once_or_held() {
        let all = [Does::Nothing, Does::Say, Does::Respawn, Does::Unload];
        for does in all {
            for bits in 0..1u32 << 5 {
                let b = |i: u32| bits & (1 << i) != 0;
                let decision = Decision {
                    does,
                    in_child: b(0),
                    waits: b(1),
                };
                // The child lives at the start (b 2), and dies while it
                // saves (b 3).
                let view = |done: &[Step]| {
                    let died = b(3) && done.contains(&Save);
                    if !b(2) || died { GONE } else { stops(done) }
                };
                let done = steps(decision, b(4), view);
                let n = |f: fn(&Step) -> bool| done.iter().filter(|s| f(s)).count();
                let at = |s: Step| done.iter().position(|&d| d == s);
                if decision.waits {
                    assert_eq!(done, vec![Hold], "{decision:?}");
                    continue;
                }
                assert_eq!(n(|s| matches!(s, Tell(_))), 1, "{decision:?}: {done:?}");
                if let Some(stop) = at(Stop) {
                    assert!(at(Save) < Some(stop), "{done:?}");
                }
                if let Some(r) = at(Retire) {
                    assert!(at(Tell(Told::Unloading)) < Some(r), "{done:?}");
                }
                if let Some(g) = at(Gone) {
                    assert!(at(Tell(Told::RespawnFailed)) < Some(g) && at(Install).is_none(), "{done:?}");
                }
                if at(Spawn).is_some() {
                    assert!(at(Install).is_some() != at(Gone).is_some(), "{done:?}");
                }
            }
        }
    }
}
