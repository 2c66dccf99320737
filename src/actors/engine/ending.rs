//! A turn's end as a machine with no I/O: the order every relayed turn's
//! end keeps, in one place. The executor (`turn_end`) asks it for one
//! `Step` at a time, handing it a `View` of what the engine holds now, and
//! carries the step out; the simulator (`warden::arbiter_sim`) runs the
//! same machine over its own world.
//!
//! The order, and why:
//! 1. `Ended`: the turn no longer runs (the intake's count), before
//!    anything awaits, so a brake sample or a status taken meanwhile
//!    counts it gone.
//! 2. On trouble (a broken stream, a watchdog, a lost worker): `Judge` on
//!    the live child (its death classified, a hung or lost child stopped;
//!    told to every other turn that ran on it), or `Recall` when that
//!    child is already gone (the turn hears how it ended from the turn
//!    that learned it first).
//! 3. On any error, `Resume`: the law (`law::resume`) lets a death go on
//!    on the next child (`Requeue`, and the end is over) or says why not.
//! 4. `Free`: the slot, with the child's own counts, only on the child the
//!    turn ran on (a judged child is gone, and its slots with it).
//! 5. On a child that serves the turn's model: the keep-alive (`Hold`),
//!    then the brake's turn-end sample (`Brake`, after the slot is freed,
//!    so a respawn it decides sees the slot's conversation to save). The
//!    keep-alive comes first: it belongs to the model, and outlives an
//!    unload the sample may decide.
//! 6. `Count` (counted, its queue place freed, published) before the
//!    client's last events, so a client that read its answer's end sees
//!    the status it left; `Notice` (the brake's, to a stateful turn);
//!    `Finish` (the final event); `Said` (`TurnEnded`).
//! 7. `Unload` for a keep-alive of 0, only once a child is live and
//!    nothing else runs or waits.

use super::walk::walk;
use crate::law::broken;

/// What the relay came to, as the end's order reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Came {
    /// An answer (whole or streamed), a client gone, or the child's own
    /// error relayed as it sent it.
    Relayed,
    /// The child refused, or sent what cannot be relayed: an error that is
    /// not a death.
    Failed,
    /// The stream broke, a watchdog passed, or an RPC worker was lost.
    Trouble,
}

/// The turn, as its end's order reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Turn {
    pub came: Came,
    /// Its route generates: it held a slot, and the brake samples its end.
    pub generates: bool,
    /// Its route loads the model for itself (generates or encodes): a
    /// keep-alive it asked for applies.
    pub holds_model: bool,
    /// It asked for a keep-alive.
    pub keep_alive: bool,
    /// Its keep-alive says unload after it (0).
    pub unload_after: bool,
    /// Its client hears the brake's notices.
    pub stateful: bool,
}

/// What the engine holds now, read before each step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct View {
    /// The child the turn ran on is the live one.
    pub on_its_child: bool,
    /// A child is live.
    pub live: bool,
    /// The live child serves the turn's model.
    pub serves: bool,
    /// Nothing else runs or waits.
    pub idle: bool,
}

/// One thing to carry out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// The turn no longer runs.
    Ended,
    /// The live child's trouble judged: the turn's error.
    Judge,
    /// The turn's child is gone: how it ended, as recorded.
    Recall,
    /// The law's verdict on the turn's error: answer `took(Resumed(..))`.
    Resume,
    /// Back to the intake's head for the next child; the end is over.
    Requeue,
    /// Its slot freed with the child's counts.
    Free,
    /// The brake's turn-end sample.
    Brake,
    /// Its keep-alive held.
    Hold,
    /// Counted, its queue place freed, the status published.
    Count,
    /// The brake's notice to its client.
    Notice,
    /// Its final event.
    Finish,
    /// `TurnEnded`.
    Said,
    /// The model unloaded, as its keep-alive of 0 asked.
    Unload,
}

/// What carrying a step out came to, where the order depends on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The law let the turn go on (`true`) or it ends with its error.
    Resumed(bool),
}

/// Where the machine stands: the step it weighs next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum At {
    Ending,
    Judging,
    Resuming,
    /// A `Resume` step waits for its verdict.
    Verdict,
    Requeuing,
    Freeing,
    Holding,
    Sampling,
    Counting,
    Noticing,
    Finishing,
    Saying,
    Unloading,
    Over,
}

/// One turn's end.
#[derive(Debug)]
pub(crate) struct Ending {
    turn: Turn,
    at: At,
}

