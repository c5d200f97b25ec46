//! `buddy_system_allocator`'s frame allocator as a contestant: a `LockedFrameAllocator`
//! (a `spin` mutex around `FrameAllocator`, whose free lists are `BTreeSet`s of frame
//! numbers on the process heap) that owns the frames of an arena of the same size as
//! mmkit's pool; frame `f` is byte `f × 4096` of the arena. A block of order `k` is
//! `alloc(2^k)` frames, which the buddy system aligns to 2^k frames.

use std::marker::PhantomData;

use buddy_system_allocator::LockedFrameAllocator;
use mmkit_core::page::PAGE_SIZE;
use mmkit_core::Order;
use mmkit_runtime::arena::Arena;

use crate::contestant::{Block, Contestant, TaggedBlock};

/// The frame allocator over its own arena.
pub struct Buddy {
    frames: LockedFrameAllocator,
    arena: Arena,
}

impl Buddy {
    /// A frame allocator owning every frame of a fresh arena of `arena_bytes`.
    pub fn new(arena_bytes: usize) -> Result<Buddy, String> {
        let arena = Arena::new(arena_bytes, 4 << 20, false).map_err(|e| e.to_string())?;
        let frames = LockedFrameAllocator::new();
        frames.lock().add_frame(0, arena.len() / PAGE_SIZE);
        Ok(Buddy { frames, arena })
    }
}

/// A block from [`Buddy`].
///
/// # Invariants
///
/// `block` is 2^order frames the allocator that `'a` borrows handed out, in its arena;
/// only this value touches or frees them (made only by [`Buddy`]'s `alloc`, not `Clone`).
/// The frame number is derived from the address and the arena's base when it is freed.
pub struct BuddyBlock<'a> {
    block: TaggedBlock,
    buddy: PhantomData<&'a Buddy>,
}

impl Block for BuddyBlock<'_> {
    fn bytes(&self) -> &[u8] {
        // SAFETY: by the invariant the frames are allocated to `self` alone and lie in
        // the arena, which the borrow of its owner keeps mapped.
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

impl Contestant for Buddy {
    type Block<'a> = BuddyBlock<'a>;

    #[inline(always)]
    fn alloc(&self, order: Order) -> Option<BuddyBlock<'_>> {
        let frame = self.frames.lock().alloc(1 << order.get())?;
        Some(BuddyBlock {
            block: TaggedBlock::new(self.arena.base() as usize + frame * PAGE_SIZE, order),
            buddy: PhantomData,
        })
    }

    #[inline(always)]
    fn free<'a>(&'a self, block: BuddyBlock<'a>) {
        let offset = block.block.addr().wrapping_sub(self.arena.base() as usize);
        assert!(
            offset < self.arena.len(),
            "a block of another frame allocator"
        );
        self.frames
            .lock()
            .dealloc(offset / PAGE_SIZE, 1 << block.block.order().get());
    }

    fn describe(&self) -> String {
        format!(
            "buddy_system_allocator 0.13 LockedFrameAllocator<33> over a {} MiB arena; alloc(2^order frames)",
            self.arena.len() >> 20
        )
    }
}
