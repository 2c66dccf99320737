//! The deterministic simulator of several residents: the arbiter machine
//! (`arbiter::Arbiter`) and the residents' law it calls
//! (`law::residents::admit`, `brake_over`, `law::schedule`), and each
//! engine's own memory brake (the controller `actors::engine::brake_state`,
//! its decision held in the engine's `intake` while turns run), its
//! turns waiting in arrival order in that same `Intake` (over plain values
//! where the engine keeps its callers' channels), and idle
//! reap (`law::reap`), driven through
//! thousands of seeded schedules of a hostile world, with invariants
//! checked after every step (FoundationDB's simulation and TigerBeetle's
//! VOPR are the model: one seed drives every arrival, fault and
//! interleaving; a failure names its seed and replays from it).
//!
//! The world: two to four models of random sizes and load costs on a
//! memory that holds one, two or all of them (sometimes with
//! `WARDEN_MAX_RESIDENT`), some pinned, some weighted; clients per model
//! that are steady, bursty or lone, with answers of random lengths, that
//! leave while they wait; children that die under their turns; pressure
//! episodes (idle samples at critical pressure, and the turns' end samples
//! critical while they last, calm after: the brake shrinks, respawns,
//! arms, unloads and grows back; a respawn fails now and then); an idle
//! reaper on a random timeout; unloads; a pin flipped by a settings
//! reload; a turn routed to a resident between the decision to evict it and
//! the eviction. Each engine's part is the order `actors::engine` keeps
//! (`room`: a load's step, its evictions, its wait; `schedule`: a holder's
//! yield at a turn's admission; `turn`: arrival order, the slot the law
//! picks and admits, idle conversations cleared for room and moved to
//! disk by the pool's law (`Slots::compaction`) first, the slot changing
//! hands, all by the engine's own slots' protocol (`moves`) against a
//! store whose writes fail now and then and a child whose erases do; a
//! turn's end frees its slot, which keeps its conversation; `turn::admit`:
//! each head turn's admission in the order of the engine's own
//! `admission::Admitting`, with the brake's start sample; `turn_end`:
//! each turn's end in the order of the engine's own `ending::Ending`, a
//! turn whose child died going back to wait for the next child when
//! `law::resume` lets it; `retire`: each stop in the order of
//! `Retire::leaving`, saved before stopped): what
//! decides is the machine and the law, called exactly as the engines call
//! them.
//!
//! Invariants, after every step:
//! - a model's pool (its child's slots over the shared window, the real
//!   `actors::engine::slots::Slots` under `law::slots`) never holds more
//!   idle and reserved cells than its window, never gives a slot to two
//!   turns, never clears or moves a slot a turn runs on (nor changes its
//!   conversation), and every turn that started ends on its slot;
//! - the memory the law admitted (footprints and reservations) never
//!   exceeds its budget while two models or more hold memory, and never
//!   more models than the count cap;
//! - the law never names a resident with a turn running or routed, or a
//!   pinned one, for an eviction, nor does the brake; no resident is
//!   evicted with a turn running or routed;
//! - a model's turns start in their arrival order (a resumed turn goes
//!   back to the head), each turn ends exactly once, with an outcome the
//!   law allows for what happened (a child's death only when
//!   `law::resume` declined to go on);
//! - a keep-alive of 0 unloads only when nothing else runs or waits;
//! - an engine's brake never stops its child (a respawn, an unload) with a
//!   turn running on it: the action is held, no new turn starts meanwhile,
//!   and it is carried out when the last one ended (never left held with
//!   none running); the intake's count of running turns is the truth;
//! - the window a brake unload (or a failed respawn) carried seeds the
//!   model's next load (no window memory lost across the unload); a live
//!   window stays within the model's own;
//! - the idle reap never takes a model with a turn running or waiting;
//! - no conversation's KV is lost without a record: once a turn of it
//!   ended holding cells worth a save, it is in its child's pool, in the
//!   store, or recorded lost: with a child that died, or said `Unsaved`
//!   when its write failed and its cells had to go (`KvBook`);
//! - a waiting load decides again only when something wakes it, as
//!   `peers::Wake` does (what its step reads changed: `Arbiter::wake_key`,
//!   the key the residency wakes on; its deadline or grace; a message to
//!   its engine): a wake that is never sent shows as a load waiting past
//!   the starvation bound;
//! - a request waiting for room is served or refused by its own deadline
//!   (its arrival and the load timeout), never before; with no pinned
//!   model, under the weighed scheduler, no model's load waits longer than
//!   the starvation bound (every model's limit, turn and loads once)
//!   before it loads or is refused;
//! - when the clients stop, everything drains: no turn waits for ever.
//!
//! `WARDEN_SIM_SCHEDULES` (default 10,000) sets the count;
//! `WARDEN_SIM_SEED=N` replays one schedule, printing its trace.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::arbiter::{Arbiter, LoadAsk, LoadStep, Seat, WakeKey, refuses_eviction};
use crate::actors::engine::admission::{self, Admitting};
use crate::actors::engine::brake_state::{Brake, Carried};
use crate::actors::engine::braking::{self, Braking, Decision, Does};
use crate::actors::engine::ending::{self, Came, View};
use crate::actors::engine::intake::{HeldBrake, Intake, Pending, Plain};
use crate::actors::engine::leaving::{Leave, Retire};
use crate::actors::engine::moves::{Found, Move, Moves, Outcome, Restore, Step, Why};
use crate::actors::engine::seating::{self, Ask};
use crate::actors::engine::slots::{SlotHeld, Slots};
use crate::law::brake::{Action, BRAKE_RELOAD_TTL, BrakeState, Level, Point, Readings, WindowFacts};
use crate::law::compact_meter::Meter;
use crate::law::crash::EngineCode;
use crate::law::kv_save::worth_saving;
use crate::law::mutant::{self, Mutant};
use crate::law::reap::should_reap;
use crate::law::residents::{Memory, ModelKind, Newcomer, Resident, ResidentsBrake, Sample, brake_over};
use crate::law::resume::{self, Death, RESUME_TURNS_DEFAULT, Verdict as Resumed};
use crate::law::schedule::{self, Holder, Policy};
use crate::law::window::{COMPUTE_INTERCEPT_BYTES, CPU_RAM_FRACTION};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// The schedules per run unless `WARDEN_SIM_SCHEDULES` says.
const SCHEDULES_DEFAULT: u64 = 10_000;

/// How often a KV write fails (the child refuses, the disk is full), per
/// mille of writes; and an erase.
const WRITE_FAILS_PER_MILLE: u64 = 60;
const ERASE_FAILS_PER_MILLE: u64 = 20;
/// How often the child refuses a save's file at a restore, per mille.
const REFUSED_PER_MILLE: u64 = 20;

/// The KV bytes of one cell of the simulated models (SmolLM2's, about):
/// what the pool's law weighs a held conversation's cells by.
const SIM_KV_BYTES_PER_CELL: u64 = 23_000;

/// What the pool's law weighs by: a SmolLM2-sized cell's priors (a meter
/// before it measured).
fn sim_reading() -> crate::law::compact_meter::Reading {
    Meter::new(SIM_KV_BYTES_PER_CELL).reading()
}

/// Moves the pool's law made and losses said, over every schedule run
/// (shown with the count: the world does reach those paths).
static MOVED: AtomicU64 = AtomicU64::new(0);
static UNSAVED: AtomicU64 = AtomicU64::new(0);
static AHEAD: AtomicU64 = AtomicU64::new(0);
static CONFIRMED: AtomicU64 = AtomicU64::new(0);
static DROPPED: AtomicU64 = AtomicU64::new(0);
static RESUMED: AtomicU64 = AtomicU64::new(0);
static DECLINED: AtomicU64 = AtomicU64::new(0);

/// How long a model stands idle before its save ahead (the default of
/// `WARDEN_KV_SAVE_AHEAD_S`).
const SAVE_AHEAD_MS: u64 = 2_000;

/// How long clients send, simulated ms.
const HORIZON_MS: u64 = 90_000;

/// splitmix64: one seed, every choice.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// In `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    /// With probability `per_mille` / 1000.
    fn chance(&mut self, per_mille: u64) -> bool {
        self.next() % 1000 < per_mille
    }
}