impl Ending {
    /// The end of `turn`.
    pub(crate) fn new(turn: Turn) -> Self {
        Self { turn, at: At::Ending }
    }

    /// The end of a turn that never ran (refused while it waited): from
    /// its count on.
    pub(crate) fn closing(turn: Turn) -> Self {
        Self { turn, at: At::Counting }
    }

    /// The next step, reading `now`; `None` once the end is over.
    pub(crate) fn next(&mut self, now: View) -> Option<Step> {
        let turn = self.turn;
        walk(&mut self.at, &mut None, |at| {
            Some(match at {
                At::Ending => (Some(Step::Ended), At::Judging),
                At::Judging => match turn.came {
                    Came::Relayed => (None, At::Freeing),
                    Came::Failed => (None, At::Resuming),
                    Came::Trouble if now.on_its_child => (Some(Step::Judge), At::Resuming),
                    Came::Trouble => (Some(Step::Recall), At::Resuming),
                },
                At::Resuming if broken!(ResumeSkipped) => (None, At::Freeing),
                At::Resuming => (Some(Step::Resume), At::Verdict),
                At::Verdict => {
                    debug_assert!(false, "a Resume step is answered before the next");
                    (None, At::Freeing)
                }
                At::Requeuing => (Some(Step::Requeue), At::Over),
                At::Freeing => (
                    Some(Step::Free).filter(|_| turn.generates && now.on_its_child),
                    At::Holding,
                ),
                At::Holding => (
                    Some(Step::Hold).filter(|_| turn.keep_alive && turn.holds_model && now.serves),
                    At::Sampling,
                ),
                At::Sampling => (
                    Some(Step::Brake).filter(|_| turn.generates && now.serves),
                    At::Counting,
                ),
                At::Counting => (Some(Step::Count), At::Noticing),
                At::Noticing => (Some(Step::Notice).filter(|_| turn.stateful), At::Finishing),
                At::Finishing => (Some(Step::Finish), At::Saying),
                At::Saying => (Some(Step::Said), At::Unloading),
                At::Unloading => {
                    let unload = turn.unload_after
                        && turn.holds_model
                        && now.live
                        && (now.idle || broken!(UnloadBusy));
                    (Some(Step::Unload).filter(|_| unload), At::Over)
                }
                At::Over => return None,
            })
        })
    }

