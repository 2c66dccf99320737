//! `EngineActor`: the one owner of the child. Its mailbox is the spec's
//! generation lock: every operation on the child is a message, and every
//! handler that awaits the child returns `AtomicResponse`, which keeps the
//! mailbox closed until the await finishes (actix's `ResponseActFuture` and
//! `ctx.spawn` would interleave other messages into it: the very race the
//! lock prevented).
//!
//! The state lives in `EngineCore`, moved into each handler's future and put
//! back when it completes; between handlers it is always home.
//! Correspondents (the design card's flow): `Warden::submit` and the
//! `PrefixCacheActor` (`Generate`, and `Reset` ahead of a turn that takes
//! the MLX cache over), the `SensorActor` (`BrakeSample`, the idle cadence),
//! the `IdleTimer` (`Reap`), `Warden` (`Load`, `Unload`, `Shutdown`), the
//! worker watch (`WorkerCheck`), another resident's engine (`Evict`), the
//! watcher of a load waiting for room (`peers::Wake`), the `IdleTimer`
//! again (`SaveAhead`, the idle clock's other deadline). One
//! engine runs per resident model (`warden::residency`); what it asks of
//! the others goes through `Peers` (`peers`; carried out in `room`). No handler awaits another
//! actor but a load making room, which awaits each idle resident's `Evict`
//! (no circle: only a resident with no turn routed to it is evicted, and
//! `Evict` awaits nothing but its own child); the brake reads the sensor's
//! latest reading from a watch, and other replies are fire-and-forget. A handler that panics is supervised
//! (`supervise`): the core comes home, the message in flight gets its
//! coded reply, and the child is retired before the next message.
//!
//! ## One writer per piece of state
//!
//! `EngineCore` is divided by who writes what, and Rust's privacy holds
//! the line (each owner's fields are private to its file):
//!
//! | owner | holds | the only writers |
//! |---|---|---|
//! | `child_holder::ChildHolder` | the live child, the activity | `install`, `stop`, `take_dead`, `set_activity` |
//! | `brake_state::Brake` | the live brake state, the last reading and action, the carry, the window memory (no sensor, no clock: `sensors::view::BrakeSensor` reads both) | its methods; a decision is `llama_step`/`mlx_step`, then `finish_llama`/`finish_mlx` told what carrying it out came to (`Carried`), which keep the protocol's order |
//! | `kv::Kv` | the KV store and the status's view of it; each model's pool meter, what compaction moved and what left unsaved (`compact`) | `carry` (each step of the slots' protocol), `turn_counted` |
//! | `moves::Moves` | the slots' protocol: every way a conversation leaves its slot or a slot changes hands, in order (no I/O: it asks `Step`s and takes `Outcome`s; the simulator runs it too) | the child's `SlotHeld`s, with `kv_check::counted` at a turn's end |
//! | `admission::Admitting` | a turn's admission, in order: skipped or refused at the door, held back by a held brake action, the scheduler's yield, the wait beside running turns, the start, the start sample, the load, the seat (no I/O: it asks `Step`s, reading a `View`; the simulator runs it too) | `turn::admit` carries its steps out |
//! | `loading::Loading` | a model's load, in order: a dead or lost child recovered, its own child reused or another's retired, the format, the brake's seed, the plan (or the one a wait for room kept), room among the residents, the workers, the spawn and one retry at the floor (no I/O) | `load::ensure_loaded` carries its steps out |
//! | `ending::Ending` | a turn's end, in order: the relay's trouble judged or recalled, the law of resume asked, the slot freed, the keep-alive, the brake's sample, the count, the last events, a keep-alive 0 unload (no I/O: it asks `Step`s, reading a `View` of the engine; the simulator runs it too) | `turn_end` carries its steps out |
//! | `braking::Braking` | a brake decision carried out, in order: held for the running turns, acted inside an MLX child, saved, stopped, spawned at the cap and installed (or gone), the controller told before an unload retires the child, the line, the event (no I/O; the simulator runs it too) | `brake_act` carries its steps out |
//! | `leaving::Retire` | every way a child leaves, in order: saved, stopped, its brake state forgotten, published, said, and an idle reap's record last (`Retire::leaving`; no I/O; the simulator runs it too) | `retire` carries its steps out |
//! | `spawning::Spawning` | a spawn's port retries: the next free port never one taken already, the last loss said (no I/O) | `spawn` |
//! | `state::Usage` | the idle clock, turns, the keep-alive, the reaped model, loads and time served | `touch`, `turn_done`, `hold`, `switching_to`, `reaped`, `loaded`, `yielded`, `running` |
//! | `intake::Intake` | what waits in arrival order, the running count, a held brake action, the last death (no channel inside: generic over what it holds, `waiting::Live` for the engine) | its methods |
//! | the core | `shut_down`, `admitted`, `room` (a load waiting for room: `peers::RoomWait`), `own` (the engine's address for its relay tasks and waiting loads) | `shutdown`, `room`, the actor's start |
//!
//! Where a generating turn sits, and what moves first, is decided on the
//! slot table alone (`seating::seat`, the time an argument); the slots'
//! protocol carries it out. The simulator calls both, as `turn` does.
//!
//! No import circle among these files: the types the core and the intake
//! keep live in leaves that import no behaviour (`waiting`, what the
//! engine's intake holds; `carry`, what a turn
//! carries across children; `peers`, what a load asks of the residency and
//! keeps while it waits; `slots`, `kv`'s owners; `relay`'s ends), and the
//! files that act on the core import those, never the reverse
//! (`tests::no_import_circle`).
//!
//! What the core talks through is one value (`Outlets`), as is what it is
//! wired to (`Wiring`). Every way a child leaves ends in `retire::gone` (`Retire::gone`'s steps)
//! (a retirement, or a brake respawn that failed after the old child
//! stopped). The engine kinds are not named here: what differs is a hook
//! (`engines::hooks`) or a method of the child's engine state
//! (`ChildState::act_in_child`, `prefix_cache`, `reset_prefix_cache`,
//! `footprint_at`) or of the plan (`SpawnPlan::window_line`, `gpu_label`);
//! the RPC workers' part is `workers`.

