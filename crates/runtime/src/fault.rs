//! Fault injection: make a chosen fraction of allocations fail, so callers' error paths
//! run (Linux: `fail_page_alloc`, with its `probability`, `times` and `min-order` knobs).

use std::cell::Cell;
use std::sync::atomic::{AtomicI64, AtomicU32, Ordering::Relaxed};

use mmkit_core::Order;

/// How often allocations fail on purpose.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FaultConfig {
    /// Fraction of eligible allocations that fail, 0.0 ..= 1.0.
    pub probability: f64,
    /// Only orders at or above this fail (`min-order`).
    pub min_order: u8,
    /// At most this many failures; negative for no limit (`times`).
    pub times: i64,
}

impl Default for FaultConfig {
    fn default() -> FaultConfig {
        FaultConfig {
            probability: 0.0,
            min_order: 0,
            times: -1,
        }
    }
}

/// The live injector.
#[derive(Debug, Default)]
pub(crate) struct FaultInjector {
    /// Probability in parts per 2^32.
    threshold: AtomicU32,
    min_order: AtomicU32,
    times_left: AtomicI64,
    pub(crate) injected: std::sync::atomic::AtomicU64,
}

thread_local! {
    static RNG: Cell<u64> = Cell::new(seed());
}

fn seed() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(std::thread::current().id()) | 1
}

fn next_random() -> u32 {
    RNG.with(|state| {
        let mut x = state.get() | 1;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        state.set(x);
        (x >> 32) as u32
    })
}

impl FaultInjector {
    pub(crate) fn configure(&self, config: FaultConfig) {
        let threshold = (config.probability.clamp(0.0, 1.0) * u32::MAX as f64) as u32;
        self.threshold.store(threshold, Relaxed);
        self.min_order.store(config.min_order as u32, Relaxed);
        self.times_left.store(config.times, Relaxed);
    }

    /// Whether this allocation should fail.
    pub(crate) fn should_fail(&self, order: Order) -> bool {
        let threshold = self.threshold.load(Relaxed);
        if threshold == 0 || (order.get() as u32) < self.min_order.load(Relaxed) {
            return false;
        }
        if next_random() > threshold {
            return false;
        }
        let times = self.times_left.load(Relaxed);
        if times == 0 {
            return false;
        }
        if times > 0 && self.times_left.fetch_sub(1, Relaxed) <= 0 {
            return false;
        }
        self.injected.fetch_add(1, Relaxed);
        true
    }
}
