//! The page allocator's boot-time self test: each step a kernel takes with its frames,
//! each followed by `verify()`, and `/proc/zoneinfo` at the end.
//!
//! Every step leaves the allocator as it found it (every page it took is given back), so
//! the steps run in any order and [`run`] can run them all. A failed expectation is a
//! [`KernelError::Check`] naming it.

use alloc::vec::Vec;
use core::convert::Infallible;
use core::fmt;

use mmkit_core::mm::kswapd;
use mmkit_core::mm::kswapd::ShrinkOutcome;
use mmkit_core::page_alloc::verify::VerifyError;
use mmkit_core::page_alloc::verify::ZoneCensus;
use mmkit_core::page_alloc::Caller;
use mmkit_core::page_alloc::CpuId;
use mmkit_core::page_alloc::NodeId;
use mmkit_core::sync::RawMutex;
use mmkit_core::views::zoneinfo;
use mmkit_core::views::zoneinfo::ZoneInfo;
use mmkit_core::AllocError;
use mmkit_core::BatchFreeError;
use mmkit_core::FreeError;
use mmkit_core::Gfp;
use mmkit_core::Order;
use mmkit_core::Pfn;
use mmkit_core::ZoneType;

use crate::Kernel;

/// Bytes below which `__GFP_DMA` memory lies on x86-64 (ZONE_DMA).
pub const DMA_LIMIT_BYTES: u64 = 16 << 20;

/// Pages one bulk allocation takes (a network driver's RX refill).
pub const BULK_PAGES: usize = 64;

/// Why a step failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KernelError {
    /// An allocation failed where it should not have.
    Alloc(AllocError),
    /// A free was refused where it should not have been.
    Free(FreeError),
    /// A batched free was refused.
    BatchFree(BatchFreeError),
    /// `verify()` found the books wrong.
    Verify(VerifyError),
    /// The page-table mapper failed.
    Map(&'static str),
    /// An expectation of the step did not hold.
    Check(&'static str),
}

impl fmt::Display for KernelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KernelError::Alloc(error) => write!(f, "allocation failed: {error}"),
            KernelError::Free(error) => write!(f, "free refused: {error}"),
            KernelError::BatchFree(error) => write!(f, "batched free refused: {error}"),
            KernelError::Verify(error) => write!(f, "verify: {error}"),
            KernelError::Map(what) => write!(f, "page tables: {what}"),
            KernelError::Check(what) => write!(f, "check failed: {what}"),
        }
    }
}

impl From<AllocError> for KernelError {
    fn from(error: AllocError) -> KernelError {
        KernelError::Alloc(error)
    }
}

impl From<FreeError> for KernelError {
    fn from(error: FreeError) -> KernelError {
        KernelError::Free(error)
    }
}

impl From<BatchFreeError> for KernelError {
    fn from(error: BatchFreeError) -> KernelError {
        KernelError::BatchFree(error)
    }
}

impl From<VerifyError> for KernelError {
    fn from(error: VerifyError) -> KernelError {
        KernelError::Verify(error)
    }
}

/// `Err(KernelError::Check(what))` unless `holds`.
pub fn check(holds: bool, what: &'static str) -> Result<(), KernelError> {
    if holds {
        Ok(())
    } else {
        Err(KernelError::Check(what))
    }
}

/// Pages allocated in every zone, by `verify()`'s census (which fails on a wrong book).
pub fn allocated_pages<R: RawMutex>(kernel: &Kernel<R>) -> Result<u64, KernelError> {
    Ok(kernel
        .allocator()
        .verify()?
        .iter()
        .map(|zone| zone.allocated)
        .sum())
}

/// Every order from 0 to `MAX_ORDER` from the caller's pageset or the buddy lists: each
/// block is aligned to its size and lies in one zone; a free with the wrong order is
/// refused and changes nothing.
pub fn alloc_free_by_order<R: RawMutex>(kernel: &Kernel<R>) -> Result<(), KernelError> {
    let allocator = kernel.allocator();
    let cpu0 = Caller::task(0);
    for order in Order::all() {
        let pfn = allocator.alloc_pages(cpu0, Gfp::KERNEL, order)?;
        check(pfn.is_aligned(order), "a block is aligned to its size")?;
        let zone = allocator
            .find_zone(pfn)
            .ok_or(KernelError::Check("a block lies in a zone"))?;
        check(
            zone.spans(pfn.add(order.pages() - 1)),
            "a block lies in one zone",
        )?;
        if let Some(smaller) = order.down() {
            let wrong = allocator.free_pages(cpu0, pfn, smaller);
            check(
                matches!(wrong, Err(FreeError::WrongOrder { .. })),
                "a wrong order is refused",
            )?;
        }
        allocator.free_pages(cpu0, pfn, order)?;
        let again = allocator.free_pages(cpu0, pfn, order);
        check(
            matches!(again, Err(FreeError::NotAllocated { .. })),
            "a double free is refused",
        )?;
    }
    Ok(())
}