pub(crate) mod admission;
mod ahead;
pub(crate) mod brake;
mod brake_act;
pub(crate) mod brake_state;
pub(crate) mod braking;
mod carry;
mod child_holder;
mod compact;
mod core;
mod counts;
mod door;
pub(crate) mod ending;
pub(crate) mod intake;
mod kv;
mod kv_check;
pub(crate) mod leaving;
mod load;
pub(crate) mod loading;
pub(crate) mod moves;
pub(crate) mod outbox;
mod peers;
mod prefix;
mod publish;
mod reap;
mod room;
mod schedule;
pub(crate) mod seating;
pub(crate) mod relay;
mod resume;
pub(crate) mod retire;
pub(crate) mod slots;
mod spawn;
mod spawning;
mod state;
mod supervise;
mod turn;
mod turn_end;
mod walk;
mod waiting;
mod workers;

use std::future::Future;
use std::panic::AssertUnwindSafe;

use actix::prelude::*;
use actix::{ActorFutureExt, WrapFuture};
use futures::FutureExt;

pub use self::core::{EngineCore, Outlets, SharedStoreView, Wiring};
pub use crate::engines::cpu::workers::workers_link;
pub use door::{Door, DoorError};
pub use peers::Peers;
// Nameable where the engine is public (with `testing`).
#[cfg(feature = "testing")]
pub use peers::Wake;
pub use supervise::CoreGuard;
pub use relay::TurnRelayed;
pub use turn::shutting_down;

use crate::error::WardenError;
use crate::messages::{
    BrakeSample, Evict, Generate, Load, Reap, Recover, Reply, Reset, SaveAhead, Shutdown, TurnEvent, Unload,
    WorkerCheck,
};
use crate::status::EngineStatus;

/// Mailbox capacity. The queue bound is `WARDEN_MAX_QUEUE`, enforced before
/// a turn is sent; the mailbox itself must never refuse or block a sender.
const MAILBOX_CAPACITY: usize = 1 << 20;

/// The engine actor.
pub struct EngineActor {
    /// The core between handlers; a handler's guard holds it meanwhile.
    home: supervise::Home,
}