    /// What a step came to.
    pub(crate) fn took(&mut self, outcome: Outcome) {
        match (self.at, outcome) {
            (At::Verdict, Outcome::Resumed(true)) => self.at = At::Requeuing,
            (At::Verdict, Outcome::Resumed(false)) => self.at = At::Freeing,
            (at, o) => debug_assert!(false, "{o:?} answers no step at {at:?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Step::*;

    const ANSWER: Turn = Turn {
        came: Came::Relayed,
        generates: true,
        holds_model: true,
        keep_alive: false,
        unload_after: false,
        stateful: false,
    };
    const LIVE: View = View {
        on_its_child: true,
        live: true,
        serves: true,
        idle: true,
    };
    const GONE: View = View {
        on_its_child: false,
        live: false,
        serves: false,
        idle: true,
    };

    /// The steps of `turn`'s end, the view read as `view(step so far)`,
    /// the law's verdict `goes_on`.
    fn steps(turn: Turn, goes_on: bool, view: impl Fn(&[Step]) -> View) -> Vec<Step> {
        let mut e = Ending::new(turn);
        let mut done = Vec::new();
        while let Some(s) = e.next(view(&done)) {
            done.push(s);
            if s == Resume {
                e.took(Outcome::Resumed(goes_on));
            }
            assert!(done.len() < 20, "an end that never ends: {done:?}");
        }
        done
    }

    /// A judged child is stopped: after `Judge`, the engine holds none.
    fn judged(done: &[Step]) -> View {
        if done.contains(&Judge) { GONE } else { LIVE }
    }

    /// A row: what it is, the turn, the law's verdict, the view, the steps.
    type Row = (&'static str, Turn, bool, fn(&[Step]) -> View, Vec<Step>);

    #[test]
    fn each_end_keeps_its_order() {
        let keep = Turn {
            keep_alive: true,
            ..ANSWER
        };
        let rows: Vec<Row> = vec![
            (
                "an answer",
                ANSWER,
                false,
                |_| LIVE,
                vec![Ended, Free, Brake, Count, Finish, Said],
            ),
            (
                "an answer with a keep-alive, to a stateful client",
                Turn { stateful: true, ..keep },
                false,
                |_| LIVE,
                vec![Ended, Free, Hold, Brake, Count, Notice, Finish, Said],
            ),
            (
                "an embedding: no slot, no sample, its keep-alive held",
                Turn {
                    generates: false,
                    ..keep
                },
                false,
                |_| LIVE,
                vec![Ended, Hold, Count, Finish, Said],
            ),
            (
                "a tokenizer call: nothing of the model's",
                Turn {
                    generates: false,
                    holds_model: false,
                    ..keep
                },
                false,
                |_| LIVE,
                vec![Ended, Count, Finish, Said],
            ),
            (
                "a refusal is not a death, and keeps the slot",
                Turn {
                    came: Came::Failed,
                    ..ANSWER
                },
                false,
                |_| LIVE,
                vec![Ended, Resume, Free, Brake, Count, Finish, Said],
            ),
            (
                "a death the law lets go on",
                Turn {
                    came: Came::Trouble,
                    ..ANSWER
                },
                true,
                judged,
                vec![Ended, Judge, Resume, Requeue],
            ),
            (
                "a death the law ends: no slot, no sample on no child",
                Turn {
                    came: Came::Trouble,
                    ..keep
                },
                false,
                judged,
                vec![Ended, Judge, Resume, Count, Finish, Said],
            ),
            (
                "a turn whose child another turn judged first",
                Turn {
                    came: Came::Trouble,
                    ..ANSWER
                },
                false,
                |_| GONE,
                vec![Ended, Recall, Resume, Count, Finish, Said],
            ),
            (
                "on a child of another model (a switch meanwhile)",
                ANSWER,
                false,
                |_| View { serves: false, ..LIVE },
                vec![Ended, Free, Count, Finish, Said],
            ),
            (
                "keep-alive 0 with nothing else waiting: unloaded last",
                Turn {
                    unload_after: true,
                    ..keep
                },
                false,
                |_| LIVE,
                vec![Ended, Free, Hold, Brake, Count, Finish, Said, Unload],
            ),
            (
                "keep-alive 0 with another turn waiting: kept",
                Turn {
                    unload_after: true,
                    ..keep
                },
                false,
                |_| View { idle: false, ..LIVE },
                vec![Ended, Free, Hold, Brake, Count, Finish, Said],
            ),
            (
                "keep-alive 0 on a child the brake stopped: nothing to unload",
                Turn {
                    unload_after: true,
                    ..keep
                },
                false,
                |done: &[Step]| if done.contains(&Brake) { GONE } else { LIVE },
                vec![Ended, Free, Hold, Brake, Count, Finish, Said],
            ),
        ];
        for (what, turn, goes_on, view, want) in rows {
            assert_eq!(steps(turn, goes_on, view), want, "{what}");
        }
    }

    /// Every end, whatever it meets, says its turn's end once, after it
    /// was counted; or goes back to wait, and says nothing.
    #[test]
    fn every_end_is_said_once_or_goes_on() {
        for bits in 0..1u32 << 12 {
            let b = |i: u32| bits & (1 << i) != 0;
            let turn = Turn {
                came: [Came::Relayed, Came::Failed, Came::Trouble][(bits % 3) as usize],
                generates: b(2),
                holds_model: b(3),
                keep_alive: b(4),
                unload_after: b(5),
                stateful: b(6),
            };
            let view = View {
                on_its_child: b(7),
                live: b(8),
                serves: b(9),
                idle: b(10),
            };
            let done = steps(turn, b(11), |_| view);
            let n = |s: Step| done.iter().filter(|&&d| d == s).count();
            assert_eq!(done.first(), Some(&Ended), "{turn:?} {view:?}: {done:?}");
            if done.last() == Some(&Requeue) {
                assert!(turn.came != Came::Relayed && n(Said) == 0 && n(Free) == 0, "{done:?}");
                continue;
            }
            assert_eq!((n(Count), n(Finish), n(Said)), (1, 1, 1), "{turn:?} {view:?}: {done:?}");
            let at = |s: Step| done.iter().position(|&d| d == s);
            assert!(at(Count) < at(Finish) && at(Finish) < at(Said));
            if let Some(u) = at(Unload) {
                assert!(view.idle && view.live && u == done.len() - 1, "{done:?}");
            }
            if n(Free) == 1 {
                assert!(view.on_its_child && turn.generates);
            }
        }
    }
}
