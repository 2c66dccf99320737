//! The arbiter: every decision between residents, as one machine with no
//! I/O. It holds the line of loads waiting for room, who yielded to whom,
//! and the loads of the thrash window; it takes what the residents are (as
//! the caller read them) and the time, as plain values, and hands back
//! decisions: a load goes (evicting these, reserving that), waits (on
//! these, until that), or is refused; a busy resident yields to this
//! waiting model, or keeps serving. No clock, lock, channel or actor is
//! inside: the residency (`warden::residency`) reads the engines' published
//! state into `Seat`s and keeps the machine behind one lock, and the
//! engines carry out what it decides (`actors::engine::room`, `schedule`).
//! The deterministic simulator (`arbiter_sim`) drives this same machine
//! through thousands of seeded schedules.
//!
//! Where the order of things lives, it lives here:
//! - **A load's step** (`load_step`): first a model some holder yielded
//!   its memory to goes first, before any other load (`owed`); then the residents' law (`law::residents::admit`);
//!   an idle resident the law would evict that went idle within the grace
//!   is weighed as busy by the scheduler (`law::schedule::next`), and kept
//!   while it wins; otherwise the load goes, reserving its memory until
//!   its child is published. A load that waits takes a place in the line
//!   (kept from its first wait), naming the residents in a turn it waits on.
//! - **A holder's step** (`holder_step`): before a resident starts a turn,
//!   each waiter waiting on it is weighed against it; the first in line
//!   that wins goes next (`law::schedule::first_in_line`).

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use crate::law::residents::{self, Admission, Fit, Held, Memory, Newcomer, Resident, Shortfall};
use crate::law::schedule::{self, Holder, Next, Policy, Waiter};

/// A resident as the arbiter weighs it: the law's view and what the
/// scheduler adds.
#[derive(Debug, Clone, PartialEq)]
pub struct Seat {
    pub resident: Resident,
    /// Its weight in the settings file.
    pub weight: f64,
    /// How long it has been resident, ms.
    pub resident_ms: u64,
    /// How long since its last use (or its load), ms.
    pub idle_ms: u64,
}

/// A load asking for room.
#[derive(Debug, Clone)]
pub struct LoadAsk {
    /// What it needs (`waited_out`: past its deadline, the law's last word).
    pub new: Newcomer,
    pub memory: Memory,
    /// `WARDEN_MAX_RESIDENT`.
    pub max_resident: Option<usize>,
    /// What loading it costs, ms.
    pub load_ms: u64,
    pub weight: f64,
    /// Turns waiting for it.
    pub queued: u32,
    /// How long this load has waited, ms.
    pub waited_ms: u64,
    pub policy: Policy,
    /// The starvation limit.
    pub limit: Duration,
}

/// What a load does now.
#[derive(Debug, Clone, PartialEq)]
pub enum LoadStep {
    /// It goes: these idle residents are evicted first; `reserve` bytes
    /// are held for it until its child is published; `kept_bytes` is what
    /// the residents that stay hold (the plan is sized beside it).
    Go {
        evict: Vec<Held>,
        kept_bytes: u64,
        reserve: u64,
    },
    /// It waits, in the line, for a change (or `grace`, when an idle
    /// resident it would evict is kept until then).
    Wait {
        on: Vec<String>,
        grace: Option<Duration>,
        why: Waits,
    },
    /// It cannot load beside what stays, whatever ends.
    Refuse(Shortfall),
}

/// Why a load waits.
#[derive(Debug, Clone, PartialEq)]
pub enum Waits {
    /// The model this one yielded to goes first.
    Behind(String),
    /// Residents in a turn hold what it needs.
    Turns(Shortfall),
    /// An idle resident within its grace, weighed as busy, is kept.
    Grace { held: String, why: Next },
}

/// One waiting load.
#[derive(Debug, Clone)]
struct Place {
    model: String,
    /// When it took its place, ms on the caller's clock.
    since_ms: u64,
    /// Arrival order (ties of the line's order).
    seq: u64,
    /// The residents in a turn it waits for.
    on: Vec<String>,
    load_ms: u64,
    weight: f64,
    /// The last decision a holder took about it, as said to a person.
    why: Option<String>,
    at_most_ms: Option<u64>,
    /// What it asked for at its last step.
    ask: LoadAsk,
}

impl Place {
    fn waiter(&self, queued: u32, now_ms: u64) -> Waiter {
        Waiter {
            model: self.model.clone(),
            weight: self.weight,
            waited_ms: now_ms.saturating_sub(self.since_ms),
            load_ms: self.load_ms,
            queued,
        }
    }
}

