//! Block metadata: the hints that let the allocator skip most of the bitmap.
//!
//! Linux counterpart: `struct pcpu_block_md` and `pcpu_block_update`,
//! `pcpu_check_block_hint`, `pcpu_next_hint` in `mm/percpu.c` (v5.14). One
//! [`BlockMd`] describes each page-sized block of a chunk's allocation map, and one more
//! describes the whole chunk. Everything is in bits of the allocation map (4 bytes each).
//! Neighbours: [`super::chunk`] keeps these up to date on allocation and free.

/// Hints about the free space of one block (or of a whole chunk), in allocation-map bits.
///
/// # Invariants
///
/// The hints are lower bounds, as Linux keeps them: each names space that is free, none
/// names more than is free. For a block: the contig hint is a free run no longer than the
/// longest, and it is the whole block exactly when the block is empty (the empty-page
/// counts rest on that); `left_free`/`right_free` are no longer than the free runs at the
/// edges; `first_free` is the first free bit (any value when the block is full: Linux
/// does not update it for blocks an allocation covers); a non-zero scan hint is a free
/// run no longer than the contig hint and not after it unless equal to it. They are not
/// exact: a refresh promotes the scan hint and scans only past it (and resets
/// `right_free`), so a longer run before it can go unseen until a later free. For a
/// chunk the same holds, except that no hint is exact for empty chunks either.
/// `PercpuAllocator::verify` checks all of this.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct BlockMd {
    /// Length of the scan hint: a free run before the contig hint.
    pub scan_hint: usize,
    /// Where the scan hint starts.
    pub scan_hint_start: usize,
    /// Length of the largest known free run.
    pub contig_hint: usize,
    /// Where it starts.
    pub contig_hint_start: usize,
    /// Free bits at the start of the block.
    pub left_free: usize,
    /// Free bits at the end of the block.
    pub right_free: usize,
    /// The first free bit.
    pub first_free: usize,
    /// Bits this metadata describes.
    pub nr_bits: usize,
}

impl BlockMd {
    /// Metadata of an all-free region of `nr_bits` (`pcpu_init_md_block`).
    pub(crate) fn new_free(nr_bits: usize) -> BlockMd {
        BlockMd {
            scan_hint: 0,
            scan_hint_start: 0,
            contig_hint: nr_bits,
            contig_hint_start: 0,
            left_free: nr_bits,
            right_free: nr_bits,
            first_free: 0,
            nr_bits,
        }
    }

    /// Metadata of a block an allocation covers entirely (the in-between blocks of
    /// `pcpu_block_update_hint_alloc`). `first_free` is left as it was, as Linux does.
    pub(crate) fn fill(&mut self) {
        self.scan_hint = 0;
        self.contig_hint = 0;
        self.left_free = 0;
        self.right_free = 0;
    }

    /// Metadata of a block a free makes entirely free.
    pub(crate) fn reset_free(&mut self) {
        *self = BlockMd::new_free(self.nr_bits);
    }

    /// Learn the free run `start..end` (`pcpu_block_update`). Keeps the better aligned of
    /// two equal runs as the contig hint, so aligned requests fit without a scan, and keeps
    /// the scan hint before the contig hint.
    pub(crate) fn update(&mut self, start: usize, end: usize) {
        let contig = end - start;
        self.first_free = self.first_free.min(start);
        if start == 0 {
            self.left_free = contig;
        }
        if end == self.nr_bits {
            self.right_free = contig;
        }
        if contig > self.contig_hint {
            // Promote the old contig hint to scan hint when it lies before the new one.
            if start > self.contig_hint_start {
                if self.contig_hint > self.scan_hint {
                    self.scan_hint_start = self.contig_hint_start;
                    self.scan_hint = self.contig_hint;
                } else if start < self.scan_hint_start {
                    // The old contig hint equalled the scan hint; keep
                    // scan_hint_start < contig_hint_start.
                    self.scan_hint = 0;
                }
            } else {
                self.scan_hint = 0;
            }
            self.contig_hint_start = start;
            self.contig_hint = contig;
        } else if contig == self.contig_hint {
            if self.contig_hint_start != 0
                && (start == 0 || start.trailing_zeros() > self.contig_hint_start.trailing_zeros())
            {
                // `start` is better aligned: use it.
                self.contig_hint_start = start;
                if start < self.scan_hint_start && self.contig_hint > self.scan_hint {
                    self.scan_hint = 0;
                }
            } else if start > self.scan_hint_start || self.contig_hint > self.scan_hint {
                // Equal to the contig hint: the scan hint may remember it if it is
                // farther or larger than the current scan hint.
                self.scan_hint_start = start;
                self.scan_hint = contig;
            }
        } else if start < self.contig_hint_start
            && (contig > self.scan_hint
                || (contig == self.scan_hint && start > self.scan_hint_start))
        {
            // Smaller than the contig hint: only the scan hint may learn it.
            self.scan_hint_start = start;
            self.scan_hint = contig;
        }
    }

    /// Whether `bits` at alignment `align` (in bits) fit in the contig hint
    /// (`pcpu_check_block_hint`).
    pub(crate) fn fits(&self, bits: usize, align: usize) -> bool {
        let skip = self.contig_hint_start.next_multiple_of(align) - self.contig_hint_start;
        skip + bits <= self.contig_hint
    }

    /// Where a search for `bits` may start (`pcpu_next_hint`): past the scan hint when the
    /// request is larger than it and the contig hint lies after it, else at `first_free`.
    pub(crate) fn next_hint(&self, bits: usize) -> usize {
        if self.scan_hint != 0
            && self.contig_hint_start > self.scan_hint_start
            && bits > self.scan_hint
        {
            return self.scan_hint_start + self.scan_hint;
        }
        self.first_free
    }
}

/// Whether `a_start..a_end` and `b_start..b_end` overlap (`pcpu_region_overlap`).
pub(crate) fn overlaps(a_start: usize, a_end: usize, b_start: usize, b_end: usize) -> bool {
    a_start < b_end && b_start < a_end
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn larger_run_demotes_the_old_contig_hint_to_scan_hint() {
        let mut block = BlockMd::new_free(1024);
        block.contig_hint = 0;
        block.first_free = 1024;
        block.update(10, 20);
        block.update(100, 150);
        assert_eq!((block.contig_hint_start, block.contig_hint), (100, 50));
        assert_eq!((block.scan_hint_start, block.scan_hint), (10, 10));
        assert_eq!(block.first_free, 10);
        assert_eq!(block.next_hint(11), 20);
        assert_eq!(block.next_hint(10), 10);
    }

    #[test]
    fn equal_run_with_better_alignment_takes_the_contig_hint() {
        let mut block = BlockMd::new_free(1024);
        block.contig_hint = 0;
        block.first_free = 1024;
        block.update(3, 19);
        block.update(64, 80);
        assert_eq!(block.contig_hint_start, 64);
        assert!(block.fits(16, 16));
        assert!(!block.fits(17, 1));
    }
}
