//! A turn's admission as a machine with no I/O: the order every waiting
//! turn's admission keeps, in one place. The executor (`turn::admit`) asks
//! it for one `Step` at a time, handing it a `View` of what the engine
//! holds now, carries the step out and says what it came to; the
//! simulator (`warden::arbiter_sim`) runs the same machine over its world.
//!
//! The order, and why:
//! 1. A turn whose client left is skipped (`Skip`); after a shutdown every
//!    turn is refused (`Refuse`). Neither costs the model anything.
//! 2. A brake action held for the running turns stops new ones (`Wait`):
//!    the action stops the child once they end.
//! 3. The scheduler between models (`AskYield`): a holder that owes its
//!    memory to another model's waiting turns yields (`Yield`) before it
//!    starts another turn of its own.
//! 4. Beside running turns, a turn waits when it needs another model or a
//!    child that died (both stop the child), or when no slot or pool room
//!    is there for it (`Probe`, the slots' law on the live child).
//! 5. It starts (`Announce`, once per turn, so a turn that waited is not
//!    announced twice); a generating turn takes the brake's start sample
//!    (`Begin`) unless its load waits for room (its start was taken when
//!    the wait began), and waits when that sample held a brake action.
//! 6. Its model loads (`Load`): ready, waiting for room, or failed
//!    (`Fail`, with the load's error).
//! 7. A turn going on after its child died is counted (`CountResumed`)
//!    on the new child.
//! 8. A generating turn takes its seat (`Seat`) and starts (`Generate`),
//!    or waits when the seat went meanwhile; any other route passes
//!    through (`PassThrough`).

use super::walk::walk;
use crate::law::broken;

/// The turn, as its admission reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Turn {
    /// Its route generates: a slot, the brake's samples.
    pub generates: bool,
    /// Its start was announced already (it waited after it).
    pub announced: bool,
    /// It goes on after its child died.
    pub resumed: bool,
}

/// What the engine holds now, read before each step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct View {
    /// The turn's client left.
    pub client_gone: bool,
    /// The engine is shut down.
    pub shut_down: bool,
    /// A brake action waits for the running turns.
    pub brake_held: bool,
    /// Turns run on the child.
    pub running: bool,
    /// The live child serves the turn's model and has not died.
    pub serves: bool,
    /// The turn's model's load waits for room.
    pub waits_for_room: bool,
}

/// One thing to carry out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Its client left: it ends, skipped.
    Skip,
    /// The engine is shut down: it ends with that error.
    Refuse,
    /// Not yet: back to the head.
    Wait,
    /// Ask the scheduler whether the model yields: `took(Yields(..))`.
    AskYield,
    /// The model yields its memory: back to the head, and the model leaves
    /// once nothing runs.
    Yield,
    /// Whether a seat is there beside the running turns: `took(Seated(..))`.
    Probe,
    /// `TurnStarted`.
    Announce,
    /// The brake's start sample and the reload announcements.
    Begin,
    /// Its model loaded: `took(Loaded(..))`.
    Load,
    /// It ends with its load's error.
    Fail,
    /// A resumed turn counted on its new child.
    CountResumed,
    /// Its seat: `took(Seated(..))`.
    Seat,
    /// It starts on its seat.
    Generate,
    /// It starts, passed through.
    PassThrough,
}

/// How a load came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Came {
    Ready,
    Waits,
    Failed,
}

/// What carrying a step out came to, where the order depends on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Yields(bool),
    Seated(bool),
    Loaded(Came),
}

/// Where the machine stands: the step it weighs next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum At {
    Door,
    Brake,
    Schedule,
    AskedYield,
    Beside,
    Probed,
    Announcing,
    Beginning,
    Begun,
    Loading,
    Loaded,
    Counting,
    Seating,
    Sat,
    /// A verdict was given: the admission is over.
    Over,
}

/// One turn's admission.
#[derive(Debug)]
pub(crate) struct Admitting {
    turn: Turn,
    at: At,
    /// A verdict an answer gave, for the next `next`.
    verdict: Option<Step>,
}

impl Admitting {
    /// The admission of `turn`.
    pub(crate) fn new(turn: Turn) -> Self {
        Self {
            turn,
            at: At::Door,
            verdict: None,
        }
    }

