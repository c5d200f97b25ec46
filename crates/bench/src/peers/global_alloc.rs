//! The malloc family as contestants: mimalloc, jemalloc (`tikv-jemallocator`), snmalloc
//! (`snmalloc-rs`, built with `cc`) and the system allocator (glibc), each asked through
//! its `GlobalAlloc` implementation for `Layout::from_size_align(4096 << order, 4096)`.
//! None is installed as the process's global allocator; the benchmark calls them
//! directly, so each keeps its own heap and thread caches.
//!
//! One module for all four because the adapter is the same code, generic over
//! [`ProcessHeap`].

use std::alloc::{GlobalAlloc, Layout, System};
use std::marker::PhantomData;
use std::ptr::NonNull;

use mmkit_core::page::PAGE_SIZE;
use mmkit_core::Order;

use crate::contestant::{block_bytes, Block, Contestant, TaggedBlock};

/// A `GlobalAlloc` whose values all allocate from one process-wide heap, so a block from
/// one value may be freed through another.
///
/// # Safety
///
/// Every value of the type must accept, in `dealloc`, any pointer that any value of the
/// type returned from `alloc` with the same layout.
pub unsafe trait ProcessHeap: GlobalAlloc + Sync {}

// SAFETY: `System` is malloc/free of the C library: one heap per process.
unsafe impl ProcessHeap for System {}
// SAFETY: `MiMalloc` is a unit struct calling mi_malloc_aligned/mi_free on the process's
// mimalloc heaps.
#[cfg(feature = "mimalloc")]
unsafe impl ProcessHeap for mimalloc::MiMalloc {}
// SAFETY: `Jemalloc` is a unit struct calling jemalloc's mallocx/sdallocx; jemalloc has
// one set of arenas per process.
#[cfg(feature = "jemalloc")]
unsafe impl ProcessHeap for tikv_jemallocator::Jemalloc {}
// SAFETY: `SnMalloc` is a unit struct calling snmalloc's sn_rust_alloc/sn_rust_dealloc
// on the process's snmalloc allocators.
#[cfg(feature = "snmalloc")]
unsafe impl ProcessHeap for snmalloc_rs::SnMalloc {}

/// A malloc-family allocator.
pub struct GlobalAllocPeer<A: ProcessHeap> {
    heap: A,
    what: &'static str,
}

impl<A: ProcessHeap> GlobalAllocPeer<A> {
    /// The heap `heap` (a unit struct), described as `what` (crate and version).
    pub fn new(heap: A, what: &'static str) -> Self {
        GlobalAllocPeer { heap, what }
    }

    fn layout(order: Order) -> Layout {
        Layout::from_size_align(block_bytes(order), PAGE_SIZE).expect("a valid layout")
    }
}

/// A block from a [`GlobalAllocPeer`].
///
/// # Invariants
///
/// `block` is a live allocation of `layout(order)` from heap `A`, owned by this value
/// alone (made only by the peer's `alloc`, not `Clone`).
pub struct HeapBlock<'a, A> {
    block: TaggedBlock,
    heap: PhantomData<&'a A>,
}

impl<A: Sync> Block for HeapBlock<'_, A> {
    fn bytes(&self) -> &[u8] {
        // SAFETY: by the invariant the range is a live allocation only `self` accesses.
        unsafe { std::slice::from_raw_parts(self.block.addr() as *const u8, self.block.size()) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`; `&mut self` makes this the only access.
        unsafe { std::slice::from_raw_parts_mut(self.block.addr() as *mut u8, self.block.size()) }
    }

    fn addr(&self) -> usize {
        self.block.addr()
    }
}

impl<A: ProcessHeap> Contestant for GlobalAllocPeer<A> {
    type Block<'a>
        = HeapBlock<'a, A>
    where
        A: 'a;

    #[inline(always)]
    fn alloc(&self, order: Order) -> Option<HeapBlock<'_, A>> {
        // SAFETY: the layout's size is at least 4096, never zero.
        let ptr = unsafe { self.heap.alloc(Self::layout(order)) };
        NonNull::new(ptr).map(|ptr| HeapBlock {
            block: TaggedBlock::new(ptr.as_ptr() as usize, order),
            heap: PhantomData,
        })
    }

    #[inline(always)]
    fn free<'a>(&'a self, block: HeapBlock<'a, A>) {
        // SAFETY: the block is a live allocation of heap `A` with this layout (its
        // invariant), which every value of `A` accepts (`ProcessHeap`); `block` is
        // consumed, so nothing uses the memory afterwards.
        unsafe {
            self.heap.dealloc(
                block.block.addr() as *mut u8,
                Self::layout(block.block.order()),
            )
        }
    }

    fn describe(&self) -> String {
        format!(
            "{}; GlobalAlloc::alloc(size, align 4096), called directly",
            self.what
        )
    }
}