#[derive(Debug, Clone)]
struct Spec {
    name: String,
    weights: u64,
    floor: u64,
    full: Option<u64>,
    load_ms: u64,
    pinned: bool,
    weight: f64,
    slots: usize,
    /// Its child's window: the shared pool's cells.
    window: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Child {
    Cold,
    Loading { done_at: u64 },
    Up,
}

/// One engine as `actors::engine` keeps it, less its I/O.
#[derive(Debug)]
struct Engine {
    spec: Spec,
    child: Child,
    footprint: u64,
    /// An admitted load's reservation, until its child is up.
    reserved: u64,
    loaded_at: u64,
    last_used: u64,
    /// No turn has started since its child came up.
    fresh: bool,
    /// Its child's slots over the shared pool (`actors::engine::slots`).
    pool: Slots,
    /// Turns running, and when each ends.
    running: Vec<(usize, u64)>,
    /// A load waiting for room (`peers::RoomWait`): when it began to wait.
    wait_began: Option<u64>,
    /// When the waiting load decides again at the latest (a grace's end).
    wake_at: Option<u64>,
    /// What its load's last step read (`arbiter::WakeKey`): it decides
    /// again only when that changed, as `peers::Wake` wakes it, or when a
    /// message reaches its engine (`poked`).
    seen: Option<WakeKey>,
    poked: bool,
    /// Its memory brake: the engine's own controller (`brake_state`),
    /// finished as `brake_act` finishes it.
    brake: Brake,
    /// Its intake's count of running turns and the brake action held for
    /// them: the engine's own `Intake`, over plain values (`Plain`).
    intake: Intake<Plain>,
    /// Its live child's window (a brake respawn changes it).
    window: u32,
    /// Children it started: the one a turn ran on is `Turn::on_child`.
    births: u64,
    /// The cap its brake's unload (or failed respawn) carried, and when:
    /// its next load must be seeded with it (`Brake::seed`).
    carried: Option<(Option<u32>, u64)>,
    /// What became of its conversations' KV.
    kv: KvBook,
}

/// What became of the conversations' KV on one model, as the slots'
/// protocol (`actors::engine::moves`, run here as the engine runs it)
/// moves it: a conversation's cells leave its child's pool into the store,
/// as too short to be worth a save (re-read at its return, counting for
/// nothing here), or with a record the status shows (a write that failed
/// when the cells had to go, said `Unsaved`; a save dropped at a return,
/// `Drop`; a child's death, its crash).
#[derive(Debug, Default)]
struct KvBook {
    /// Conversations whose cells were worth saving when a turn of theirs ended.
    known: BTreeSet<String>,
    /// Conversations the store holds a save of, and its tokens.
    stored: BTreeMap<String, u32>,
    /// Conversations whose cells left with a record: a child's death, or a
    /// write that failed when they had to go.
    lost: BTreeSet<String>,
    /// A rule of the store the protocol broke (a restore of a save that
    /// does not fit the window).
    broken: Option<String>,
}

impl KvBook {
    /// Carries `moves` out on `pool` as `kv::Kv::carry` does, against a
    /// store whose writes fail now and then, and a child whose erases do.
    fn carry(&mut self, pool: &mut Slots, mut moves: Moves, window: u32, rng: &mut Rng) {
        let before: Vec<SlotHeld> = pool.iter().filter_map(|s| s.held.clone()).collect();
        while let Some(step) = moves.next(pool) {
            let outcome = match step {
                Step::Confirm { conversation, .. } => {
                    CONFIRMED.fetch_add(1, Ordering::Relaxed);
                    Outcome::Confirmed(self.stored.contains_key(&conversation))
                }
                Step::Write { held, why, .. } => {
                    if why == Why::Ahead {
                        AHEAD.fetch_add(1, Ordering::Relaxed);
                    }
                    let kept = !rng.chance(WRITE_FAILS_PER_MILLE);
                    if kept {
                        self.stored.insert(held.conversation, held.tokens);
                    }
                    Outcome::Written(kept)
                }
                Step::Erase { .. } => Outcome::Erased(!rng.chance(ERASE_FAILS_PER_MILLE)),
                Step::Find { conversation } => Outcome::Found(self.stored.get(&conversation).map(|&tokens| Found {
                    tokens,
                    answer_tokens: 0,
                })),
                Step::Restore { conversation, .. } => {
                    let tokens = self.stored.get(&conversation).copied().unwrap_or(0);
                    if tokens >= window {
                        self.broken = Some(format!(
                            "the save of {conversation} ({tokens} tokens) is restored into a window of {window}"
                        ));
                    }
                    Outcome::Restored(if rng.chance(REFUSED_PER_MILLE) {
                        Restore::Refused
                    } else {
                        Restore::Done { tokens }
                    })
                }
                Step::Drop { conversation, .. } => {
                    DROPPED.fetch_add(1, Ordering::Relaxed);
                    // Said and counted in the status: a record.
                    self.stored.remove(&conversation);
                    self.lost.insert(conversation);
                    Outcome::Said
                }
                Step::Moved { .. } => {
                    MOVED.fetch_add(1, Ordering::Relaxed);
                    Outcome::Said
                }
                Step::Unsaved { held, .. } => {
                    UNSAVED.fetch_add(1, Ordering::Relaxed);
                    self.lost.insert(held.conversation);
                    Outcome::Said
                }
            };
            moves.took(pool, outcome);
        }
        // One too short to be worth a save left unwritten: re-read at its
        // return, nothing lost.
        for h in before {
            let still = pool
                .iter()
                .any(|s| s.held.as_ref().is_some_and(|x| x.conversation == h.conversation));
            if !still && !worth_saving(h.tokens) && !self.stored.contains_key(&h.conversation) {
                self.known.remove(&h.conversation);
            }
        }
    }

    /// Every conversation `pool` holds is saved: the child is about to
    /// stop for the warden's own reasons (`kv::save_all`).
    fn save_all(&mut self, pool: &mut Slots, rng: &mut Rng) {
        let moves = Moves::new(true, true, None).stop_all(pool.len(), "stop");
        self.carry(pool, moves, u32::MAX, rng);
    }

    /// Every conversation `pool` holds is lost with its child, recorded.
    fn lose_all(&mut self, pool: &mut Slots) {
        for i in 0..pool.len() {
            if let Some(h) = pool.get_mut(i).held.take() {
                self.lost.insert(h.conversation);
            }
        }
    }
}

impl Engine {
    /// The turn at the head of its intake (turns routed here wait there,
    /// in arrival order, as the engine's own do).
    fn head(&self) -> Option<usize> {
        match self.intake.head() {
            Some(Pending::Turn(t)) => Some(*t),
            _ => None,
        }
    }

    /// The head turn, taken.
    fn pop_head(&mut self) -> Option<usize> {
        match self.intake.pop() {
            Some(Pending::Turn(t)) => Some(t),
            Some(other) => {
                self.intake.push_front(other);
                None
            }
            None => None,
        }
    }

    /// Turns routed here, waiting.
    fn waiting(&self) -> usize {
        self.intake.waiting_turns()
    }

    fn holds_memory(&self) -> bool {
        self.child != Child::Cold || self.reserved > 0
    }

    fn busy(&self) -> bool {
        !self.running.is_empty() || self.waiting() > 0
    }

    /// As `warden::residency` reads it from the published status (the
    /// brake ranks by `last_used_ms` on the sample's clock: the
    /// simulator's clock is that clock).
    fn resident(&self) -> Resident {
        Resident {
            model: self.spec.name.clone(),
            kind: ModelKind::Chat,
            footprint_bytes: self.footprint.max(self.reserved),
            last_used_ms: self.last_used,
            in_flight: !self.running.is_empty() || matches!(self.child, Child::Loading { .. }) || self.reserved > 0,
            pinned: self.spec.pinned,
            reload_ms: self.spec.load_ms,
            queued: (self.waiting() + self.running.len()) as u32,
            window: WindowFacts::default(),
            brake: BrakeState::default(),
        }
    }
}

/// How a turn ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Answered,
    /// 503 `model_does_not_fit`, at its load's deadline.
    NoRoom,
    /// Its client left before it began.
    Skipped,
    /// Its child died under it.
    ChildDied,
}

#[derive(Debug, Clone)]
struct Turn {
    model: usize,
    arrived: u64,
    /// Its place in its model's arrival order (set as it arrives).
    seq: u64,
    /// Its conversation (a client's conversations return).
    conversation: String,
    /// Its prompt, tokens, and the answer bound it asked (`max_tokens`).
    prompt: u32,
    requested: Option<u32>,
    /// The answer it gets, tokens (at most its bound).
    answer: u32,
    len_ms: u64,
    gone_at: Option<u64>,
    started: bool,
    ended: Option<End>,
    /// Streamed (a whole answer sends nothing before its end).
    streamed: bool,
    /// It asked for a keep-alive of 0.
    unload_after: bool,
    /// The child it runs on (`Engine::births`).
    on_child: u64,
    /// Its start was announced (it may wait after that).
    announced: bool,
    /// Times it went on on a next child, and whether it waits to again.
    resumes: u32,
    resumed: bool,
    /// The law of resume ended it after its child died.
    declined: bool,
}

/// A fault or a request from outside, at a time.
#[derive(Debug, Clone, Copy)]
enum Outside {
    Arrive(usize),
    Death(usize),
    Pressure,
    Unload(usize),
    FlipPin(usize),
    /// The idle reaper's tick on a model.
    Reap(usize),
    /// The idle clock's other deadline on a model: its save ahead.
    SaveAhead(usize),
}

