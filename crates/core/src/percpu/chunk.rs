//! A chunk: one allocation map shared by every unit, its hints and its populated pages.
//!
//! Linux counterpart: `struct pcpu_chunk` and the area-map functions of `mm/percpu.c`
//! (v5.14): `pcpu_alloc_area`, `pcpu_free_area`, `pcpu_find_block_fit`,
//! `pcpu_block_update_hint_alloc`/`_free`, `pcpu_block_refresh_hint`,
//! `pcpu_chunk_refresh_hint`, `pcpu_next_md_free_region`, `pcpu_next_fit_region`,
//! `pcpu_find_zero_area`, `pcpu_is_populated`. These are ported function by function, so
//! the hints go stale exactly where Linux's do (see [`BlockMd`]).
//!
//! The hint functions return how many pages became empty (positive) or stopped being
//! empty (negative); the allocator applies that to the chunk and global counts, because
//! which global count it goes to depends on whether the chunk is isolated.
//!
//! Where we differ: an allocation shrinks the chunk's own `left_free`/`right_free` to
//! what is left free at the edges. Linux never reads these two and never shrinks them, so
//! they can claim space that is allocated; ours stay lower bounds like every other hint,
//! which `verify` checks. No placement changes.

use alloc::vec;
use alloc::vec::Vec;
use core::ops::Range;

use super::bitmap::Bitmap;
use super::block::{overlaps, BlockMd};
use super::PCPU_MIN_ALLOC_SIZE;

/// A chunk's allocation state. Bits are `PCPU_MIN_ALLOC_SIZE` (4) bytes of every unit.
#[derive(Clone, Debug)]
pub(crate) struct Chunk {
    /// 1 = allocated.
    pub(crate) alloc_map: Bitmap,
    /// A bit at each allocation's start and one past its end; `nr_bits + 1` bits. Bits of
    /// freed allocations stay set, as in Linux; an allocation clears the bits inside it.
    pub(crate) bound_map: Bitmap,
    /// One per page-sized block.
    pub(crate) md_blocks: Vec<BlockMd>,
    /// The same hints over the whole chunk.
    pub(crate) chunk_md: BlockMd,
    pub(crate) free_bytes: usize,
    /// 1 = the page is backed in every unit.
    pub(crate) populated: Bitmap,
    pub(crate) nr_populated: usize,
    /// Pages that are populated and hold no allocation. Goes below its true value for the
    /// length of one non-atomic allocation (the pages it is about to populate), as Linux's.
    pub(crate) nr_empty_pop_pages: isize,
    /// Taken off the active slots to have its empty pages reclaimed.
    pub(crate) isolated: bool,
    /// The first or the reserved chunk: populated from boot, never depopulated or freed.
    pub(crate) immutable: bool,
    /// Bits hidden (allocated for good) before and after the region an immutable chunk
    /// serves: its map starts at the page below the region and ends at the page above
    /// (`chunk->start_offset`, `chunk->end_offset`, in bits here).
    pub(crate) hidden_start_bits: usize,
    pub(crate) hidden_end_bits: usize,
    /// Bits per block: `PAGE_SIZE / 4`.
    pub(crate) block_bits: usize,
    /// The slot list the chunk is on, and its neighbours there (chunk indexes).
    pub(crate) list_slot: usize,
    pub(crate) list_prev: Option<usize>,
    pub(crate) list_next: Option<usize>,
}

impl Chunk {
    /// A new, all-free, unpopulated chunk of `nr_pages` pages (`pcpu_alloc_chunk`).
    pub(crate) fn new(nr_pages: usize, page_size: usize) -> Chunk {
        let block_bits = page_size / PCPU_MIN_ALLOC_SIZE;
        let nr_bits = nr_pages * block_bits;
        Chunk {
            alloc_map: Bitmap::new(nr_bits),
            bound_map: Bitmap::new(nr_bits + 1),
            md_blocks: vec![BlockMd::new_free(block_bits); nr_pages],
            chunk_md: BlockMd::new_free(nr_bits),
            free_bytes: nr_bits * PCPU_MIN_ALLOC_SIZE,
            populated: Bitmap::new(nr_pages),
            nr_populated: 0,
            nr_empty_pop_pages: 0,
            isolated: false,
            immutable: false,
            hidden_start_bits: 0,
            hidden_end_bits: 0,
            block_bits,
            list_slot: 0,
            list_prev: None,
            list_next: None,
        }
    }