/// The line as the status shows one place.
#[derive(Debug, Clone, PartialEq)]
pub struct PlaceView {
    pub model: String,
    pub waited_ms: u64,
    pub on: Vec<String>,
    pub queued: u32,
    pub at_most_ms: Option<u64>,
    pub why: String,
}

/// What waking a waiting load depends on in the line: each place and
/// whom it waits on, and who lets whom go first.
pub type LineKey = (Vec<(String, Vec<String>)>, Vec<(String, String)>);

/// Everything a load's step reads: the residents as the law sees them and
/// the line. A waiting load is woken when it changes (`wake_key`), not at
/// every status a resident publishes: its own engine publishes too.
pub type WakeKey = (Vec<Resident>, LineKey);

/// The machine.
#[derive(Debug, Default)]
pub struct Arbiter {
    places: Vec<Place>,
    arrivals: u64,
    /// A model that yielded, and the model its next load lets go first.
    behind: BTreeMap<String, String>,
    /// Every load's end and length, over the thrash window.
    loads: VecDeque<(u64, u64)>,
}

impl Arbiter {
    /// A load's step (see the module docs). `others` is every resident but
    /// the asker, reservations included.
    pub fn load_step(&mut self, ask: &LoadAsk, others: &[Seat], now_ms: u64) -> LoadStep {
        let me = ask.new.model.as_str();
        if !ask.new.waited_out
            && let Some(first) = self.owed(me)
        {
            self.wait(ask, vec![first.clone()], now_ms);
            return LoadStep::Wait {
                on: vec![first.clone()],
                grace: None,
                why: Waits::Behind(first),
            };
        }
        let residents: Vec<Resident> = others.iter().map(|s| s.resident.clone()).collect();
        match residents::admit(&ask.new, &residents, ask.memory, ask.max_resident) {
            Admission::Load {
                evict,
                kept_bytes,
                fit,
                budget_bytes,
            } => {
                if !ask.new.waited_out
                    && ask.policy == Policy::Weighed
                    && let Some((held, why, grace)) = self.kept_in_grace(ask, &evict, others, now_ms)
                {
                    self.wait(ask, vec![held.clone()], now_ms);
                    return LoadStep::Wait {
                        on: vec![held.clone()],
                        grace: Some(grace),
                        why: Waits::Grace { held, why },
                    };
                }
                LoadStep::Go {
                    evict,
                    kept_bytes,
                    reserve: reservation(&ask.new, fit, budget_bytes).max(1),
                }
            }
            Admission::Wait(short) => {
                let on: Vec<String> = short
                    .residents
                    .iter()
                    .filter(|r| r.in_turn)
                    .map(|r| r.model.clone())
                    .collect();
                self.wait(ask, on.clone(), now_ms);
                LoadStep::Wait {
                    on,
                    grace: None,
                    why: Waits::Turns(short),
                }
            }
            Admission::Refuse(short) => LoadStep::Refuse(short),
        }
    }

    /// Of the idle residents `evict` names, one that went idle less than
    /// `law::schedule::IDLE_GRACE_MS` ago and that the scheduler, weighing
    /// it as busy, keeps: its model, the decision, and what is left of its
    /// grace. Its client is likely sending back to back.
    fn kept_in_grace(
        &self,
        ask: &LoadAsk,
        evict: &[Held],
        others: &[Seat],
        now_ms: u64,
    ) -> Option<(String, Next, Duration)> {
        let me = self.waiter_of(ask, now_ms);
        for held in evict {
            let Some(s) = others.iter().find(|s| s.resident.model == held.model) else {
                continue;
            };
            if s.idle_ms >= schedule::IDLE_GRACE_MS {
                continue;
            }
            let holder = Holder {
                model: held.model.clone(),
                pinned: s.resident.pinned,
                weight: s.weight,
                resident_ms: s.resident_ms,
                reload_ms: s.resident.reload_ms,
                idle: false,
                // Idle within its grace: it served since its load.
                fresh: false,
                queued: s.resident.queued,
            };
            let n = schedule::next(Policy::Weighed, &holder, &me, ask.limit);
            if !n.yields() {
                return Some((
                    held.model.clone(),
                    n,
                    Duration::from_millis(schedule::IDLE_GRACE_MS - s.idle_ms),
                ));
            }
        }
        None
    }

    /// The asker as the scheduler weighs it: from its place's arrival when
    /// it has one, else from what it says it waited.
    fn waiter_of(&self, ask: &LoadAsk, now_ms: u64) -> Waiter {
        let waited_ms = self
            .places
            .iter()
            .find(|p| p.model == ask.new.model)
            .map_or(ask.waited_ms, |p| now_ms.saturating_sub(p.since_ms).max(ask.waited_ms));
        Waiter {
            model: ask.new.model.clone(),
            weight: ask.weight,
            waited_ms,
            load_ms: ask.load_ms,
            queued: ask.queued,
        }
    }