    /// The next step, reading `now`; `None` once a verdict was given
    /// (`Skip`, `Refuse`, `Wait`, `Yield`, `Fail`, `Generate`,
    /// `PassThrough`).
    pub(crate) fn next(&mut self, now: View) -> Option<Step> {
        let turn = self.turn;
        walk(&mut self.at, &mut self.verdict, |at| {
            Some(match at {
                At::Door if now.client_gone => (Some(Step::Skip), At::Over),
                At::Door if now.shut_down => (Some(Step::Refuse), At::Over),
                At::Door => (None, At::Brake),
                At::Brake if now.brake_held && !broken!(BrakeIgnored) => (Some(Step::Wait), At::Over),
                At::Brake => (None, At::Schedule),
                At::Schedule => (Some(Step::AskYield), At::AskedYield),
                At::AskedYield | At::Probed | At::Loaded | At::Sat => {
                    debug_assert!(false, "a step that asks is answered before the next");
                    (Some(Step::Wait), At::Over)
                }
                At::Beside if now.running && !now.serves => (Some(Step::Wait), At::Over),
                At::Beside if now.running && turn.generates => (Some(Step::Probe), At::Probed),
                At::Beside => (None, At::Announcing),
                At::Announcing => (Some(Step::Announce).filter(|_| !turn.announced), At::Beginning),
                At::Beginning if turn.generates && !now.waits_for_room => (Some(Step::Begin), At::Begun),
                At::Beginning => (None, At::Loading),
                At::Begun if now.brake_held && !broken!(BrakeIgnored) => (Some(Step::Wait), At::Over),
                At::Begun => (None, At::Loading),
                At::Loading => (Some(Step::Load), At::Loaded),
                At::Counting => (Some(Step::CountResumed).filter(|_| turn.resumed), At::Seating),
                At::Seating if turn.generates => (Some(Step::Seat), At::Sat),
                At::Seating => (Some(Step::PassThrough), At::Over),
                At::Over => return None,
            })
        })
    }

    /// What an asking step came to.
    pub(crate) fn took(&mut self, outcome: Outcome) {
        self.at = match (self.at, outcome) {
            (At::AskedYield, Outcome::Yields(true)) => return self.verdict(Step::Yield),
            (At::AskedYield, Outcome::Yields(false)) => At::Beside,
            (At::Probed, Outcome::Seated(true)) => At::Announcing,
            (At::Probed, Outcome::Seated(false)) => return self.verdict(Step::Wait),
            (At::Loaded, Outcome::Loaded(Came::Ready)) => At::Counting,
            (At::Loaded, Outcome::Loaded(Came::Waits)) => return self.verdict(Step::Wait),
            (At::Loaded, Outcome::Loaded(Came::Failed)) => return self.verdict(Step::Fail),
            (At::Sat, Outcome::Seated(true)) => return self.verdict(Step::Generate),
            (At::Sat, Outcome::Seated(false)) => return self.verdict(Step::Wait),
            (at, o) => {
                debug_assert!(false, "{o:?} answers no step at {at:?}");
                At::Over
            }
        };
    }

