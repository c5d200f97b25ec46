//! The walker: recount every bit of every chunk and check each hint, count and list
//! against the recount.
//!
//! Linux has no single counterpart (`pcpu_check_block_hint` is a fit test, and
//! `CONFIG_DEBUG_VM` checks little here); talc's heap verifier is the model. Tests run it
//! after every step.

use alloc::format;
use alloc::string::String;
use alloc::vec;

use super::backing::ChunkBacking;
use super::block::BlockMd;
use super::chunk::Chunk;
use super::slots::PCPU_SLOT_FAIL_THRESHOLD;
use super::{PercpuAllocator, PCPU_MIN_ALLOC_SIZE};

/// What the walk counted.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct PercpuCensus {
    /// Chunks.
    pub chunks: usize,
    /// Live allocations.
    pub allocations: usize,
    /// Bytes allocated per unit.
    pub allocated_bytes: usize,
    /// Bytes free per unit.
    pub free_bytes: usize,
    /// Populated pages per unit.
    pub populated_pages: usize,
    /// Populated pages with no allocation.
    pub empty_pop_pages: usize,
    /// Isolated chunks.
    pub isolated_chunks: usize,
}

/// What the walker found wrong, in words.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct VerifyError(pub String);

impl core::fmt::Display for VerifyError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(&self.0)
    }
}

impl core::error::Error for VerifyError {}

macro_rules! ensure {
    ($cond:expr, $($arg:tt)*) => {
        if !$cond {
            return Err(VerifyError(format!($($arg)*)));
        }
    };
}

/// The free runs of `bits` of a chunk's allocation map, as the hints should see them.
struct Runs {
    longest: usize,
    left: usize,
    right: usize,
    first_free: Option<usize>,
}

fn runs_of(chunk: &Chunk, start: usize, end: usize) -> Runs {
    let mut runs = Runs {
        longest: 0,
        left: 0,
        right: 0,
        first_free: None,
    };
    for run in chunk.alloc_map.clear_runs(start..end) {
        runs.longest = runs.longest.max(run.len());
        runs.first_free.get_or_insert(run.start - start);
        if run.start == start {
            runs.left = run.len();
        }
        if run.end == end {
            runs.right = run.len();
        }
    }
    runs
}

fn is_free(chunk: &Chunk, base: usize, start: usize, len: usize) -> bool {
    chunk.alloc_map.next_set(base + start, base + start + len) == base + start + len
}

impl<B: ChunkBacking> PercpuAllocator<B> {
    /// Walk every chunk. Checks: each allocated bit belongs to exactly one allocation
    /// delimited by the bound map, and allocated + free bits = the chunk; `free_bytes`;
    /// every allocation lies on populated pages, and `nr_populated` counts the populated
    /// bitmap; every block's hints against a recount of its bits (first free exact; the
    /// contig hint the whole block exactly when the block is empty, elsewhere a free run
    /// no longer than the longest; left and right free no more than what is free; the
    /// scan hint free, no longer than the contig hint and not after it unless equal); the
    /// chunk's hints (contig hint free and no longer than the longest run, first free
    /// exact, left and right no more than what is free, scan hint free); empty populated
    /// pages per chunk, globally and over isolated chunks; the slot lists (links, each
    /// chunk on exactly one, on its own slot or where Linux lets it stay: slot 0 after a
    /// failed fit, sidelined or to_depopulate when isolated).
    pub fn verify(&self) -> Result<PercpuCensus, VerifyError> {
        let mut census = PercpuCensus::default();
        let (mut empty_active, mut empty_isolated, mut populated) = (0isize, 0isize, 0usize);
        for (index, chunk) in self.chunks.iter().enumerate() {
            let Some(chunk) = chunk else { continue };
            let id = self.id_of(index);
            self.verify_chunk(chunk, &mut census)
                .map_err(|VerifyError(e)| VerifyError(format!("chunk {id:?}: {e}")))?;
            census.chunks += 1;
            if !chunk.immutable {
                populated += chunk.nr_populated;
            }
            if self.reserved_chunk == Some(index) {
                // Its empty pages count nowhere: atomic requests cannot use them.
            } else if chunk.isolated {
                census.isolated_chunks += 1;
                empty_isolated += chunk.nr_empty_pop_pages;
                ensure!(
                    self.config.policy.partial_depopulation,
                    "chunk {id:?} isolated without partial depopulation"
                );
            } else {
                empty_active += chunk.nr_empty_pop_pages;
            }
            self.verify_slot(index, chunk)
                .map_err(|VerifyError(e)| VerifyError(format!("chunk {id:?}: {e}")))?;
        }
        ensure!(
            empty_active == self.nr_empty_pop_pages,
            "pcpu_nr_empty_pop_pages {} but active chunks hold {empty_active}",
            self.nr_empty_pop_pages
        );
        ensure!(
            empty_isolated == self.nr_isolated_empty_pop_pages,
            "isolated empty pages {} but isolated chunks hold {empty_isolated}",
            self.nr_isolated_empty_pop_pages
        );
        ensure!(
            populated + self.first_chunk_pages == self.nr_populated,
            "pcpu_nr_populated {} but chunks hold {populated} beside the first chunk's {}",
            self.nr_populated,
            self.first_chunk_pages
        );
        let listed = census.chunks - usize::from(self.reserved_chunk.is_some());
        self.verify_lists(listed)?;
        Ok(census)
    }

