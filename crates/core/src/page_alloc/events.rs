//! What a call did under the zone lock, reported as it happens: one [`ZoneLockHold`] per
//! zone-lock hold, handed to a [`LockEvents`] sink the caller passes in.
//!
//! Linux counterpart: the tracepoints of `mm/page_alloc.c` that fire under the zone lock,
//! `mm_page_alloc_zone_locked` (one per block `rmqueue_bulk` or `rmqueue_buddy` takes,
//! `percpu_refill` saying which) and `mm_page_pcpu_drain` (one per block
//! `free_pcppages_bulk` returns). A record here sums one hold's events: a refill of 63
//! blocks is one record with `blocks: 63`, as it is one acquisition of the lock. It also
//! says what the tracepoints leave out: the drain's reason, whose pageset, and the buddy
//! merge levels done (each reads a cold descriptor under the lock). A simulator charges
//! lock time from the records; the trace replayer and `mmkit pcp-script` total them.
//! Diffing the zone's [`ZoneEvents`](super::ZoneEvents) counters around a call, as they
//! did before, cannot tell a refill from a direct allocation in the same call, nor one
//! drain of many blocks from several, and counts no drained blocks at all.
//!
//! The sink is a generic `&mut impl LockEvents` parameter of the `_report` entry points
//! ([`PageAllocator::alloc_pages_report`] and the others); the plain entry points pass
//! `&mut ()`, whose methods are empty, so the compiler removes every record and every
//! value computed only for one. The runtime's paths compile to what they were before the
//! records existed: `crates/bench/callgrind-check.sh` counts the same instructions per page
//! (`docs/ARCHITECTURE.md`, "Per-call reports"). The other shape considered, a `Copy`
//! outcome returned by each call, would cost the runtime: every call would fill and return
//! it, and a call holds the zone lock a varying number of times (a slow path drains every
//! CPU), so it would need a count per kind, not one record per hold.
//!
//! A sink runs where a tracepoint would: inside the allocator, with the pageset lock and
//! the zone lock held. It must not call back into the allocator.
//!
//! [`PageAllocator::alloc_pages_report`]: super::PageAllocator::alloc_pages_report

use alloc::vec::Vec;

use super::types::CpuId;
use super::zone::DrainReason;
use crate::page::{Order, Page, Pfn};

/// What one zone-lock hold did.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum HoldKind {
    /// `rmqueue_bulk`: blocks moved from the buddy lists to `cpu`'s pageset
    /// (`mm_page_alloc_zone_locked` with `percpu_refill`). Zero blocks when the zone had
    /// none of the order; the request then goes to [`HoldKind::BuddyAlloc`].
    Refill,
    /// `free_pcppages_bulk`: blocks moved from `cpu`'s pageset to the buddy lists
    /// (`mm_page_pcpu_drain`), and why. A remote drain (`drain_all_pages`, CPU offline,
    /// `zone_pcp_disable`) names the CPU whose pageset it emptied.
    Drain(DrainReason),
    /// `rmqueue_buddy`: one block taken for the caller without a pageset: an order the
    /// pagesets do not cache, an interrupt that bypasses them, a busy pageset, a refill
    /// that found nothing (`mm_page_alloc_zone_locked` without `percpu_refill`). Zero blocks
    /// when the zone had none.
    BuddyAlloc,
    /// `free_one_page`/`__free_pages_ok`: one block straight back to the buddy lists: an
    /// order the pagesets do not cache, an interrupt that bypasses them, a busy pageset, an
    /// isolated pageblock.
    BuddyFree,
    /// `reserve_highatomic_pageblock` or `unreserve_highatomic_pageblock`: a pageblock's
    /// free blocks moved to another migratetype's lists (zero when it had none or was not
    /// changed).
    HighAtomic,
}

/// One zone-lock hold inside an allocator call: what moved between the buddy lists and
/// the rest of the system while the lock was held.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ZoneLockHold {
    /// The zone: its index in [`PageAllocator::zones`](super::PageAllocator::zones).
    pub zone: usize,
    /// Whose pageset a refill filled or a drain emptied; the calling CPU for the other
    /// kinds.
    pub cpu: CpuId,
    /// What the hold did.
    pub kind: HoldKind,
    /// Blocks moved (each block is one tracepoint event in Linux).
    pub blocks: u64,
    /// Pages in those blocks.
    pub pages: u64,
    /// Buddy merge levels done by the blocks freed (`__free_one_page`'s loop iterations).
    pub merges: u64,
    /// Buddy split levels done for the blocks taken (`expand`'s loop iterations): each
    /// writes the freed half's cold descriptor, as a merge level reads its buddy's.
    pub splits: u64,
}

