//! Which model goes next when the models asked for do not all fit at
//! once: a resident serving its own turns (the *holder*) against a model
//! whose load waits for the memory the holder's turns keep (the *waiter*).
//!
//! Two wrong answers frame it. Switching per request spends the machine on
//! loads (5 to 60 s each for the models people run, and the whole card on a
//! GPU); never switching while busy starves the other model for as long as
//! the busy one has traffic (measured before this law: a lone turn waited
//! 37 s beside three busy clients, and under traffic that never pauses it
//! would wait out the load timeout and be refused). So the law weighs what
//! a switch costs against how long the other has waited:
//!
//! 1. **A pinned holder never yields** (its settings say it never leaves);
//!    the waiter waits for memory to free elsewhere, up to its load timeout.
//! 2. **An idle holder yields at once** (what admission already does: an
//!    idle resident is evicted for a newcomer), once idle for
//!    `IDLE_GRACE_MS`: a shorter gap is a client sending back to back, and
//!    weighs as busy.
//! 3. **A holder serves its first turn** after its load before it yields,
//!    under either policy: the switch that brought it in was paid for the
//!    turns that waited for it, and yielding before one of them ran wastes
//!    the switch. Without this rule three models that do not fit together
//!    livelock under first come, first served (each one loaded yields to
//!    the next waiter before its first turn, for ever: found by the
//!    residents' simulator, `warden::arbiter_sim`), and a starved waiter
//!    would take the memory from a model whose own turns had waited as
//!    long.
//! 4. **The starvation limit**: once the waiter has waited the limit (a
//!    setting, `WARDEN_STARVATION_LIMIT_S`, default `STARVATION_LIMIT_DEFAULT`;
//!    never less than `LIMIT_SWITCHES` switches), the holder yields, whatever
//!    the weights and however recently it loaded.
//! 5. **Collation while it pays**: the holder keeps serving its own turns
//!    while the waiter's wait, weighted, is shorter than the switch costs (the
//!    waiter's load and the holder's reload: the holder's turns come back);
//!    and a holder just loaded keeps the memory for `MIN_RESIDENCY_SWITCHES`
//!    switches' time, so that with both models busy switching takes at most
//!    `THRASH_SHARE` of the time.
//!
//! Weights (`weight` per model in the settings file, default 1) scale the
//! waiter's wait against the holder's: a model of weight 2 waiting counts
//! its wait double against a holder of weight 1. So does the work queued
//! on each side: a switch serves every turn the waiter has queued and
//! delays every turn the holder has (each by about the switch), so the
//! waiter's wait counts once per turn it has waiting and the switch's cost
//! once per turn of the holder's (a burst of three waits a third as long
//! beside one busy client; a lone turn beside three, three times as long,
//! the minimum residency and the starvation limit bounding both).
//!
//! A yield takes effect at the holder's next turn admission: it starts no
//! new turn, its running turns end, and it leaves (its KV saved, as any
//! eviction) with its own turns queued in arrival order; they load it again
//! once the waiter's load went through, and then its own wait counts.
//!
//! What a switch costs is measured: the model's own last load, or before
//! it has loaded once its weights over `PRIOR_DISK_BYTES_PER_MS`.
//!
//! Pure: waits and costs come in as milliseconds.

use std::time::Duration;

/// The starvation limit unless the settings name one. A switch of the
/// models people run on a laptop or a workstation costs 2 to 10 s (4 to
/// 8 GB from NVMe) and up to a minute (30 GB from a SATA disk); 30 s is
/// about as long as a person watches a spinner before thinking it hung,
/// several switches of a mid-sized model, and the effective limit grows
/// with the switch (`LIMIT_SWITCHES`) so a slow one is not forced every
/// half minute.
pub const STARVATION_LIMIT_DEFAULT: Duration = Duration::from_secs(30);

/// The effective limit is never less than this many switches: forcing a
/// switch sooner than its own cost twice over would spend more than half
/// the time switching.
pub const LIMIT_SWITCHES: u64 = 2;

/// The share of the time switching may take with both models busy.
pub const THRASH_SHARE: f64 = 0.2;

/// A model just loaded keeps the memory this many switches' time (unless it
/// is idle): a switch then takes at most `THRASH_SHARE` of the time
/// (1 / (1 + 4) = 0.2).
pub const MIN_RESIDENCY_SWITCHES: u64 = 4;

/// The disk read rate a load is estimated at before the model has loaded
/// once, bytes per ms (1 GB/s: an NVMe page-cache miss; SmolLM2 here loads
/// in 0.2 to 0.4 s, mostly the child's start, so a floor is added).
pub const PRIOR_DISK_BYTES_PER_MS: u64 = 1_000_000;

/// What a load costs beside its bytes before it was measured (a child's
/// start and its warm-up), ms.
pub const PRIOR_LOAD_FLOOR_MS: u64 = 500;

