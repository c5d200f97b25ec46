//! Frame allocators: the small interface through which a kernel uses mmkit as its page
//! frame allocator, and adapters from it to other crates' interfaces.
//!
//! [`FrameAllocator`] is mmkit's own: allocate and free naturally aligned blocks of
//! 2^order frames, by order or by [`Layout`] (as Asterinas's frame allocator takes a
//! `Layout`, and LLFree an order). [`Frames`] implements it on a [`PageAllocator`] for one
//! CPU and one set of GFP flags, which is what Linux's `alloc_pages(gfp, order)` takes
//! implicitly (the current CPU) and explicitly (the flags).
//!
//! Adapters, each behind a cargo feature of the same name:
//!
//! - `x86_64`: [`Frames`] implements the `x86_64` crate's `FrameAllocator` and
//!   `FrameDeallocator` for 4 KiB and 2 MiB frames, so its page-table mappers allocate page
//!   tables from mmkit. The only `unsafe` in the core: the two traits are `unsafe` to
//!   implement, and the module says why the promise holds. The traits are those of
//!   `x86_64` 0.15: a kernel depends on `x86_64 = "0.15"` (default features off, unless
//!   it builds with nightly) for its mappers to take a `Frames`.
//!
//! Linux counterpart: `alloc_pages` / `__free_pages` (`include/linux/gfp.h`), and for the
//! layout arithmetic `get_order`.

use core::alloc::Layout;

use crate::page::{Order, Pfn, MAX_ORDER, PAGE_SHIFT};
use crate::page_alloc::{AllocError, Caller, FreeError, Gfp, PageAllocator};
use crate::sync::{RawMutex, RawSpinLock};

/// Allocates and frees naturally aligned blocks of 2^order page frames.
///
/// A block is handed out once: until it is freed, no other call returns a frame of it.
/// A free names the block as it was allocated (first pfn and order); any other free is
/// refused with an error and changes nothing.
///
/// ```
/// use core::alloc::Layout;
/// use mmkit_core::frame::FrameAllocator;
/// use mmkit_core::page_alloc::{Caller, Gfp, ZoneType};
/// use mmkit_core::topology::{CacheInfo, MemoryRange, Topology, ZoneLimits};
/// use mmkit_core::{Order, PageAllocator, Policy, Settings};
///
/// let usable = [MemoryRange::from_bytes(0x10_0000, 0x400_0000, 0)];
/// let llc = CacheInfo { llc_bytes: 1 << 20, llc_shared_cpus: 1 };
/// let topology = Topology::from_memory_map(&usable, &[], ZoneLimits::X86_64, &[0], llc)?;
/// let allocator = PageAllocator::new(topology, Settings::default(), Policy::V6_7)?;
/// let frames = allocator.frames(Caller::task(0), Gfp::KERNEL);
///
/// let table = frames.alloc_frames(Order::ZERO)?;
/// let huge = frames.alloc_layout(Layout::from_size_align(8 << 10, 2 << 20)?)?;
/// assert_eq!(huge.0 % 512, 0, "2 MiB aligned");
/// frames.free_layout(huge, Layout::from_size_align(8 << 10, 2 << 20)?)?;
/// frames.free_frames(table, Order::ZERO)?;
/// allocator.verify()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait FrameAllocator {
    /// A block of 2^`order` frames aligned to its size; returns its first pfn.
    fn alloc_frames(&self, order: Order) -> Result<Pfn, AllocError>;

    /// Give back the block [`FrameAllocator::alloc_frames`] returned for `order`.
    fn free_frames(&self, pfn: Pfn, order: Order) -> Result<(), FreeError>;

    /// The smallest block holding `layout.size()` bytes at `layout.align()` alignment
    /// ([`layout_order`]); [`AllocError::TooLarge`] when no order up to `MAX_ORDER` does.
    fn alloc_layout(&self, layout: Layout) -> Result<Pfn, AllocError> {
        let order = layout_order(layout).ok_or(AllocError::TooLarge(layout))?;
        self.alloc_frames(order)
    }

    /// Give back the block [`FrameAllocator::alloc_layout`] returned for `layout`.
    fn free_layout(&self, pfn: Pfn, layout: Layout) -> Result<(), FreeError> {
        // A layout that could not have been allocated names no block: at MAX_ORDER the
        // free finds the block's real order and refuses the mismatch.
        self.free_frames(pfn, layout_order(layout).unwrap_or(Order::MAX))
    }
}