struct World {
    rng: Rng,
    now: u64,
    engines: Vec<Engine>,
    arbiter: Arbiter,
    turns: Vec<Turn>,
    outside: Vec<(u64, Outside)>,
    memory: Memory,
    budget: i64,
    max_resident: Option<usize>,
    policy: Policy,
    limit: Duration,
    load_timeout_ms: u64,
    /// Whether any model was ever pinned (the starvation bound is off).
    pins: bool,
    /// The longest any model's load waits with nothing pinned.
    starvation_bound_ms: u64,
    /// Per model, the arrival place of the turn that started last.
    starts: Vec<Option<u64>>,
    arrivals: u64,
    trace: VecDeque<String>,
    full_trace: bool,
    /// The pool's clock's origin (`Slots` keeps `Instant`s).
    clock: tokio::time::Instant,
    /// The machine's RAM (the brake's facts).
    ram: u64,
    /// Brake samples read critical until then (a pressure episode).
    critical_until: u64,
    /// The idle timeout the reaper ticks against (`None`: no reaper).
    reap_after_ms: Option<u64>,
}

type Verdict = Result<(), String>;

impl World {
    fn new(seed: u64, full_trace: bool) -> Self {
        let mut rng = Rng(seed);
        let n = rng.range(2, 4) as usize;
        let ram = rng.range(8, 32) * GIB;
        let budget = (ram as f64 * CPU_RAM_FRACTION) as i64 - COMPUTE_INTERCEPT_BYTES as i64;
        let pins_on = rng.chance(200);
        let mut engines = Vec::new();
        for i in 0..n {
            // Floors from a tenth of the budget to most of it: one, two or
            // all fit together depending on the draw.
            let floor = (budget as u64 / 100) * rng.range(10, 70);
            let weights = floor * rng.range(50, 90) / 100;
            let full = rng.chance(700).then(|| floor + (floor - weights) * rng.range(0, 6));
            engines.push(Engine {
                spec: Spec {
                    name: format!("m{i}"),
                    weights,
                    floor,
                    full,
                    load_ms: rng.range(100, 8_000),
                    pinned: pins_on && rng.chance(300),
                    weight: if rng.chance(200) { 2.0 } else { 1.0 },
                    slots: rng.range(1, 4) as usize,
                    window: rng.range(2, 16) as u32 * 1024,
                },
                pool: Slots::new(1),
                child: Child::Cold,
                footprint: 0,
                reserved: 0,
                loaded_at: 0,
                last_used: 0,
                fresh: false,
                running: Vec::new(),
                wait_began: None,
                wake_at: None,
                seen: None,
                poked: false,
                brake: Brake::default(),
                intake: Intake::default(),
                kv: KvBook::default(),
                window: 0,
                births: 0,
                carried: None,
            });
        }
        let policy = if rng.chance(850) {
            Policy::Weighed
        } else {
            Policy::Arrival
        };
        let limit = Duration::from_millis(rng.range(2_000, 40_000));
        let max_turn = 4_000;
        let max_load = engines.iter().map(|e| e.spec.load_ms).max().unwrap_or(0);
        let eff = schedule::effective_limit_ms(limit, 2 * max_load);
        let mut w = World {
            rng,
            now: 0,
            arbiter: Arbiter::default(),
            turns: Vec::new(),
            outside: Vec::new(),
            memory: Memory::Ram(ram),
            budget,
            max_resident: None,
            policy,
            limit,
            load_timeout_ms: 600_000,
            pins: engines.iter().any(|e| e.spec.pinned),
            starvation_bound_ms: n as u64 * (eff + max_turn + 2 * max_load + schedule::IDLE_GRACE_MS) + 1_000,
            starts: vec![None; n],
            arrivals: 0,
            engines,
            trace: VecDeque::new(),
            full_trace,
            clock: tokio::time::Instant::now(),
            ram,
            critical_until: 0,
            reap_after_ms: None,
        };
        if w.rng.chance(400) {
            w.reap_after_ms = Some(w.rng.range(1_000, 30_000));
        }
        if w.rng.chance(300) {
            w.max_resident = Some(w.rng.range(1, n as u64) as usize);
        }
        w.clients();
        w.faults();
        w.outside.sort_by_key(|(t, _)| *t);
        w
    }

    /// Arrivals per model: steady, bursty or lone clients.
    fn clients(&mut self) {
        for m in 0..self.engines.len() {
            match self.rng.range(0, 2) {
                0 => {
                    // Steady: one or more clients back to back.
                    let gap = self.rng.range(150, 3_000);
                    let mut t = self.rng.range(0, 5_000);
                    while t < HORIZON_MS {
                        self.arrival(m, t);
                        t += gap + self.rng.range(0, gap);
                    }
                }
                1 => {
                    // Bursty: a few at once, now and then.
                    for _ in 0..self.rng.range(1, 5) {
                        let at = self.rng.range(0, HORIZON_MS);
                        for _ in 0..self.rng.range(1, 6) {
                            self.arrival(m, at);
                        }
                    }
                }
                _ => {
                    // Lone: one or two turns.
                    for _ in 0..self.rng.range(1, 2) {
                        let at = self.rng.range(0, HORIZON_MS);
                        self.arrival(m, at);
                    }
                }
            }
        }
    }

    fn arrival(&mut self, m: usize, at: u64) {
        let gone_at = self.rng.chance(60).then(|| at + self.rng.range(0, 20_000));
        self.turns.push(Turn {
            model: m,
            arrived: at,
            len_ms: self.rng.range(50, 4_000),
            seq: 0,
            conversation: format!("m{m}-c{}", self.rng.range(0, 5)),
            prompt: self.rng.range(20, 1_500) as u32,
            requested: self.rng.chance(500).then(|| self.rng.range(1, 2_000) as u32),
            answer: self.rng.range(1, 2_000) as u32,
            gone_at,
            started: false,
            ended: None,
            streamed: self.rng.chance(800),
            unload_after: self.rng.chance(30),
            on_child: 0,
            announced: false,
            resumes: 0,
            resumed: false,
            declined: false,
        });
        self.outside.push((at, Outside::Arrive(self.turns.len() - 1)));
    }

    fn faults(&mut self) {
        let n = self.engines.len();
        for _ in 0..self.rng.range(0, 3) {
            let at = self.rng.range(0, HORIZON_MS);
            let m = self.rng.range(0, n as u64 - 1) as usize;
            self.outside.push((at, Outside::Death(m)));
        }
        for _ in 0..self.rng.range(0, 4) {
            let at = self.rng.range(0, HORIZON_MS);
            self.outside.push((at, Outside::Pressure));
        }
        for _ in 0..self.rng.range(0, 2) {
            let at = self.rng.range(0, HORIZON_MS);
            let m = self.rng.range(0, n as u64 - 1) as usize;
            self.outside.push((at, Outside::Unload(m)));
        }
        if self.pins && self.rng.chance(500) {
            let at = self.rng.range(0, HORIZON_MS);
            let m = self.rng.range(0, n as u64 - 1) as usize;
            self.outside.push((at, Outside::FlipPin(m)));
        }
        for m in 0..n {
            let mut at = self.rng.range(0, 10_000);
            while at < HORIZON_MS {
                self.outside.push((at, Outside::SaveAhead(m)));
                at += self.rng.range(1_000, 8_000);
            }
        }
        if self.reap_after_ms.is_some() {
            for m in 0..n {
                let mut at = self.rng.range(0, 10_000);
                while at < HORIZON_MS {
                    self.outside.push((at, Outside::Reap(m)));
                    at += self.rng.range(2_000, 10_000);
                }
            }
        }
    }

    fn say(&mut self, line: String) {
        if self.full_trace {
            eprintln!("{:>7} ms  {line}", self.now);
        }
        self.trace.push_back(format!("{:>7} ms  {line}", self.now));
        if self.trace.len() > 40 {
            self.trace.pop_front();
        }
    }