    /// Takes (or keeps, updated) the asker's place in the line.
    fn wait(&mut self, ask: &LoadAsk, on: Vec<String>, now_ms: u64) {
        if let Some(p) = self.places.iter_mut().find(|p| p.model == ask.new.model) {
            p.on = on;
            p.load_ms = ask.load_ms;
            p.weight = ask.weight;
            p.ask = ask.clone();
            return;
        }
        self.arrivals += 1;
        self.places.push(Place {
            model: ask.new.model.clone(),
            since_ms: now_ms.saturating_sub(ask.waited_ms),
            seq: self.arrivals,
            on,
            load_ms: ask.load_ms,
            weight: ask.weight,
            why: None,
            at_most_ms: None,
            ask: ask.clone(),
        });
    }

    /// `me`'s load left the line (it loads, was refused, or nobody waits
    /// for it); whoever let it go first goes on. Whether the line changed.
    pub fn leave(&mut self, me: &str) -> bool {
        let before = self.places.len();
        self.places.retain(|p| p.model != me);
        self.behind.retain(|_, first| first != me);
        self.places.len() != before
    }

    /// Whether `holder`, about to start a turn, yields to a load waiting on
    /// it: the model it yields to and why. Every waiter's decision is kept
    /// for the status. `queued` says the turns waiting for each model;
    /// `all` gives every resident, the holder among them (read only when a
    /// load waits on the holder: this runs at every turn's admission).
    ///
    /// A waiter that would not fit even if every resident it waits on that
    /// may leave did (a pinned one holds what it needs) is not yielded to:
    /// the yield would free nothing it can use, and the yielder would wait
    /// behind it until its deadline (found by the simulator: a model that
    /// yielded to one blocked by a pinned resident waited 519 s).
    pub fn holder_step(
        &mut self,
        holder: &Holder,
        all: impl FnOnce() -> Vec<Seat>,
        queued: impl Fn(&str) -> u32,
        policy: Policy,
        limit: Duration,
        now_ms: u64,
    ) -> Option<(String, Next)> {
        let mut yes: Vec<(u64, Waiter, Next)> = Vec::new();
        let (mut all, mut seats) = (Some(all), Vec::new());
        for p in self
            .places
            .iter_mut()
            .filter(|p| p.model != holder.model && p.on.contains(&holder.model))
        {
            if let Some(read) = all.take() {
                seats = read();
            }
            let all = &seats;
            if !fits_once_they_leave(&p.ask, &p.on, all) {
                let pinned: Vec<&str> = all
                    .iter()
                    .filter(|s| s.resident.pinned)
                    .map(|s| s.resident.model.as_str())
                    .collect();
                p.why = Some(format!(
                    "{} waits: {} {} pinned and never {} for another model, and {} does not fit beside {}",
                    p.model,
                    pinned.join(", "),
                    if pinned.len() == 1 { "is" } else { "are" },
                    if pinned.len() == 1 { "leaves" } else { "leave" },
                    p.model,
                    if pinned.len() == 1 { "it" } else { "them" },
                ));
                p.at_most_ms = None;
                continue;
            }
            let w = p.waiter(queued(&p.model), now_ms);
            let n = schedule::next(policy, holder, &w, limit);
            p.why = Some(schedule::explain(&holder.model, &p.model, n));
            p.at_most_ms = match n {
                Next::Keep { in_ms, .. } => in_ms,
                Next::Yield(_) => Some(0),
            };
            if n.yields() {
                yes.push((p.seq, w, n));
            }
        }
        let order: Vec<(u64, &Waiter)> = yes.iter().map(|(s, w, _)| (*s, w)).collect();
        let first = schedule::first_in_line(&order)?;
        let (_, w, n) = &yes[first];
        Some((w.model.clone(), *n))
    }

    /// `me` yielded to `to`: its next load lets `to`'s go first.
    pub fn yielded(&mut self, me: &str, to: &str) {
        self.behind.insert(me.to_string(), to.to_string());
    }

    /// The model a holder yielded its memory to, while that one still
    /// waits and is not `me`: every other load waits for it, the yielder's
    /// own and any other waiter's. Without this a smaller waiter took the
    /// memory yielded to a larger one at each switch, and the larger one
    /// waited past every bound (found by the simulator: four busy models,
    /// the largest overtaken for 90 s and more).
    fn owed(&mut self, me: &str) -> Option<String> {
        let places = &self.places;
        // Whoever no longer waits is owed nothing.
        self.behind.retain(|_, first| places.iter().any(|p| p.model == *first));
        self.behind.values().find(|first| first.as_str() != me).cloned()
    }

