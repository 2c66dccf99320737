//! The rates `law::compact` weighs, measured on the child as it works: the
//! decode time one idle conversation's cell adds to a token (fitted over
//! lone turns' own timings against the other conversations' cells they ran
//! beside), the store's write and
//! read rates (each slot action's own timing), and how long this model's
//! answers run. Each starts from its prior (`compact::Rates::prior`,
//! `PRIOR_ANSWER_TOKENS`) and follows what the child shows. Pure: the
//! engine feeds it the child's counts.

use std::collections::VecDeque;

use super::compact::{PRIOR_ANSWER_TOKENS, Rates};

/// Lone turns kept for the fit: the last few dozen, so the fit follows a
/// machine whose load changes.
pub const FIT_SAMPLES: usize = 32;

/// The least difference in cells beside them between two lone turns whose
/// slope counts: closer pairs' slopes are mostly the machine's noise (a
/// decode rate varies 10-20 % from minute to minute here).
pub const FIT_PAIR_CELLS: u32 = 1024;

/// The most two lone turns' own contexts may differ for their pair to
/// count: a turn's own cells are attended for real, a cost ten times a
/// masked cell's here (SmolLM2: ~5 µs against 0.5 µs per token), so pairs
/// whose own contexts differ would measure that instead.
pub const FIT_OWN_SLACK_CELLS: u32 = 256;

/// The fewest pairs a slope is fitted from.
pub const FIT_MIN_PAIRS: usize = 3;

/// How far a fitted slope may stray from the prior, either way: beyond
/// that, a noisy machine is a likelier cause than a different kernel.
pub const FIT_MAX_FACTOR: f64 = 4.0;

/// The fewest tokens a lone turn must decode to be a sample: a short
/// answer's rate is mostly its first steps' warm-up.
pub const FIT_MIN_TOKENS: u32 = 32;

/// The weight of the newest reading in a running mean.
const EWMA_NEW: f64 = 0.3;

/// A running mean that starts at its prior.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Ewma {
    value: f64,
    seen: u32,
}

impl Ewma {
    fn new(prior: f64) -> Self {
        Self { value: prior, seen: 0 }
    }

    fn add(&mut self, x: f64) {
        if !x.is_finite() || x < 0.0 {
            return;
        }
        self.value = if self.seen == 0 { x } else { self.value + EWMA_NEW * (x - self.value) };
        self.seen = self.seen.saturating_add(1);
    }
}

/// What one model's child has shown of its rates.
#[derive(Debug, Clone, PartialEq)]
pub struct Meter {
    prior: Rates,
    /// Lone turns: (cells of other conversations beside it, its own
    /// context's cells, ms per decoded token).
    lone: VecDeque<(u32, u32, f64)>,
    save: Ewma,
    restore: Ewma,
    answer: Ewma,
}

/// The rates in force, and which were measured (for the status).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reading {
    /// The rates.
    pub rates: Rates,
    /// The decode cost is this child's fit, not the prior.
    pub decode_measured: bool,
    /// Saves and restores timed.
    pub saves_timed: u32,
    /// Restores timed.
    pub restores_timed: u32,
    /// The expected answer, tokens.
    pub typical_answer: u32,
}

impl Meter {
    /// A meter for a model whose cells are `kv_bytes_per_cell` bytes.
    pub fn new(kv_bytes_per_cell: u64) -> Self {
        let prior = Rates::prior(kv_bytes_per_cell);
        Self {
            prior,
            lone: VecDeque::with_capacity(FIT_SAMPLES),
            save: Ewma::new(prior.save_ns_per_cell),
            restore: Ewma::new(prior.restore_ns_per_cell),
            answer: Ewma::new(f64::from(PRIOR_ANSWER_TOKENS)),
        }
    }

