//! The engine's housekeeping handlers: the idle reap, explicit loads, the
//! brake's idle tick and shutdown. Part of `EngineCore`.

use super::core::EngineCore;
use super::load::Loading;
use crate::error::WardenError;
use crate::law::keep_alive::KeepAlive;
use crate::law::reap::should_reap;
use crate::status::WardenEvent;

impl EngineCore {
    /// The idle reap, re-checked here: a tick that queued behind a turn sees
    /// the idle clock at that turn's end and leaves the model alone.
    pub async fn reap(&mut self) {
        let idle_for = self.usage.last().map(|u| u.at.elapsed()).unwrap_or_default();
        let reaped = self
            .idle_timeout()
            .is_some_and(|t| should_reap(self.child.is_live(), !self.intake.idle(), idle_for, t));
        if reaped {
            tracing::info!(
                idle_s = idle_for.as_secs(),
                "model idle past {:?}; unloading",
                self.idle_timeout().unwrap_or_default()
            );
            self.unload_idle().await;
        }
        self.emit(WardenEvent::ReapChecked { reaped });
    }

    /// Unloads the model as the idle reap does (the reap, and a turn that
    /// asked for `keep_alive: 0`): the steps `Retire::Idle` orders, its
    /// record for the next turn last.
    pub(crate) async fn unload_idle(&mut self) {
        self.retire(super::leaving::Retire::Idle).await;
    }

    /// `/warden/load`: loads (or switches to) a model outside a turn; its
    /// caller answers with the snapshot once it is `Ready`.
    pub(crate) async fn load_request(
        &mut self,
        id: Option<&str>,
        keep_alive: Option<KeepAlive>,
        arrived: tokio::time::Instant,
    ) -> Result<Loading, WardenError> {
        if self.shut_down {
            return Err(super::turn::shutting_down());
        }
        let entry = self.resolve(id)?;
        let patience = super::peers::Patience {
            since: arrived,
            at_most: None,
        };
        if self.ensure_loaded(&entry, None, patience).await? == Loading::Waits {
            return Ok(Loading::Waits);
        }
        if let Some(k) = keep_alive {
            self.usage.hold(&entry.id, k);
        }
        // A load is a use: the idle clock starts at its end.
        self.usage.touch(super::state::Used::read());
        Ok(Loading::Ready)
    }

    /// The brake's idle sample on the `BrakeSample`'s reading (paced in
    /// `brake_point`).
    pub async fn brake_idle_sample(&mut self, reading: crate::sensors::view::Given) {
        // Not idle while turns run: their own start and end samples read
        // the pressure.
        if self.intake.running() > 0 {
            return;
        }
        self.brake_point(crate::law::brake::Point::Idle, Some(reading)).await;
    }

    /// Stops the child for good; later turns are refused, and what waited
    /// is answered (running turns end as their child stops).
    pub async fn shutdown(&mut self) {
        self.shut_down = true;
        // A load waiting for room gives up its place.
        self.room = None;
        for p in self.intake.drain_all() {
            match p {
                super::intake::Pending::Turn(w) => {
                    self.refuse(*w, super::turn_end::failed(super::turn::shutting_down())).await
                }
                super::intake::Pending::Load(ask) => {
                    let _ = ask.reply.send(Err(super::turn::shutting_down()));
                }
                super::intake::Pending::Unload(reply) => {
                    let _ = reply.send(Ok(self.child.is_live()));
                }
                super::intake::Pending::Reset(_) => {}
            }
        }
        self.retire(super::leaving::Retire::Shutdown).await;
        self.brake.forget_carry();
        self.usage.reaped(None);
    }
}