    /// The scheduler's last estimate of how long `me`'s load still waits, ms.
    pub fn estimate(&self, me: &str) -> Option<u64> {
        self.places.iter().find(|p| p.model == me)?.at_most_ms
    }

    /// A load took `ms`, ending at `now_ms`: the time every model spent
    /// loading over the last `law::schedule::THRASH_WINDOW_MS`, ms.
    pub fn loaded(&mut self, ms: u64, now_ms: u64) -> u64 {
        // Loads older than the window are forgotten here, where they grow.
        while self
            .loads
            .front()
            .is_some_and(|(at, _)| now_ms.saturating_sub(*at) > schedule::THRASH_WINDOW_MS)
        {
            self.loads.pop_front();
        }
        self.loads.push_back((now_ms, ms));
        self.loading_ms(now_ms).1
    }

    /// The loads over the thrash window ending at `now_ms`: how many, and
    /// their time, ms (`None`: no load ever).
    pub fn loading(&self, now_ms: u64) -> Option<(u64, u64)> {
        (!self.loads.is_empty()).then(|| self.loading_ms(now_ms))
    }

    fn loading_ms(&self, now_ms: u64) -> (u64, u64) {
        let recent = self
            .loads
            .iter()
            .filter(|(at, _)| now_ms.saturating_sub(*at) <= schedule::THRASH_WINDOW_MS);
        recent.fold((0, 0), |(n, sum), (_, ms)| (n + 1, sum + ms))
    }

    /// The line, longest weighted wait first.
    pub fn line(&self, queued: impl Fn(&str) -> u32, now_ms: u64) -> Vec<PlaceView> {
        let waiters: Vec<Waiter> = self.places.iter().map(|p| p.waiter(queued(&p.model), now_ms)).collect();
        let line: Vec<(u64, &Waiter)> = self.places.iter().map(|p| p.seq).zip(&waiters).collect();
        schedule::line_order(&line)
            .into_iter()
            .map(|i| {
                let (p, w) = (&self.places[i], &waiters[i]);
                PlaceView {
                    model: p.model.clone(),
                    waited_ms: w.waited_ms,
                    on: p.on.clone(),
                    queued: w.queued,
                    at_most_ms: p.at_most_ms,
                    why: p
                        .why
                        .clone()
                        .unwrap_or_else(|| format!("{} waits for a turn of {} to end", p.model, p.on.join(", "))),
                }
            })
            .collect()
    }

    /// What a waiting load's wake depends on, beside `residents`.
    pub fn wake_key(&self, residents: Vec<Resident>) -> WakeKey {
        if crate::law::broken!(LostWake) {
            return (Vec::new(), self.key());
        }
        (residents, self.key())
    }

    /// What a waiting load's wake depends on in the line.
    pub fn key(&self) -> LineKey {
        let places = self.places.iter().map(|p| (p.model.clone(), p.on.clone())).collect();
        let behind = self.behind.iter().map(|(a, b)| (a.clone(), b.clone())).collect();
        (places, behind)
    }
}

/// Whether `ask` would be admitted if every resident in `on` that may
/// leave (not pinned) were idle.
fn fits_once_they_leave(ask: &LoadAsk, on: &[String], all: &[Seat]) -> bool {
    let residents: Vec<Resident> = all
        .iter()
        .filter(|s| s.resident.model != ask.new.model)
        .map(|s| {
            let mut r = s.resident.clone();
            if on.contains(&r.model) && !r.pinned {
                r.in_flight = false;
                r.queued = 0;
            }
            r
        })
        .collect();
    let new = Newcomer {
        waited_out: false,
        ..ask.new.clone()
    };
    matches!(
        residents::admit(&new, &residents, ask.memory, ask.max_resident),
        Admission::Load { .. }
    )
}

/// What an admitted load reserves until its child is published: its full
/// window when that fits, all the law's budget left beside the residents
/// when only a smaller one does (the window law will take it), its floor
/// alone.
pub fn reservation(new: &Newcomer, fit: Fit, budget_bytes: i64) -> u64 {
    match fit {
        Fit::Full => new.full_bytes.unwrap_or(new.floor_bytes),
        Fit::Reduced => new.weights_bytes + budget_bytes.max(0) as u64,
        Fit::FloorAlone => new.floor_bytes,
    }
}

/// Whether an engine refuses an eviction asked of it: a turn was routed to
/// it since the decision (it would reload at once), or it is pinned.
pub(crate) fn refuses_eviction(queued: usize, pinned: bool) -> bool {
    if crate::law::broken!(EvictRefusalOff) {
        return pinned;
    }
    queued > 0 || pinned
}

#[cfg(test)]
#[path = "arbiter_tests.rs"]
mod tests;