/// How long a holder must have been idle before it counts as idle: a
/// client sending back to back sends its next turn within a round trip (a
/// few ms here, tens over a LAN), so a shorter gap is not the end of its
/// work, and a waiting model that took every such gap would switch per
/// request (measured: 5 loads for 16 alternating turns with no grace).
pub const IDLE_GRACE_MS: u64 = 200;

/// A model's weight unless its settings give one.
pub const WEIGHT_DEFAULT: f64 = 1.0;

/// How the models take turns in memory (`WARDEN_SCHEDULE`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Policy {
    /// The law of this module: collation while it pays, the starvation limit.
    #[default]
    Weighed,
    /// First come, first served: a busy model yields as soon as another
    /// model's load waits on it (what llama-swap and the warden before this
    /// law approximate; the bench's baseline, and a choice for those who
    /// want arrival order across models whatever the switches cost).
    Arrival,
}

impl Policy {
    /// `WARDEN_SCHEDULE`: `weighed` (or unset) or `arrival`.
    pub fn parse(raw: Option<&str>) -> Result<Self, String> {
        match raw.map(str::trim) {
            None | Some("") | Some("weighed") => Ok(Self::Weighed),
            Some("arrival") => Ok(Self::Arrival),
            Some(other) => Err(format!("WARDEN_SCHEDULE={other:?}: expected `weighed` or `arrival`")),
        }
    }
}

/// What a switch to a model costs, ms: its last load when measured, else
/// its weights over the prior disk rate plus the start.
pub fn load_cost_ms(last_load_ms: Option<u64>, weights_bytes: u64) -> u64 {
    last_load_ms.unwrap_or(PRIOR_LOAD_FLOOR_MS + weights_bytes / PRIOR_DISK_BYTES_PER_MS)
}

/// The resident whose turns keep the memory.
#[derive(Debug, Clone, PartialEq)]
pub struct Holder {
    pub model: String,
    /// Pinned by its settings.
    pub pinned: bool,
    /// Its weight (`WEIGHT_DEFAULT` unless set).
    pub weight: f64,
    /// How long since its child became ready, ms.
    pub resident_ms: u64,
    /// What loading it again costs, ms (`load_cost_ms`).
    pub reload_ms: u64,
    /// No turn running or waiting.
    pub idle: bool,
    /// No turn has started on its child since it loaded.
    pub fresh: bool,
    /// Its turns running or waiting.
    pub queued: u32,
}

/// A model whose load waits for the holder's memory.
#[derive(Debug, Clone, PartialEq)]
pub struct Waiter {
    pub model: String,
    /// Its weight.
    pub weight: f64,
    /// How long its load has waited, ms.
    pub waited_ms: u64,
    /// What loading it costs, ms (`load_cost_ms`).
    pub load_ms: u64,
    /// Its turns waiting for the load.
    pub queued: u32,
}

/// Why the holder yields or keeps the memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// Pinned: it never leaves for another model.
    Pinned,
    /// Nothing runs on it.
    Idle,
    /// The waiter waited the starvation limit.
    Starved { limit_ms: u64 },
    /// The waiter waited longer than the switch costs, weighted.
    SwitchPays { switch_ms: u64 },
    /// Its own turns go first: switching costs more than the waiter waited.
    Collating { switch_ms: u64 },
    /// Loaded recently: it keeps the memory its minimum residency.
    JustLoaded { residency_ms: u64 },
    /// Loaded and not yet serving: its first turn goes first.
    FirstTurn,
    /// First come, first served (`Policy::Arrival`): another model waits.
    Arrival,
}

/// The decision for one holder and one waiter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// The holder starts no new turn; it leaves once its running ones end.
    Yield(Why),
    /// The holder keeps serving; the waiter goes next at most `in_ms` from
    /// now (`None`: never, pinned), plus the end of the turns then running.
    Keep { in_ms: Option<u64>, why: Why },
}

impl Next {
    /// Whether the holder yields.
    pub fn yields(&self) -> bool {
        matches!(self, Next::Yield(_))
    }
}

/// The starvation limit in force for a switch of `switch_ms`.
pub fn effective_limit_ms(limit: Duration, switch_ms: u64) -> u64 {
    (limit.as_millis() as u64).max(LIMIT_SWITCHES.saturating_mul(switch_ms))
}