/// [`BULK_PAGES`] order-0 pages in one call (`alloc_pages_bulk_array`, no heap), all
/// distinct, given back in one batched free; a batch naming a page twice is refused whole.
pub fn bulk<R: RawMutex>(kernel: &Kernel<R>) -> Result<(), KernelError> {
    let allocator = kernel.allocator();
    let cpu1 = Caller::task(1);
    let mut slots = [None; BULK_PAGES];
    let filled = allocator.alloc_pages_bulk_array(cpu1, Gfp::KERNEL, None, &mut slots)?;
    check(filled == BULK_PAGES, "the bulk allocation fills every slot")?;
    let mut pfns = [Pfn(0); BULK_PAGES];
    for (pfn, slot) in pfns.iter_mut().zip(slots) {
        *pfn = slot.ok_or(KernelError::Check("a filled slot holds a pfn"))?;
    }
    let mut sorted = pfns;
    sorted.sort_unstable_by_key(|pfn| pfn.0);
    check(
        sorted.windows(2).all(|pair| pair[0] != pair[1]),
        "bulk pages are distinct",
    )?;
    let twice = [pfns[0], pfns[1], pfns[0]];
    let refused = allocator.free_pages_batch(cpu1, &twice);
    check(
        refused.is_err_and(|error| error.index == 2),
        "a page named twice is refused",
    )?;
    allocator.free_pages_batch(cpu1, &pfns)?;
    Ok(())
}

/// A `__GFP_DMA` page comes from ZONE_DMA, below 16 MiB; a `__GFP_DMA32` block from
/// below 4 GiB.
pub fn dma<R: RawMutex>(kernel: &Kernel<R>) -> Result<(), KernelError> {
    let allocator = kernel.allocator();
    let cpu0 = Caller::task(0);
    let dma = allocator.alloc_pages(cpu0, Gfp::KERNEL | Gfp::DMA, Order::ZERO)?;
    let zone = allocator.find_zone(dma).map(|zone| zone.zone_type());
    check(
        zone == Some(ZoneType::Dma),
        "a DMA request is served by ZONE_DMA",
    )?;
    check(
        dma.phys_addr() < DMA_LIMIT_BYTES,
        "a DMA page lies below 16 MiB",
    )?;
    let order4 = Order::new(4).ok_or(KernelError::Check("order 4 exists"))?;
    let dma32 = allocator.alloc_pages(cpu0, Gfp::KERNEL | Gfp::DMA32, order4)?;
    let zone = allocator.find_zone(dma32).map(|zone| zone.zone_type());
    check(
        matches!(zone, Some(ZoneType::Dma | ZoneType::Dma32)),
        "DMA32 or below",
    )?;
    check(
        dma32.add(order4.pages()).phys_addr() <= 1 << 32,
        "a DMA32 block lies below 4 GiB",
    )?;
    allocator.free_pages(cpu0, dma32, order4)?;
    allocator.free_pages(cpu0, dma, Order::ZERO)?;
    Ok(())
}

/// CPU `cpu` goes offline (its pagesets drain, requests from it are refused) and comes
/// back; the last online CPU cannot go.
pub fn cpu_hotplug<R: RawMutex>(kernel: &Kernel<R>, cpu: CpuId) -> Result<(), KernelError> {
    let allocator = kernel.allocator();
    let caller = Caller::task(cpu);
    check(allocator.is_cpu_online(cpu), "the CPU starts online")?;
    // Leave a page on the CPU's pageset, so that going offline has something to drain.
    let pfn = allocator.alloc_pages(caller, Gfp::KERNEL, Order::ZERO)?;
    allocator.free_pages(caller, pfn, Order::ZERO)?;
    check(allocator.cpu_down(cpu), "an online CPU goes offline")?;
    check(!allocator.is_cpu_online(cpu), "the CPU is offline")?;
    let cached = allocator
        .zones()
        .iter()
        .filter_map(|zone| zone.pageset(cpu))
        .map(|pcp| pcp.count);
    check(
        cached.sum::<u64>() == 0,
        "an offline CPU's pagesets are empty",
    )?;
    let refused = allocator.alloc_pages(caller, Gfp::KERNEL, Order::ZERO);
    check(
        refused == Err(AllocError::InvalidCpu(cpu)),
        "an offline CPU cannot allocate",
    )?;
    check(
        !allocator.cpu_down(cpu),
        "an offline CPU cannot go offline again",
    )?;
    check(allocator.cpu_up(cpu), "the CPU comes back")?;
    let pfn = allocator.alloc_pages(caller, Gfp::KERNEL, Order::ZERO)?;
    allocator.free_pages(caller, pfn, Order::ZERO)?;
    Ok(())
}