    /// The verdict an answer gave, handed out by the next `next`.
    fn verdict(&mut self, step: Step) {
        self.at = At::Over;
        self.verdict = Some(step);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Step::*;

    const CHAT: Turn = Turn {
        generates: true,
        announced: false,
        resumed: false,
    };
    const IDLE: View = View {
        client_gone: false,
        shut_down: false,
        brake_held: false,
        running: false,
        serves: true,
        waits_for_room: false,
    };

    /// Every answer an asking step can get, as a row gives them.
    #[derive(Clone, Copy)]
    struct Answers {
        yields: bool,
        probe: bool,
        load: Came,
        seat: bool,
    }

    const YES: Answers = Answers {
        yields: false,
        probe: true,
        load: Came::Ready,
        seat: true,
    };

    /// The steps of `turn`'s admission against `view` (read as
    /// `view(steps so far)`) and `answers`.
    fn steps(turn: Turn, answers: Answers, view: impl Fn(&[Step]) -> View) -> Vec<Step> {
        let mut a = Admitting::new(turn);
        let mut done = Vec::new();
        while let Some(s) = a.next(view(&done)) {
            done.push(s);
            match s {
                AskYield => a.took(Outcome::Yields(answers.yields)),
                Probe => a.took(Outcome::Seated(answers.probe)),
                Load => a.took(Outcome::Loaded(answers.load)),
                Seat => a.took(Outcome::Seated(answers.seat)),
                _ => {}
            }
            assert!(done.len() < 20, "an admission that never ends: {done:?}");
        }
        done
    }

    /// A row: what it is, the turn, the answers, the view, the steps.
    type Row = (&'static str, Turn, Answers, fn(&[Step]) -> View, Vec<Step>);

    #[test]
    fn each_admission_keeps_its_order() {
        let pass = Turn {
            generates: false,
            ..CHAT
        };
        let rows: Vec<Row> = vec![
            ("a chat turn on an idle child", CHAT, YES, |_| IDLE, vec![AskYield, Announce, Begin, Load, Seat, Generate]),
            ("its client left", CHAT, YES, |_| View { client_gone: true, ..IDLE }, vec![Skip]),
            ("shut down", CHAT, YES, |_| View { shut_down: true, ..IDLE }, vec![Refuse]),
            ("a brake action held", CHAT, YES, |_| View { brake_held: true, ..IDLE }, vec![Wait]),
            ("the model yields", CHAT, Answers { yields: true, ..YES }, |_| IDLE, vec![AskYield, Yield]),
            (
                "beside running turns of another model",
                CHAT,
                YES,
                |_| View { running: true, serves: false, ..IDLE },
                vec![AskYield, Wait],
            ),
            (
                "beside running turns, no seat",
                CHAT,
                Answers { probe: false, ..YES },
                |_| View { running: true, ..IDLE },
                vec![AskYield, Probe, Wait],
            ),
            (
                "beside running turns, a seat",
                CHAT,
                YES,
                |_| View { running: true, ..IDLE },
                vec![AskYield, Probe, Announce, Begin, Load, Seat, Generate],
            ),
            (
                "its start sample held a brake action",
                CHAT,
                YES,
                |done: &[Step]| View { brake_held: done.contains(&Begin), ..IDLE },
                vec![AskYield, Announce, Begin, Wait],
            ),
            (
                "announced before it waited: not again",
                Turn { announced: true, ..CHAT },
                YES,
                |_| IDLE,
                vec![AskYield, Begin, Load, Seat, Generate],
            ),
            (
                "its load waits for room: no second start sample",
                Turn { announced: true, ..CHAT },
                Answers { load: Came::Waits, ..YES },
                |_| View { waits_for_room: true, ..IDLE },
                vec![AskYield, Load, Wait],
            ),
            (
                "its load failed",
                CHAT,
                Answers { load: Came::Failed, ..YES },
                |_| IDLE,
                vec![AskYield, Announce, Begin, Load, Fail],
            ),
            (
                "resumed on a new child",
                Turn { resumed: true, announced: true, ..CHAT },
                YES,
                |_| IDLE,
                vec![AskYield, Begin, Load, CountResumed, Seat, Generate],
            ),
            (
                "the seat went while it loaded",
                CHAT,
                Answers { seat: false, ..YES },
                |_| IDLE,
                vec![AskYield, Announce, Begin, Load, Seat, Wait],
            ),
            (
                "an embedding: no sample, no seat",
                pass,
                YES,
                |_| View { running: true, ..IDLE },
                vec![AskYield, Announce, Load, PassThrough],
            ),
        ];
        for (what, turn, answers, view, want) in rows {
            assert_eq!(steps(turn, answers, view), want, "{what}");
        }
    }

    /// Whatever it meets, an admission ends in one verdict; a turn starts
    /// only announced, loaded, and (generating) seated, and never while a
    /// brake action is held or after its client left or a shutdown.
    #[test]
    fn every_admission_ends_in_one_verdict() {
        const VERDICTS: [Step; 7] = [Skip, Refuse, Wait, Yield, Fail, Generate, PassThrough];
        for bits in 0..1u32 << 14 {
            let b = |i: u32| bits & (1 << i) != 0;
            let turn = Turn {
                generates: b(0),
                announced: b(1),
                resumed: b(2),
            };
            let view = View {
                client_gone: b(3),
                shut_down: b(4),
                brake_held: b(5),
                running: b(6),
                serves: b(7),
                waits_for_room: b(8),
            };
            let answers = Answers {
                yields: b(9),
                probe: b(10),
                load: if b(11) { Came::Waits } else if b(12) { Came::Failed } else { Came::Ready },
                seat: b(13),
            };
            let done = steps(turn, answers, |_| view);
            let verdicts: Vec<&Step> = done.iter().filter(|s| VERDICTS.contains(s)).collect();
            assert_eq!(verdicts.len(), 1, "{turn:?} {view:?}: {done:?}");
            assert_eq!(Some(verdicts[0]), done.last(), "{done:?}");
            if matches!(done.last(), Some(Generate | PassThrough)) {
                assert!(!view.client_gone && !view.shut_down && !view.brake_held, "{done:?}");
                assert!(turn.announced || done.contains(&Announce), "{done:?}");
                assert!(done.contains(&Load), "{done:?}");
                assert_eq!(done.contains(&Seat), turn.generates, "{done:?}");
            }
        }
    }
}