    /// A turn that ran alone on the child decoded `tokens` in `ms` beside
    /// `beside` cells of idle conversations, its own context about `own`
    /// cells.
    pub fn lone_turn(&mut self, beside: u32, own: u32, tokens: u32, ms: f64) {
        // A NaN or non-positive time is no measurement.
        if tokens < FIT_MIN_TOKENS || ms.is_nan() || ms <= 0.0 {
            return;
        }
        if self.lone.len() == FIT_SAMPLES {
            self.lone.pop_front();
        }
        self.lone.push_back((beside, own, ms / f64::from(tokens)));
    }

    /// A turn answered `tokens` (the child's count), bounded or not.
    pub fn answered(&mut self, tokens: u32) {
        self.answer.add(f64::from(tokens));
    }

    /// A save wrote `cells` in `ms` (the child's own timing).
    pub fn saved(&mut self, cells: u32, ms: f64) {
        if cells > 0 {
            self.save.add(ms * 1e6 / f64::from(cells));
        }
    }

    /// A restore read `cells` in `ms`.
    pub fn restored(&mut self, cells: u32, ms: f64) {
        if cells > 0 {
            self.restore.add(ms * 1e6 / f64::from(cells));
        }
    }

    /// The slope of ms per token over the cells beside a turn, in ns per
    /// cell: the median of the slopes between pairs of lone turns whose own
    /// contexts are alike and whose cells beside differ by at least
    /// `FIT_PAIR_CELLS` (Theil and Sen's estimator: a least-squares line
    /// follows a turn slowed by another process wherever it lies; the
    /// median of the pairs' slopes does not). `None` below `FIT_MIN_PAIRS`.
    fn fit(&self) -> Option<f64> {
        let mut slopes = Vec::new();
        for (i, &(b1, o1, y1)) in self.lone.iter().enumerate() {
            for &(b2, o2, y2) in self.lone.iter().skip(i + 1) {
                let db = f64::from(b2) - f64::from(b1);
                if o1.abs_diff(o2) <= FIT_OWN_SLACK_CELLS && db.abs() >= f64::from(FIT_PAIR_CELLS) {
                    slopes.push((y2 - y1) / db * 1e6);
                }
            }
        }
        if slopes.len() < FIT_MIN_PAIRS {
            return None;
        }
        slopes.sort_by(f64::total_cmp);
        let m = slopes.len();
        Some(if m % 2 == 1 {
            slopes[m / 2]
        } else {
            (slopes[m / 2 - 1] + slopes[m / 2]) / 2.0
        })
    }