    /// Runs the schedule to its end: every turn must end.
    fn run(&mut self) -> Verdict {
        let mut next_outside = 0;
        // Past this, something waits for ever: every turn's length, every
        // request's deadline twice over and a load per turn.
        let work: u64 = self.turns.iter().map(|t| t.len_ms).sum();
        let loads = self.engines.iter().map(|e| e.spec.load_ms).max().unwrap_or(0) * self.turns.len() as u64;
        let end_by = HORIZON_MS + 2 * self.load_timeout_ms + work + loads;
        loop {
            // The next time anything happens.
            let mut t = self.outside.get(next_outside).map(|(t, _)| *t);
            for e in &self.engines {
                let soonest = [
                    e.running.iter().map(|(_, end)| *end).min(),
                    match e.child {
                        Child::Loading { done_at } => Some(done_at),
                        _ => None,
                    },
                    e.wake_at,
                    e.wait_began
                        .and(e.head())
                        .map(|h| self.turns[h].arrived + self.load_timeout_ms),
                ];
                // What is due now was done at the last step.
                for s in soonest.into_iter().flatten().filter(|&s| s > self.now) {
                    t = Some(t.map_or(s, |t: u64| t.min(s)));
                }
            }
            for turn in &self.turns {
                if let (Some(g), None, false) = (turn.gone_at, turn.ended, turn.started)
                    && g > self.now
                {
                    t = Some(t.map_or(g, |t| t.min(g)));
                }
            }
            let Some(t) = t else { break };
            if t > end_by {
                return Err(format!("still running at {t} ms: something waits for ever"));
            }
            self.now = self.now.max(t);
            while let Some(&(at, o)) = self.outside.get(next_outside) {
                if at > self.now {
                    break;
                }
                next_outside += 1;
                self.outside_event(o)?;
                self.check()?;
            }
            self.inside_events()?;
            self.settle_all()?;
            if next_outside >= self.outside.len()
                && self
                    .engines
                    .iter()
                    .all(|e| !e.busy() && !matches!(e.child, Child::Loading { .. }))
            {
                break;
            }
        }
        for (i, turn) in self.turns.iter().enumerate() {
            if turn.ended.is_none() {
                return Err(format!(
                    "turn {i} for m{} (arrived {} ms) never ended",
                    turn.model, turn.arrived
                ));
            }
        }
        Ok(())
    }

    fn outside_event(&mut self, o: Outside) -> Verdict {
        match o {
            Outside::Arrive(i) => {
                let m = self.turns[i].model;
                self.arrive(i);
                self.say(format!("turn {i} arrives for m{m}"));
            }
            Outside::Death(m) => {
                if self.engines[m].child == Child::Up {
                    let code = match self.rng.range(0, 19) {
                        0..=9 => EngineCode::ChildKilled,
                        10..=14 => EngineCode::ChildCrashed,
                        15..=18 => EngineCode::OutOfMemory,
                        _ => EngineCode::IllegalInstruction,
                    };
                    self.say(format!("m{m}'s child dies ({})", code.as_str()));
                    let running: Vec<usize> = self.engines[m].running.iter().map(|(t, _)| *t).collect();
                    if running.is_empty() {
                        self.child_gone(m);
                    }
                    // Each relay reports its broken stream; the first
                    // judges the death, the others recall it.
                    for t in running {
                        self.turn_end(m, t, Some(code))?;
                    }
                }
            }
            Outside::Pressure => self.pressure()?,
            Outside::Unload(m) => {
                let e = &self.engines[m];
                if e.child == Child::Up && e.running.is_empty() {
                    self.retire(m, Retire::Request, "unloaded")?;
                }
            }
            Outside::FlipPin(m) => {
                self.engines[m].spec.pinned ^= true;
                let p = self.engines[m].spec.pinned;
                self.say(format!("a settings reload pins m{m}: {p}"));
            }
            Outside::Reap(m) => {
                // `reap`: the idle clock against the timeout (a pinned
                // model has none).
                let e = &self.engines[m];
                let timeout = Duration::from_millis(self.reap_after_ms.unwrap_or(u64::MAX));
                let idle_for = Duration::from_millis(self.now.saturating_sub(e.last_used));
                if !e.spec.pinned && should_reap(e.child == Child::Up, e.busy(), idle_for, timeout) {
                    self.retire(m, Retire::Idle, "reaped")?;
                }
            }
            Outside::SaveAhead(m) => {
                // `ahead::save_ahead`: once the model stood idle
                // `WARDEN_KV_SAVE_AHEAD_S`, with nothing running or
                // waiting, what a new conversation's turn would move is
                // written while nobody waits.
                let at = self.clock + Duration::from_millis(self.now);
                let e = &mut self.engines[m];
                let idle_for = self.now.saturating_sub(e.last_used);
                if e.child == Child::Up && !e.busy() && idle_for >= SAVE_AHEAD_MS {
                    let ahead = e.pool.ahead(sim_reading(), at);
                    let moves = ahead
                        .into_iter()
                        .map(Move::Ahead)
                        .fold(Moves::new(true, true, Some(e.window)), Moves::then);
                    e.kv.carry(&mut e.pool, moves, e.window, &mut self.rng);
                }
            }
        }
        Ok(())
    }

    /// Turn ends, loads done, clients gone, at `now`.
    fn inside_events(&mut self) -> Verdict {
        let now = self.now;
        for m in 0..self.engines.len() {
            let ended: Vec<usize> = self.engines[m]
                .running
                .iter()
                .filter(|(_, end)| *end <= now)
                .map(|(t, _)| *t)
                .collect();
            let any_ended = !ended.is_empty();
            for t in ended {
                self.engines[m].last_used = now;
                self.turn_end(m, t, None)?;
            }
            if any_ended {
                // `settle`: a held action once nothing runs.
                self.take_held(m)?;
            }
            if let Child::Loading { done_at } = self.engines[m].child
                && done_at <= now
            {
                let name = self.engines[m].spec.name.clone();
                let e = &mut self.engines[m];
                // `load`: the brake seeds the new child (an unload's carry
                // first, then the window memory).
                let seed = e.brake.seed(&name, now);
                if let Some((cap, at)) = e.carried.take()
                    && now.saturating_sub(at) < BRAKE_RELOAD_TTL.as_millis() as u64
                    && seed.cap != cap
                {
                    return Err(format!(
                        "m{m}'s brake carried its window {cap:?} over its unload; its reload is seeded with {:?}",
                        seed.cap
                    ));
                }
                e.window = seed.cap.map_or(e.spec.window, |c| c.min(e.spec.window));
                e.brake.started(seed);
                e.child = Child::Up;
                e.births += 1;
                e.pool = Slots::new(e.spec.slots as u32);
                e.footprint = e.reserved;
                if !mutant::is(Mutant::ReservationKept) {
                    e.reserved = 0;
                }
                e.loaded_at = now;
                e.last_used = now;
                e.fresh = true;
                let ms = e.spec.load_ms;
                self.arbiter.loaded(ms, now);
                self.say(format!("m{m} is up"));
            }
        }
        self.check()
    }

    fn settle_all(&mut self) -> Verdict {
        // Every pass that changes something ends or starts a turn, or
        // moves a load: bounded by the turns, with room to spare.
        for _ in 0..64 + 4 * self.turns.len() {
            let mut order: Vec<usize> = (0..self.engines.len()).collect();
            for i in (1..order.len()).rev() {
                let j = self.rng.range(0, i as u64) as usize;
                order.swap(i, j);
            }
            let mut changed = false;
            for m in order {
                changed |= self.settle(m)?;
                self.check()?;
            }
            if !changed {
                return Ok(());
            }
        }
        Err("the engines never settle".into())
    }

    /// One engine's settle: skips the head turns whose clients left, then
    /// admits, yields, loads or waits. Whether anything changed.
    fn settle(&mut self, m: usize) -> Result<bool, String> {
        let now = self.now;
        let mut changed = false;
        while let Some(head) = self.engines[m].head() {
            if self.turns[head].gone_at.is_none_or(|g| g > now) {
                break;
            }
            self.engines[m].pop_head();
            self.end(head, End::Skipped)?;
            // The head's client left: its watcher wakes the engine.
            self.engines[m].poked = true;
            changed = true;
        }
        match self.engines[m].child {
            Child::Loading { .. } => Ok(changed),
            Child::Up => Ok(self.admit(m)? || changed),
            Child::Cold => {
                if self.engines[m].waiting() == 0 {
                    if self.engines[m].wait_began.take().is_some() {
                        // Nobody waits for it any more: it leaves the line.
                        self.engines[m].wake_at = None;
                        self.arbiter.leave(&self.engines[m].spec.name);
                        self.say(format!("m{m}'s load leaves the line: its clients left"));
                        return Ok(true);
                    }
                    return Ok(changed);
                }
                // A waiting load decides again only when woken: what its
                // step reads changed, its deadline or grace came, or a
                // message reached its engine. A lost wake shows as a load
                // waiting past the starvation bound.
                let key = self.wake_key();
                let e = &self.engines[m];
                let woken = e.wait_began.is_none()
                    || e.poked
                    || e.wake_at.is_some_and(|w| self.now >= w)
                    || e.seen.as_ref() != Some(&key);
                if !woken {
                    return Ok(changed);
                }
                let e = &mut self.engines[m];
                e.poked = false;
                e.seen = Some(key);
                Ok(self.room_step(m)? || changed)
            }
        }
    }