    /// A chunk serving `map_size` bytes from byte `start` of each unit, from boot
    /// (`pcpu_alloc_first_chunk`): the map covers the pages around the region, all
    /// populated, and the bits before and after the region are hidden as allocated so that
    /// nothing is ever placed there. Offsets into the chunk count from the first of its
    /// pages.
    pub(crate) fn new_first(start: usize, map_size: usize, page_size: usize) -> Chunk {
        let start_offset = start % page_size;
        let region_size = (start_offset + map_size).next_multiple_of(page_size);
        let mut chunk = Chunk::new(region_size / page_size, page_size);
        chunk.immutable = true;
        let nr_pages = chunk.nr_pages();
        chunk.populated.assign_range(0..nr_pages, true);
        chunk.nr_populated = nr_pages;
        chunk.nr_empty_pop_pages = nr_pages as isize;
        chunk.free_bytes = map_size;
        chunk.hidden_start_bits = start_offset / PCPU_MIN_ALLOC_SIZE;
        chunk.hidden_end_bits = (region_size - start_offset - map_size) / PCPU_MIN_ALLOC_SIZE;
        let nr_bits = chunk.nr_bits();
        if chunk.hidden_start_bits > 0 {
            let bits = chunk.hidden_start_bits;
            chunk.hide(0, bits);
            chunk.chunk_md.first_free = bits;
        }
        if chunk.hidden_end_bits > 0 {
            let bits = chunk.hidden_end_bits;
            chunk.hide(nr_bits - bits, bits);
        }
        chunk
    }

    /// Mark `bits` at `bit_off` allocated for good, as `pcpu_alloc_first_chunk` does
    /// (bitmap and bounds set by hand, then `pcpu_block_update_hint_alloc`; `free_bytes`
    /// already leaves them out).
    fn hide(&mut self, bit_off: usize, bits: usize) {
        self.alloc_map.assign_range(bit_off..bit_off + bits, true);
        self.bound_map.set(bit_off);
        self.bound_map.set(bit_off + bits);
        // Ours: the chunk's edge runs stay lower bounds (see the module comment).
        if bit_off == 0 {
            self.chunk_md.left_free = 0;
        } else {
            self.chunk_md.right_free = 0;
        }
        let empty_delta = self.block_update_hint_alloc(bit_off, bits);
        self.nr_empty_pop_pages += empty_delta;
    }

    /// The bits an allocation may use: all but the hidden ones.
    pub(crate) fn served_bits(&self) -> Range<usize> {
        self.hidden_start_bits..self.nr_bits() - self.hidden_end_bits
    }

    pub(crate) fn nr_bits(&self) -> usize {
        self.alloc_map.len()
    }

    pub(crate) fn nr_pages(&self) -> usize {
        self.md_blocks.len()
    }

    pub(crate) fn unit_size(&self) -> usize {
        self.nr_bits() * PCPU_MIN_ALLOC_SIZE
    }

    /// `find_next_zero_bit` inside block `index` from block offset `from`.
    fn block_next_clear(&self, index: usize, from: usize) -> usize {
        let base = index * self.block_bits;
        if from >= self.block_bits {
            return self.block_bits;
        }
        self.alloc_map
            .next_clear(base + from, base + self.block_bits)
            - base
    }

    /// `find_next_bit` inside block `index` from block offset `from`.
    fn block_next_set(&self, index: usize, from: usize) -> usize {
        let base = index * self.block_bits;
        if from >= self.block_bits {
            return self.block_bits;
        }
        self.alloc_map.next_set(base + from, base + self.block_bits) - base
    }

    /// `find_last_bit` inside block `index` below block offset `end` (`end` if none).
    fn block_last_set(&self, index: usize, end: usize) -> usize {
        let base = index * self.block_bits;
        let last = self.alloc_map.last_set(base + end);
        if last == base + end || last < base {
            end
        } else {
            last - base
        }
    }

    /// Learn a free run the allocation scan skipped (`pcpu_block_update_scan`): scan back
    /// to the run's real start (alignment may have skipped free bits) and tell the block.
    fn block_update_scan(&mut self, bit_off: usize, bits: usize) {
        let s_off = bit_off % self.block_bits;
        let e_off = s_off + bits;
        if e_off > self.block_bits {
            return;
        }
        let index = bit_off / self.block_bits;
        let l_bit = self.block_last_set(index, s_off);
        let s_off = if s_off == l_bit { 0 } else { l_bit + 1 };
        self.md_blocks[index].update(s_off, e_off);
    }

