//! Order statistics for small noisy samples: median, nearest-rank
//! percentiles, min and max. NaN-free inputs are assumed (callers drop
//! missing values before).

/// A sorted copy.
fn sorted(xs: &[f64]) -> Vec<f64> {
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    v
}

/// The median (mean of the two middle values for an even count); NaN when empty.
pub fn median(xs: &[f64]) -> f64 {
    let v = sorted(xs);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The nearest-rank `p`-th percentile (0 < p <= 100); NaN when empty.
pub fn percentile(xs: &[f64], p: f64) -> f64 {
    let v = sorted(xs);
    if v.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

/// The smallest value; NaN when empty.
pub fn min(xs: &[f64]) -> f64 {
    xs.iter().copied().fold(f64::NAN, f64::min)
}

/// The largest value; NaN when empty.
pub fn max(xs: &[f64]) -> f64 {
    xs.iter().copied().fold(f64::NAN, f64::max)
}

/// `min..max` with `digits` decimals, or `-` when empty.
pub fn spread(xs: &[f64], digits: usize) -> String {
    if xs.is_empty() {
        return "-".into();
    }
    format!("{:.digits$}..{:.digits$}", min(xs), max(xs))
}

/// Student's t at 97.5% (a two-sided 95% interval) for `df` degrees of
/// freedom: the table's values to 30, the normal's beyond.
fn t975(df: usize) -> f64 {
    const T: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
    ];
    T.get(df.wrapping_sub(1)).copied().unwrap_or(1.96)
}

/// The mean and the half-width of its 95% interval (Student's t over the
/// sample's standard error); NaN when fewer than two values.
pub fn mean_interval(xs: &[f64]) -> (f64, f64) {
    let n = xs.len();
    if n < 2 {
        return (f64::NAN, f64::NAN);
    }
    let mean = xs.iter().sum::<f64>() / n as f64;
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    (mean, t975(n - 1) * (var / n as f64).sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_statistics() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
        let xs: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&xs, 99.0), 99.0);
        assert_eq!(percentile(&xs, 50.0), 50.0);
        assert_eq!(percentile(&[5.0], 99.0), 5.0);
        assert_eq!(min(&[2.0, 1.0]), 1.0);
        assert_eq!(max(&[2.0, 1.0]), 2.0);
        let (m, h) = mean_interval(&[1.0, 2.0, 3.0]);
        assert_eq!(m, 2.0);
        // sd 1, se 1/sqrt(3), t(2) 4.303
        assert!((h - 4.303 / 3f64.sqrt()).abs() < 1e-9);
        assert!(mean_interval(&[1.0]).0.is_nan());
    }
}
