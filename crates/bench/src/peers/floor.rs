//! Reference rows of `mmkit bench pagealloc`, not contestants: the physical floor of a
//! page allocator's order-0 fast path on this machine, measured by the same harness
//! loop, with the same memory touching, next to the real allocators.
//!
//! - `floor: lifo` — a bare stack of frame numbers over an arena: an allocation pops a
//!   pfn, a free pushes it back; nothing else (no zone, no statistics, no checks beyond
//!   the harness's own). This is what a per-CPU list costs when the hardware does nothing
//!   but move the number: the product's "≈ 3 ns" anchor.
//! - `floor: spinlock` — the same stack with one uncontended spinlock acquire (a
//!   compare-and-swap) and release (a store) around each pop and each push: the cost of
//!   a PCP that takes a lock per operation, as Linux's `pcp->lock` (a `spin_trylock` since
//!   6.0) and mmkit's pageset try-lock do.
//!
//! The stack is an array of `AtomicU32` and a top index read and written with relaxed
//! loads and stores: plain moves on x86, never a read-modify-write, so the `lifo` row
//! has no atomic instruction and the `spinlock` row has exactly the lock's. They are
//! atomics only so that the types are `Sync`, as the harness's [`Contestant`] trait asks.
//! A block is a pfn and an address in the arena, touched by the harness as every
//! contestant's is ([`crate::contestant::Touch`]). Order 0 only; no threads pattern.
//!
//! Linux counterpart: none (the floor under `rmqueue_pcplist` / `free_unref_page_commit`).

use std::marker::PhantomData;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering::Relaxed};

use mmkit_core::page::{PAGE_SHIFT, PAGE_SIZE};
use mmkit_core::Order;
use mmkit_runtime::arena::Arena;

use crate::contestant::{block_bytes, Block, Contestant, TaggedBlock};
use crate::pagealloc::{self, CellSample, CellSpec};
use crate::runner::Runner;
use crate::threads::{ThreadsConfig, ThreadsOutcome};
use crate::BenchError;

/// The two floors' names, in report order.
pub const NAMES: &[&str] = &["floor: spinlock", "floor: lifo"];

/// Which floor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FloorKind {
    /// One spinlock acquire + release around each stack operation.
    Spinlock,
    /// The bare stack.
    Lifo,
}

impl FloorKind {
    /// The kind called `name` (one of [`NAMES`]).
    pub fn from_name(name: &str) -> Option<FloorKind> {
        match name {
            "floor: spinlock" => Some(FloorKind::Spinlock),
            "floor: lifo" => Some(FloorKind::Lifo),
            _ => None,
        }
    }

    /// The name in reports.
    pub fn name(self) -> &'static str {
        match self {
            FloorKind::Spinlock => NAMES[0],
            FloorKind::Lifo => NAMES[1],
        }
    }
}

/// A floor's arena and its stack of free pfns.
///
/// # Invariants
///
/// `stack[..top]` holds distinct pfns of `arena`, each a page that no [`FloorPage`]
/// owns; every other pfn of the arena is owned by exactly one live `FloorPage`. `top`
/// and `stack` are used by one thread at a time: only through a `Sampling`, made only
/// while `sampling` is held.
pub struct Floor {
    kind: FloorKind,
    arena: Arena,
    stack: Box<[AtomicU32]>,
    top: AtomicUsize,
    /// The lock `floor: spinlock` takes per operation.
    lock: spin::Mutex<()>,
    /// Held for a whole sample: one thread at a time uses the stack.
    sampling: spin::Mutex<()>,
}

impl Floor {
    /// A floor over a fresh arena of `arena_bytes`, every page on the stack (the lowest
    /// pfn on top).
    pub fn new(kind: FloorKind, arena_bytes: usize) -> Result<Floor, String> {
        let arena = Arena::new(arena_bytes, 4 << 20, false).map_err(|e| e.to_string())?;
        let pages = u32::try_from(arena.len() / PAGE_SIZE)
            .map_err(|_| "an arena of more than 2^32 pages".to_owned())?;
        let stack: Box<[AtomicU32]> = (0..pages).rev().map(AtomicU32::new).collect();
        Ok(Floor {
            kind,
            arena,
            top: AtomicUsize::new(stack.len()),
            stack,
            lock: spin::Mutex::new(()),
            sampling: spin::Mutex::new(()),
        })
    }

    /// Pages on the stack now.
    fn free_pages(&self) -> usize {
        self.top.load(Relaxed)
    }
}

/// The floor as the harness sees it during one sample.
///
/// # Invariants
///
/// Made only by [`Floor`]'s `pagealloc_sample` while it holds `floor.sampling`, and
/// used only on that thread (the harness's single-thread `measure_cell`) until it drops.
struct Sampling<'f> {
    floor: &'f Floor,
    base: usize,
}