impl EngineActor {
    /// An actor around `core`.
    pub fn new(core: EngineCore) -> Self {
        Self {
            home: std::rc::Rc::new(std::cell::RefCell::new(Some(core))),
        }
    }

    /// Runs `f` over the core as one atomic handler; a panic inside it is
    /// answered with `on_panic`'s reply and the engine recovers.
    fn atomic<R, F, Fut>(&mut self, f: F, on_panic: impl FnOnce(&str) -> R + 'static) -> AtomicResponse<Self, R>
    where
        R: 'static,
        F: FnOnce(CoreGuard) -> Fut,
        Fut: Future<Output = (CoreGuard, R)> + 'static,
    {
        let guard = CoreGuard::take(&self.home);
        let run = f(guard);
        let fut = async move {
            // The unwound future, and the guard in it, are dropped at the
            // end of this statement: the core is home again either way.
            // Every handler ends by publishing what the engine now holds
            // (the status and the side door are functions of the core); a
            // panicked one publishes at the end of its `Recover`.
            AssertUnwindSafe(run).catch_unwind().await.map(|(guard, r)| {
                guard.publish();
                drop(guard);
                r
            })
        };
        AtomicResponse::new(Box::pin(fut.into_actor(self).map(|r, _act, ctx| match r {
            Ok(r) => r,
            Err(payload) => {
                let why = supervise::panic_message(payload.as_ref());
                tracing::error!(panic = %why, "an engine handler panicked; its child is stopped and the engine carries on");
                ctx.notify(Recover { why: why.clone() });
                on_panic(&why)
            }
        })))
    }
}

impl Actor for EngineActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(MAILBOX_CAPACITY);
        // Where each turn's relay task reports its end.
        if let Some(core) = self.home.borrow_mut().as_mut() {
            core.own = Some(core::Own {
                ends: ctx.address().recipient(),
                wake: ctx.address().recipient(),
            });
        }
    }
}

impl Handler<Generate> for EngineActor {
    type Result = AtomicResponse<Self, ()>;

    fn handle(&mut self, msg: Generate, _ctx: &mut Self::Context) -> Self::Result {
        // The turn in flight hears of a panic on its own channel.
        let events = msg.events.clone();
        self.atomic(
            |mut core| async move {
                core.take_turn(msg).await;
                (core, ())
            },
            move |why| {
                let ev = TurnEvent::Error(WardenError::EnginePanicked(why.to_string()));
                if let Err(tokio::sync::mpsc::error::TrySendError::Full(ev)) = events.try_send(ev) {
                    // A full buffer drains as the client reads; bounded.
                    actix::spawn(async move {
                        let _ = tokio::time::timeout(std::time::Duration::from_secs(30), events.send(ev)).await;
                    });
                }
            },
        )
    }
}

impl Handler<TurnRelayed> for EngineActor {
    type Result = AtomicResponse<Self, ()>;

    fn handle(&mut self, msg: TurnRelayed, _ctx: &mut Self::Context) -> Self::Result {
        self.atomic(
            |mut core| async move {
                core.turn_relayed(msg).await;
                core.settle().await;
                (core, ())
            },
            nothing,
        )
    }
}

impl Handler<Load> for EngineActor {
    type Result = AtomicResponse<Self, Reply<Result<EngineStatus, WardenError>>>;

    fn handle(&mut self, msg: Load, _ctx: &mut Self::Context) -> Self::Result {
        self.atomic(
            |mut core| async move {
                // Behind running or waiting turns it waits its turn; a load
                // that must wait for room waits at the head of the intake,
                // with the mailbox open (`room`).
                let (reply, rx) = tokio::sync::oneshot::channel();
                core.intake.push(intake::Pending::Load(waiting::LoadAsk {
                    model: msg.model,
                    keep_alive: msg.keep_alive,
                    arrived: tokio::time::Instant::now(),
                    reply,
                }));
                core.settle().await;
                (core, Reply::Later(rx))
            },
            |why| Reply::Now(Err(WardenError::EnginePanicked(why.to_string()))),
        )
    }
}

impl Handler<peers::Wake> for EngineActor {
    type Result = AtomicResponse<Self, ()>;

    fn handle(&mut self, _msg: peers::Wake, _ctx: &mut Self::Context) -> Self::Result {
        self.atomic(
            |mut core| async move {
                core.settle().await;
                (core, ())
            },
            nothing,
        )
    }
}

