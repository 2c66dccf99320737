//! Whether a turn whose child died under it goes on on the next child.
//! A child's death is a pause for the turns it carried: the
//! engine respawns, and each turn that had not ended either runs again
//! (it had sent nothing) or continues from exactly where it was (the
//! prompt as the child renders it, then the text already sent; `splice`
//! joins the two streams into one). This module decides which, or why not.
//!
//! The rules, and why:
//! - A death from outside (SIGKILL with no OOM kill on record, an RPC
//!   worker lost) never says anything about the turn: it goes on.
//! - A death that may come from inside (a crash, an out-of-memory, a hang)
//!   is the turn's own doing when it came while the turn was still reading
//!   its prompt (nothing sent yet): the same prompt would kill the next
//!   child too, so it ends with the coded error, which names why. A turn
//!   that was already streaming did read its prompt safely: the death is
//!   another's (a prompt read beside it), or the world's. A whole
//!   (unstreamed) answer sends nothing until it ends, so it cannot tell
//!   its prompt from its generation: it runs again, once (the bound below
//!   keeps a prompt that does kill children to two deaths).
//! - A binary this CPU cannot run, or a damaged model, kills every child:
//!   no new one is tried for the turn.
//! - A turn goes on at most `limit` times (`WARDEN_RESUME_TURNS`, 1 by
//!   default, 0 turns this off): a turn whose second child died too is
//!   likely the cause, whatever the code says.
//! - Never for a client that went away, nor for an answer that began
//!   something other than text (a tool call, reasoning: what was sent
//!   cannot be handed back to the template as the answer's beginning), nor
//!   for a body the continuation cannot be written for (`splice`).
//!
//! Pure: the engine reads the facts, this decides.

use super::crash::EngineCode;

/// Resumes per turn when `WARDEN_RESUME_TURNS` is unset: once. A second
/// death under the same turn makes the turn the likely cause.
pub const RESUME_TURNS_DEFAULT: u32 = 1;

/// How the child ended, as far as the turn is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Death {
    /// It died, classified (`law::crash`); a watchdog's stop is `ChildHung`.
    Died(EngineCode),
    /// One of its RPC workers was lost and it was stopped.
    WorkerLost,
}

/// What the engine knows of the turn when its child died.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Turn {
    /// Events its client was sent (0: nothing, so it can simply run again).
    pub sent: u32,
    /// Streamed (a whole answer sends nothing until its end).
    pub streamed: bool,
    /// Resumes it already had.
    pub resumes: u32,
    /// Its client went away.
    pub client_gone: bool,
    /// What it sent that cannot be continued as text, if any.
    pub opaque: Option<&'static str>,
    /// Why its body cannot be continued, if it cannot (`splice`).
    pub unfit: Option<&'static str>,
}

/// The verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing was sent: the same request on the next child.
    Rerun,
    /// Continue on the next child from the text already sent.
    Continue,
    /// End with the coded error; the reason is said with it.
    Decline(Decline),
}

/// Why a turn does not go on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decline {
    /// `WARDEN_RESUME_TURNS=0`.
    Off,
    /// The client went away.
    ClientGone,
    /// It already went on `limit` times.
    Again { limit: u32 },
    /// Every new child would die the same way.
    Hopeless(EngineCode),
    /// The child died while reading this turn's prompt.
    OwnPrompt(EngineCode),
    /// What was sent is not text the template can take back.
    Opaque(&'static str),
    /// The body cannot be continued.
    Unfit(&'static str),
}

impl Decline {
    /// The sentence said with the error (after "the turn was not resumed: ").
    pub fn why(self) -> String {
        match self {
            Self::Off => "resuming is off (WARDEN_RESUME_TURNS=0)".into(),
            Self::ClientGone => "its client went away".into(),
            Self::Again { limit } => format!(
                "its model server died again after {limit} resume{} (WARDEN_RESUME_TURNS)",
                if limit == 1 { "" } else { "s" }
            ),
            Self::Hopeless(code) => format!("every new model server would end the same way ({})", code.as_str()),
            Self::OwnPrompt(code) => format!(
                "the model server ended ({}) while reading this turn's prompt, which may be the cause",
                code.as_str()
            ),
            Self::Opaque(what) => format!("the answer had begun {what}, which cannot be continued as text"),
            Self::Unfit(why) => why.to_string(),
        }
    }

    /// The stable tag in events and metrics.
    pub fn tag(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::ClientGone => "client_gone",
            Self::Again { .. } => "again",
            Self::Hopeless(_) => "hopeless",
            Self::OwnPrompt(_) => "own_prompt",
            Self::Opaque(_) => "opaque",
            Self::Unfit(_) => "unfit",
        }
    }
}

/// Whether a death may have come from the turns the child was running
/// (rather than from outside it).
fn may_come_from_inside(code: EngineCode) -> bool {
    matches!(
        code,
        EngineCode::ChildCrashed | EngineCode::OutOfMemory | EngineCode::CudaOutOfMemory | EngineCode::ChildHung
    )
}

/// Whether every new child would die the same way, whatever it runs.
fn hopeless(code: EngineCode) -> bool {
    matches!(
        code,
        EngineCode::IllegalInstruction | EngineCode::ModelCorrupt | EngineCode::NotGguf
    )
}