    fn verify_chunk(&self, chunk: &Chunk, census: &mut PercpuCensus) -> Result<(), VerifyError> {
        let nr_bits = chunk.nr_bits();
        if chunk.immutable {
            verify_immutable(chunk)?;
        } else {
            ensure!(
                chunk.unit_size() == self.config.unit_size,
                "unit of {} bytes",
                chunk.unit_size()
            );
        }
        // Every allocated bit belongs to one allocation: a bound bit at its start, the
        // next bound bit at its end, all bits between allocated.
        let mut allocated_bits = 0;
        for run in chunk.alloc_map.set_runs(0..nr_bits) {
            let mut start = run.start;
            while start < run.end {
                ensure!(
                    chunk.bound_map.test(start),
                    "allocated bit {start} starts no allocation"
                );
                let end = chunk.bound_map.next_set(start + 1, nr_bits + 1);
                ensure!(
                    end <= run.end,
                    "allocation at bit {start} runs to {end} past allocated bits ending at {}",
                    run.end
                );
                ensure!(
                    chunk.bound_map.test(end),
                    "allocation at bit {start} has no end bound"
                );
                census.allocations += 1;
                allocated_bits += end - start;
                let page_size_bits = chunk.block_bits;
                for page in start / page_size_bits..end.div_ceil(page_size_bits) {
                    ensure!(
                        chunk.populated.test(page),
                        "allocation at bit {start} lies on unpopulated page {page}"
                    );
                }
                start = end;
            }
        }
        let free_bits = nr_bits - allocated_bits;
        ensure!(
            chunk.free_bytes == free_bits * PCPU_MIN_ALLOC_SIZE,
            "free_bytes {} but {free_bits} bits are free",
            chunk.free_bytes
        );
        // The hidden ends of an immutable chunk are bits held for good, not allocations.
        let hidden_bits = chunk.hidden_start_bits + chunk.hidden_end_bits;
        census.allocations -=
            usize::from(chunk.hidden_start_bits > 0) + usize::from(chunk.hidden_end_bits > 0);
        census.allocated_bytes += (allocated_bits - hidden_bits) * PCPU_MIN_ALLOC_SIZE;
        census.free_bytes += chunk.free_bytes;
        ensure!(
            chunk.populated.count_set(0..chunk.nr_pages()) == chunk.nr_populated,
            "nr_populated {} disagrees with the populated bitmap",
            chunk.nr_populated
        );
        census.populated_pages += chunk.nr_populated;

        let mut empty_pop = 0;
        for (i, block) in chunk.md_blocks.iter().enumerate() {
            verify_block(chunk, i, block)
                .map_err(|VerifyError(e)| VerifyError(format!("block {i}: {e}")))?;
            if chunk.page_is_empty(i) && chunk.populated.test(i) {
                empty_pop += 1;
            }
        }
        ensure!(
            chunk.nr_empty_pop_pages == empty_pop,
            "nr_empty_pop_pages {} but {empty_pop} pages are empty and populated",
            chunk.nr_empty_pop_pages
        );
        census.empty_pop_pages += empty_pop as usize;
        verify_chunk_md(chunk).map_err(|VerifyError(e)| VerifyError(format!("chunk_md: {e}")))
    }

