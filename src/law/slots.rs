//! Several conversations on one child: how many slots a child runs, which
//! slot a turn takes, and whether it may start now without the shared KV
//! pool overflowing.
//!
//! ## What was measured (llama-server b10883, `docs/performance.md`)
//!
//! Four slots over one unified pool (`--kv-unified`) cost what one slot
//! costs at load (RssAnon 201 -> 202 MiB for three more slots: at most
//! `EXTRA_SLOT_BYTES` each), and keep the whole window for one
//! conversation. Four split slots (`n_ctx / 4` each) refuse any
//! conversation longer than 2048 tokens. But a unified pool that fills
//! fails *every* turn in it (500 "Context size has been exceeded", all
//! four), and the child does not free an idle slot's cells for a busy one.
//! So the child runs one pool, and the warden decides before it fills:
//! each running turn reserves its prompt and its answer bound, each idle
//! slot holds its conversation's cells, and a turn starts only when its
//! reservation fits beside them, after the least recently used idle
//! conversations went to disk if that is what makes it fit; otherwise it
//! waits for a running turn to end. Nothing is refused on an estimate: a
//! prompt longer than the window alone goes to the child, whose exact
//! count refuses it (400, naming the tokens).
//!
//! ## The answer bound with several slots
//!
//! A request without `max_tokens` may run to the end of the window when
//! there is one slot (today's rule, `request::token_bound`). Beside others
//! that would reserve the whole pool and serialize every client that
//! leaves the field out (most do), so with more than one slot such an
//! answer is bounded by what its prompt leaves of one slot's share of the
//! pool (`window / slots`: what llama-server's own split slots give a
//! whole conversation); a conversation longer than its share is given
//! the rest of the window, and starts when that much is free. An answer
//! the client bounded itself keeps its bound. Four short unbounded turns
//! at 8192 tokens and 4 slots reserve 2048 each: they all run at once.

/// The `WARDEN_PARALLEL` setting: a count, or `auto`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Parallel {
    /// `AUTO_SLOTS` where the engine can serve several, else one.
    #[default]
    Auto,
    /// This many slots (1 to `MAX_SLOTS`).
    Fixed(u32),
}

/// `auto`'s count: llama-server's own (`-np auto` is 4 slots over a
/// unified pool in b10883), LM Studio's default of 4 parallel requests,
/// and on these 2 cores the count past which the measured aggregate
/// decode stopped rising (4 and 8 clients got the same rate).
pub const AUTO_SLOTS: u32 = 4;

/// The most slots a setting may ask: each slot is a sequence in one
/// batch; past 64 the child's batch bookkeeping, not memory, is the cost.
pub const MAX_SLOTS: u32 = 64;

/// What one slot beyond the first costs at load (measured: three more
/// slots, 201 -> 202 MiB RssAnon; 1 MiB each, the measure's precision).
/// The KV pool itself does not grow: it is the window's.
pub const EXTRA_SLOT_BYTES: u64 = 1 << 20;

/// The least answer an unbounded turn beside others is given within its
/// slot's share: a conversation whose prompt leaves less of the share
/// than this is given the rest of the window instead, and runs when that
/// much is free.
pub const MIN_ANSWER: u32 = 256;

/// Parses `WARDEN_PARALLEL` (`None`: neither `auto` nor a count in range).
pub fn parse(raw: &str) -> Option<Parallel> {
    let t = raw.trim();
    if t.eq_ignore_ascii_case("auto") {
        return Some(Parallel::Auto);
    }
    match t.parse::<u32>() {
        Ok(n) if (1..=MAX_SLOTS).contains(&n) => Some(Parallel::Fixed(n)),
        _ => None,
    }
}

