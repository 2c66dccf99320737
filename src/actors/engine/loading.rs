//! A model's load as a machine with no I/O: the order every load keeps,
//! in one place. The executor (`load::ensure_loaded`) asks it for one
//! `Step` at a time, handing it a `View` of the engine, carries the step
//! out (the header read, the residents asked for room, the spawn) and says
//! what it came to.
//!
//! The order, and why:
//! 1. `Recover`: a child that died while idle is recorded, and one whose
//!    RPC worker is gone is retired, before anything trusts the live child.
//! 2. The model's own live child is reused (`Reuse`); another model's is
//!    retired first (`Retire`, a switch), and a keep-alive held for
//!    another model is forgotten (`Switch`).
//! 3. A format this engine cannot run is refused before any file is read
//!    (`Refuse`).
//! 4. `Seed`: the brake's unload carry, else its window memory, caps the
//!    window before it is planned.
//! 5. The plan alone: the header read (`Facts`; a fatal header fails the
//!    load) then `Plan`, unless a load that waited for room kept its plan
//!    (`Wake`: one reading of the machine per load).
//! 6. `Room` among the residents: made (and, when others stay beside it,
//!    `Replan` for the memory left), or a wait (`Keep` the plan for the
//!    wake: the load resumes at 5 with it), or a refusal (`Fail`).
//! 7. `Workers`: the plan over RPC workers, when any serve.
//! 8. `Announce` (the plan's log line and the `loading` notice) only once
//!    the load goes ahead, so a load that waits says nothing yet.
//! 9. `Spawn`; a child that exited may be given one `Retry` at the floor
//!    window (an engine hook says whether); then `Install` (the brake
//!    started with its seed, the load timed, the child live, the `loaded`
//!    notice), or `Fail`.
//!
//! Every failure ends in `Fail`, which the executor publishes, counts and
//! logs once (`load_failed`).

use super::walk::walk;

/// What the engine holds now, read before each step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct View {
    /// The live child serves the model.
    pub holds: bool,
    /// A child is live.
    pub live: bool,
    /// The engine runs the model's format.
    pub accepts: bool,
    /// The load waited for room and kept its plan alone.
    pub planned: bool,
}

/// One thing to carry out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// A child that died idle recorded; a lost worker's child retired.
    Recover,
    /// Verdict: the model's child is live.
    Reuse,
    /// Another model's child retired (a switch).
    Retire,
    /// A keep-alive held for another model forgotten.
    Switch,
    /// Verdict: a format the engine cannot run (the executor fails it).
    Refuse,
    /// The brake's seed for this spawn.
    Seed,
    /// A load that waited for room takes its plan alone back.
    Wake,
    /// The header read: `took(Read(..))`.
    Facts,
    /// The plan alone, from the facts.
    Plan,
    /// Room among the residents: `took(Roomed(..))`.
    Room,
    /// The plan again, beside the residents that stay.
    Replan,
    /// Verdict: it waits for room; its plan alone is kept for the wake.
    Keep,
    /// The plan over RPC workers: `took(Read(..))`.
    Workers,
    /// The plan said, and the `loading` notice.
    Announce,
    /// The child spawned to readiness: `took(Spawned(..))`.
    Spawn,
    /// One spawn again at the floor window: `took(Spawned(..))`.
    Retry,
    /// Verdict: the child installed and live.
    Install,
    /// Verdict: the load failed with the error the executor holds.
    Fail,
}

/// How room among the residents came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Roomed {
    /// Made, with this many residents staying beside it.
    Made { beside: bool },
    /// It waits for a wake.
    Waits,
    /// Refused.
    Failed,
}

/// How a spawn came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Spawned {
    Ready,
    /// It failed, and the engine would run it again at its floor window.
    Retryable,
    Failed,
}

/// What carrying a step out came to, where the order depends on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The header read, or the plan over workers: done, or failed.
    Read(bool),
    Roomed(Roomed),
    Spawned(Spawned),
}

