//! The reclaim hook kswapd calls.
//!
//! The page pool does not know what its pages hold, so reclaim is the user's: a database
//! evicts buffers, a packet pool drops cached frames. kswapd calls [`Reclaim::reclaim`]
//! while a zone of its node is below the high watermark.

use mmkit_core::page_alloc::NodeId;
use mmkit_core::PageAllocator;

/// What kswapd asks of one reclaim round.
#[derive(Debug)]
pub struct ReclaimContext<'a> {
    /// The allocator (zones, statistics, drains).
    pub allocator: &'a PageAllocator,
    /// The node being balanced.
    pub node: NodeId,
    /// Pages kswapd would like back this round (`SWAP_CLUSTER_MAX` = 32 per call in Linux).
    pub nr_to_reclaim: u64,
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
///         0 // nothing freed: kswapd stops for now
///     }
/// }
///
/// let pool = PagePool::builder().memory_bytes(16 << 20).reclaim(Arc::new(Counting::default())).build()?;
/// # Ok::<(), mmkit_runtime::PoolError>(())
/// ```
pub trait Reclaim: Send + Sync {
    /// Free up to `cx.nr_to_reclaim` pages back to the pool; return how many were freed.
    /// Returning 0 tells kswapd that no progress is possible now.
    fn reclaim(&self, cx: &ReclaimContext<'_>) -> u64;
}

/// The default hook: nothing to reclaim, but it drains every pageset, which returns
/// cached free pages to the zones. Reports no progress, so kswapd stops after one round.
#[derive(Debug, Default)]
pub struct NoReclaim;

impl Reclaim for NoReclaim {
    fn reclaim(&self, cx: &ReclaimContext<'_>) -> u64 {
        cx.allocator.drain_all_pages(None);
        0
    }
}
