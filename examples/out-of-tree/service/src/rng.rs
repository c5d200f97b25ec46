//! A small deterministic generator for the workers' choices (xorshift64*), so that a run
//! is the same sequence of requests every time; only the threads' interleaving varies.

/// xorshift64* (Vigna 2016).
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed` (any value; 0 is moved off the fixed point).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number below `bound` (which is not 0).
    pub fn below(&mut self, bound: usize) -> usize {
        (self.next_u64() % bound as u64) as usize
    }
}