    /// Rebuild a block's contig hint after an allocation broke it
    /// (`pcpu_block_refresh_hint`): promote the scan hint, then scan what lies after it.
    fn block_refresh_hint(&mut self, index: usize) {
        let base = index * self.block_bits;
        let block = &mut self.md_blocks[index];
        let start = if block.scan_hint != 0 {
            block.contig_hint_start = block.scan_hint_start;
            block.contig_hint = block.scan_hint;
            block.scan_hint = 0;
            block.contig_hint_start + block.contig_hint
        } else {
            block.contig_hint = 0;
            block.first_free
        };
        block.right_free = 0;
        let from = (base + start).min(base + self.block_bits);
        for run in self.alloc_map.clear_runs(from..base + self.block_bits) {
            block.update(run.start - base, run.end - base);
        }
    }

    /// Rebuild the chunk's hints from the block hints (`pcpu_chunk_refresh_hint`). Without
    /// `full_scan`, promote the scan hint and scan only past it.
    fn chunk_refresh_hint(&mut self, full_scan: bool) {
        let md = &mut self.chunk_md;
        let mut bit_off = if !full_scan && md.scan_hint != 0 {
            md.contig_hint_start = md.scan_hint_start;
            md.contig_hint = md.scan_hint;
            md.scan_hint = 0;
            md.contig_hint_start + md.contig_hint
        } else {
            md.contig_hint = 0;
            md.first_free
        };
        let mut bits;
        (bit_off, bits) = self.next_md_free_region(bit_off);
        while bit_off < self.nr_bits() {
            self.chunk_md.update(bit_off, bit_off + bits);
            bit_off += bits + 1;
            (bit_off, bits) = self.next_md_free_region(bit_off);
        }
    }

    /// The next free region from the block hints at or after `bit_off`, including runs
    /// that cross block edges (`pcpu_next_md_free_region`). Returns `(start, bits)`;
    /// a start ≥ `nr_bits` means none.
    fn next_md_free_region(&self, bit_off: usize) -> (usize, usize) {
        let b = self.block_bits;
        let mut start = bit_off;
        let mut block_off = bit_off % b;
        let mut bits = 0;
        for i in bit_off / b..self.nr_pages() {
            let block = &self.md_blocks[i];
            if bits != 0 {
                bits += block.left_free;
                if block.left_free == b {
                    continue;
                }
                return (start, bits);
            }
            // A contig hint not seen yet that does not spill into the next block.
            bits = block.contig_hint;
            if bits != 0
                && block.contig_hint_start >= block_off
                && bits + block.contig_hint_start < b
            {
                return (i * b + block.contig_hint_start, bits);
            }
            block_off = 0;
            bits = block.right_free;
            start = (i + 1) * b - block.right_free;
        }
        (start, bits)
    }

    /// The next region at or after `bit_off` where `alloc_bits` at alignment `align` may
    /// fit, judged by the block hints (`pcpu_next_fit_region`). Returns `(start, bits)`:
    /// where a first-fit scan should begin and how far it may need to look; a start ≥
    /// `nr_bits` means none.
    fn next_fit_region(&self, alloc_bits: usize, align: usize, bit_off: usize) -> (usize, usize) {
        let b = self.block_bits;
        let mut start = bit_off;
        let mut block_off = bit_off % b;
        let mut bits = 0;
        for i in bit_off / b..self.nr_pages() {
            let block = &self.md_blocks[i];
            // A free area across blocks.
            if bits != 0 {
                bits += block.left_free;
                if bits >= alloc_bits {
                    return (start, bits);
                }
                if block.left_free == b {
                    continue;
                }
            }
            // The block's contig hint, if not checked before and large enough.
            bits = block.contig_hint_start.next_multiple_of(align) - block.contig_hint_start;
            if block.contig_hint != 0
                && block.contig_hint_start >= block_off
                && block.contig_hint >= bits + alloc_bits
            {
                let hint = block.next_hint(alloc_bits);
                bits += alloc_bits + block.contig_hint_start - hint;
                return (i * b + hint, bits);
            }
            block_off = 0;
            let off = (b - block.right_free).next_multiple_of(align);
            bits = b - off;
            start = i * b + off;
            if bits >= alloc_bits {
                return (start, bits);
            }
        }
        (self.nr_bits(), 0)
    }

