//! The simulator's own pseudo-random numbers: SplitMix64 (Steele, Lea and Flood, "Fast
//! splittable pseudorandom number generators", OOPSLA 2014), seeded per stream.
//!
//! Every random choice of a workload comes from a stream owned by one virtual CPU, pair or
//! slot, drawn in that owner's program order. The draws therefore do not depend on how the
//! allocator's costs interleave the CPUs, so two policies see the same jobs, messages and
//! lifetimes, and the same seed gives the same run.

/// A SplitMix64 stream.
#[derive(Clone, Debug)]
pub struct Rng {
    state: u64,
}

const GOLDEN_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

impl Rng {
    /// The stream `stream` of master seed `seed`.
    pub fn new(seed: u64, stream: u64) -> Rng {
        let mut mix = Rng {
            state: seed ^ stream.wrapping_mul(0xd1b5_4a32_d192_ed03),
        };
        Rng {
            state: mix.next_u64(),
        }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GOLDEN_GAMMA);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)` with 53 bits.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in `0..n` (Lemire's multiply-shift; the bias is below 2^-32 for the small
    /// `n` used here). `n` must be positive.
    pub fn below(&mut self, n: u64) -> u64 {
        debug_assert!(n > 0);
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    /// Exponential with mean `mean`.
    pub fn exp(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.unit()).ln()
    }

    /// Standard normal (Box–Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.unit();
        let u2 = self.unit();
        (-2.0 * u1.ln()).sqrt() * (core::f64::consts::TAU * u2).cos()
    }

    /// Log-normal with median `median` and shape `sigma`.
    pub fn lognormal(&mut self, median: f64, sigma: f64) -> f64 {
        median * (sigma * self.normal()).exp()
    }

    /// Geometric on `1..` with mean `mean` (≥ 1).
    pub fn geometric(&mut self, mean: f64) -> u64 {
        self.sample_geometric(&Geometric::new(mean))
    }

    /// A draw of `dist`: [`Self::geometric`] without recomputing its constant logarithm.
    pub fn sample_geometric(&mut self, dist: &Geometric) -> u64 {
        match dist.ln_q {
            // The quotient of two logarithms ≤ 0 (`ln_q` < 0) is ≥ 0 (or −0), so the
            // conversion's truncation is `floor`, without libm's `floor` call (the
            // x86-64 baseline has no rounding instruction): the same draws.
            Some(ln_q) => 1 + ((1.0 - self.unit()).ln() / ln_q) as u64,
            None => 1,
        }
    }

    /// A permutation of `0..n` (Fisher–Yates).
    pub fn permutation(&mut self, n: u32) -> Vec<u32> {
        let mut items: Vec<u32> = (0..n).collect();
        for i in (1..items.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
        items
    }
}

/// A geometric distribution on `1..` ([`Rng::geometric`]) whose `ln(1 − p)` is computed
/// once: a workload that draws from the same one many times saves a `log` per draw, and
/// the draws are the same values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Geometric {
    /// `ln(1 − 1/mean)`, or `None` when the mean is at most 1 (every draw is 1).
    ln_q: Option<f64>,
}

impl Geometric {
    /// The distribution with mean `mean`.
    pub fn new(mean: f64) -> Geometric {
        let ln_q = (mean > 1.0).then(|| (1.0 - 1.0 / mean).ln());
        Geometric { ln_q }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_reproducible_and_distinct() {
        let a: Vec<u64> = (0..4).map(|_| Rng::new(7, 1).next_u64()).collect();
        assert!(a.windows(2).all(|w| w[0] == w[1]));
        assert_ne!(Rng::new(7, 1).next_u64(), Rng::new(7, 2).next_u64());
    }

    #[test]
    fn distributions_have_their_means() {
        let mut rng = Rng::new(1, 0);
        let n = 100_000;
        let exp: f64 = (0..n).map(|_| rng.exp(10.0)).sum::<f64>() / n as f64;
        assert!((exp - 10.0).abs() < 0.3, "{exp}");
        let geo: f64 = (0..n).map(|_| rng.geometric(8.0) as f64).sum::<f64>() / n as f64;
        assert!((geo - 8.0).abs() < 0.3, "{geo}");
        assert!((0..n).all(|_| rng.below(5) < 5));
    }
}