impl Sampling<'_> {
    #[inline(always)]
    fn pop(&self) -> Option<u32> {
        let top = self.floor.top.load(Relaxed);
        let next = top.checked_sub(1)?;
        let pfn = self.floor.stack[next].load(Relaxed);
        self.floor.top.store(next, Relaxed);
        Some(pfn)
    }

    #[inline(always)]
    fn push(&self, pfn: u32) {
        let top = self.floor.top.load(Relaxed);
        self.floor.stack[top].store(pfn, Relaxed);
        self.floor.top.store(top + 1, Relaxed);
    }
}

/// A page of a floor.
///
/// # Invariants
///
/// `block` is an order-0 page of the arena of the floor that `'a` borrows, popped from
/// its stack and owned by this value alone (made only by `Sampling`'s `alloc`, not
/// `Clone`). Its page number is derived from the address and the arena's base when it is
/// pushed back.
pub struct FloorPage<'a> {
    block: TaggedBlock,
    floor: PhantomData<&'a Floor>,
}

impl Block for FloorPage<'_> {
    fn bytes(&self) -> &[u8] {
        // SAFETY: by the invariant the range is a page of the live arena (kept mapped by
        // the borrow of its floor) that only `self` accesses.
        unsafe {
            std::slice::from_raw_parts(self.block.addr() as *const u8, block_bytes(Order::ZERO))
        }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`; `&mut self` makes this the only access.
        unsafe {
            std::slice::from_raw_parts_mut(self.block.addr() as *mut u8, block_bytes(Order::ZERO))
        }
    }

    fn addr(&self) -> usize {
        self.block.addr()
    }
}

impl Contestant for Sampling<'_> {
    type Block<'a>
        = FloorPage<'a>
    where
        Self: 'a;

    #[inline(always)]
    fn alloc(&self, order: Order) -> Option<FloorPage<'_>> {
        assert_eq!(order, Order::ZERO, "the floors are order 0 only");
        let pfn = match self.floor.kind {
            FloorKind::Lifo => self.pop(),
            FloorKind::Spinlock => {
                let _locked = self.floor.lock.lock();
                self.pop()
            }
        }?;
        Some(FloorPage {
            block: TaggedBlock::new(self.base + pfn as usize * PAGE_SIZE, Order::ZERO),
            floor: PhantomData,
        })
    }

    #[inline(always)]
    fn free<'a>(&'a self, page: FloorPage<'a>) {
        // The page number, with any order bits on top, where the one range check refuses
        // them together with another floor's page (as `mmkit`'s bulk free does).
        let pfn = page
            .block
            .word()
            .wrapping_sub(self.base)
            .rotate_right(PAGE_SHIFT);
        assert!(pfn < self.floor.stack.len(), "a page of another floor");
        let pfn = pfn as u32;
        match self.floor.kind {
            FloorKind::Lifo => self.push(pfn),
            FloorKind::Spinlock => {
                let _locked = self.floor.lock.lock();
                self.push(pfn);
            }
        }
    }

    fn describe(&self) -> String {
        self.floor.describe()
    }
}

impl Floor {
    fn describe(&self) -> String {
        let what = match self.kind {
            FloorKind::Lifo => "reference, not a contestant: a bare LIFO of u32 pfns (relaxed loads and stores, no atomic read-modify-write)",
            FloorKind::Spinlock => "reference, not a contestant: the same LIFO with one uncontended spin::Mutex lock (compare-and-swap) + unlock (store) per alloc and per free",
        };
        format!("{what} over a {} MiB arena", self.arena.len() >> 20)
    }
}

impl Runner for Floor {
    fn name(&self) -> &'static str {
        self.kind.name()
    }

    fn describe(&self) -> String {
        Floor::describe(self)
    }

    fn supports(&self, order: Order) -> bool {
        order == Order::ZERO
    }

    fn bulk(&self) -> bool {
        false
    }

    fn pagealloc_sample(&self, spec: &CellSpec) -> Result<CellSample, BenchError> {
        let _sampling = self.sampling.lock();
        let sampling = Sampling {
            floor: self,
            base: self.arena.base() as usize,
        };
        pagealloc::measure_cell(&sampling, false, spec).map_err(|e| e.context(self.name()))
    }

    fn threads(&self, _config: &ThreadsConfig) -> Result<ThreadsOutcome, BenchError> {
        Err(BenchError::new(format!(
            "{} is a reference row of pagealloc, not a threads contestant",
            self.name()
        )))
    }

    fn audit(&self) -> Result<(), String> {
        let _sampling = self.sampling.lock();
        let pages = self.stack.len();
        match self.free_pages() {
            free if free == pages => Ok(()),
            free => Err(format!("{} of {pages} pages still allocated", pages - free)),
        }
    }
}
