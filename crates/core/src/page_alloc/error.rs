//! Errors of the allocation and free calls. A failed call changes nothing.

use core::fmt;

use super::types::{CpuId, NodeId};
use crate::page::{Order, Pfn};

/// Why an allocation failed.
///
/// ```
/// # use mmkit_core::topology::{CacheInfo, ZoneSize};
/// # use mmkit_core::{PageAllocator, Policy, Settings, Topology, ZoneType};
/// # let zones = [ZoneSize::managed(0, ZoneType::Normal, 16_384)];
/// # let llc = CacheInfo { llc_bytes: 8 << 20, llc_shared_cpus: 1 };
/// # let topology = Topology::x86_64(&zones, vec![1], llc, false)?;
/// # let allocator = PageAllocator::new(topology, Settings::default(), Policy::V6_7)?;
/// use mmkit_core::page_alloc::Caller;
/// use mmkit_core::{AllocError, Gfp, Order};
///
/// // CPU 3 does not exist on this one-CPU machine; a DMA request finds no DMA zone.
/// let cpu3 = allocator.alloc_pages(Caller::task(3), Gfp::KERNEL, Order::ZERO);
/// assert_eq!(cpu3, Err(AllocError::InvalidCpu(3)));
/// let dma = allocator.alloc_pages(Caller::task(0), Gfp::KERNEL | Gfp::DMA, Order::ZERO);
/// assert_eq!(dma, Err(AllocError::NoZone));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum AllocError {
    /// No eligible zone had a free block of the order within the caller's watermark, even
    /// after giving back the high-atomic reserve.
    OutOfMemory {
        /// The order requested.
        order: Order,
    },
    /// The GFP flags contradict each other, or ask for what no allocation can honour
    /// (`__GFP_NOFAIL`, a bit mmkit does not define; see [`Gfp`](super::Gfp)).
    InvalidGfp(&'static str),
    /// The preferred node does not exist.
    InvalidNode(NodeId),
    /// No zone the request may use has memory (e.g. `__GFP_DMA` on a machine without DMA).
    NoZone,
    /// The CPU does not exist or is offline.
    InvalidCpu(CpuId),
    /// The layout needs a block larger than order `MAX_ORDER` (4 MiB) holds
    /// ([`FrameAllocator::alloc_layout`](crate::frame::FrameAllocator::alloc_layout)).
    TooLarge(core::alloc::Layout),
}

impl fmt::Display for AllocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AllocError::OutOfMemory { order } => {
                write!(f, "out of memory for an order-{order} block")
            }
            AllocError::InvalidGfp(why) => write!(f, "invalid GFP flags: {why}"),
            AllocError::InvalidNode(node) => write!(f, "node {node} does not exist"),
            AllocError::NoZone => write!(f, "no zone with memory matches the GFP flags"),
            AllocError::InvalidCpu(cpu) => write!(f, "CPU {cpu} does not exist or is offline"),
            AllocError::TooLarge(layout) => write!(
                f,
                "{} bytes aligned to {} need more than an order-{} block (4 MiB)",
                layout.size(),
                layout.align(),
                crate::page::MAX_ORDER
            ),
        }
    }
}

impl core::error::Error for AllocError {}