    /// `turn::admit` on a live child: the holder's yield first, then the
    /// slots, in arrival order.
    fn admit(&mut self, m: usize) -> Result<bool, String> {
        let mut changed = false;
        // Each head turn's admission, in the order of the engine's own
        // machine (`admission::Admitting`).
        'turns: while let Some(t) = self.engines[m].head() {
            let mut a = Admitting::new(admission::Turn {
                generates: true,
                announced: self.turns[t].announced,
                resumed: self.turns[t].resumed,
            });
            let mut yields = None;
            while let Some(step) = a.next(self.admission_view(m, t)) {
                match step {
                    admission::Step::Skip => {
                        self.engines[m].pop_head();
                        self.end(t, End::Skipped)?;
                        changed = true;
                        continue 'turns;
                    }
                    admission::Step::Wait => break 'turns,
                    admission::Step::AskYield => {
                        yields = self.yields(m);
                        a.took(admission::Outcome::Yields(yields.is_some()));
                    }
                    admission::Step::Yield => {
                        let (to, why) = yields.take().expect("the model it yields to");
                        if self.engines[m].running.is_empty() {
                            let name = self.engines[m].spec.name.clone();
                            self.say(format!("m{m} yields to {to}: {}", schedule::explain(&name, &to, why)));
                            self.arbiter.yielded(&name, &to);
                            self.retire(m, Retire::Evicted, "yielded")?;
                            return Ok(true);
                        }
                        break 'turns;
                    }
                    admission::Step::Probe => {
                        let seated = self.probe(m, t);
                        a.took(admission::Outcome::Seated(seated));
                    }
                    admission::Step::Announce => self.turns[t].announced = true,
                    admission::Step::Begin => self.brake_sample(m, Point::TurnStart)?,
                    admission::Step::Load => {
                        // A child that left (the start sample's unload or a
                        // failed respawn) loads through the room's step, as
                        // `load_for_turn` loads it in the same handler: the
                        // engine settles again.
                        let up = self.engines[m].child == Child::Up;
                        changed |= !up;
                        let came = if up {
                            admission::Came::Ready
                        } else {
                            admission::Came::Waits
                        };
                        a.took(admission::Outcome::Loaded(came));
                    }
                    admission::Step::CountResumed => {}
                    admission::Step::Seat => {
                        let seated = self.seat(m, t)?;
                        a.took(admission::Outcome::Seated(seated));
                    }
                    admission::Step::Generate => {
                        self.start(m, t)?;
                        changed = true;
                        continue 'turns;
                    }
                    admission::Step::Refuse | admission::Step::Fail | admission::Step::PassThrough => {
                        return Err(format!(
                            "turn {t}'s admission on m{m} ended in {step:?}, which nothing here asks"
                        ));
                    }
                }
            }
            return Err(format!("turn {t}'s admission on m{m} ended with no verdict"));
        }
        Ok(changed)
    }

    /// What the admission's order reads of `m` for turn `t`.
    fn admission_view(&self, m: usize, t: usize) -> admission::View {
        let e = &self.engines[m];
        admission::View {
            client_gone: self.turns[t].gone_at.is_some_and(|g| g <= self.now),
            shut_down: false,
            brake_held: e.intake.brake_held(),
            running: !e.running.is_empty(),
            serves: e.child == Child::Up,
            waits_for_room: e.wait_began.is_some(),
        }
    }

    /// `schedule::yields_to`: whether `m`, holding the memory, yields it to
    /// another model's waiting turns, and why.
    fn yields(&mut self, m: usize) -> Option<(String, schedule::Next)> {
        let now = self.now;
        let e = &self.engines[m];
        let holder = Holder {
            model: e.spec.name.clone(),
            pinned: e.spec.pinned,
            weight: e.spec.weight,
            resident_ms: now.saturating_sub(e.loaded_at),
            reload_ms: e.spec.load_ms,
            idle: false,
            fresh: e.fresh,
            queued: (e.waiting() + e.running.len()) as u32,
        };
        let queued: Vec<(String, u32)> = self
            .engines
            .iter()
            .map(|e| (e.spec.name.clone(), (e.waiting() + e.running.len()) as u32))
            .collect();
        let queued_of = |name: &str| queued.iter().find(|(n, _)| n == name).map_or(0, |(_, q)| *q);
        let all = self.seats(None);
        self.arbiter
            .holder_step(&holder, || all, queued_of, self.policy, self.limit, now)
    }

    /// Turn `t`, seated, starts on `m` (in arrival order, but for a turn
    /// that went back to the head after its child died).
    fn start(&mut self, m: usize, t: usize) -> Verdict {
        let now = self.now;
        self.engines[m].pop_head();
        let seq = self.turns[t].seq;
        if !std::mem::take(&mut self.turns[t].resumed) {
            if self.starts[m].is_some_and(|last| last > seq) {
                return Err(format!(
                    "m{m}'s turn {t} starts after a turn that arrived later: out of arrival order"
                ));
            }
            self.starts[m] = Some(seq);
        }
        if self.engines[m].intake.brake_held() {
            return Err(format!(
                "m{m}'s turn {t} starts while a brake action waits for the running turns"
            ));
        }
        self.turns[t].started = true;
        self.turns[t].on_child = self.engines[m].births;
        let end = now + self.turns[t].len_ms;
        let e = &mut self.engines[m];
        e.running.push((t, end));
        e.intake.started();
        e.last_used = now;
        e.fresh = false;
        self.say(format!("turn {t} starts on m{m}"));
        Ok(())
    }

    /// Whether turn `t` would find a seat on `m`'s pool now (`turn::seat`).
    fn probe(&self, m: usize, t: usize) -> bool {
        let e = &self.engines[m];
        let turn = &self.turns[t];
        let ask = Ask {
            owner: Some(&turn.conversation),
            text: None,
            prompt: turn.prompt.min(e.window / 2),
            requested: turn.requested,
        };
        let now = self.clock + Duration::from_millis(self.now);
        seating::seat(&e.pool, e.window, ask, Some(sim_reading()), now).is_some()
    }

    /// `turn::seat` and `admit_generation` on the live child's pool: the
    /// slot the law picks and its admission there (idle conversations in
    /// the way go to disk first); `false` when the turn must wait.
    fn seat(&mut self, m: usize, t: usize) -> Result<bool, String> {
        let window = self.engines[m].window;
        let turn = self.turns[t].clone();
        let prompt = turn.prompt.min(window / 2);
        let now = self.clock + Duration::from_millis(self.now);
        let e = &mut self.engines[m];
        let ask = Ask {
            owner: Some(&turn.conversation),
            text: None,
            prompt,
            requested: turn.requested,
        };
        let Some(seat) = seating::seat(&e.pool, window, ask, Some(sim_reading()), now) else {
            return Ok(false);
        };
        let (slot, bound, reserve, evict) = (seat.slot, seat.bound, seat.reserve, &seat.evict);
        if let Some(i) = evict.iter().find(|&&i| e.pool.get(i).busy.is_some()) {
            return Err(format!("m{m}'s pool law clears slot {i} with a turn running on it"));
        }
        if e.pool.get(slot).busy.is_some() {
            return Err(format!(
                "m{m}'s slot {slot} is given to turn {t} while another runs on it"
            ));
        }
        // `admit_generation`: the evictions, the pool's law's moves, then
        // the slot changes hands (the previous owner's conversation saved
        // first; the turn's conversation holds it, about its prompt until
        // its answer is counted, its own save restored), by the slots'
        // protocol.
        let moves = seat.moves(
            Moves::new(true, true, Some(window)),
            Some(turn.conversation.clone()),
            prompt,
        );
        let running: Vec<(usize, Option<SlotHeld>)> = (0..e.pool.len())
            .filter(|&i| e.pool.get(i).busy.is_some())
            .map(|i| (i, e.pool.get(i).held.clone()))
            .collect();
        e.kv.carry(&mut e.pool, moves, window, &mut self.rng);
        if let Some((i, _)) = running.iter().find(|(i, h)| &e.pool.get(*i).held != h) {
            return Err(format!(
                "m{m}'s slot {i} changed its conversation with a turn running on it"
            ));
        }
        e.pool.start(slot, t as u64, reserve, bound, None);
        let (idle, busy) = e.pool.cells();
        if u64::from(idle) + u64::from(busy) > u64::from(window) {
            return Err(format!(
                "m{m}'s pool holds {idle} idle and {busy} reserved cells, over its window of {window}"
            ));
        }
        if bound == 0 || reserve > window {
            return Err(format!(
                "m{m}'s turn {t} admitted with bound {bound}, reserve {reserve} of {window}"
            ));
        }
        Ok(true)
    }

    /// Turn `t`'s slot on `m` is freed at its end; the slot keeps its
    /// conversation: its prompt and its answer (`kv_check::counted`).
    fn release(&mut self, m: usize, t: usize) -> Verdict {
        let at = self.clock + Duration::from_millis(self.now);
        let answer = self.turns[t].answer;
        let e = &mut self.engines[m];
        let Some((slot, busy)) = e.pool.end(t as u64, at) else {
            return Err(format!("m{m}'s turn {t} ended on no slot"));
        };
        let answer = answer.min(busy.bound);
        if let Some(h) = e.pool.get_mut(slot).held.as_mut() {
            h.tokens = h.tokens.saturating_add(answer).min(busy.reserved);
            h.answer_tokens = answer;
            if worth_saving(h.tokens) {
                e.kv.known.insert(h.conversation.clone());
                // In the pool again: a record of an earlier loss no
                // longer covers it.
                e.kv.lost.remove(&h.conversation);
            }
        }
        Ok(())
    }

    /// `room::room_step`: the arbiter's step for this engine's load, then
    /// the evictions it names, the wait, or the refusal.
    fn room_step(&mut self, m: usize) -> Result<bool, String> {
        let now = self.now;
        // The scheduler weighs the load's wait from its first decision
        // (`peers::RoomWait`); the head's own deadline counts from its
        // arrival (`room::Patience`).
        let began = *self.engines[m].wait_began.get_or_insert(now);
        let head = self.engines[m].head().expect("a load is asked for a turn");
        let deadline = self.turns[head].arrived + self.load_timeout_ms;
        let spec = self.engines[m].spec.clone();
        let ask = LoadAsk {
            new: Newcomer {
                model: spec.name.clone(),
                kind: ModelKind::Chat,
                weights_bytes: spec.weights,
                floor_bytes: spec.floor,
                full_bytes: spec.full,
                waited_out: now >= deadline,
            },
            memory: self.memory,
            max_resident: self.max_resident,
            load_ms: spec.load_ms,
            weight: spec.weight,
            queued: self.engines[m].waiting() as u32,
            waited_ms: now - began,
            policy: self.policy,
            limit: self.limit,
        };
        let seats = self.seats(Some(m));
        match self.arbiter.load_step(&ask, &seats, now) {
            LoadStep::Go { evict, reserve, .. } => {
                for h in &evict {
                    let t = self.index(&h.model);
                    let e = &self.engines[t];
                    if e.busy() || matches!(e.child, Child::Loading { .. }) || e.spec.pinned {
                        return Err(format!(
                            "the law names {} for an eviction with a turn in it, loading, or pinned",
                            h.model
                        ));
                    }
                }
                let mut all_gone = true;
                for h in evict {
                    let t = self.index(&h.model);
                    // A turn may be routed to it between the decision and the eviction.
                    self.maybe_route_now(t);
                    let e = &self.engines[t];
                    let refused = refuses_eviction(e.waiting() + e.running.len(), e.spec.pinned);
                    if refused {
                        self.say(format!("m{t} refuses its eviction for m{m}"));
                        all_gone = false;
                        continue;
                    }
                    self.retire(t, Retire::Evicted, "evicted")?;
                }
                if all_gone {
                    let e = &mut self.engines[m];
                    e.reserved = reserve;
                    e.child = Child::Loading {
                        done_at: now + spec.load_ms,
                    };
                    e.wait_began = None;
                    e.wake_at = None;
                    self.arbiter.leave(&spec.name);
                    let waited = now - began;
                    if self.starvation_applies() && waited > self.starvation_bound_ms {
                        return Err(format!(
                            "m{m}'s load waited {waited} ms, past the starvation bound {} ms",
                            self.starvation_bound_ms
                        ));
                    }
                    self.say(format!(
                        "m{m} loads (waited {waited} ms, reserves {} MiB)",
                        reserve / MIB
                    ));
                    return Ok(true);
                }
                // A refused eviction: the engine decides again at once.
                self.engines[m].wake_at = Some(deadline);
                self.engines[m].poked = true;
                Ok(true)
            }
            LoadStep::Wait { grace, .. } => {
                let until = grace.map_or(deadline, |g| (now + g.as_millis() as u64).min(deadline));
                let e = &mut self.engines[m];
                let changed = e.wake_at != Some(until);
                e.wake_at = Some(until);
                Ok(changed)
            }
            LoadStep::Refuse(short) => {
                if now < deadline {
                    return Err(format!("m{m} refused before its deadline: {short}"));
                }
                // Under more traffic than the memory serves, a request may
                // wait out its deadline behind its own model's backlog; the
                // load itself must not have waited past the bound.
                let waited = now - began;
                if self.starvation_applies() && waited > self.starvation_bound_ms {
                    return Err(format!(
                        "m{m} starved: its load waited {waited} ms, then was refused: {short}"
                    ));
                }
                let head = self.engines[m].pop_head().expect("a load is asked for a turn");
                self.engines[m].wait_begun_again();
                self.arbiter.leave(&spec.name);
                self.say(format!("m{m}'s turn {head} refused: {short}"));
                self.end(head, End::NoRoom)?;
                Ok(true)
            }
        }
    }

    /// Turn `i` reaches its engine's intake.
    fn arrive(&mut self, i: usize) {
        self.arrivals += 1;
        self.turns[i].seq = self.arrivals;
        let m = self.turns[i].model;
        self.engines[m].intake.push(Pending::Turn(i));
        // A `Generate` reaches the engine: its handler settles.
        self.engines[m].poked = true;
    }

    /// What a waiting load's step reads now (`warden::residency` computes
    /// the same from the published statuses).
    fn wake_key(&self) -> WakeKey {
        let residents = self
            .engines
            .iter()
            .filter(|e| e.holds_memory())
            .map(Engine::resident)
            .collect();
        self.arbiter.wake_key(residents)
    }

    /// Every engine holding memory but `but`, as the residency reads them.
    fn seats(&self, but: Option<usize>) -> Vec<Seat> {
        let now = self.now;
        self.engines
            .iter()
            .enumerate()
            .filter(|(i, e)| Some(*i) != but && e.holds_memory())
            .map(|(_, e)| Seat {
                resident: e.resident(),
                weight: e.spec.weight,
                resident_ms: now.saturating_sub(e.loaded_at),
                idle_ms: now.saturating_sub(e.last_used),
            })
            .collect()
    }

    /// With some chance, the next turn of engine `t`'s model arrives now:
    /// routed to it while an eviction of it was on its way.
    fn maybe_route_now(&mut self, t: usize) {
        if !self.rng.chance(150) {
            return;
        }
        let now = self.now;
        let Some(k) = self
            .outside
            .iter()
            .position(|(at, o)| *at > now && matches!(o, Outside::Arrive(i) if self.turns[*i].model == t))
        else {
            return;
        };
        let (_, o) = self.outside.remove(k);
        let Outside::Arrive(i) = o else { unreachable!() };
        self.turns[i].arrived = now;
        self.arrive(i);
        self.say(format!("turn {i} for m{t} is routed while its eviction is on its way"));
    }

    /// An idle brake sample at critical pressure, for a random resident.
    fn pressure(&mut self) -> Verdict {
        let now = self.now;
        let up: Vec<usize> = (0..self.engines.len())
            .filter(|&m| self.engines[m].child == Child::Up)
            .collect();
        if up.is_empty() {
            return Ok(());
        }
        // An episode: the turns' end samples read critical a while.
        self.critical_until = self.critical_until.max(now + self.rng.range(1_000, 20_000));
        let me = up[self.rng.range(0, up.len() as u64 - 1) as usize];
        let all: Vec<Resident> = self
            .engines
            .iter()
            .filter(|e| e.holds_memory())
            .map(|e| e.resident())
            .collect();
        let name = self.engines[me].spec.name.clone();
        let sample = Sample {
            model: &name,
            point: Point::Idle,
            readings: Readings {
                level: Level::Critical,
                paging: Some(true),
                footprint_bytes: None,
            },
            now_ms: now,
        };
        if let ResidentsBrake::Evict { model, .. } = brake_over(&sample, &all) {
            let t = self.index(&model);
            let e = &self.engines[t];
            if e.busy() || e.spec.pinned || e.child != Child::Up {
                return Err(format!("the brake evicts {model} with a turn in it, pinned, or not up"));
            }
            let refused = refuses_eviction(e.waiting() + e.running.len(), e.spec.pinned);
            self.say(format!("the brake evicts {model}"));
            if !refused {
                self.retire(t, Retire::Evicted, "evicted by the brake")?;
            }
            return Ok(());
        }
        // No other resident answers: its own brake's idle sample, taken
        // only while none of its turns runs (`brake_idle_sample`).
        if self.engines[me].running.is_empty() {
            self.brake_sample(me, Point::Idle)?;
        }
        Ok(())
    }

    /// A brake sample of `m`'s child at `point` (`brake_point`,
    /// `llama_brake`): the law's decision, carried out (or held for the
    /// running turns) in the engine's own order (`brake_act`).
    fn brake_sample(&mut self, m: usize, point: Point) -> Verdict {
        let now = self.now;
        let level = if now < self.critical_until {
            Level::Critical
        } else {
            Level::Calm
        };
        let e = &mut self.engines[m];
        if e.child != Child::Up || e.intake.brake_held() {
            return Ok(());
        }
        let readings = Readings {
            level,
            paging: Some(level == Level::Critical),
            footprint_bytes: Some(e.footprint),
        };
        let facts = WindowFacts {
            allocated: e.window,
            kv_per_token: ((e.spec.floor - e.spec.weights) / u64::from(e.spec.window)).max(1),
            ram_bytes: self.ram,
            uncapped: e.spec.window,
            pinned: false,
        };
        let decided = e.brake.llama_step(point, &readings, &facts);
        self.brake_act(
            m,
            HeldBrake {
                point,
                readings,
                facts,
                decided,
            },
        )
    }

    /// The held brake action of `m`, once none of its turns runs
    /// (`settle`).
    fn take_held(&mut self, m: usize) -> Verdict {
        match self.engines[m].intake.take_brake() {
            Some(held) => self.brake_act(m, held),
            None => Ok(()),
        }
    }

    /// `carry_out_brake`: the steps the engine's machine
    /// (`braking::Braking`) asks, over this world: held for the running
    /// turns, a respawn at the cap (failing now and then: the model is
    /// gone as an unload's), the emergency unload, or a line; the brake
    /// told what it came to.
    fn brake_act(&mut self, m: usize, held: HeldBrake) -> Verdict {
        let now = self.now;
        let name = self.engines[m].spec.name.clone();
        let fails = self.rng.chance(50);
        let e = &self.engines[m];
        let action = held.decided.action;
        let running = e.intake.running();
        // What an unload must carry: the cap its brake holds now, read
        // before any step (a retirement drops it).
        let carry = e.brake.state().cap;
        let cap = match action {
            Action::Shrink { cap } | Action::Grow { cap } => cap,
            _ => e.window,
        };
        let mut braking = Braking::new(Decision {
            does: Does::llama(action),
            in_child: false,
            waits: action.waits_for(running),
        });
        let mut held = Some(held);
        let mut footprint = 0;
        loop {
            let view = braking::View {
                live: self.engines[m].child == Child::Up,
            };
            let Some(step) = braking.next(view) else { break };
            let e = &mut self.engines[m];
            match step {
                braking::Step::Hold => {
                    e.intake.hold_brake(held.take().expect("held once"));
                    self.say(format!("m{m}'s brake holds its action for {running} running turn(s)"));
                }
                braking::Step::Save => e.kv.save_all(&mut e.pool, &mut self.rng),
                braking::Step::Stop => {
                    if !e.running.is_empty() {
                        return Err(format!(
                            "m{m}'s brake stops its child with {} turns running",
                            e.running.len()
                        ));
                    }
                    // Its slots go with it.
                    footprint = e.footprint;
                    e.child = Child::Cold;
                    e.footprint = 0;
                    e.pool = Slots::new(1);
                    braking.took(braking::Outcome::Stopped(true));
                }
                braking::Step::Spawn => braking.took(braking::Outcome::Spawned(!fails)),
                braking::Step::Install => {
                    // The new pool is empty: its conversations went to the
                    // KV store.
                    e.child = Child::Up;
                    e.footprint = footprint;
                    e.window = cap;
                    e.pool = Slots::new(e.spec.slots as u32);
                    self.say(format!("m{m}'s brake respawns it at {cap}"));
                }
                braking::Step::Tell(told) => {
                    let decided = held.take().expect("told once").decided;
                    let model = name.as_str();
                    let (carried, live) = match told {
                        braking::Told::Respawned => (Carried::Respawned { cap, pinned: false }, Some(model)),
                        braking::Told::RespawnFailed => {
                            e.carried = Some((Some(cap), now));
                            let carried = Carried::RespawnFailed {
                                cap,
                                pinned: false,
                                model,
                            };
                            (carried, None)
                        }
                        braking::Told::Unloading => {
                            e.carried = Some((carry, now));
                            (Carried::Unloading { model }, Some(model))
                        }
                        braking::Told::Said | braking::Told::Acted => {
                            (Carried::Said, Some(model).filter(|_| e.child == Child::Up))
                        }
                    };
                    e.brake.finish_llama(decided, carried, live, now);
                }
                braking::Step::Retire => self.retire(m, Retire::Brake, "unloaded by the brake")?,
                braking::Step::Gone => {
                    for step in Retire::Brake.gone() {
                        if let Leave::Forget { .. } = step {
                            let e = &mut self.engines[m];
                            e.brake.child_gone();
                            e.intake.forget_brake();
                        }
                    }
                    self.say(format!(
                        "m{m}'s brake respawn at {cap} fails: it reloads at the next message"
                    ));
                }
                braking::Step::Say | braking::Step::Event => {}
                braking::Step::Act => return Err(format!("m{m}'s llama.cpp brake asked its child to act")),
            }
        }
        Ok(())
    }

    /// The child of `m` stops (evicted, yielded, unloaded), as
    /// `leaving::Retire` says: its conversations saved first when the stop
    /// is one the real rule saves for (`Retire::saves_kv`), else dropped
    /// with the child (every stop here is the warden's own choice on a
    /// healthy child, so a rule that saves nothing for one loses KV).
    fn retire(&mut self, m: usize, how: Retire, why: &str) -> Verdict {
        let e = &mut self.engines[m];
        if !e.running.is_empty() {
            return Err(format!("m{m} {why} with {} turns running", e.running.len()));
        }
        if why.starts_with("evicted") && e.waiting() > 0 {
            return Err(format!("m{m} {why} with {} turns routed to it", e.waiting()));
        }
        if why.starts_with("evicted") && e.spec.pinned {
            return Err(format!("pinned m{m} {why}"));
        }
        if why.starts_with("reaped") && e.waiting() > 0 {
            return Err(format!("m{m} {why} with {} turns waiting for it", e.waiting()));
        }
        // `retire`: the steps its reason orders (`Retire::leaving`).
        for step in how.leaving(Duration::from_secs(5)) {
            let e = &mut self.engines[m];
            match step {
                // Saved from the child while it answers; a stopped child
                // has nothing to save from.
                Leave::Save(_) if e.child == Child::Up => e.kv.save_all(&mut e.pool, &mut self.rng),
                Leave::Save(_) => {}
                Leave::Stop(_) => {
                    e.child = Child::Cold;
                    e.footprint = 0;
                    // Its slots go with it.
                    e.pool = Slots::new(1);
                }
                Leave::Forget { .. } => {
                    e.brake.child_gone();
                    // A brake action held for its turns goes with it.
                    e.intake.forget_brake();
                }
                Leave::Publish => {}
                Leave::Said => self.say(format!("m{m} {why}")),
                // A reap forgets an unload's carry, so its reload is not
                // seeded with it.
                Leave::Reaped => {
                    e.brake.forget_carry();
                    e.carried = None;
                }
            }
        }
        Ok(())
    }

    /// `turn_end::turn_relayed`: turn `t`'s end on `m`, in the order the
    /// engine's own machine (`ending::Ending`) keeps; `death`: its child
    /// died under it, and how (`law::resume` says whether it goes on).
    fn turn_end(&mut self, m: usize, t: usize, death: Option<EngineCode>) -> Verdict {
        let turn = &self.turns[t];
        let mut end = ending::Ending::new(ending::Turn {
            came: if death.is_some() { Came::Trouble } else { Came::Relayed },
            generates: true,
            holds_model: true,
            keep_alive: turn.unload_after,
            unload_after: turn.unload_after,
            stateful: false,
        });
        let how = if death.is_some() { End::ChildDied } else { End::Answered };
        while let Some(step) = end.next(self.view(m, t)) {
            match step {
                ending::Step::Ended => {
                    let e = &mut self.engines[m];
                    e.intake.ended();
                    e.running.retain(|(r, _)| *r != t);
                }
                ending::Step::Judge => self.child_gone(m),
                ending::Step::Recall => {}
                ending::Step::Resume => {
                    let code = death.expect("only a death is put to the law here");
                    let sent = if self.turns[t].streamed && !self.rng.chance(300) {
                        self.rng.range(1, 200) as u32
                    } else {
                        0
                    };
                    let tr = &self.turns[t];
                    let facts = resume::Turn {
                        sent,
                        streamed: tr.streamed,
                        resumes: tr.resumes,
                        client_gone: tr.gone_at.is_some_and(|g| g <= self.now),
                        opaque: None,
                        unfit: None,
                    };
                    let goes_on = !matches!(
                        resume::decide(facts, Death::Died(code), RESUME_TURNS_DEFAULT),
                        Resumed::Decline(_)
                    );
                    if !goes_on {
                        DECLINED.fetch_add(1, Ordering::Relaxed);
                        self.turns[t].declined = true;
                    }
                    end.took(ending::Outcome::Resumed(goes_on));
                }
                ending::Step::Requeue => {
                    RESUMED.fetch_add(1, Ordering::Relaxed);
                    let now = self.now;
                    let tr = &mut self.turns[t];
                    tr.resumes += 1;
                    tr.resumed = true;
                    tr.started = false;
                    // Its pause counts from its child's death.
                    tr.arrived = now;
                    self.engines[m].intake.push_front(Pending::Turn(t));
                    self.say(format!("turn {t} goes on on m{m}'s next child"));
                }
                ending::Step::Free => self.release(m, t)?,
                ending::Step::Brake => self.brake_sample(m, Point::TurnEnd)?,
                ending::Step::Said => self.end(t, how)?,
                ending::Step::Unload => self.retire(m, Retire::Idle, "reaped after its turn (keep-alive 0)")?,
                ending::Step::Hold | ending::Step::Count | ending::Step::Notice | ending::Step::Finish => {}
            }
        }
        Ok(())
    }

    /// What the end's order reads of `m` for turn `t`.
    fn view(&self, m: usize, t: usize) -> View {
        let e = &self.engines[m];
        let live = e.child == Child::Up;
        View {
            on_its_child: live && e.births == self.turns[t].on_child,
            live,
            serves: live,
            idle: e.intake.idle(),
        }
    }

    /// `m`'s child is gone by itself: its conversations lost with it,
    /// recorded.
    fn child_gone(&mut self, m: usize) {
        let e = &mut self.engines[m];
        e.child = Child::Cold;
        e.footprint = 0;
        e.kv.lose_all(&mut e.pool);
        e.pool = Slots::new(1);
        e.brake.child_gone();
        // As `take_dead_child`: a brake action held for its turns goes with it.
        e.intake.forget_brake();
    }

    fn end(&mut self, t: usize, how: End) -> Verdict {
        if let Some(was) = self.turns[t].ended {
            return Err(format!("turn {t} ended twice: {was:?}, then {how:?}"));
        }
        if how == End::Skipped && self.turns[t].gone_at.is_none() {
            return Err(format!("turn {t} skipped with its client there"));
        }
        if how == End::ChildDied && !self.turns[t].declined {
            return Err(format!(
                "turn {t} ended with its child's death, which the law of resume did not decide"
            ));
        }
        self.turns[t].ended = Some(how);
        Ok(())
    }

    /// Whether the starvation bound holds: the weighed scheduler, nothing
    /// ever pinned (a pinned holder never yields, by design).
    fn starvation_applies(&self) -> bool {
        !self.pins && self.policy == Policy::Weighed
    }

    fn index(&self, model: &str) -> usize {
        self.engines
            .iter()
            .position(|e| e.spec.name == model)
            .expect("a known model")
    }

    /// The invariants of every step.
    fn check(&self) -> Verdict {
        let holders: Vec<&Engine> = self.engines.iter().filter(|e| e.holds_memory()).collect();
        let held: u64 = holders.iter().map(|e| e.footprint.max(e.reserved)).sum();
        if holders.len() >= 2 && held as i64 > self.budget {
            return Err(format!(
                "{} models hold {} MiB, over the law's budget of {} MiB",
                holders.len(),
                held / MIB,
                self.budget / MIB as i64
            ));
        }
        if let Some(cap) = self.max_resident
            && holders.len() > cap
        {
            return Err(format!("{} models hold memory, over the cap of {cap}", holders.len()));
        }
        for (m, e) in self.engines.iter().enumerate() {
            if e.intake.running() != e.running.len() {
                return Err(format!(
                    "m{m}'s intake counts {} running turns, {} run",
                    e.intake.running(),
                    e.running.len()
                ));
            }
            if e.intake.brake_held() && e.child != Child::Up {
                return Err(format!(
                    "m{m}'s brake action is held for a child that is gone: it outlived its child"
                ));
            }
            if e.intake.brake_held() && e.running.is_empty() {
                return Err(format!(
                    "m{m}'s brake action is held with no turn running: it never acts"
                ));
            }
            let live = e.child == Child::Up;
            let held = |c: &str| {
                live && e
                    .pool
                    .iter()
                    .any(|s| s.held.as_ref().is_some_and(|h| h.conversation == c))
            };
            if let Some(c) =
                e.kv.known
                    .iter()
                    .find(|c| !held(c) && !e.kv.stored.contains_key(*c) && !e.kv.lost.contains(*c))
            {
                return Err(format!(
                    "m{m}'s conversation {c} left its pool unsaved, and no record says it was lost"
                ));
            }
            if let Some(b) = &e.kv.broken {
                return Err(format!("m{m}: {b}"));
            }
            if e.child == Child::Up && (e.window == 0 || e.window > e.spec.window) {
                return Err(format!(
                    "m{m} runs a window of {}, outside 1..={}",
                    e.window, e.spec.window
                ));
            }
        }
        for (m, e) in self.engines.iter().enumerate() {
            if e.wait_began.is_none() {
                continue;
            }
            if let Some(head) = e.head()
                && self.turns[head].gone_at.is_none_or(|g| g > self.now)
                && self.now > self.turns[head].arrived + self.load_timeout_ms
            {
                return Err(format!(
                    "m{m}'s turn {head} outlived its deadline ({} ms waited)",
                    self.now - self.turns[head].arrived
                ));
            }
        }
        Ok(())
    }
}