    fn verify_slot(&self, index: usize, chunk: &Chunk) -> Result<(), VerifyError> {
        let layout = self.layout;
        let slot = chunk.list_slot;
        ensure!(
            chunk.immutable
                == (Some(index) == self.first_chunk || Some(index) == self.reserved_chunk),
            "immutable is {} for a chunk that is {}the first or the reserved chunk",
            chunk.immutable,
            if chunk.immutable { "not " } else { "" }
        );
        ensure!(
            !(chunk.immutable && chunk.isolated),
            "the first or the reserved chunk is isolated"
        );
        if Some(index) == self.reserved_chunk {
            // On no slot list; `verify_lists` checks that no list holds it.
            return Ok(());
        }
        if chunk.isolated {
            ensure!(
                slot == layout.sidelined || slot == layout.to_depopulate,
                "isolated chunk on slot {slot}"
            );
            return Ok(());
        }
        let computed = self.chunk_slot(index);
        ensure!(
            slot == computed || (slot == 0 && computed < PCPU_SLOT_FAIL_THRESHOLD),
            "chunk of slot {computed} on list {slot}"
        );
        Ok(())
    }

    fn verify_lists(&self, nr_chunks: usize) -> Result<(), VerifyError> {
        let mut seen = vec![false; self.chunks.len()];
        let mut listed = 0;
        for (slot, list) in self.slots.iter().enumerate() {
            let mut prev = None;
            let mut cursor = list.head;
            while let Some(index) = cursor {
                ensure!(
                    self.chunks.get(index).is_some_and(Option::is_some),
                    "slot {slot} lists dead chunk index {index}"
                );
                ensure!(!seen[index], "chunk index {index} listed twice");
                seen[index] = true;
                listed += 1;
                let chunk = self.chunk(index);
                ensure!(
                    chunk.list_slot == slot,
                    "chunk index {index} on slot {slot} says {}",
                    chunk.list_slot
                );
                ensure!(
                    chunk.list_prev == prev,
                    "slot {slot}: bad prev link at index {index}"
                );
                prev = Some(index);
                cursor = chunk.list_next;
            }
            ensure!(list.tail == prev, "slot {slot}: tail is not the last chunk");
        }
        ensure!(listed == nr_chunks, "{listed} chunks listed of {nr_chunks}");
        Ok(())
    }
}

/// The first or the reserved chunk: every page populated, the hidden ends still held
/// (allocated, with their bounds), and nothing else allocated by boot.
fn verify_immutable(chunk: &Chunk) -> Result<(), VerifyError> {
    let nr_bits = chunk.nr_bits();
    ensure!(
        chunk.nr_populated == chunk.nr_pages(),
        "immutable chunk with {} of {} pages populated",
        chunk.nr_populated,
        chunk.nr_pages()
    );
    let served = chunk.served_bits();
    for (range, what) in [(0..served.start, "start"), (served.end..nr_bits, "end")] {
        if range.is_empty() {
            continue;
        }
        ensure!(
            chunk.alloc_map.next_clear(range.start, range.end) == range.end
                && chunk.bound_map.test(range.start)
                && chunk.bound_map.test(range.end),
            "the hidden {what} {}..{} is not held",
            range.start,
            range.end
        );
    }
    Ok(())
}