/// The verdict for `turn` after `death`, resuming at most `limit` times.
pub fn decide(turn: Turn, death: Death, limit: u32) -> Verdict {
    if limit == 0 {
        return Verdict::Decline(Decline::Off);
    }
    if turn.client_gone {
        return Verdict::Decline(Decline::ClientGone);
    }
    if turn.resumes >= limit {
        return Verdict::Decline(Decline::Again { limit });
    }
    if let Death::Died(code) = death {
        if hopeless(code) {
            return Verdict::Decline(Decline::Hopeless(code));
        }
        if turn.streamed && turn.sent == 0 && may_come_from_inside(code) {
            return Verdict::Decline(Decline::OwnPrompt(code));
        }
    }
    if turn.sent == 0 {
        return Verdict::Rerun;
    }
    if let Some(what) = turn.opaque {
        return Verdict::Decline(Decline::Opaque(what));
    }
    if let Some(why) = turn.unfit {
        return Verdict::Decline(Decline::Unfit(why));
    }
    Verdict::Continue
}

#[cfg(test)]
mod tests {
    use super::*;

    const STREAMING: Turn = Turn {
        sent: 12,
        streamed: true,
        resumes: 0,
        client_gone: false,
        opaque: None,
        unfit: None,
    };

    fn with(f: impl FnOnce(&mut Turn)) -> Turn {
        let mut t = STREAMING;
        f(&mut t);
        t
    }

    #[test]
    fn verdicts() {
        use EngineCode::*;
        let killed = Death::Died(ChildKilled);
        let cases: Vec<(&str, Turn, Death, u32, Verdict)> = vec![
            ("a kill mid-stream continues", STREAMING, killed, 1, Verdict::Continue),
            ("a kill before anything was sent runs again", with(|t| t.sent = 0), killed, 1, Verdict::Rerun),
            ("a lost worker runs again", with(|t| t.sent = 0), Death::WorkerLost, 1, Verdict::Rerun),
            ("a crash mid-stream continues", STREAMING, Death::Died(ChildCrashed), 1, Verdict::Continue),
            ("a hang between tokens continues", STREAMING, Death::Died(ChildHung), 1, Verdict::Continue),
            (
                "a crash while reading the prompt is the prompt's",
                with(|t| t.sent = 0),
                Death::Died(ChildCrashed),
                1,
                Verdict::Decline(Decline::OwnPrompt(ChildCrashed)),
            ),
            (
                "a crash under a whole answer runs it again: it cannot tell",
                with(|t| {
                    t.sent = 0;
                    t.streamed = false
                }),
                Death::Died(ChildCrashed),
                1,
                Verdict::Rerun,
            ),
            (
                "a hang before the first token may be the prompt's",
                with(|t| t.sent = 0),
                Death::Died(ChildHung),
                1,
                Verdict::Decline(Decline::OwnPrompt(ChildHung)),
            ),
            (
                "out of memory while reading the prompt",
                with(|t| t.sent = 0),
                Death::Died(OutOfMemory),
                1,
                Verdict::Decline(Decline::OwnPrompt(OutOfMemory)),
            ),
            (
                "a binary this CPU cannot run",
                STREAMING,
                Death::Died(IllegalInstruction),
                1,
                Verdict::Decline(Decline::Hopeless(IllegalInstruction)),
            ),
            (
                "the second death under one turn",
                with(|t| t.resumes = 1),
                killed,
                1,
                Verdict::Decline(Decline::Again { limit: 1 }),
            ),
            ("a limit of two allows the second", with(|t| t.resumes = 1), killed, 2, Verdict::Continue),
            ("off", STREAMING, killed, 0, Verdict::Decline(Decline::Off)),
            (
                "a client gone",
                with(|t| t.client_gone = true),
                killed,
                1,
                Verdict::Decline(Decline::ClientGone),
            ),
            (
                "a tool call begun",
                with(|t| t.opaque = Some("a tool call")),
                killed,
                1,
                Verdict::Decline(Decline::Opaque("a tool call")),
            ),
            (
                "a body that cannot be continued",
                with(|t| t.unfit = Some("x")),
                killed,
                1,
                Verdict::Decline(Decline::Unfit("x")),
            ),
            (
                "a body that cannot be continued still runs again when nothing was sent",
                with(|t| {
                    t.unfit = Some("x");
                    t.sent = 0
                }),
                killed,
                1,
                Verdict::Rerun,
            ),
        ];
        for (name, turn, death, limit, want) in cases {
            assert_eq!(decide(turn, death, limit), want, "{name}");
        }
    }

    #[test]
    fn every_decline_says_why_and_has_a_tag() {
        let all = [
            Decline::Off,
            Decline::ClientGone,
            Decline::Again { limit: 2 },
            Decline::Hopeless(EngineCode::IllegalInstruction),
            Decline::OwnPrompt(EngineCode::ChildCrashed),
            Decline::Opaque("a tool call"),
            Decline::Unfit("a prompt given as tokens"),
        ];
        for d in all {
            assert!(!d.why().is_empty() && !d.tag().is_empty(), "{d:?}");
        }
        assert!(Decline::Again { limit: 2 }.why().contains("2 resumes"));
        assert!(Decline::OwnPrompt(EngineCode::ChildCrashed).why().contains("child_crashed"));
    }
}