/// Why a free was refused. The block stays as it was.
///
/// ```
/// # use mmkit_core::topology::{CacheInfo, ZoneSize};
/// # use mmkit_core::{PageAllocator, Policy, Settings, Topology, ZoneType};
/// # let zones = [ZoneSize::managed(0, ZoneType::Normal, 16_384)];
/// # let llc = CacheInfo { llc_bytes: 8 << 20, llc_shared_cpus: 1 };
/// # let topology = Topology::x86_64(&zones, vec![1], llc, false)?;
/// # let allocator = PageAllocator::new(topology, Settings::default(), Policy::V6_7)?;
/// use mmkit_core::page_alloc::Caller;
/// use mmkit_core::{FreeError, Gfp, Order};
///
/// let cpu0 = Caller::task(0);
/// let pfn = allocator.alloc_pages(cpu0, Gfp::KERNEL, Order::ZERO)?;
/// allocator.free_pages(cpu0, pfn, Order::ZERO)?;
/// // A double free is refused and changes nothing.
/// let again = allocator.free_pages(cpu0, pfn, Order::ZERO);
/// assert!(matches!(again, Err(FreeError::NotAllocated { .. })), "{again:?}");
/// allocator.verify()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum FreeError {
    /// The pfn is in no zone.
    OutsideZones {
        /// The pfn given.
        pfn: Pfn,
    },
    /// The pfn is not aligned to the order given, so it cannot start such a block.
    Misaligned {
        /// The pfn given.
        pfn: Pfn,
        /// The order given.
        order: Order,
    },
    /// The page is free: freed twice, or never allocated.
    NotAllocated {
        /// The pfn given.
        pfn: Pfn,
    },
    /// The block was allocated with another order.
    WrongOrder {
        /// The pfn given.
        pfn: Pfn,
        /// The order it was allocated with.
        allocated: Order,
        /// The order given.
        given: Order,
    },
    /// The pfn is inside an allocated block that starts elsewhere.
    NotBlockStart {
        /// The pfn given.
        pfn: Pfn,
        /// Where the block starts.
        block: Pfn,
    },
    /// The page is reserved or a hole: the allocator never managed it.
    Reserved {
        /// The pfn given.
        pfn: Pfn,
    },
    /// The freeing CPU does not exist or is offline.
    InvalidCpu(CpuId),
    /// A batched free names the same block twice.
    Duplicate {
        /// The pfn given twice.
        pfn: Pfn,
    },
}

impl fmt::Display for FreeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FreeError::OutsideZones { pfn } => write!(f, "pfn {pfn} is outside every zone"),
            FreeError::Misaligned { pfn, order } => {
                write!(f, "pfn {pfn} is not aligned for an order-{order} block")
            }
            FreeError::NotAllocated { pfn } => {
                write!(f, "pfn {pfn} is free: double free, or never allocated")
            }
            FreeError::WrongOrder {
                pfn,
                allocated,
                given,
            } => write!(
                f,
                "pfn {pfn} was allocated as order {allocated}, freed as order {given}"
            ),
            FreeError::NotBlockStart { pfn, block } => {
                write!(f, "pfn {pfn} is inside the block allocated at pfn {block}")
            }
            FreeError::Reserved { pfn } => write!(f, "pfn {pfn} is reserved: never managed"),
            FreeError::InvalidCpu(cpu) => write!(f, "CPU {cpu} does not exist or is offline"),
            FreeError::Duplicate { pfn } => write!(f, "pfn {pfn} appears twice in one batch"),
        }
    }
}

impl core::error::Error for FreeError {}

/// Why a batched free ([`PageAllocator::free_pages_batch`](super::PageAllocator::free_pages_batch))
/// was refused: the first page that could not be freed, and why. Nothing was freed.
///
/// ```
/// # use mmkit_core::topology::{CacheInfo, ZoneSize};
/// # use mmkit_core::{PageAllocator, Policy, Settings, Topology, ZoneType};
/// # let zones = [ZoneSize::managed(0, ZoneType::Normal, 16_384)];
/// # let llc = CacheInfo { llc_bytes: 8 << 20, llc_shared_cpus: 1 };
/// # let topology = Topology::x86_64(&zones, vec![1], llc, false)?;
/// # let allocator = PageAllocator::new(topology, Settings::default(), Policy::V6_7)?;
/// use mmkit_core::page_alloc::Caller;
/// use mmkit_core::{FreeError, Gfp, Order};
///
/// let cpu0 = Caller::task(0);
/// let pfn = allocator.alloc_pages(cpu0, Gfp::KERNEL, Order::ZERO)?;
/// // The batch names one page twice: refused whole, so the page is still allocated.
/// let err = allocator.free_pages_batch(cpu0, &[pfn, pfn]).unwrap_err();
/// assert_eq!(err.index, 1);
/// assert_eq!(err.error, FreeError::Duplicate { pfn });
/// allocator.free_pages_batch(cpu0, &[pfn])?;
/// allocator.verify()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct BatchFreeError {
    /// The page's index in the batch.
    pub index: usize,
    /// Why that page could not be freed.
    pub error: FreeError,
}

impl fmt::Display for BatchFreeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "page {} of the batch: {}; nothing freed",
            self.index, self.error
        )
    }
}

impl core::error::Error for BatchFreeError {}

impl From<(usize, FreeError)> for BatchFreeError {
    fn from((index, error): (usize, FreeError)) -> Self {
        BatchFreeError { index, error }
    }
}