/// What a child can do with slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Child {
    /// llama-server running a generating model: slots over one pool.
    Generating,
    /// llama-server running an embedding or rerank model: one slot. An
    /// encoder reads each input in one micro-batch of the whole window
    /// (`-b`/`-ub` = the window), so slots would share that one batch
    /// and gain nothing, and four window-sized inputs would overflow the
    /// pool.
    Encoder,
    /// llama-server running a recurrent or hybrid model: one slot. Its
    /// recurrent state is allocated once per slot, beside the window's
    /// KV, and the window law counts one.
    Recurrent,
    /// mlx_vlm.server: one request at a time, one prefix cache.
    Mlx,
}

/// The slots a child runs.
pub fn count(setting: Parallel, child: Child) -> u32 {
    match (child, setting) {
        (Child::Encoder | Child::Recurrent | Child::Mlx, _) => 1,
        (Child::Generating, Parallel::Auto) => AUTO_SLOTS,
        (Child::Generating, Parallel::Fixed(n)) => n.clamp(1, MAX_SLOTS),
    }
}

/// What `slots` slots cost beyond one slot's footprint.
pub fn extra_bytes(slots: u32) -> u64 {
    u64::from(slots.saturating_sub(1)) * EXTRA_SLOT_BYTES
}

/// About how many tokens a request's JSON text is, before the child counts
/// them: its ASCII bytes over 4 (English runs about 4 characters a
/// token, and the JSON's keys and quotes make this an over-estimate), plus
/// one token for every other character (a CJK character is one to two
/// tokens, an accented letter part of one: counting it whole keeps the
/// estimate from falling far short for scripts that are not Latin, where
/// bytes over 4 would count a 3-byte character as 0.75 of a token). The
/// child's own count replaces it at the turn's end.
pub fn estimate_tokens(text: &str) -> u32 {
    let ascii = text.bytes().filter(u8::is_ascii).count();
    let other = text.chars().filter(|c| !c.is_ascii()).count();
    (ascii / 4 + other).min(u32::MAX as usize) as u32
}

/// One slot as the warden sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotView<'a> {
    /// The conversation whose cells it holds, if any.
    pub holds: Option<&'a str>,
    /// The tokens it holds (idle) or has reserved (busy).
    pub tokens: u32,
    /// A turn runs on it.
    pub busy: bool,
    /// When it was last used, on the caller's clock (larger is later).
    pub used: u64,
    /// About how many of its cells begin as the new request does (tokens,
    /// estimated from the text both share): what the child reuses there.
    pub shared: u32,
}

/// The share of a new request that must begin as a slot's cells do for
/// the slot to be chosen for it: llama-server's own default
/// (`--slot-prompt-similarity 0.10`), in tenths.
pub const SIMILAR_TENTHS: u32 = 1;

/// Which slot a turn of `conversation`, of about `prompt` tokens, takes:
/// 1. the idle slot that holds the conversation (its cells are reused);
/// 2. else the idle slot whose cells begin most as the request does, when
///    that is at least `SIMILAR_TENTHS` of it (a shared system prompt or
///    chat template is not read again, as llama-server itself would pick)
///    and taking it costs no save (it holds no conversation worth one,
///    `kv_save::worth_saving`) or the shared part is itself worth one;
/// 3. else an empty idle slot;
/// 4. else the least recently used idle slot (its conversation goes to
///    disk first).
///
/// `None` when every slot is busy: the turn waits.
pub fn pick(slots: &[SlotView], conversation: Option<&str>, prompt: u32) -> Option<usize> {
    let idle = || slots.iter().enumerate().filter(|(_, s)| !s.busy);
    if let Some(c) = conversation
        && let Some((i, _)) = idle().filter(|(_, s)| s.holds == Some(c)).max_by_key(|(_, s)| s.used)
    {
        return Some(i);
    }
    let similar = idle()
        .filter(|(_, s)| s.shared > 0 && u64::from(s.shared) * 10 >= u64::from(prompt) * u64::from(SIMILAR_TENTHS))
        .filter(|(_, s)| s.holds.is_none() || !super::kv_save::worth_saving(s.tokens) || super::kv_save::worth_saving(s.shared))
        .max_by_key(|(_, s)| (s.shared, s.used));
    if let Some((i, _)) = similar {
        return Some(i);
    }
    if let Some((i, _)) = idle().find(|(_, s)| s.holds.is_none() && s.tokens == 0) {
        return Some(i);
    }
    idle().min_by_key(|(_, s)| s.used).map(|(i, _)| i)
}

