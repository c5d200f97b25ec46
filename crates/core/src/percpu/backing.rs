//! The door to memory: what the allocator asks of whoever backs its chunks.
//!
//! Linux counterpart: `mm/percpu-vm.c` (`pcpu_create_chunk`, `pcpu_destroy_chunk`,
//! `pcpu_populate_chunk`, `pcpu_depopulate_chunk`). The core never touches memory; it calls
//! a [`ChunkBacking`] instead, so the runtime can reserve and commit real pages while tests
//! and the simulator use [`MemoryBacking`], which only keeps books.

use alloc::collections::BTreeMap;
use alloc::vec;
use alloc::vec::Vec;
use core::ops::Range;

use super::ChunkId;

/// The backing could not do what was asked (out of address space or memory).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct BackingError;

impl core::error::Error for BackingError {}

impl core::fmt::Display for BackingError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("the chunk backing failed (no address space or memory)")
    }
}

/// Backs chunks with memory: one unit per possible CPU, `nr_pages` pages each.
///
/// Page ranges are chunk pages; each call applies to that range in every unit.
pub trait ChunkBacking {
    /// Reserve address space for a new chunk of `nr_pages` pages per unit, none of it
    /// populated.
    fn create_chunk(&mut self, chunk: ChunkId, nr_pages: usize) -> Result<(), BackingError>;
    /// Release a chunk's address space. Every page is depopulated first.
    fn destroy_chunk(&mut self, chunk: ChunkId);
    /// Give `pages` memory in every unit (they read as zeros).
    fn populate(&mut self, chunk: ChunkId, pages: Range<usize>) -> Result<(), BackingError>;
    /// Give the memory of `pages` in every unit back.
    fn depopulate(&mut self, chunk: ChunkId, pages: Range<usize>);
    /// Back the first `pages` pages of every unit for the kernel image's static per-CPU
    /// data, before the first chunk's own pages; called once, when the allocator is built
    /// with a first chunk, and never given back. Books-only backings need not do anything.
    fn back_static(&mut self, pages: usize) -> Result<(), BackingError> {
        let _ = pages;
        Ok(())
    }
}

/// An in-memory fake: records which pages of which chunk are backed, can be told to fail,
/// and checks that the allocator never populates a page twice or depopulates one that is
/// not populated (a `panic!` here is an allocator bug).
#[derive(Clone, Debug, Default)]
pub struct MemoryBacking {
    chunks: BTreeMap<ChunkId, Vec<bool>>,
    /// Fail every `populate` and `create_chunk` call while set.
    pub fail: bool,
    /// Pages populated so far, counted once per chunk page (not per unit).
    pub pages_populated: u64,
}

impl MemoryBacking {
    /// A backing that never fails.
    pub fn new() -> MemoryBacking {
        MemoryBacking::default()
    }

    /// The populated pages of `chunk`, or `None` if it does not exist.
    pub fn populated(&self, chunk: ChunkId) -> Option<&[bool]> {
        self.chunks.get(&chunk).map(Vec::as_slice)
    }

    /// The chunks that exist.
    pub fn chunk_ids(&self) -> impl Iterator<Item = ChunkId> + '_ {
        self.chunks.keys().copied()
    }

    /// Populated pages over all chunks.
    pub fn nr_populated(&self) -> usize {
        self.chunks
            .values()
            .map(|pages| pages.iter().filter(|&&p| p).count())
            .sum()
    }
}

impl ChunkBacking for MemoryBacking {
    fn create_chunk(&mut self, chunk: ChunkId, nr_pages: usize) -> Result<(), BackingError> {
        if self.fail {
            return Err(BackingError);
        }
        let old = self.chunks.insert(chunk, vec![false; nr_pages]);
        assert!(old.is_none(), "chunk {chunk:?} created twice");
        Ok(())
    }

    fn destroy_chunk(&mut self, chunk: ChunkId) {
        let pages = self
            .chunks
            .remove(&chunk)
            .expect("destroying an unknown chunk");
        assert!(
            pages.iter().all(|&p| !p),
            "chunk {chunk:?} destroyed with pages populated"
        );
    }

    fn populate(&mut self, chunk: ChunkId, pages: Range<usize>) -> Result<(), BackingError> {
        if self.fail {
            return Err(BackingError);
        }
        let map = self
            .chunks
            .get_mut(&chunk)
            .expect("populating an unknown chunk");
        for page in &mut map[pages.clone()] {
            assert!(!*page, "page populated twice in chunk {chunk:?}");
            *page = true;
        }
        self.pages_populated += pages.len() as u64;
        Ok(())
    }

    fn depopulate(&mut self, chunk: ChunkId, pages: Range<usize>) {
        let map = self
            .chunks
            .get_mut(&chunk)
            .expect("depopulating an unknown chunk");
        for page in &mut map[pages] {
            assert!(*page, "depopulating an unpopulated page of chunk {chunk:?}");
            *page = false;
        }
    }
}
