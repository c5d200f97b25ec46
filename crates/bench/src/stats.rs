//! Order statistics of samples.

/// The `q`-quantile (0 ≤ q ≤ 1) of `values` by the nearest-rank method; `None` if empty.
/// Sorts `values`.
pub fn quantile(values: &mut [f64], q: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_unstable_by(f64::total_cmp);
    let rank = (q.clamp(0.0, 1.0) * values.len() as f64).ceil() as usize;
    Some(values[rank.clamp(1, values.len()) - 1])
}

/// The median (the lower one of an even count); `None` if empty.
pub fn median(values: &mut [f64]) -> Option<f64> {
    quantile(values, 0.5)
}

/// The `q`-quantile of integer samples, like [`quantile`]. Sorts `values`.
pub fn quantile_u64(values: &mut [u64], q: f64) -> Option<u64> {
    if values.is_empty() {
        return None;
    }
    values.sort_unstable();
    let rank = (q.clamp(0.0, 1.0) * values.len() as f64).ceil() as usize;
    Some(values[rank.clamp(1, values.len()) - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_quantiles() {
        let mut v = [5.0, 1.0, 3.0, 2.0, 4.0];
        assert_eq!(median(&mut v), Some(3.0));
        assert_eq!(quantile(&mut v, 0.0), Some(1.0));
        assert_eq!(quantile(&mut v, 1.0), Some(5.0));
        let mut w: Vec<u64> = (1..=100).collect();
        assert_eq!(quantile_u64(&mut w, 0.99), Some(99));
        assert_eq!(quantile_u64(&mut w, 0.5), Some(50));
        assert_eq!(median(&mut []), None);
    }
}