/// Take blocks of `order` until the allocator says `OutOfMemory` (at the watermark, every
/// node's zones tried), then give them all back. Returns how many pages were taken.
pub fn out_of_memory<R: RawMutex>(kernel: &Kernel<R>, order: Order) -> Result<u64, KernelError> {
    let allocator = kernel.allocator();
    let cpu0 = Caller::task(0);
    let mut taken: Vec<Pfn> = Vec::new();
    let error = loop {
        match allocator.alloc_pages(cpu0, Gfp::KERNEL, order) {
            Ok(pfn) => taken.push(pfn),
            Err(error) => break error,
        }
    };
    check(
        error == AllocError::OutOfMemory { order },
        "running out is OutOfMemory",
    )?;
    check(!taken.is_empty(), "some memory was free")?;
    let pages = taken.len() as u64 * order.pages();
    check(
        allocated_pages(kernel)? >= pages,
        "the census counts every page taken",
    )?;
    if order == Order::ZERO {
        allocator.free_pages_batch(cpu0, &taken)?;
    } else {
        for pfn in taken {
            allocator.free_pages(cpu0, pfn, order)?;
        }
    }
    // Memory is back: the same request succeeds.
    let pfn = allocator.alloc_pages(cpu0, Gfp::KERNEL, order)?;
    allocator.free_pages(cpu0, pfn, order)?;
    // Falling back to other migratetypes on the way down boosted the watermarks; the
    // allocator woke kswapd to drop the boost again.
    kswapd_wakeups(kernel);
    let boost: u64 = allocator
        .zones()
        .iter()
        .map(|zone| zone.watermarks().boost())
        .sum();
    check(boost == 0, "kswapd dropped every watermark boost")?;
    Ok(pages)
}

/// What each node's kswapd thread does when it wakes: take the request the allocator
/// recorded and run the core's kswapd loop on it, with a shrinker that has nothing to
/// reclaim (this kernel has no page cache). Besides balancing, the loop drops the
/// watermark boost that migratetype fallbacks raise; a kernel that never runs it keeps
/// the boost (a pageblock or 1.5 times the high watermark, whichever is more, per zone:
/// 2 MiB of each small zone here) out of every allocation's reach.
/// Returns the boost dropped, in pages.
pub fn kswapd_wakeups<R: RawMutex>(kernel: &Kernel<R>) -> u64 {
    let allocator = kernel.allocator();
    let nothing_to_reclaim = |_: &_| Ok::<_, Infallible>(ShrinkOutcome::default());
    let mut dropped = 0;
    for node in 0..allocator.topology().nr_nodes() {
        let Ok(node) = NodeId::try_from(node) else {
            break;
        };
        let request = allocator
            .kswapd(node)
            .and_then(|kswapd| kswapd.take_request());
        if let Some((order, highest_zone)) = request {
            let Ok(outcome) = kswapd::run(allocator, node, order, highest_zone, nothing_to_reclaim);
            dropped += outcome.boost_dropped;
        }
    }
    dropped
}

/// `/proc/zoneinfo` of the allocator, in the layout of its policy's kernel.
pub fn zoneinfo<R: RawMutex>(kernel: &Kernel<R>, out: &mut impl fmt::Write) -> fmt::Result {
    let zones: Vec<ZoneInfo> = zoneinfo::collect(kernel.allocator());
    out.write_str(&zoneinfo::render(
        &zones,
        kernel.allocator().policy().zoneinfo,
    ))
}

/// Run `step`, then `verify()`; write one line saying how it went.
pub fn verified<R: RawMutex>(
    kernel: &Kernel<R>,
    name: &str,
    out: &mut impl fmt::Write,
    step: impl FnOnce(&Kernel<R>) -> Result<(), KernelError>,
) -> Result<(), KernelError> {
    step(kernel)?;
    let census = kernel.allocator().verify()?;
    let sum = |field: fn(&ZoneCensus) -> u64| census.iter().map(field).sum::<u64>();
    let (free, pcp, allocated) = (sum(|z| z.free), sum(|z| z.pcp), sum(|z| z.allocated));
    // A log line that cannot be written is no allocator failure.
    let _ = writeln!(
        out,
        "{name:<24} ok; verify: {free} free, {pcp} on pagesets, {allocated} allocated"
    );
    Ok(())
}

/// Every step, each verified, then zoneinfo: what a kernel runs once at boot.
pub fn run<R: RawMutex>(kernel: &Kernel<R>, out: &mut impl fmt::Write) -> Result<(), KernelError> {
    verified(kernel, "boot", out, |_| Ok(()))?;
    verified(kernel, "alloc/free by order", out, alloc_free_by_order)?;
    verified(kernel, "bulk alloc/free", out, bulk)?;
    verified(kernel, "DMA request", out, dma)?;
    let last = kernel.allocator().topology().nr_cpus() - 1;
    verified(kernel, "CPU offline/online", out, |kernel| {
        cpu_hotplug(kernel, last)
    })?;
    verified(kernel, "out of memory, order 0", out, |kernel| {
        out_of_memory(kernel, Order::ZERO).map(drop)
    })?;
    verified(kernel, "out of memory, MAX_ORDER", out, |kernel| {
        out_of_memory(kernel, Order::MAX).map(drop)
    })?;
    verified(kernel, "x86_64 page tables", out, |kernel| {
        crate::paging::map_unmap(kernel, 16).map(drop)
    })?;
    let _ = zoneinfo(kernel, out);
    Ok(())
}