    /// Whether the pages under `bit_off .. bit_off + bits` are all populated
    /// (`pcpu_is_populated`); if not, the bit offset just past the first unpopulated run.
    fn is_populated(&self, bit_off: usize, bits: usize) -> Result<(), usize> {
        let bits_per_page = self.block_bits;
        let page_start = bit_off / bits_per_page;
        let page_end = (bit_off + bits).div_ceil(bits_per_page);
        let rs = self.populated.next_clear(page_start, page_end);
        if rs >= page_end {
            return Ok(());
        }
        let re = self.populated.next_set(rs + 1, page_end);
        Err(re * bits_per_page)
    }

    /// Where to start a first-fit scan for `alloc_bits` at `align`, or `None` if the hints
    /// say it does not fit (`pcpu_find_block_fit`). With `pop_only` (atomic requests) the
    /// region must be populated.
    pub(crate) fn find_block_fit(
        &self,
        alloc_bits: usize,
        align: usize,
        pop_only: bool,
    ) -> Option<usize> {
        // If even the chunk's hint is too small, assume pressure: a new chunk comes soon.
        if !self.chunk_md.fits(alloc_bits, align) {
            return None;
        }
        let hint = self.chunk_md.next_hint(alloc_bits);
        let (mut bit_off, mut bits) = self.next_fit_region(alloc_bits, align, hint);
        while bit_off < self.nr_bits() {
            if !pop_only {
                break;
            }
            match self.is_populated(bit_off, bits) {
                Ok(()) => break,
                Err(next_off) => (bit_off, bits) = (next_off, 0),
            }
            (bit_off, bits) = self.next_fit_region(alloc_bits, align, bit_off + bits);
        }
        (bit_off < self.nr_bits()).then_some(bit_off)
    }

    /// First fit of `nr` bits at `align_mask + 1` alignment in `start..size`, remembering
    /// the largest too-small free area passed on the way (`pcpu_find_zero_area`). Returns
    /// the start, or a value with `start + nr > size` if none.
    fn find_zero_area(
        &self,
        size: usize,
        mut start: usize,
        nr: usize,
        align_mask: usize,
        largest: &mut (usize, usize),
    ) -> usize {
        loop {
            let index =
                (self.alloc_map.next_clear(start.min(size), size) + align_mask) & !align_mask;
            let end = index + nr;
            if end > size {
                return end;
            }
            let i = self.alloc_map.next_set(index, end);
            if i >= end {
                return index;
            }
            let area_bits = i - index;
            let (largest_off, largest_bits) = *largest;
            if area_bits > largest_bits
                || (area_bits == largest_bits
                    && largest_off != 0
                    && (index == 0 || index.trailing_zeros() > largest_off.trailing_zeros()))
            {
                *largest = (index, area_bits);
            }
            start = i + 1;
        }
    }

    /// Allocate `alloc_bits` at `align` bits, scanning first-fit from `start` for at most a
    /// block past the request (`pcpu_alloc_area`). Returns the bit offset and the change
    /// in empty pages.
    pub(crate) fn alloc_area(
        &mut self,
        alloc_bits: usize,
        align: usize,
        start: usize,
    ) -> Option<(usize, isize)> {
        let end = (start + alloc_bits + self.block_bits).min(self.nr_bits());
        let mut largest = (0, 0);
        let bit_off = self.find_zero_area(end, start, alloc_bits, align - 1, &mut largest);
        if bit_off >= end {
            return None;
        }
        if largest.1 != 0 {
            self.block_update_scan(largest.0, largest.1);
        }
        let area_end = bit_off + alloc_bits;
        self.alloc_map.assign_range(bit_off..area_end, true);
        self.bound_map.set(bit_off);
        self.bound_map.assign_range(bit_off + 1..area_end, false);
        self.bound_map.set(area_end);
        self.free_bytes -= alloc_bits * PCPU_MIN_ALLOC_SIZE;
        if bit_off == self.chunk_md.first_free {
            self.chunk_md.first_free = self.alloc_map.next_clear(area_end, self.nr_bits());
        }
        // Ours: an allocation shrinks the chunk's edge runs (see the module comment).
        self.chunk_md.left_free = self.chunk_md.left_free.min(bit_off);
        self.chunk_md.right_free = self.chunk_md.right_free.min(self.nr_bits() - area_end);
        let empty_delta = self.block_update_hint_alloc(bit_off, alloc_bits);
        Some((bit_off, empty_delta))
    }