/// The order of the smallest naturally aligned block that holds `layout`: enough pages
/// for its size (at least one, as `get_order(0)` is 0) and a block size no smaller than
/// its alignment, since a block of 2^n pages is aligned to 2^n pages. `None` above
/// `MAX_ORDER` (4 MiB).
///
/// ```
/// use core::alloc::Layout;
/// use mmkit_core::frame::layout_order;
/// let order = |size, align| layout_order(Layout::from_size_align(size, align).unwrap());
/// assert_eq!(order(4096, 4096).map(|o| o.get()), Some(0));
/// assert_eq!(order(4097, 8).map(|o| o.get()), Some(1));
/// assert_eq!(order(4096, 1 << 21).map(|o| o.get()), Some(9));
/// assert_eq!(order(8 << 20, 4096), None);
/// ```
pub fn layout_order(layout: Layout) -> Option<Order> {
    let bytes = layout.size().max(layout.align()).max(1);
    let pages = bytes.div_ceil(1 << PAGE_SHIFT);
    let order = pages.next_power_of_two().trailing_zeros();
    u8::try_from(order)
        .ok()
        .filter(|&o| o <= MAX_ORDER)
        .and_then(Order::new)
}

/// A [`PageAllocator`] as one CPU sees it with one set of GFP flags: the
/// [`FrameAllocator`] a kernel hands to code that wants frames. Cheap to make; make one
/// per call site or per CPU.
///
/// ```
/// # use mmkit_core::topology::{CacheInfo, ZoneSize};
/// # use mmkit_core::{PageAllocator, Policy, Settings, Topology, ZoneType};
/// # let zones = [ZoneSize::managed(0, ZoneType::Normal, 16_384)];
/// # let llc = CacheInfo { llc_bytes: 8 << 20, llc_shared_cpus: 1 };
/// # let topology = Topology::x86_64(&zones, vec![1], llc, false)?;
/// # let allocator = PageAllocator::new(topology, Settings::default(), Policy::V6_7)?;
/// use mmkit_core::frame::FrameAllocator;
/// use mmkit_core::page_alloc::Caller;
/// use mmkit_core::{Gfp, Order};
///
/// // What CPU 0's page-table code allocates through: kernel requests, one page at a time.
/// let frames = allocator.frames(Caller::task(0), Gfp::KERNEL);
/// let table = frames.alloc_frames(Order::ZERO)?;
/// frames.free_frames(table, Order::ZERO)?;
/// allocator.verify()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Frames<'a, R: RawMutex = RawSpinLock> {
    allocator: &'a PageAllocator<R>,
    caller: Caller,
    gfp: Gfp,
}

// By hand: a derive would ask the lock type to be `Copy`, and the handle only borrows it.
impl<R: RawMutex> Clone for Frames<'_, R> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<R: RawMutex> Copy for Frames<'_, R> {}

impl<R: RawMutex> PageAllocator<R> {
    /// A [`FrameAllocator`] that allocates as `caller` with `gfp` and frees as `caller`.
    pub fn frames(&self, caller: Caller, gfp: Gfp) -> Frames<'_, R> {
        Frames {
            allocator: self,
            caller,
            gfp,
        }
    }
}

impl<R: RawMutex> Frames<'_, R> {
    /// The allocator behind it.
    pub fn allocator(&self) -> &PageAllocator<R> {
        self.allocator
    }
}

impl<R: RawMutex> FrameAllocator for Frames<'_, R> {
    fn alloc_frames(&self, order: Order) -> Result<Pfn, AllocError> {
        self.allocator.alloc_pages(self.caller, self.gfp, order)
    }

    fn free_frames(&self, pfn: Pfn, order: Order) -> Result<(), FreeError> {
        self.allocator.free_pages(self.caller, pfn, order)
    }
}