/// Where the machine stands: the step it weighs next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum At {
    Recovering,
    Reusing,
    Switching,
    Formats,
    Seeding,
    Planning,
    ReadFacts,
    Planned,
    Rooming,
    Roomed,
    WithWorkers,
    Workers,
    Announcing,
    Spawning,
    Spawned,
    Retried,
    /// A verdict was given (or is about to be handed out).
    Over,
}

/// One load.
#[derive(Debug)]
pub(crate) struct Loading {
    at: At,
    verdict: Option<Step>,
}

impl Loading {
    /// A model's load.
    pub(crate) fn new() -> Self {
        Self {
            at: At::Recovering,
            verdict: None,
        }
    }

    /// The next step, reading `now`; `None` once a verdict was given
    /// (`Reuse`, `Refuse`, `Keep`, `Install`, `Fail`).
    pub(crate) fn next(&mut self, now: View) -> Option<Step> {
        walk(&mut self.at, &mut self.verdict, |at| {
            Some(match at {
                At::Recovering => (Some(Step::Recover), At::Reusing),
                At::Reusing if now.holds => (Some(Step::Reuse), At::Over),
                At::Reusing if now.live => (Some(Step::Retire), At::Switching),
                At::Reusing => (None, At::Switching),
                At::Switching => (Some(Step::Switch), At::Formats),
                At::Formats if !now.accepts => (Some(Step::Refuse), At::Over),
                At::Formats => (None, At::Seeding),
                At::Seeding => (Some(Step::Seed), At::Planning),
                At::Planning if now.planned => (Some(Step::Wake), At::Rooming),
                At::Planning => (Some(Step::Facts), At::ReadFacts),
                At::Planned => (Some(Step::Plan), At::Rooming),
                At::Rooming => (Some(Step::Room), At::Roomed),
                At::WithWorkers => (Some(Step::Workers), At::Workers),
                At::Announcing => (Some(Step::Announce), At::Spawning),
                At::Spawning => (Some(Step::Spawn), At::Spawned),
                At::ReadFacts | At::Roomed | At::Workers | At::Spawned | At::Retried => {
                    debug_assert!(false, "a step that asks is answered before the next");
                    (Some(Step::Fail), At::Over)
                }
                At::Over => return None,
            })
        })
    }

    /// What an asking step came to.
    pub(crate) fn took(&mut self, outcome: Outcome) {
        self.at = match (self.at, outcome) {
            (At::ReadFacts, Outcome::Read(true)) => At::Planned,
            (At::Roomed, Outcome::Roomed(Roomed::Made { beside: false })) => At::WithWorkers,
            (At::Roomed, Outcome::Roomed(Roomed::Made { beside: true })) => return self.then(Step::Replan, At::WithWorkers),
            (At::Roomed, Outcome::Roomed(Roomed::Waits)) => return self.over(Step::Keep),
            (At::Workers, Outcome::Read(true)) => At::Announcing,
            (At::Spawned | At::Retried, Outcome::Spawned(Spawned::Ready)) => return self.over(Step::Install),
            (At::Spawned, Outcome::Spawned(Spawned::Retryable)) => return self.then(Step::Retry, At::Retried),
            (
                At::ReadFacts | At::Workers,
                Outcome::Read(false),
            )
            | (At::Roomed, Outcome::Roomed(Roomed::Failed))
            | (At::Spawned, Outcome::Spawned(Spawned::Failed))
            // A retry is given once.
            | (At::Retried, Outcome::Spawned(Spawned::Failed | Spawned::Retryable)) => return self.over(Step::Fail),
            (at, o) => {
                debug_assert!(false, "{o:?} answers no step at {at:?}");
                return self.over(Step::Fail);
            }
        };
    }

    /// `step` next, then on from `at`.
    fn then(&mut self, step: Step, at: At) {
        self.verdict = Some(step);
        self.at = at;
    }