    /// Whether `bit_off` is the first bit of a live allocation. Interior bound bits are
    /// cleared by every allocation, so an allocated bit with its bound bit set is one; the
    /// hidden ends of an immutable chunk are not allocations.
    pub(crate) fn is_allocation_start(&self, bit_off: usize) -> bool {
        self.served_bits().contains(&bit_off)
            && self.alloc_map.test(bit_off)
            && self.bound_map.test(bit_off)
    }

    /// Free the allocation starting at `bit_off` (`pcpu_free_area`). Returns its size in
    /// bits and the change in empty pages. The caller checked
    /// [`is_allocation_start`](Self::is_allocation_start).
    pub(crate) fn free_area(&mut self, bit_off: usize) -> (usize, isize) {
        debug_assert!(self.is_allocation_start(bit_off));
        let end = self.bound_map.next_set(bit_off + 1, self.nr_bits());
        let bits = end - bit_off;
        self.alloc_map.assign_range(bit_off..end, false);
        self.free_bytes += bits * PCPU_MIN_ALLOC_SIZE;
        self.chunk_md.first_free = self.chunk_md.first_free.min(bit_off);
        let empty_delta = self.block_update_hint_free(bit_off, bits);
        (bits, empty_delta)
    }

    /// Update the block and chunk hints for an allocation of `bits` at `bit_off`
    /// (`pcpu_block_update_hint_alloc`). Returns minus the pages that stopped being empty,
    /// populated or not: the populate that follows adds the unpopulated ones back.
    fn block_update_hint_alloc(&mut self, bit_off: usize, bits: usize) -> isize {
        let b = self.block_bits;
        let s_index = bit_off / b;
        let e_index = (bit_off + bits - 1) / b;
        let s_off = bit_off % b;
        let e_off = (bit_off + bits - 1) % b + 1;
        let mut nr_empty_pages = 0;

        // The start block.
        if self.md_blocks[s_index].contig_hint == b {
            nr_empty_pages += 1;
        }
        if s_off == self.md_blocks[s_index].first_free {
            self.md_blocks[s_index].first_free = self.block_next_clear(s_index, s_off + bits);
        }
        let s_block = self.md_blocks[s_index];
        let s_end = s_off + bits;
        if overlaps(
            s_block.scan_hint_start,
            s_block.scan_hint_start + s_block.scan_hint,
            s_off,
            s_end,
        ) {
            self.md_blocks[s_index].scan_hint = 0;
        }
        if overlaps(
            s_block.contig_hint_start,
            s_block.contig_hint_start + s_block.contig_hint,
            s_off,
            s_end,
        ) {
            // The contig hint is broken: scan to fix it.
            if s_off == 0 {
                self.md_blocks[s_index].left_free = 0;
            }
            self.block_refresh_hint(s_index);
        } else {
            let block = &mut self.md_blocks[s_index];
            block.left_free = block.left_free.min(s_off);
            block.right_free = if s_index == e_index {
                block.right_free.min(b - e_off)
            } else {
                0
            };
        }

        // The end block, and the blocks in between.
        if s_index != e_index {
            if self.md_blocks[e_index].contig_hint == b {
                nr_empty_pages += 1;
            }
            self.md_blocks[e_index].first_free = self.block_next_clear(e_index, e_off);
            let mut filled_end = e_index;
            if e_off == b {
                // The allocation covers the end block: reset it with the middle ones.
                filled_end = e_index + 1;
            } else {
                let block = &mut self.md_blocks[e_index];
                if e_off > block.scan_hint_start {
                    block.scan_hint = 0;
                }
                block.left_free = 0;
                if e_off > block.contig_hint_start {
                    // The contig hint is broken: scan to fix it.
                    self.block_refresh_hint(e_index);
                } else {
                    block.right_free = block.right_free.min(b - e_off);
                }
            }
            nr_empty_pages += (e_index - s_index - 1) as isize;
            for block in &mut self.md_blocks[s_index + 1..filled_end] {
                block.fill();
            }
        }

        // The chunk: only a broken contig hint needs a scan.
        let md = self.chunk_md;
        let end = bit_off + bits;
        if overlaps(
            md.scan_hint_start,
            md.scan_hint_start + md.scan_hint,
            bit_off,
            end,
        ) {
            self.chunk_md.scan_hint = 0;
        }
        if overlaps(
            md.contig_hint_start,
            md.contig_hint_start + md.contig_hint,
            bit_off,
            end,
        ) {
            self.chunk_refresh_hint(false);
        }
        -nr_empty_pages
    }