impl Handler<Unload> for EngineActor {
    type Result = AtomicResponse<Self, Reply<Result<bool, WardenError>>>;

    fn handle(&mut self, _msg: Unload, _ctx: &mut Self::Context) -> Self::Result {
        self.atomic(
            |mut core| async move {
                // Nothing loaded and nothing running (a load may wait for
                // room): nothing to unload, answered now.
                if core.intake.running() == 0 && !core.child.is_live() {
                    return (core, Reply::Now(Ok(false)));
                }
                // Never cuts a running turn: it acts once they ended.
                if !core.intake.idle() {
                    let (reply, rx) = tokio::sync::oneshot::channel();
                    core.intake.push(intake::Pending::Unload(reply));
                    return (core, Reply::Later(rx));
                }
                let was = core.retire(leaving::Retire::Request).await.is_some();
                (core, Reply::Now(Ok(was)))
            },
            |why| Reply::Now(Err(WardenError::EnginePanicked(why.to_string()))),
        )
    }
}

impl Handler<Evict> for EngineActor {
    type Result = AtomicResponse<Self, Option<u64>>;

    fn handle(&mut self, _msg: Evict, _ctx: &mut Self::Context) -> Self::Result {
        self.atomic(
            |mut core| async move {
                let freed = core.evict().await;
                (core, freed)
            },
            |_why| None,
        )
    }
}

/// The reply of a tick whose handler panicked: nothing to answer.
fn nothing(_why: &str) {}

impl Handler<Reset> for EngineActor {
    type Result = AtomicResponse<Self, ()>;

    fn handle(&mut self, msg: Reset, _ctx: &mut Self::Context) -> Self::Result {
        self.atomic(
            |mut core| async move {
                // Ahead of its turn, behind every earlier one.
                if core.intake.idle() {
                    core.reset_prefix(msg).await;
                } else {
                    core.intake.push(intake::Pending::Reset(msg));
                }
                (core, ())
            },
            nothing,
        )
    }
}

impl Handler<Reap> for EngineActor {
    type Result = AtomicResponse<Self, ()>;

    fn handle(&mut self, _msg: Reap, _ctx: &mut Self::Context) -> Self::Result {
        self.atomic(
            |mut core| async move {
                core.reap().await;
                (core, ())
            },
            nothing,
        )
    }
}

impl Handler<SaveAhead> for EngineActor {
    type Result = AtomicResponse<Self, ()>;

    fn handle(&mut self, msg: SaveAhead, _ctx: &mut Self::Context) -> Self::Result {
        self.atomic(
            |mut core| async move {
                core.save_ahead(msg.last_use).await;
                (core, ())
            },
            nothing,
        )
    }
}

impl Handler<BrakeSample> for EngineActor {
    type Result = AtomicResponse<Self, ()>;

    fn handle(&mut self, msg: BrakeSample, _ctx: &mut Self::Context) -> Self::Result {
        self.atomic(
            |mut core| async move {
                core.brake_idle_sample(msg.reading).await;
                (core, ())
            },
            nothing,
        )
    }
}

impl Handler<Shutdown> for EngineActor {
    type Result = AtomicResponse<Self, ()>;

    fn handle(&mut self, _msg: Shutdown, _ctx: &mut Self::Context) -> Self::Result {
        self.atomic(
            |mut core| async move {
                core.shutdown().await;
                (core, ())
            },
            nothing,
        )
    }
}

impl Handler<WorkerCheck> for EngineActor {
    type Result = AtomicResponse<Self, ()>;

    fn handle(&mut self, _msg: WorkerCheck, _ctx: &mut Self::Context) -> Self::Result {
        self.atomic(
            |mut core| async move {
                core.worker_check().await;
                (core, ())
            },
            nothing,
        )
    }
}

impl Handler<Recover> for EngineActor {
    type Result = AtomicResponse<Self, ()>;

    fn handle(&mut self, msg: Recover, _ctx: &mut Self::Context) -> Self::Result {
        self.atomic(
            |mut core| async move {
                core.recover(&msg.why).await;
                core.settle().await;
                (core, ())
            },
            nothing,
        )
    }
}

