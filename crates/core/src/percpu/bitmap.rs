//! A fixed-size bitmap with the searches `lib/find_bit.c` offers (`find_next_bit`,
//! `find_next_zero_bit`, `find_last_bit`), word at a time.
//!
//! Neighbours: the chunk's allocation, bound and populated maps ([`super::chunk`]).

use alloc::vec;
use alloc::vec::Vec;
use core::ops::Range;

const WORD_BITS: usize = 64;

/// A bitmap of `len` bits, all clear at first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Bitmap {
    words: Vec<u64>,
    len: usize,
}

impl Bitmap {
    pub(crate) fn new(len: usize) -> Bitmap {
        Bitmap {
            words: vec![0; len.div_ceil(WORD_BITS)],
            len,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn test(&self, bit: usize) -> bool {
        debug_assert!(bit < self.len);
        self.words[bit / WORD_BITS] & (1 << (bit % WORD_BITS)) != 0
    }

    pub(crate) fn set(&mut self, bit: usize) {
        debug_assert!(bit < self.len);
        self.words[bit / WORD_BITS] |= 1 << (bit % WORD_BITS);
    }

    #[cfg(test)]
    pub(crate) fn clear(&mut self, bit: usize) {
        debug_assert!(bit < self.len);
        self.words[bit / WORD_BITS] &= !(1 << (bit % WORD_BITS));
    }

    /// Set or clear every bit of `range`, a word at a time where the range covers one.
    pub(crate) fn assign_range(&mut self, range: Range<usize>, value: bool) {
        debug_assert!(range.end <= self.len);
        let mut bit = range.start;
        while bit < range.end {
            let word = bit / WORD_BITS;
            let lo = bit % WORD_BITS;
            let hi = (range.end - word * WORD_BITS).min(WORD_BITS);
            let mask = mask_between(lo, hi);
            if value {
                self.words[word] |= mask;
            } else {
                self.words[word] &= !mask;
            }
            bit = word * WORD_BITS + hi;
        }
    }

    /// The first set bit in `from..end`, or `end` if none (`find_next_bit`).
    pub(crate) fn next_set(&self, from: usize, end: usize) -> usize {
        self.next_matching(from, end, false)
    }

    /// The first clear bit in `from..end`, or `end` if none (`find_next_zero_bit`).
    pub(crate) fn next_clear(&self, from: usize, end: usize) -> usize {
        self.next_matching(from, end, true)
    }

    fn next_matching(&self, from: usize, end: usize, clear: bool) -> usize {
        debug_assert!(end <= self.len);
        let mut bit = from;
        while bit < end {
            let word = bit / WORD_BITS;
            let raw = if clear {
                !self.words[word]
            } else {
                self.words[word]
            };
            let bits = raw & !mask_between(0, bit % WORD_BITS);
            if bits != 0 {
                return (word * WORD_BITS + bits.trailing_zeros() as usize).min(end);
            }
            bit = (word + 1) * WORD_BITS;
        }
        end
    }

    /// The last set bit in `0..end`, or `end` if none (`find_last_bit`).
    pub(crate) fn last_set(&self, end: usize) -> usize {
        let mut word_end = end;
        while word_end > 0 {
            let word = (word_end - 1) / WORD_BITS;
            let hi = word_end - word * WORD_BITS;
            let bits = self.words[word] & mask_between(0, hi);
            if bits != 0 {
                return word * WORD_BITS + (WORD_BITS - 1 - bits.leading_zeros() as usize);
            }
            word_end = word * WORD_BITS;
        }
        end
    }

    /// The maximal runs of clear bits inside `range`, in order
    /// (`for_each_clear_bitrange_from`).
    pub(crate) fn clear_runs(&self, range: Range<usize>) -> Runs<'_> {
        Runs {
            map: self,
            at: range.start,
            end: range.end,
            clear: true,
        }
    }

    /// The maximal runs of set bits inside `range`, in order (`for_each_set_bitrange`).
    pub(crate) fn set_runs(&self, range: Range<usize>) -> Runs<'_> {
        Runs {
            map: self,
            at: range.start,
            end: range.end,
            clear: false,
        }
    }

    /// How many bits of `range` are set.
    pub(crate) fn count_set(&self, range: Range<usize>) -> usize {
        self.set_runs(range).map(|r| r.len()).sum()
    }
}

/// Iterator over runs of equal bits; see [`Bitmap::clear_runs`].
pub(crate) struct Runs<'a> {
    map: &'a Bitmap,
    at: usize,
    end: usize,
    clear: bool,
}

impl Iterator for Runs<'_> {
    type Item = Range<usize>;

    fn next(&mut self) -> Option<Range<usize>> {
        let start = self.map.next_matching(self.at, self.end, self.clear);
        if start >= self.end {
            return None;
        }
        let stop = self.map.next_matching(start, self.end, !self.clear);
        self.at = stop;
        Some(start..stop)
    }
}

/// Bits `lo..hi` of a word set (`hi` ≤ 64).
fn mask_between(lo: usize, hi: usize) -> u64 {
    let upper = if hi >= WORD_BITS {
        u64::MAX
    } else {
        (1u64 << hi) - 1
    };
    let lower = if lo >= WORD_BITS {
        u64::MAX
    } else {
        (1u64 << lo) - 1
    };
    upper & !lower
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn searches_agree_with_a_bit_by_bit_walk() {
        let mut map = Bitmap::new(200);
        map.assign_range(3..70, true);
        map.clear(64);
        map.set(150);
        assert_eq!(map.next_set(0, 200), 3);
        assert_eq!(map.next_clear(3, 200), 64);
        assert_eq!(map.next_clear(65, 200), 70);
        assert_eq!(map.next_set(70, 200), 150);
        assert_eq!(map.next_set(151, 200), 200);
        assert_eq!(map.next_set(151, 160), 160);
        assert_eq!(map.last_set(150), 69);
        assert_eq!(map.last_set(3), 3);
        assert_eq!(map.last_set(200), 150);
        let runs: Vec<_> = map.clear_runs(0..100).collect();
        assert_eq!(runs, vec![0..3, 64..65, 70..100]);
        assert_eq!(map.count_set(0..200), 67 - 1 + 1);
    }
}
