//! The reclaim hook kswapd calls.
//!
//! The page pool does not know what its pages hold, so reclaim is the user's: a database
//! evicts buffers, a packet pool drops cached frames. kswapd calls [`Reclaim::reclaim`]
//! once per pass of the core's `balance_pgdat` (`mmkit_core::mm::kswapd`): while no zone
//! of its node is above its high watermark, and while a watermark boost is being paid
//! back.

use mmkit_core::mm::kswapd::ScanControl;
use mmkit_core::PageAllocator;

/// What kswapd asks of one reclaim pass.
#[derive(Debug)]
pub struct ReclaimContext<'a> {
    /// The allocator (zones, statistics, drains).
    pub allocator: &'a PageAllocator,
    /// The pass: the node (`scan.node`), the pages wanted back (`scan.nr_to_reclaim`: the
    /// high watermark of each eligible zone, at least `SWAP_CLUSTER_MAX` = 32 each), the
    /// priority (12 gentle … 1 hard), and whether the pass may write back or swap (not
    /// while kswapd reclaims only for a watermark boost).
    pub scan: ScanControl,
}

/// A source of reclaimable pages.
///
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
/// use std::sync::Arc;
/// use mmkit_runtime::{PagePool, Reclaim, ReclaimContext};
///
/// /// Counts kswapd's calls; a real cache would free its coldest blocks here.
/// #[derive(Default)]
/// struct Counting(AtomicU64);
///
/// impl Reclaim for Counting {
///     fn reclaim(&self, cx: &ReclaimContext<'_>) -> u64 {
///         self.0.fetch_add(1, Relaxed);
///         cx.allocator.drain_all_pages(None);
///         0 // nothing freed: kswapd scans harder, then gives up until woken again
///     }
/// }
///
/// let pool = PagePool::builder().memory_bytes(16 << 20).reclaim(Arc::new(Counting::default())).build()?;
/// # Ok::<(), mmkit_runtime::PoolError>(())
/// ```
pub trait Reclaim: Send + Sync {
    /// Free up to `cx.scan.nr_to_reclaim` pages back to the pool; return how many were
    /// freed. Returning 0 makes kswapd try harder (a lower priority) up to priority 1, and
    /// ends a run that only pays back a boost.
    fn reclaim(&self, cx: &ReclaimContext<'_>) -> u64;
}

/// The default hook: nothing to reclaim, but it drains every pageset, which returns
/// cached free pages to the zones. Reports no progress, so kswapd's priority falls with
/// each pass, and a run for a boost ends after one.
#[derive(Debug, Default)]
pub struct NoReclaim;

impl Reclaim for NoReclaim {
    fn reclaim(&self, cx: &ReclaimContext<'_>) -> u64 {
        cx.allocator.drain_all_pages(None);
        0
    }
}