/// Whether `holder` yields to `waiter` now under `policy` (see the module
/// docs).
pub fn next(policy: Policy, holder: &Holder, waiter: &Waiter, limit: Duration) -> Next {
    if holder.pinned {
        return Next::Keep {
            in_ms: None,
            why: Why::Pinned,
        };
    }
    if holder.idle {
        return Next::Yield(Why::Idle);
    }
    if holder.fresh {
        return Next::Keep {
            in_ms: None,
            why: Why::FirstTurn,
        };
    }
    if policy == Policy::Arrival {
        return Next::Yield(Why::Arrival);
    }
    let switch_ms = waiter.load_ms.saturating_add(holder.reload_ms);
    let limit_ms = effective_limit_ms(limit, switch_ms);
    if waiter.waited_ms >= limit_ms {
        return Next::Yield(Why::Starved { limit_ms });
    }
    // The wait that pays for a switch, on the holder's clock: a heavier
    // waiter, or one with more turns waiting, needs less; a heavier holder,
    // or one with more turns, more.
    let ratio = (weight(holder.weight) * f64::from(holder.queued.max(1)))
        / (weight(waiter.weight) * f64::from(waiter.queued.max(1)));
    let pays_at_ms = (switch_ms as f64 * ratio).round() as u64;
    let residency_ms = MIN_RESIDENCY_SWITCHES.saturating_mul(switch_ms);
    let wait_left = pays_at_ms.saturating_sub(waiter.waited_ms);
    let residency_left = residency_ms.saturating_sub(holder.resident_ms);
    if wait_left == 0 && residency_left == 0 {
        return Next::Yield(Why::SwitchPays { switch_ms });
    }
    let in_ms = wait_left.max(residency_left).min(limit_ms - waiter.waited_ms);
    let why = if wait_left >= residency_left {
        Why::Collating { switch_ms }
    } else {
        Why::JustLoaded { residency_ms }
    };
    Next::Keep { in_ms: Some(in_ms), why }
}

/// A weight as the law uses it: positive and finite, else the default.
fn weight(w: f64) -> f64 {
    if w.is_finite() && w > 0.0 { w } else { WEIGHT_DEFAULT }
}

/// Of several waiting loads, which goes first: the longest weighted wait
/// (arrival order among equals, `seq`). Loads for the same model never
/// race (one engine per model), so this orders models, not requests.
pub fn first_in_line(waiters: &[(u64, &Waiter)]) -> Option<usize> {
    line_order(waiters).first().copied()
}

/// The whole line in the order its loads go (`first_in_line` is its head).
pub fn line_order(waiters: &[(u64, &Waiter)]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..waiters.len()).collect();
    order.sort_by(|&i, &j| {
        let ((si, a), (sj, b)) = (waiters[i], waiters[j]);
        let wa = a.waited_ms as f64 * weight(a.weight);
        let wb = b.waited_ms as f64 * weight(b.weight);
        wb.total_cmp(&wa).then(si.cmp(&sj))
    });
    order
}

/// The span the thrash share is measured over, ms: long enough to hold
/// several switches of a mid-sized model, short enough to clear soon
/// after the traffic changes.
pub const THRASH_WINDOW_MS: u64 = 300_000;

/// The `Retry-After` of a request refused because it would not wait
/// (`Prefer: wait=N`), seconds: the scheduler's estimate of the wait left
/// (`at_most_ms`, when a holder has weighed it) plus the load itself,
/// rounded up; before any estimate, the load and one more of the same (the
/// holder's reload is about as long). At least 1.
pub fn retry_after_s(at_most_ms: Option<u64>, load_ms: u64) -> u64 {
    let ms = at_most_ms.map_or(2 * load_ms, |w| w + load_ms);
    ms.div_ceil(1000).max(1)
}

/// Whether switching took more than `THRASH_SHARE` of `over_ms` (the time
/// spent loading, `loading_ms`, summed over the models).
pub fn thrashing(loading_ms: u64, over_ms: u64) -> bool {
    over_ms > 0 && loading_ms as f64 > THRASH_SHARE * over_ms as f64
}

/// The sentence a waiting model's status shows.
pub fn explain(holder: &str, waiter: &str, n: Next) -> String {
    let s = |ms: u64| format!("{:.1} s", ms as f64 / 1000.0);
    match n {
        Next::Yield(Why::Idle) => format!("{waiter} goes next: {holder} is idle"),
        Next::Yield(Why::Starved { limit_ms }) => format!(
            "{waiter} goes next: it waited the starvation limit ({}); {holder} ends its running turns",
            s(limit_ms)
        ),
        Next::Yield(Why::Arrival) => format!("{waiter} goes next: first come, first served; {holder} ends its running turns"),
        Next::Yield(_) => format!("{waiter} goes next: it waited longer than switching costs; {holder} ends its running turns"),
        Next::Keep { in_ms, why } => {
            let more = in_ms.map_or_else(String::new, |ms| format!(", at most {} more", s(ms)));
            match why {
                Why::Pinned => format!("{waiter} waits: {holder} is pinned and never leaves for another model"),
                Why::Collating { switch_ms } => {
                    format!("{waiter} waits: switching costs {}, {holder}'s turns go first{more}", s(switch_ms))
                }
                Why::JustLoaded { residency_ms } => format!(
                    "{waiter} waits: {holder} loaded recently and keeps the memory {}{more}",
                    s(residency_ms)
                ),
                Why::FirstTurn => format!("{waiter} waits: {holder} just loaded and serves its first turn first"),
                Why::Idle | Why::Starved { .. } | Why::SwitchPays { .. } | Why::Arrival => {
                    format!("{waiter} waits for {holder}{more}")
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "schedule_tests.rs"]
mod tests;
