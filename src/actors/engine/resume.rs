//! A turn whose child died under it goes on on the next child: what
//! a turn carries across its children (`carry::Carry`), the law's verdict when its
//! child dies (`law::resume`), and the way back into the intake, at its
//! head, where the next admission respawns the child and starts it again:
//! run again when its client had nothing yet, else continued from the text
//! already sent (`law::splice` writes the request and joins the streams).
//! Part of `EngineCore`; runs inside the atomic `TurnRelayed` handler.

use tokio::time::Instant;

use super::carry::{Carry, Pause};
use super::core::EngineCore;
use super::intake::Pending;
use super::waiting::{Read, Waiting};
use super::relay::Running;
use crate::error::GenerationError;
use crate::law::crash::EngineCode;
use crate::law::resume::{self, Death, Verdict};
use crate::law::route::Route;
use crate::law::types::EngineKind;
use crate::messages::TurnRequest;
use crate::status::WardenEvent;

/// How a turn's error says its child ended, when it is a death.
fn death(e: &GenerationError) -> Option<Death> {
    match e {
        GenerationError::ChildDied { code, .. } => Some(Death::Died(*code)),
        GenerationError::Hung { .. } => Some(Death::Died(EngineCode::ChildHung)),
        GenerationError::WorkerLost { .. } => Some(Death::WorkerLost),
        _ => None,
    }
}

impl EngineCore {
    /// A turn that ended with `e`: back to the head of the intake when its
    /// child died and the law lets it go on; otherwise its error, saying
    /// why it did not (a death) or as it was (anything else).
    pub(crate) fn resume_or_fail(&mut self, turn: &mut Running, e: GenerationError) -> Result<(), GenerationError> {
        let (Some(death), Some(request)) = (death(&e), turn.request.as_mut()) else {
            return Err(e);
        };
        let carry = &mut *turn.carry;
        let sent = carry.sent();
        let mut body = None;
        let mut echo = None;
        let unfit = match carry.dialect {
            _ if sent.sent == 0 => None,
            None => Some("the route has no answer to continue"),
            Some(_) if self.backend.kind() == EngineKind::Mlx => Some("mlx_vlm.server cannot continue an answer begun"),
            Some(d) => match request.body.continued(d, &sent.text) {
                Ok((continued, said)) => {
                    body = Some(continued);
                    echo = said;
                    None
                }
                Err(why) => Some(why),
            },
        };
        let facts = resume::Turn {
            sent: sent.sent,
            streamed: turn.stream,
            resumes: carry.resumes,
            client_gone: turn.out.is_closed(),
            opaque: sent.opaque,
            unfit,
        };
        let verdict = resume::decide(facts, death, self.cfg().resume_turns);
        let code = e.to_api().code;
        match verdict {
            Verdict::Decline(d) => {
                let why = d.why();
                tracing::warn!(
                    seq = turn.seq,
                    why = d.tag(),
                    "turn {}: its model server ended under it ({code}); not resumed: {why}",
                    turn.seq,
                );
                Err(GenerationError::NotResumed {
                    cause: Box::new(e),
                    why,
                })
            }
            Verdict::Rerun | Verdict::Continue => {
                let continuing = verdict == Verdict::Continue;
                if continuing && let Some(body) = body {
                    request.body = body;
                }
                tracing::info!(
                    seq = turn.seq,
                    "turn {}: its model server ended under it ({code}); it goes on on the next one ({}, {} characters sent)",
                    turn.seq,
                    if continuing { "continued" } else { "run again" },
                    sent.text.len()
                );
                carry.resumes += 1;
                carry.transcript = sent;
                carry.splice = None;
                carry.pause = Some(Pause {
                    at: Instant::now(),
                    pid: turn.pid,
                    code,
                });
                carry.continuing = continuing;
                carry.echo = echo;
                carry.produced = None;
                Ok(())
            }
        }
    }

    /// A turn the law let go on: back to the head of the intake, where the
    /// next admission respawns its child.
    pub(crate) fn requeue(&mut self, turn: Running) {
        let Running {
            entry,
            out,
            seq,
            ticket,
            request,
            carry,
            ..
        } = turn;
        let request = request.expect("a resumable turn kept its request");
        self.intake.push_front(Pending::Turn(Box::new(Waiting {
            // Read again: a continuation is a new body (its prompt grew).
            read: Read::of(&request.body),
            request,
            entry,
            out,
            seq,
            // Its pause counts from its child's death.
            arrived: tokio::time::Instant::now(),
            ticket,
            started: true,
            carry: Some(carry),
        })));
    }

    /// A resumed turn on its new child, before its seat: a continuation's
    /// bound loses the tokens its client already has (counted by the new
    /// child's tokenizer, as its prompt will read them), and the resume is
    /// said (event, metrics, dashboard). Once per death: a turn sent back to
    /// wait for its seat is not counted again.
    pub(crate) async fn count_resumed(
        &mut self,
        request: &mut TurnRequest,
        carry: &mut Carry,
        model: &str,
        seq: u64,
    ) {
        let Some(pause) = carry.pause.as_ref().filter(|_| carry.produced.is_none()) else {
            return;
        };
        let mut produced = 0;
        if carry.continuing {
            produced = self.count_tokens(&carry.transcript.text).await.unwrap_or(u64::from(carry.transcript.sent));
            if let Some(bound) = request.body.bound() {
                // At least one: the child reads 0 as no bound at all.
                // rest <= max(bound, 1): a u32.
                let rest = u64::from(bound).saturating_sub(produced).max(1) as u32;
                request.body.bound_to(rest);
            }
        }
        self.emit(WardenEvent::TurnResumed {
            seq,
            route: request.route,
            model: model.to_string(),
            pid: pause.pid,
            code: pause.code.clone(),
            how: if carry.continuing { "continued" } else { "rerun" },
            sent_tokens: produced,
            paused_ms: pause.at.elapsed().as_millis() as u64,
        });
        carry.produced = Some(produced);
    }

    /// Tokens `text` counts on the live child (its own tokenizer, no
    /// special tokens added, through the side door); `None` when it does
    /// not answer.
    async fn count_tokens(&self, text: &str) -> Option<u64> {
        let door = super::Door::of(self.child.get()?);
        let body = serde_json::to_vec(&serde_json::json!({"content": text, "add_special": false})).ok()?;
        let (status, answer) = door
            .tokenizer(Route::Tokenize, body.into(), std::time::Duration::from_secs(10))
            .await
            .ok()?;
        let v: serde_json::Value = serde_json::from_slice(&answer).ok().filter(|_| status == 200)?;
        v.get("tokens").and_then(serde_json::Value::as_array).map(|t| t.len() as u64)
    }
}
