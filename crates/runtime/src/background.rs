//! The pool's background threads: the vmstat tick and one kswapd per node.
//!
//! Linux counterpart: the per-CPU `vmstat_update` work (every `vm.stat_interval`, which
//! runs `decay_pcp_high` on each CPU's pagesets) and `kswapd`'s `balance_pgdat` (woken
//! when an allocation finds a zone below its low watermark; reclaims until a zone is above
//! its high watermark; sets `ZONE_RECLAIM_ACTIVE` meanwhile, which makes the pagesets
//! shrink; drops the watermark boost when done).
//!
//! The threads hold only a `Weak` reference to the pool's state, so they never keep it
//! alive; the pool stops and joins them when it drops.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Weak};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use mmkit_core::page_alloc::{NodeId, ZoneFlags, ZoneType};
use mmkit_core::Order;

use crate::pool::Inner;
use crate::reclaim::ReclaimContext;

/// Reclaim rounds before kswapd gives up on a node (`MAX_RECLAIM_RETRIES`).
const MAX_RECLAIM_RETRIES: u32 = 16;
/// Pages asked of one reclaim round at least (`SWAP_CLUSTER_MAX`).
const SWAP_CLUSTER_MAX: u64 = 32;
/// kswapd also looks for work this often, in case a wake-up was missed.
const KSWAPD_POLL: Duration = Duration::from_millis(100);

pub(crate) struct Background {
    stop: Arc<AtomicBool>,
    tick: Option<JoinHandle<()>>,
    kswapd: Vec<JoinHandle<()>>,
}

impl Background {
    pub(crate) fn start(inner: &Arc<Inner>) -> std::io::Result<Background> {
        let stop = Arc::new(AtomicBool::new(false));
        let tick = {
            let (weak, stop) = (Arc::downgrade(inner), stop.clone());
            thread::Builder::new()
                .name("mmkit-vmstat".into())
                .spawn(move || vmstat_thread(&weak, &stop))?
        };
        let mut kswapd = Vec::new();
        for node in 0..inner.allocator.topology().nr_nodes() as NodeId {
            let (weak, stop) = (Arc::downgrade(inner), stop.clone());
            let handle = thread::Builder::new()
                .name(format!("mmkit-kswapd{node}"))
                .spawn(move || kswapd_thread(&weak, &stop, node))?;
            kswapd.push(handle);
        }
        Ok(Background {
            stop,
            tick: Some(tick),
            kswapd,
        })
    }

    /// Wake the kswapd of every node with a pending request (cheap when there is none).
    pub(crate) fn kick(&self, inner: &Inner) {
        for (node, handle) in self.kswapd.iter().enumerate() {
            let pending = inner
                .allocator
                .kswapd(node as NodeId)
                .is_some_and(|k| k.pending.load(Relaxed));
            if pending {
                handle.thread().unpark();
            }
        }
    }

    pub(crate) fn stop(mut self) {
        self.stop.store(true, Relaxed);
        let threads = self.tick.take().into_iter().chain(self.kswapd.drain(..));
        for handle in threads {
            handle.thread().unpark();
            // A background thread that panicked already reported it; nothing to add.
            let _ = handle.join();
        }
    }
}

fn vmstat_thread(weak: &Weak<Inner>, stop: &AtomicBool) {
    loop {
        let interval = match weak.upgrade() {
            Some(inner) => {
                Duration::from_millis(inner.allocator.settings().stat_interval_ms as u64)
            }
            None => return,
        };
        thread::park_timeout(interval);
        if stop.load(Relaxed) {
            return;
        }
        let Some(inner) = weak.upgrade() else { return };
        for cpu in 0..inner.nr_cpus {
            inner.allocator.vmstat_tick(cpu);
        }
    }
}

fn kswapd_thread(weak: &Weak<Inner>, stop: &AtomicBool, node: NodeId) {
    loop {
        thread::park_timeout(KSWAPD_POLL);
        if stop.load(Relaxed) {
            return;
        }
        let Some(inner) = weak.upgrade() else { return };
        let Some(state) = inner.allocator.kswapd(node) else {
            return;
        };
        if state.pending.swap(false, Relaxed) {
            balance_pgdat(&inner, node);
        }
    }
}

/// `balance_pgdat`, reduced: reclaim through the hook until the node is balanced or no
/// progress is made.
fn balance_pgdat(inner: &Inner, node: NodeId) {
    let allocator = &inner.allocator;
    inner.kswapd_runs.fetch_add(1, Relaxed);
    let zones: Vec<_> = allocator
        .zones()
        .iter()
        .filter(|z| z.node() == node && z.is_managed())
        .collect();
    for zone in &zones {
        zone.set_flag(ZoneFlags::RECLAIM_ACTIVE);
    }
    for _ in 0..MAX_RECLAIM_RETRIES {
        if allocator.pgdat_balanced(node, Order::ZERO, ZoneType::Movable) {
            break;
        }
        let deficit: u64 = zones
            .iter()
            .map(|z| {
                z.wmark(mmkit_core::page_alloc::WatermarkKind::High)
                    .saturating_sub(z.free_pages().max(0) as u64)
            })
            .sum();
        let cx = ReclaimContext {
            allocator,
            node,
            nr_to_reclaim: deficit.max(SWAP_CLUSTER_MAX),
        };
        // A reclaim round makes many calls as one CPU (the hook picks it): keep it online.
        let reclaimed = {
            let _hotplug = inner.cpus_read_lock();
            inner.reclaim.reclaim(&cx)
        };
        if reclaimed == 0 {
            break;
        }
    }
    for zone in &zones {
        zone.clear_watermark_boost();
        zone.clear_flag(ZoneFlags::RECLAIM_ACTIVE);
    }
}