    /// `step` next, and the load is over.
    fn over(&mut self, step: Step) {
        self.then(step, At::Over);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Step::*;

    const COLD: View = View {
        holds: false,
        live: false,
        accepts: true,
        planned: false,
    };

    /// Every answer an asking step can get, as a row gives them.
    #[derive(Clone, Copy)]
    struct Answers {
        facts: bool,
        room: Roomed,
        workers: bool,
        spawn: Spawned,
        retry: Spawned,
    }

    const WELL: Answers = Answers {
        facts: true,
        room: Roomed::Made { beside: false },
        workers: true,
        spawn: Spawned::Ready,
        retry: Spawned::Ready,
    };

    fn steps(answers: Answers, view: View) -> Vec<Step> {
        let mut l = Loading::new();
        let mut done = Vec::new();
        while let Some(s) = l.next(view) {
            done.push(s);
            match s {
                Facts => l.took(Outcome::Read(answers.facts)),
                Room => l.took(Outcome::Roomed(answers.room)),
                Workers => l.took(Outcome::Read(answers.workers)),
                Spawn => l.took(Outcome::Spawned(answers.spawn)),
                Retry => l.took(Outcome::Spawned(answers.retry)),
                _ => {}
            }
            assert!(done.len() < 20, "a load that never ends: {done:?}");
        }
        done
    }

    #[test]
    fn each_load_keeps_its_order() {
        let rows: Vec<(&str, Answers, View, Vec<Step>)> = vec![
            (
                "a cold load",
                WELL,
                COLD,
                vec![Recover, Switch, Seed, Facts, Plan, Room, Workers, Announce, Spawn, Install],
            ),
            ("its own child live", WELL, View { holds: true, live: true, ..COLD }, vec![Recover, Reuse]),
            (
                "a switch from another model",
                WELL,
                View { live: true, ..COLD },
                vec![Recover, Retire, Switch, Seed, Facts, Plan, Room, Workers, Announce, Spawn, Install],
            ),
            ("a format it cannot run", WELL, View { accepts: false, ..COLD }, vec![Recover, Switch, Refuse]),
            (
                "a fatal header",
                Answers { facts: false, ..WELL },
                COLD,
                vec![Recover, Switch, Seed, Facts, Fail],
            ),
            (
                "room beside others: planned again",
                Answers { room: Roomed::Made { beside: true }, ..WELL },
                COLD,
                vec![Recover, Switch, Seed, Facts, Plan, Room, Replan, Workers, Announce, Spawn, Install],
            ),
            (
                "a wait for room keeps its plan, and says nothing yet",
                Answers { room: Roomed::Waits, ..WELL },
                COLD,
                vec![Recover, Switch, Seed, Facts, Plan, Room, Keep],
            ),
            (
                "the wake reuses the plan",
                WELL,
                View { planned: true, ..COLD },
                vec![Recover, Switch, Seed, Wake, Room, Workers, Announce, Spawn, Install],
            ),
            (
                "room refused",
                Answers { room: Roomed::Failed, ..WELL },
                COLD,
                vec![Recover, Switch, Seed, Facts, Plan, Room, Fail],
            ),
            (
                "a worker's plan failed",
                Answers { workers: false, ..WELL },
                COLD,
                vec![Recover, Switch, Seed, Facts, Plan, Room, Workers, Fail],
            ),
            (
                "a child that exited, run again at the floor",
                Answers { spawn: Spawned::Retryable, ..WELL },
                COLD,
                vec![Recover, Switch, Seed, Facts, Plan, Room, Workers, Announce, Spawn, Retry, Install],
            ),
            (
                "a retry is given once",
                Answers { spawn: Spawned::Retryable, retry: Spawned::Retryable, ..WELL },
                COLD,
                vec![Recover, Switch, Seed, Facts, Plan, Room, Workers, Announce, Spawn, Retry, Fail],
            ),
            (
                "a spawn that failed",
                Answers { spawn: Spawned::Failed, ..WELL },
                COLD,
                vec![Recover, Switch, Seed, Facts, Plan, Room, Workers, Announce, Spawn, Fail],
            ),
        ];
        for (what, answers, view, want) in rows {
            assert_eq!(steps(answers, view), want, "{what}");
        }
    }
}
