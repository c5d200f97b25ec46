//! `talc` (5.x) as a contestant: one `TalcLock` (a `spin` mutex around `Talc`) that has
//! claimed an arena of the same size as mmkit's pool, asked through `GlobalAlloc` for
//! `Layout::from_size_align(4096 << order, 4096)`.
//!
//! The arena is the runtime's [`Arena`] (an anonymous `MAP_NORESERVE` mapping aligned to
//! 4 MiB), as mmkit's pool uses. Talc keeps its metadata in the heap itself (a tag after
//! each chunk), so 4 KiB-aligned 4 KiB blocks cost it 8 KiB of address space each; the
//! arena is sized with room for that (see `pagealloc::arena_bytes`).

use std::alloc::{GlobalAlloc, Layout};
use std::marker::PhantomData;
use std::ptr::NonNull;

use mmkit_core::page::PAGE_SIZE;
use mmkit_core::Order;
use mmkit_runtime::arena::Arena;
use talc::source::Manual;
use talc::TalcLock;

use crate::contestant::{block_bytes, Block, Contestant, TaggedBlock};

/// Talc over its own arena.
pub struct Talc {
    // Declared before `arena`, so it is dropped first: talc's chunks live in the arena.
    talc: TalcLock<spin::Mutex<()>, Manual>,
    arena: Arena,
}

impl Talc {
    /// Talc over a fresh arena of `arena_bytes`.
    pub fn new(arena_bytes: usize) -> Result<Talc, String> {
        let arena = Arena::new(arena_bytes, 4 << 20, false).map_err(|e| e.to_string())?;
        let talc = TalcLock::new(Manual);
        // SAFETY: the arena is a fresh private mapping that nothing else knows of; from
        // here on only talc writes to it, except the blocks talc hands out, and it lives
        // as long as `talc` (field order above). `Manual` allows manual claims.
        let claimed = unsafe { talc.lock().claim(arena.base(), arena.len()) };
        claimed.ok_or("talc refused to claim the arena")?;
        Ok(Talc { talc, arena })
    }

    fn layout(order: Order) -> Layout {
        Layout::from_size_align(block_bytes(order), PAGE_SIZE).expect("a valid layout")
    }
}

/// A block from [`Talc`].
///
/// # Invariants
///
/// `block` is a live allocation of `Talc::layout(order)` from the talc that `'a` borrows,
/// inside its arena, owned by this value alone (made only by [`Talc`]'s `alloc`, not
/// `Clone`).
pub struct TalcBlock<'a> {
    block: TaggedBlock,
    talc: PhantomData<&'a Talc>,
}

impl Block for TalcBlock<'_> {
    fn bytes(&self) -> &[u8] {
        // SAFETY: by the invariant the range is a live allocation in the arena (kept
        // mapped by the borrow of its owner) that only `self` accesses.
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

impl Contestant for Talc {
    type Block<'a> = TalcBlock<'a>;

    #[inline(always)]
    fn alloc(&self, order: Order) -> Option<TalcBlock<'_>> {
        // SAFETY: the layout's size is at least 4096, never zero.
        let ptr = unsafe { self.talc.alloc(Talc::layout(order)) };
        NonNull::new(ptr).map(|ptr| TalcBlock {
            block: TaggedBlock::new(ptr.as_ptr() as usize, order),
            talc: PhantomData,
        })
    }

    #[inline(always)]
    fn free<'a>(&'a self, block: TalcBlock<'a>) {
        assert!(
            self.arena.offset_of(block.block.addr()).is_some(),
            "a block of another talc"
        );
        // SAFETY: the block is a live allocation of this talc (checked: it is inside our
        // arena, and only our talc allocates there) with this layout, owned by `block`,
        // which is consumed here.
        unsafe {
            self.talc.dealloc(
                block.block.addr() as *mut u8,
                Talc::layout(block.block.order()),
            )
        }
    }

    fn describe(&self) -> String {
        format!(
            "talc 5 TalcLock<spin::Mutex> over a {} MiB arena; GlobalAlloc::alloc(size, align 4096)",
            self.arena.len() >> 20
        )
    }
}
