//! Rules the deterministic simulator (`warden::arbiter_sim`) breaks on
//! purpose, to show its invariants catch each one: a test build's switch,
//! read at the one place each rule is kept (through `law::broken!`, false
//! in every other build). Nothing here exists outside
//! `cfg(test)`.

use std::cell::Cell;

/// A rule broken on purpose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mutant {
    /// The residents' law counts a resident in a turn as idle: an admission
    /// may name a busy resident for eviction.
    BusyIdle,
    /// The brake over residents evicts a resident in a turn.
    BrakeInFlight,
    /// An engine asked to leave does not refuse when a turn was routed to
    /// it since the decision.
    EvictRefusalOff,
    /// A load's reservation is never given back once its child is up.
    ReservationKept,
    /// The slots' law forgets the idle conversations' cells: a turn is
    /// admitted into a pool they fill.
    PoolOvercommit,
    /// A waiting load is not woken when a resident's turn ends or it
    /// leaves (only by the line, its deadline or a message).
    LostWake,
    /// The engine's brake carries out a respawn or an unload at once, with
    /// turns running on the child it stops.
    BrakeCutsTurn,
    /// The idle reap counts a model with turns waiting or running as idle.
    ReapBusy,
    /// A slot changes hands without its previous owner's conversation
    /// saved first (the slots' protocol, `actors::engine::moves`).
    ClaimUnsaved,
    /// A resident stopped for another's memory saves none of its
    /// conversations (`Retire::saves_kv`).
    EvictUnsaved,
    /// A conversation whose write failed leaves its slot (for room, a
    /// change of hands, a stop) without the loss said (`moves`).
    UnsavedSilent,
    /// The pool's law's move erases a conversation whose save failed
    /// (`moves`).
    CompactUnsaved,
    /// A save that no longer fits the child's window is restored all the
    /// same (`moves`).
    RestoreUnfit,
    /// A turn whose child died ends with the death, without the law of
    /// resume asked (`actors::engine::ending`).
    ResumeSkipped,
    /// A keep-alive of 0 unloads the model after its turn with other turns
    /// running or waiting (`ending`).
    UnloadBusy,
    /// A child is stopped before its conversations are saved
    /// (`actors::engine::leaving`).
    SaveAfterStop,
    /// A turn is admitted while a brake action waits for the running turns
    /// (`actors::engine::admission`).
    BrakeIgnored,
    /// A brake respawn stops its child without saving its conversations
    /// first (`actors::engine::braking`).
    RespawnUnsaved,
    /// The brake's unload retires the child before its controller is told,
    /// so the carry it records is made of state the retirement dropped
    /// (`braking`).
    ToldAfterRetire,
}

thread_local! {
    static ON: Cell<Option<Mutant>> = const { Cell::new(None) };
}

/// Whether `m` is switched on (on this thread).
pub fn is(m: Mutant) -> bool {
    ON.with(|c| c.get() == Some(m))
}

/// Switches `m` on (`None`: every rule kept).
pub fn set(m: Option<Mutant>) {
    ON.with(|c| c.set(m));
}