#[cfg(feature = "x86_64")]
#[expect(
    unsafe_code,
    reason = "the x86_64 crate's FrameAllocator and FrameDeallocator are unsafe traits"
)]
mod x86_64_adapter {
    //! The `x86_64` crate's frame traits on [`Frames`]. Frames of 1 GiB would need order
    //! 18, above `MAX_ORDER`, so `allocate_frame` for `Size1GiB` always returns `None`.

    use x86_64::structures::paging::{
        FrameAllocator as X86FrameAllocator, FrameDeallocator, PageSize, PhysFrame,
    };
    use x86_64::PhysAddr;

    use super::{layout_order, FrameAllocator, Frames};
    use crate::page::{Order, Pfn, PAGE_SHIFT};
    use crate::sync::RawMutex;

    /// The order of an `S`-sized frame, `None` above `MAX_ORDER`.
    fn frame_order<S: PageSize>() -> Option<Order> {
        let size = usize::try_from(S::SIZE).ok()?;
        layout_order(core::alloc::Layout::from_size_align(size, size).ok()?)
    }

    // SAFETY: the x86_64 crate asks that `allocate_frame` yield only unused frames. A
    // `Frames` allocates through `PageAllocator::alloc_pages`, which hands out a block
    // only from the free lists or a pageset and marks it allocated under the lock that
    // guards it, so no frame of it is handed out again until `free_pages` accepts it back
    // (`verify()` checks that every page is in exactly one block, and frees of blocks not
    // allocated are refused). The frames are of the size asked: the block of
    // `frame_order::<S>()` is `S::SIZE` bytes, aligned to its size.
    unsafe impl<S: PageSize, R: RawMutex> X86FrameAllocator<S> for Frames<'_, R> {
        fn allocate_frame(&mut self) -> Option<PhysFrame<S>> {
            let pfn = self.alloc_frames(frame_order::<S>()?).ok()?;
            let frame = PhysFrame::from_start_address(PhysAddr::new(pfn.0 << PAGE_SHIFT));
            debug_assert!(frame.is_ok(), "blocks are aligned to their size");
            frame.ok()
        }
    }

    impl<S: PageSize, R: RawMutex> FrameDeallocator<S> for Frames<'_, R> {
        /// A frame mmkit refuses (never allocated, freed twice, or of another size) is
        /// left as it was; debug builds assert.
        unsafe fn deallocate_frame(&mut self, frame: PhysFrame<S>) {
            let Some(order) = frame_order::<S>() else {
                return;
            };
            let pfn = Pfn(frame.start_address().as_u64() >> PAGE_SHIFT);
            let freed = self.free_frames(pfn, order);
            debug_assert!(freed.is_ok(), "deallocate_frame({pfn:?}): {freed:?}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::page_alloc::test_allocator;

    #[test]
    fn a_layout_above_max_order_is_refused_and_changes_nothing() {
        let allocator = test_allocator();
        let frames = allocator.frames(Caller::task(0), Gfp::KERNEL);
        let free = allocator
            .zones()
            .iter()
            .map(|z| z.free_pages())
            .sum::<i64>();
        let layout = Layout::from_size_align(4 << 20, 8 << 20).unwrap();
        assert_eq!(
            frames.alloc_layout(layout),
            Err(AllocError::TooLarge(layout))
        );
        let after = allocator
            .zones()
            .iter()
            .map(|z| z.free_pages())
            .sum::<i64>();
        assert_eq!(after, free);
    }

    #[test]
    fn a_layout_freed_with_another_size_is_refused() {
        let allocator = test_allocator();
        let frames = allocator.frames(Caller::task(0), Gfp::KERNEL);
        let layout = Layout::from_size_align(3 << 12, 4096).unwrap();
        let pfn = frames.alloc_layout(layout).unwrap();
        let other = Layout::from_size_align(4096, 4096).unwrap();
        assert!(matches!(
            frames.free_layout(pfn, other),
            Err(FreeError::WrongOrder { .. })
        ));
        frames.free_layout(pfn, layout).unwrap();
        allocator.verify().unwrap();
    }
}