/// The pool a turn is admitted to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pool {
    /// The window: the pool's cells, shared by every slot.
    pub window: u32,
    /// The slots over it.
    pub slots: u32,
}

/// A turn's admission.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admit {
    /// Start now with this answer bound; `reserve` is what it holds of
    /// the pool while it runs; first save and clear these idle slots.
    Run {
        /// The answer's token bound (the one field the child obeys).
        bound: u32,
        /// Prompt plus answer, counted against the pool until it ends.
        reserve: u32,
        /// Idle slots to send to disk and clear first, least recently
        /// used first.
        evict: Vec<usize>,
    },
    /// Not now: running turns hold the room it needs.
    Wait,
}

/// The answer cap of a turn of about `prompt` tokens: the request's own
/// bound; else, at one slot, the whole window (today's rule); else what
/// is left of one slot's share (`window / slots`) after the prompt, or,
/// when that is less than `MIN_ANSWER`, the rest of the window.
pub fn answer_cap(pool: Pool, prompt: u32, requested: Option<u32>) -> u32 {
    let w = pool.window;
    if requested.is_some() || pool.slots <= 1 {
        // Today's rule, one function for it.
        return super::request::token_bound(requested, Some(w));
    }
    let share = w / pool.slots;
    match share.checked_sub(prompt) {
        Some(left) if left >= MIN_ANSWER => left,
        _ => w.saturating_sub(prompt),
    }
}

/// Admits a turn of about `prompt` tokens asking `requested` answer
/// tokens to slot `slot` of `pool`, beside `slots` (the slot's own cells
/// are the prompt's prefix, so they are not counted twice). Beside running
/// turns it starts only when its whole cap fits (a turn is never given a
/// shorter answer because others run: it waits for them); alone it always
/// starts, as today, and the child stops where the pool ends.
pub fn admit(pool: Pool, slots: &[SlotView], slot: usize, prompt: u32, requested: Option<u32>) -> Admit {
    let w = pool.window;
    let cap = answer_cap(pool, prompt, requested);
    // What the turn would hold at most: its prompt and its answer.
    let target = cap.min(w.saturating_sub(prompt));
    let busy = slots.iter().any(|s| s.busy);
    let held_busy: u64 = slots.iter().filter(|s| s.busy).map(|s| u64::from(s.tokens)).sum();
    let mut idle: Vec<(usize, &SlotView)> = slots
        .iter()
        .enumerate()
        .filter(|(i, s)| *i != slot && !s.busy && s.tokens > 0)
        .collect();
    idle.sort_by_key(|(_, s)| s.used);
    let idle_counted = !crate::law::broken!(PoolOvercommit);
    let free = |idle_left: u64| {
        let idle_left = if idle_counted { idle_left } else { 0 };
        u64::from(w).saturating_sub(held_busy + idle_left + u64::from(prompt))
    };
    let mut left: u64 = idle.iter().map(|(_, s)| u64::from(s.tokens)).sum();
    let mut evict = Vec::new();
    for (i, s) in &idle {
        if free(left) >= u64::from(target) {
            break;
        }
        left -= u64::from(s.tokens);
        evict.push(*i);
    }
    let room = free(left).min(u64::from(u32::MAX)) as u32;
    if busy && room < target {
        return Admit::Wait;
    }
    Admit::Run {
        bound: if busy { target } else { cap },
        reserve: prompt.saturating_add(target.min(room)),
        evict,
    }
}

#[cfg(test)]
#[path = "slots_tests.rs"]
mod tests;