#[cfg(feature = "testing")]
impl Handler<crate::messages::recover::PanicNextTurn> for EngineActor {
    type Result = ();

    fn handle(&mut self, _msg: crate::messages::recover::PanicNextTurn, _ctx: &mut Self::Context) {
        if let Some(core) = self.home.borrow_mut().as_mut() {
            core.panic_next_turn = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    /// The owners of the engine's state that decide without I/O (what
    /// waits, the brake's state, the use, the slots, the child's counts, a
    /// turn's carry) and every file of the law read no clock and reach no
    /// runtime, socket or file: the time and what happened come in as
    /// values, so a table test or the simulator says when. The types of
    /// the time (`tokio::time::Instant`, which paused tests advance) are
    /// values and allowed. Test modules are not read.
    #[test]
    fn the_owners_and_the_law_read_no_clock_and_do_no_io() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files: Vec<std::path::PathBuf> = ["intake", "brake_state", "state", "slots", "counts", "carry", "moves", "seating", "ending", "leaving", "spawning", "admission", "loading", "braking", "walk"]
            .iter()
            .map(|f| root.join("actors/engine").join(format!("{f}.rs")))
            .collect();
        let mut dirs = vec![root.join("law")];
        while let Some(d) = dirs.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    dirs.push(p);
                } else if p.extension().is_some_and(|x| x == "rs")
                    && !p.file_stem().unwrap().to_string_lossy().ends_with("_tests")
                {
                    files.push(p);
                }
            }
        }
        assert!(files.len() > 20, "the law's files were found: {}", files.len());
        const FORBIDDEN: [&str; 8] = [
            "::now()",
            ".elapsed()",
            "std::fs",
            "std::net",
            "reqwest",
            "actix",
            "tokio::",
            "std::thread",
        ];
        let mut found = Vec::new();
        for f in &files {
            let text = std::fs::read_to_string(f).unwrap();
            let body = text.split("#[cfg(test)]\nmod tests").next().unwrap();
            for (n, line) in body.lines().enumerate() {
                let code = line.split("//").next().unwrap();
                let code = code.replace("tokio::time::Instant", "");
                for bad in FORBIDDEN {
                    if code.contains(bad) {
                        found.push(format!("{}:{}: {bad}", f.display(), n + 1));
                    }
                }
            }
        }
        assert!(found.is_empty(), "a clock or I/O in a decision: {found:#?}");
    }

    /// The files of this folder import each other without a circle: a
    /// circle would make every file in it depend on every other.
    #[test]
    fn no_import_circle() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/actors/engine");
        let mut files: BTreeMap<String, String> = BTreeMap::new();
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "rs") {
                let stem = p.file_stem().unwrap().to_string_lossy().to_string();
                files.insert(stem, std::fs::read_to_string(&p).unwrap());
            }
        }
        let names: BTreeSet<String> = files.keys().cloned().collect();
        let mut edges: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        for (f, text) in &files {
            let out = edges.entry(f.as_str()).or_default();
            for piece in text.split("super::").skip(1) {
                let name: String = piece.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                if let Some(n) = names.get(&name)
                    && n != f
                    && f != "mod"
                {
                    out.insert(n.as_str());
                }
            }
        }
        // Depth-first search for a back edge, naming the circle found.
        fn visit<'a>(
            v: &'a str,
            edges: &BTreeMap<&'a str, BTreeSet<&'a str>>,
            path: &mut Vec<&'a str>,
            done: &mut BTreeSet<&'a str>,
        ) -> Option<Vec<&'a str>> {
            if let Some(i) = path.iter().position(|p| *p == v) {
                return Some(path[i..].to_vec());
            }
            if done.contains(v) {
                return None;
            }
            path.push(v);
            for w in edges.get(v).into_iter().flatten() {
                if let Some(c) = visit(w, edges, path, done) {
                    return Some(c);
                }
            }
            path.pop();
            done.insert(v);
            None
        }
        let mut done = BTreeSet::new();
        for v in edges.keys() {
            if let Some(c) = visit(v, &edges, &mut Vec::new(), &mut done) {
                panic!("an import circle in actors/engine: {}", c.join(" -> "));
            }
        }
    }
}
