//! The walk the engine's order machines share (`admission`, `ending`,
//! `loading`): a table from where a machine stands to the step it asks
//! there (or none) and where it goes next, walked until a row asks a step;
//! a verdict an answer gave is handed out first. No I/O.

/// From `at`, the rows of `table` until one asks a step: that step, with
/// `at` moved past it; `None` once `table` says the machine is over (it
/// returns `None`). A step kept in `held` (a verdict an answer gave) comes
/// first.
pub(crate) fn walk<A: Copy, S>(
    at: &mut A,
    held: &mut Option<S>,
    mut table: impl FnMut(A) -> Option<(Option<S>, A)>,
) -> Option<S> {
    if let Some(s) = held.take() {
        return Some(s);
    }
    loop {
        let (step, then) = table(*at)?;
        *at = then;
        if step.is_some() {
            return step;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::walk;

    /// Rows that ask nothing are passed; a held step comes first; an
    /// ended table ends the walk.
    #[test]
    fn a_walk_stops_at_each_step_asked() {
        let table = |at: u8| match at {
            0 => Some((None, 1)),
            1 => Some((Some('a'), 2)),
            2 => Some((Some('b'), 3)),
            _ => None,
        };
        let (mut at, mut held) = (0u8, Some('v'));
        let got: Vec<char> = std::iter::from_fn(|| walk(&mut at, &mut held, table)).collect();
        assert_eq!(got, vec!['v', 'a', 'b']);
        assert_eq!(at, 3);
    }
}