/// Receives what an allocator call did, as it does it. Every method defaults to doing
/// nothing, so a sink implements only what it wants; `()` is the sink that wants nothing
/// (the plain entry points use it), and `Vec<ZoneLockHold>` collects the holds.
///
/// They run inside the allocator, most with its locks held, as a Linux tracepoint's probe
/// does: they must not call into the allocator.
///
/// # Example
///
/// A simulator's sink that charges each zone-lock hold
/// `lock_ns + blocks × page_ns + merges × merge_ns` to the zone's lock, and each PCP hit
/// a fixed cost:
///
/// ```
/// use mmkit_core::page_alloc::{Caller, CpuId, LockEvents, ZoneLockHold};
/// use mmkit_core::topology::{CacheInfo, ZoneSize};
/// use mmkit_core::{Gfp, Order, PageAllocator, Policy, Settings, Topology, ZoneType};
///
/// #[derive(Default)]
/// struct Charges {
///     /// Per zone index: lock hold time charged, in ns.
///     held_ns: Vec<u64>,
///     /// PCP hit time charged, in ns.
///     hit_ns: u64,
/// }
///
/// impl LockEvents for Charges {
///     fn hold(&mut self, hold: &ZoneLockHold) {
///         let (lock_ns, page_ns, merge_ns) = (100, 120, 30);
///         self.held_ns[hold.zone] += lock_ns + hold.blocks * page_ns + hold.merges * merge_ns;
///     }
///
///     fn pcp_hit(&mut self, _zone: usize, _cpu: CpuId, blocks: u64) {
///         self.hit_ns += blocks * 20;
///     }
/// }
///
/// let llc = CacheInfo { llc_bytes: 32 << 20, llc_shared_cpus: 2 };
/// let sizes = [ZoneSize::managed(0, ZoneType::Normal, 1 << 16)];
/// let topology = Topology::x86_64(&sizes, vec![2], llc, false)?;
/// let allocator = PageAllocator::new(topology, Settings::default(), Policy::V6_7)?;
/// let normal = allocator.zones().iter().position(|z| z.managed() > 0).unwrap();
/// let mut charges = Charges { held_ns: vec![0; allocator.zones().len()], ..Charges::default() };
/// let cpu0 = Caller::task(0);
///
/// // The first allocation refills the empty pageset: one hold of `batch` blocks.
/// let pfn = allocator.alloc_pages_report(cpu0, Gfp::KERNEL, Order::ZERO, &mut charges)?;
/// let refill_ns = charges.held_ns[normal];
/// assert!(refill_ns > 100 + 120);
/// // The second is served by the pageset: a PCP hit, no hold.
/// allocator.alloc_pages_report(cpu0, Gfp::KERNEL, Order::ZERO, &mut charges)?;
/// assert_eq!((charges.held_ns[normal], charges.hit_ns), (refill_ns, 20));
/// allocator.free_pages_report(cpu0, pfn, Order::ZERO, &mut charges)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait LockEvents {
    /// The call held a zone's lock once and did `hold` under it.
    #[inline(always)]
    fn hold(&mut self, hold: &ZoneLockHold) {
        let _ = hold;
    }

    /// `blocks` blocks of the zone at index `zone` went from `cpu`'s pageset to the caller
    /// (an allocation) or from the caller to that pageset (a free) under the pageset lock
    /// alone, without a zone-lock hold for them: PCP hits. A block whose allocation needed
    /// a refill, or whose free triggered a drain, is not a hit: its hold is reported
    /// instead. A single allocation or free reports at most one hit, of one block.
    #[inline(always)]
    fn pcp_hit(&mut self, zone: usize, cpu: CpuId, blocks: u64) {
        let _ = (zone, cpu, blocks);
    }

    /// A `drain_all_pages` call (the allocator's slow path's among them) took the drain
    /// mutex and drained or queued work (`skipped` false), or found another drain running
    /// and returned (`skipped` true, a global request). Reported before its drains, with
    /// no lock held: a caller that reclaims counts its drains by it.
    #[inline(always)]
    fn drain_all(&mut self, skipped: bool) {
        let _ = skipped;
    }

    /// Whether the sink takes [`LockEvents::read_ahead`] hints. `false` by default, and
    /// the core tests it before it looks ahead at all, so for a sink that does not want
    /// them (`()`: the runtime's paths) the walk that finds the descriptors compiles away.
    const READS_AHEAD: bool = false;

    /// The call will soon read `page`'s descriptor under the zone lock (a drain's next
    /// blocks' buddies, each a likely cache miss, independent of the others): a caller
    /// that can ask the processor for it early (the simulator's prefetch) may, so that
    /// the misses overlap instead of coming one after another. A hint only: what the call
    /// does is the same whatever the sink does. Linux had the same read-ahead in
    /// `free_pcppages_bulk` from v4.18 (`prefetch_buddy`, Aaron Lu, 2018) until Mel
    /// Gorman's "mm/page_alloc: do not prefetch buddies during bulk free" (February
    /// 2022), which found it not worth its instructions on the kernel's own path.
    #[inline(always)]
    fn read_ahead(&mut self, page: &Page) {
        let _ = page;
    }

    /// A refill of an `order` pageset list left `first` at the head of the buddy list of
    /// zone `zone` it took its blocks from, `blocks` long: the next refill from that list
    /// takes its blocks from `first` on, after any freed to the list's head meanwhile.
    /// Called, with
    /// the zone lock held, only for a sink that [reads ahead](LockEvents::READS_AHEAD) and
    /// only when the list is not empty. A hint: a caller that runs other work before that
    /// refill (the simulator) may walk the list's `next` links from `first` in between,
    /// asking for each descriptor early, so that the refill's own walk, one dependent load
    /// per block, finds them in cache. The list changes under such a walk (blocks taken,
    /// merged away), so it must check each block it reads (still free, of `order`) and
    /// stop where one is not.
    #[inline(always)]
    fn refill_left(&mut self, zone: usize, order: Order, first: Pfn, blocks: u64) {
        let _ = (zone, order, first, blocks);
    }
}

/// The sink that wants nothing: what the plain entry points pass.
impl LockEvents for () {}

/// Collects every hold, in the order they happened; PCP hits are not kept. The vector
/// grows under the allocator's locks, so this suits callers whose heap is not this
/// allocator (a replayer, a script runner, a test).
impl LockEvents for Vec<ZoneLockHold> {
    fn hold(&mut self, hold: &ZoneLockHold) {
        self.push(*hold);
    }
}
