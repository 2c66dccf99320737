//! A fixed-bucket histogram, as Prometheus exposes one: cumulative counts
//! per upper bound, plus the sum and the count.

/// Observations counted per bucket.
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    bounds: &'static [f64],
    /// Observations `<= bounds[i]` and above the previous bound (not
    /// cumulative; the renderer accumulates).
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    /// An empty histogram over ascending `bounds` (`+Inf` is implied).
    pub fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            counts: vec![0; bounds.len()],
            sum: 0.0,
            count: 0,
        }
    }

    /// Records one value (a NaN is ignored: it belongs to no bucket).
    pub fn observe(&mut self, v: f64) {
        if v.is_nan() {
            return;
        }
        if let Some(i) = self.bounds.iter().position(|b| v <= *b) {
            self.counts[i] += 1;
        }
        self.sum += v;
        self.count += 1;
    }

    /// `(le, cumulative count)` per bound, then `+Inf` with the total.
    pub fn cumulative(&self) -> Vec<(String, u64)> {
        let mut acc = 0;
        let mut out: Vec<(String, u64)> = self
            .bounds
            .iter()
            .zip(&self.counts)
            .map(|(b, n)| {
                acc += n;
                (format!("{b}"), acc)
            })
            .collect();
        out.push(("+Inf".into(), self.count));
        out
    }

    /// The sum of the observations.
    pub fn sum(&self) -> f64 {
        self.sum
    }

    /// How many were observed.
    pub fn count(&self) -> u64 {
        self.count
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_cumulative_and_inf_counts_everything() {
        let mut h = Histogram::new(&[1.0, 5.0]);
        for v in [0.5, 1.0, 3.0, 9.0, f64::NAN] {
            h.observe(v);
        }
        assert_eq!(
            h.cumulative(),
            [("1".to_string(), 2), ("5".to_string(), 3), ("+Inf".to_string(), 4)]
        );
        assert_eq!((h.sum(), h.count()), (13.5, 4));
    }
}