    /// Update the block and chunk hints for a free of `bits` at `bit_off`
    /// (`pcpu_block_update_hint_free`). Returns the pages that became empty.
    fn block_update_hint_free(&mut self, bit_off: usize, bits: usize) -> isize {
        let b = self.block_bits;
        let s_index = bit_off / b;
        let e_index = (bit_off + bits - 1) / b;
        let s_off = bit_off % b;
        let e_off = (bit_off + bits - 1) % b + 1;
        let mut nr_empty_pages = 0;

        // The extent of the free run in the start and end blocks; the contig hints save a
        // scan when the freed area touches them.
        let s_block = self.md_blocks[s_index];
        let start = if s_off == s_block.contig_hint_start + s_block.contig_hint {
            s_block.contig_hint_start
        } else {
            let l_bit = self.block_last_set(s_index, s_off);
            if l_bit == s_off {
                0
            } else {
                l_bit + 1
            }
        };
        let e_block = self.md_blocks[e_index];
        let end = if e_off == e_block.contig_hint_start {
            e_block.contig_hint_start + e_block.contig_hint
        } else {
            self.block_next_set(e_index, e_off)
        };

        let s_block_end = if s_index == e_index { end } else { b };
        if start == 0 && s_block_end == b {
            nr_empty_pages += 1;
        }
        self.md_blocks[s_index].update(start, s_block_end);
        if s_index != e_index {
            if end == b {
                nr_empty_pages += 1;
            }
            self.md_blocks[e_index].update(0, end);
            nr_empty_pages += (e_index - s_index - 1) as isize;
            for block in &mut self.md_blocks[s_index + 1..e_index] {
                block.reset_free();
            }
        }

        // The chunk hint is refreshed when a block became free or the run spans blocks;
        // otherwise it learns the run.
        if s_index != e_index || end - start >= b {
            self.chunk_refresh_hint(true);
        } else {
            self.chunk_learn_block_run(s_index * b + start, end);
        }
        nr_empty_pages
    }

    /// `pcpu_block_update(&chunk->chunk_md, pcpu_block_off_to_off(s_index, start), end)`
    /// as v5.14 calls it: `end` is block-relative, so outside block 0 the "run" has a
    /// negative length and the chunk learns only `first_free`. Kept as Linux has it (the
    /// chunk hint stays too small, never too large; allocations may pass the chunk by).
    fn chunk_learn_block_run(&mut self, start: usize, end_in_block: usize) {
        if end_in_block >= start {
            self.chunk_md.update(start, end_in_block);
        } else {
            self.chunk_md.first_free = self.chunk_md.first_free.min(start);
        }
    }

    /// Mark `pages` populated (`pcpu_chunk_populated`). Returns the pages that became
    /// empty and populated.
    pub(crate) fn mark_populated(&mut self, pages: Range<usize>) -> isize {
        debug_assert_eq!(self.populated.count_set(pages.clone()), 0);
        self.populated.assign_range(pages.clone(), true);
        self.nr_populated += pages.len();
        pages.len() as isize
    }

    /// Mark `pages` depopulated (`pcpu_chunk_depopulated`). Returns minus their number.
    pub(crate) fn mark_depopulated(&mut self, pages: Range<usize>) -> isize {
        debug_assert_eq!(self.populated.count_set(pages.clone()), pages.len());
        self.populated.assign_range(pages.clone(), false);
        self.nr_populated -= pages.len();
        -(pages.len() as isize)
    }

    /// Whether page `index` holds no allocation (its block's contig hint is the block).
    pub(crate) fn page_is_empty(&self, index: usize) -> bool {
        self.md_blocks[index].contig_hint == self.block_bits
    }
}