    /// The rates in force now.
    pub fn reading(&self) -> Reading {
        let p = self.prior.cell_decode_ns;
        let fit = self.fit();
        Reading {
            rates: Rates {
                cell_decode_ns: fit.map_or(p, |f| f.clamp(p / FIT_MAX_FACTOR, p * FIT_MAX_FACTOR)),
                save_ns_per_cell: self.save.value,
                restore_ns_per_cell: self.restore.value,
            },
            decode_measured: fit.is_some(),
            saves_timed: self.save.seen,
            restores_timed: self.restore.seen,
            typical_answer: self.answer.value.round().clamp(1.0, f64::from(u32::MAX)) as u32,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMOL: u64 = 23_040;

    /// Before the child shows anything, the priors: the KV shape over the
    /// rates measured here, and the prior answer.
    #[test]
    fn a_fresh_meter_reads_the_priors() {
        let r = Meter::new(SMOL).reading();
        assert_eq!(r.rates, Rates::prior(SMOL));
        assert!(!r.decode_measured);
        assert_eq!((r.saves_timed, r.restores_timed, r.typical_answer), (0, 0, PRIOR_ANSWER_TOKENS));
        // why: 23,040 B at 46 B/ns is about 0.5 µs per cell, the measure
        assert!((r.rates.cell_decode_ns - 500.9).abs() < 1.0, "{}", r.rates.cell_decode_ns);
    }

    /// Lone turns whose own contexts are alike give the slope of their ms
    /// per token over the cells beside them; too few pairs keep the prior.
    #[test]
    fn the_decode_cost_is_fitted_over_like_turns_only() {
        let prior = Rates::prior(SMOL).cell_decode_ns;
        // (beside, own, ms per token) of each lone turn, and the slope
        type Row<'a> = (&'a [(u32, u32, f64)], Option<f64>);
        let rows: [Row; 6] = [
            // why: 0.5 µs per cell beside, exactly: 8 ms + 0.5 µs × cells
            (&[(0, 300, 8.0), (2000, 300, 9.0), (4000, 300, 10.0), (6000, 300, 11.0)], Some(500.0)),
            // why: two pairs are too few
            (&[(0, 300, 8.0), (3000, 300, 9.5), (600, 300, 8.3)], None),
            // why: turns whose own contexts differ measure their own
            // attention, not the cells beside: no pair counts
            (&[(0, 300, 8.0), (2000, 2300, 20.0), (4000, 4300, 32.0), (6000, 6300, 44.0)], None),
            // why: a slope beyond FIT_MAX_FACTOR is clamped to it
            (&[(0, 300, 8.0), (2000, 300, 18.0), (4000, 300, 28.0), (6000, 300, 38.0)], Some(prior * FIT_MAX_FACTOR)),
            // why: a machine that got faster as cells grew (noise) clamps low
            (&[(0, 300, 11.0), (2000, 300, 10.0), (4000, 300, 9.0), (6000, 300, 8.0)], Some(prior / FIT_MAX_FACTOR)),
            // why: one turn slowed by another process does not move the
            // median of the pairs' slopes off the line the others lie on
            (
                &[(0, 300, 8.0), (1500, 300, 8.75), (3000, 300, 9.5), (4500, 300, 10.25), (6000, 300, 31.0)],
                Some(500.0),
            ),
        ];
        for (i, (samples, want)) in rows.iter().enumerate() {
            let mut m = Meter::new(SMOL);
            for &(beside, own, ms_per_token) in samples.iter() {
                m.lone_turn(beside, own, 100, ms_per_token * 100.0);
            }
            let r = m.reading();
            assert_eq!(r.decode_measured, want.is_some(), "row {i}");
            let got = r.rates.cell_decode_ns;
            let want = want.unwrap_or(prior);
            assert!((got - want).abs() < 1e-6, "row {i}: {got} against {want}");
        }
    }

    /// A short answer is no sample; the ring keeps the last FIT_SAMPLES.
    #[test]
    fn short_turns_are_not_samples_and_old_ones_leave() {
        let mut m = Meter::new(SMOL);
        for c in [0, 2000, 4000, 6000] {
            m.lone_turn(c, 300, FIT_MIN_TOKENS - 1, 100.0);
        }
        assert!(!m.reading().decode_measured);
        for i in 0..(FIT_SAMPLES as u32 + 8) {
            m.lone_turn(i * 200, 300, 100, 800.0 + f64::from(i * 200) * 100.0 * 0.0005);
        }
        assert_eq!(m.lone.len(), FIT_SAMPLES);
        assert!((m.reading().rates.cell_decode_ns - 500.0).abs() < 1e-3);
    }

    /// Saves, restores and answers: the first reading replaces the prior,
    /// later ones move the mean; nonsense is ignored.
    #[test]
    fn store_rates_and_answers_follow_the_child() {
        let mut m = Meter::new(SMOL);
        m.saved(2000, 40.0);
        m.restored(2000, 60.0);
        m.answered(100);
        let r = m.reading();
        assert_eq!((r.rates.save_ns_per_cell, r.rates.restore_ns_per_cell), (20_000.0, 30_000.0));
        assert_eq!(r.typical_answer, 100);
        m.saved(2000, 80.0);
        m.saved(0, 1.0);
        m.answered(200);
        let r = m.reading();
        assert_eq!((r.saves_timed, r.restores_timed), (2, 1));
        assert!((r.rates.save_ns_per_cell - 26_000.0).abs() < 1e-6);
        assert_eq!(r.typical_answer, 130);
        m.restored(100, f64::NAN);
        assert_eq!(m.reading().restores_timed, 1);
    }
}
