//! Table tests of the brake controller's protocol (`brake_state`): what a
//! decision carried out leaves behind (the live state, an unload's carry,
//! the window memory, the status's action), with the time as plain
//! milliseconds: no clock, no sensor, no actor.

use super::*;

const MODEL: &str = "m";
/// A moment on the engine's clock, and one long after it.
const NOW: u64 = 1_000;
const LATER: u64 = NOW + 60 * 60 * 1000;

/// A brake whose live child runs at `cap` (none: uncapped), hurt at `hurt`.
fn brake(cap: Option<u32>, hurt: Option<u32>) -> Brake {
    Brake {
        state: BrakeState {
            cap,
            hurt,
            ..BrakeState::default()
        },
        ..Brake::default()
    }
}

/// The decision `action` taken from the brake's state now: what the law
/// would hand back, its next state `next` kept.
fn decided<A>(b: &mut Brake, action: A, next: BrakeState) -> Decided<A> {
    let before = b.state;
    b.state = next;
    Decided { action, before }
}

/// What the brake left: (live cap, the carry's model and cap, the window
/// memory's cap for MODEL, the status's last action).
type Left = (Option<u32>, Option<(String, Option<u32>)>, Option<u32>, Option<BrakeDid>);

fn left(b: &Brake) -> Left {
    (
        b.state.cap,
        b.reload.as_ref().map(|r| (r.model.clone(), r.cap)),
        b.memory.get(MODEL).and_then(|m| m.cap),
        b.last_action,
    )
}

#[test]
fn a_llama_decision_finished_leaves_its_state_its_carry_and_its_memory() {
    // (why, cap before, the action, what carrying it out came to, the state left)
    let rows: Vec<(&str, Option<u32>, Action, Carried<'_>, Left)> = vec![
        (
            "a shrink that came up runs at its cap, remembered for the next spawn",
            None,
            Action::Shrink { cap: 4096 },
            Carried::Respawned {
                cap: 4096,
                pinned: false,
            },
            (Some(4096), None, Some(4096), Some(BrakeDid::ShrinkRespawn)),
        ),
        (
            "a growth that came up: the same, larger",
            Some(4096),
            Action::Grow { cap: 6144 },
            Carried::Respawned {
                cap: 6144,
                pinned: false,
            },
            (Some(6144), None, Some(6144), Some(BrakeDid::GrowRespawn)),
        ),
        (
            "a respawn that failed is an unload: the carry holds the cap, the live state is gone",
            None,
            Action::Shrink { cap: 4096 },
            Carried::RespawnFailed {
                cap: 4096,
                pinned: false,
                model: MODEL,
            },
            (None, Some((MODEL.into(), Some(4096))), Some(4096), Some(BrakeDid::ShrinkRespawn)),
        ),
        (
            "an emergency unload carries the window it ran at",
            Some(4096),
            Action::Unload,
            Carried::Unloading { model: MODEL },
            (None, Some((MODEL.into(), Some(4096))), Some(4096), Some(BrakeDid::Unload)),
        ),
        (
            "an armed unload only says so",
            Some(4096),
            Action::ArmUnload,
            Carried::Said,
            (Some(4096), None, None, Some(BrakeDid::ArmUnload)),
        ),
        (
            "nothing decided leaves nothing, not even a status action",
            Some(4096),
            Action::None,
            Carried::Said,
            (Some(4096), None, None, None),
        ),
    ];
    for (why, cap, action, carried, want) in rows {
        let mut b = brake(cap, None);
        let next = BrakeState {
            cap,
            ..BrakeState::default()
        };
        let d = decided(&mut b, action, next);
        b.finish_llama(d, carried, Some(MODEL), NOW);
        assert_eq!(left(&b), want, "{why}");
    }
}

#[test]
fn an_unloads_carry_seeds_the_models_next_spawn_until_it_expires() {
    let mut b = brake(Some(4096), Some(8192));
    let next = b.state;
    let d = decided(&mut b, Action::Unload, next);
    b.finish_llama(d, Carried::Unloading { model: MODEL }, Some(MODEL), NOW);
    assert!(b.reload_pending(MODEL, None, NOW + 1), "the reload is announced");
    assert!(!b.reload_pending("other", None, NOW + 1), "for its own model only");
    let seed = b.seed(MODEL, NOW + 1);
    assert_eq!((seed.cap, seed.hurt), (Some(4096), Some(8192)));
    b.started(seed);
    assert!(b.reload.is_none(), "a spawn takes the carry");
    // Long after, neither the carry nor the window memory seeds it.
    let mut b = brake(Some(4096), Some(8192));
    let next = b.state;
    let d = decided(&mut b, Action::Unload, next);
    b.finish_llama(d, Carried::Unloading { model: MODEL }, None, NOW);
    assert_eq!(b.seed(MODEL, LATER), BrakeState::default());
    assert!(!b.reload_pending(MODEL, None, LATER));
}

#[test]
fn an_mlx_decision_that_did_not_complete_goes_back_to_its_state_before() {
    let before = BrakeState {
        cap: Some(8192),
        calm_streak: 2,
        ..BrakeState::default()
    };
    let next = BrakeState {
        cap: Some(4096),
        calm_streak: 0,
        shrunk_since_turn: true,
        ..BrakeState::default()
    };
    // (why, the action, what carrying it out came to, the live cap left, memory written)
    let rows = [
        (
            "a bound the child applied is the new cap, remembered",
            MlxAction::Shrink { cap: 4096 },
            Carried::Bounded { applied: true },
            Some(4096),
            Some(4096),
        ),
        (
            "a bound the child refused leaves the cap it had",
            MlxAction::Shrink { cap: 4096 },
            Carried::Bounded { applied: false },
            Some(8192),
            None,
        ),
        (
            "an incomplete release: the state before it, the next sample decides again",
            MlxAction::Release,
            Carried::Incomplete,
            Some(8192),
            None,
        ),
    ];
    for (why, action, carried, cap, memory) in rows {
        let mut b = Brake {
            state: before,
            ..Brake::default()
        };
        let d = decided(&mut b, action, next);
        b.finish_mlx(d, carried, Some(MODEL), NOW);
        assert_eq!(b.state.cap, cap, "{why}");
        assert_eq!(b.memory.get(MODEL).and_then(|m| m.cap), memory, "{why}");
        assert_eq!(b.last_action, action.did(), "{why}: the status says what was tried");
    }
}

#[test]
fn idle_samples_are_paced_on_the_clock_given() {
    let skip = std::time::Duration::from_secs(10);
    let mut b = Brake::default();
    // A turn's points are always taken; an idle one past the pacing only.
    assert!(b.take_sample(Point::TurnEnd, NOW, None, skip));
    assert!(!b.take_sample(Point::Idle, NOW + 1_000, None, skip));
    assert!(b.take_sample(Point::Idle, NOW + 10_000, None, skip));
    // A use since the last sample puts the next idle one off again.
    assert!(!b.take_sample(Point::Idle, NOW + 21_000, Some(NOW + 15_000), skip));
}