fn verify_block(chunk: &Chunk, index: usize, block: &BlockMd) -> Result<(), VerifyError> {
    let b = chunk.block_bits;
    let base = index * b;
    let runs = runs_of(chunk, base, base + b);
    ensure!(block.nr_bits == b, "nr_bits {}", block.nr_bits);
    // Linux's block hints are lower bounds: a refresh that promotes the scan hint scans
    // only past it and resets right_free, so a longer run before it, or a right-edge run
    // it covered, can go unseen until a later free. They never claim space that is not
    // free, and a block is empty exactly when its contig hint is the whole block (the
    // empty-page counts depend on that).
    ensure!(
        block.contig_hint <= runs.longest,
        "contig_hint {} but the longest free run is {}",
        block.contig_hint,
        runs.longest
    );
    ensure!(
        (block.contig_hint == b) == (runs.longest == b),
        "contig_hint {} in a block whose longest free run is {}",
        block.contig_hint,
        runs.longest
    );
    if block.contig_hint > 0 {
        ensure!(
            block.contig_hint_start + block.contig_hint <= b
                && is_free(chunk, base, block.contig_hint_start, block.contig_hint),
            "contig hint {}+{} is not free",
            block.contig_hint_start,
            block.contig_hint
        );
    }
    ensure!(
        block.left_free <= runs.left,
        "left_free {} but {} free",
        block.left_free,
        runs.left
    );
    ensure!(
        block.right_free <= runs.right,
        "right_free {} but {} free",
        block.right_free,
        runs.right
    );
    if let Some(first) = runs.first_free {
        ensure!(
            block.first_free == first,
            "first_free {} but {first}",
            block.first_free
        );
    }
    if block.scan_hint > 0 {
        let (start, len) = (block.scan_hint_start, block.scan_hint);
        ensure!(
            start + len <= b && is_free(chunk, base, start, len),
            "scan hint {start}+{len} is not free"
        );
        ensure!(
            len <= block.contig_hint,
            "scan hint {len} beats the contig hint"
        );
        ensure!(
            start <= block.contig_hint_start || len == block.contig_hint,
            "scan hint at {start} after the contig hint at {}",
            block.contig_hint_start
        );
    }
    Ok(())
}

fn verify_chunk_md(chunk: &Chunk) -> Result<(), VerifyError> {
    let md = &chunk.chunk_md;
    let nr_bits = chunk.nr_bits();
    let runs = runs_of(chunk, 0, nr_bits);
    ensure!(md.nr_bits == nr_bits, "nr_bits {}", md.nr_bits);
    ensure!(
        md.contig_hint <= runs.longest,
        "contig_hint {} larger than the longest free run {}",
        md.contig_hint,
        runs.longest
    );
    if md.contig_hint > 0 {
        ensure!(
            md.contig_hint_start + md.contig_hint <= nr_bits
                && is_free(chunk, 0, md.contig_hint_start, md.contig_hint),
            "contig hint {}+{} is not free",
            md.contig_hint_start,
            md.contig_hint
        );
    }
    ensure!(
        md.first_free == runs.first_free.unwrap_or(nr_bits),
        "first_free {} but {:?}",
        md.first_free,
        runs.first_free
    );
    ensure!(
        md.left_free <= runs.left,
        "left_free {} but {} free",
        md.left_free,
        runs.left
    );
    ensure!(
        md.right_free <= runs.right,
        "right_free {} but {} free",
        md.right_free,
        runs.right
    );
    if md.scan_hint > 0 {
        ensure!(
            md.scan_hint_start + md.scan_hint <= nr_bits
                && is_free(chunk, 0, md.scan_hint_start, md.scan_hint),
            "scan hint {}+{} is not free",
            md.scan_hint_start,
            md.scan_hint
        );
        ensure!(
            md.scan_hint <= md.contig_hint,
            "scan hint beats the contig hint"
        );
    }
    Ok(())
}