impl Engine {
    /// The refused turn's load is over; the next turn's wait begins afresh.
    fn wait_begun_again(&mut self) {
        self.wait_began = None;
        self.wake_at = None;
    }
}

/// Runs schedule `seed`; its failure carries the seed and the last steps.
fn schedule(seed: u64, full_trace: bool) -> Verdict {
    let mut w = World::new(seed, full_trace);
    w.run().map_err(|why| {
        let trace: Vec<String> = w.trace.iter().cloned().collect();
        format!(
            "schedule {seed} failed: {why}\nreplay it: WARDEN_SIM_SEED={seed} cargo test --lib arbiter_sim -- --nocapture\nits last steps:\n{}",
            trace.join("\n")
        )
    })
}

fn count() -> u64 {
    std::env::var("WARDEN_SIM_SCHEDULES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(SCHEDULES_DEFAULT)
}

/// The first schedule of `0..n` that fails, on two threads.
fn first_failure(n: u64, m: Option<Mutant>) -> Option<(u64, String)> {
    let threads = 2;
    let found: Vec<Option<(u64, String)>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|k| {
                s.spawn(move || {
                    mutant::set(m);
                    let mut seed = k;
                    while seed < n {
                        if let Err(e) = schedule(seed, false) {
                            return Some((seed, e));
                        }
                        seed += threads;
                    }
                    None
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("a schedule thread")).collect()
    });
    found.into_iter().flatten().min_by_key(|(seed, _)| *seed)
}

#[test]
fn ten_thousand_hostile_schedules_keep_every_invariant() {
    if let Some(seed) = std::env::var("WARDEN_SIM_SEED").ok().and_then(|s| s.parse().ok()) {
        if let Err(e) = schedule(seed, true) {
            panic!("{e}");
        }
        return;
    }
    let n = count();
    let t0 = std::time::Instant::now();
    if let Some((_, e)) = first_failure(n, None) {
        panic!("{e}");
    }
    let secs = t0.elapsed().as_secs_f64();
    eprintln!(
        "arbiter_sim: {n} schedules in {secs:.1} s ({:.0} per second); {} idle conversations moved to disk by the pool's law, {} saved ahead, {} leavings that found a save ahead, {} said unsaved after a failed write, {} saves dropped at a return (too big for a shrunk window, or refused), {} turns gone on on a next child after a death, {} ended by the law of resume",
        n as f64 / secs,
        MOVED.load(Ordering::Relaxed),
        AHEAD.load(Ordering::Relaxed),
        CONFIRMED.load(Ordering::Relaxed),
        UNSAVED.load(Ordering::Relaxed),
        DROPPED.load(Ordering::Relaxed),
        RESUMED.load(Ordering::Relaxed),
        DECLINED.load(Ordering::Relaxed)
    );
}

/// Each rule broken on purpose is caught, and how soon.
#[test]
fn a_broken_rule_is_caught() {
    for m in [
        Mutant::BusyIdle,
        Mutant::BrakeInFlight,
        Mutant::EvictRefusalOff,
        Mutant::ReservationKept,
        Mutant::PoolOvercommit,
        Mutant::LostWake,
        Mutant::BrakeCutsTurn,
        Mutant::ReapBusy,
        Mutant::ClaimUnsaved,
        Mutant::EvictUnsaved,
        Mutant::UnsavedSilent,
        Mutant::CompactUnsaved,
        Mutant::RestoreUnfit,
        Mutant::ResumeSkipped,
        Mutant::UnloadBusy,
        Mutant::SaveAfterStop,
        Mutant::BrakeIgnored,
        Mutant::RespawnUnsaved,
        Mutant::ToldAfterRetire,
    ] {
        let Some((seed, e)) = first_failure(SCHEDULES_DEFAULT, Some(m)) else {
            panic!("{m:?}: no schedule of {SCHEDULES_DEFAULT} caught it");
        };
        let why = e.lines().next().unwrap_or_default().to_string();
        eprintln!("arbiter_sim: {m:?} caught at schedule {seed}: {why}");
    }
}
