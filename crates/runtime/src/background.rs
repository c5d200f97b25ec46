//! The pool's background threads: the vmstat tick and one kswapd per node.
//!
//! Linux counterpart: the per-CPU `vmstat_update` work (every `vm.stat_interval`, which
//! runs `decay_pcp_high` on each CPU's pagesets) and the `kswapd` thread (woken when an
//! allocation finds a zone below its low watermark or a fallback boosts a watermark). The
//! thread takes the wake-up's order and highest zone and runs the core's
//! `mmkit_core::mm::kswapd::run` (`balance_pgdat` until the node is balanced) with the
//! pool's [`crate::Reclaim`] hook as the shrinker; it has no reclaim loop of its own.
//!
//! The threads hold only a `Weak` reference to the pool's state, so they never keep it
//! alive; the pool stops and joins them when it drops.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Weak};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use std::convert::Infallible;

use mmkit_core::mm::kswapd::{self, KswapdOutcome, ShrinkOutcome};
use mmkit_core::page_alloc::{NodeId, ZoneType};
use mmkit_core::Order;

use crate::pool::Inner;
use crate::reclaim::ReclaimContext;

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
                .is_some_and(|k| k.pending());
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
        if let Some((order, highest_zoneidx)) = state.take_request() {
            kswapd_run(&inner, node, order, highest_zoneidx);
        }
    }
}

/// One wake-up of kswapd: the core's [`kswapd::run`] (`balance_pgdat` until the node is
/// balanced or reclaim keeps failing), with the pool's reclaim hook as the shrinker.
pub(crate) fn kswapd_run(
    inner: &Inner,
    node: NodeId,
    order: Order,
    highest_zoneidx: ZoneType,
) -> KswapdOutcome {
    inner.kswapd_runs.fetch_add(1, Relaxed);
    let allocator = &inner.allocator;
    let run = kswapd::run(allocator, node, order, highest_zoneidx, |sc| {
        let cx = ReclaimContext {
            allocator,
            scan: *sc,
        };
        // A reclaim pass makes many calls as one CPU (the hook picks it): keep it online.
        let _hotplug = inner.cpus_read_lock();
        let reclaimed = inner.reclaim.reclaim(&cx);
        // The hook reports what it freed, not what it looked at: count the pass as one
        // that scanned what it freed, so a hook that keeps up keeps the priority gentle.
        Ok::<_, Infallible>(ShrinkOutcome {
            scanned: reclaimed,
            reclaimed,
        })
    });
    match run {
        Ok(outcome) => outcome,
        Err(never) => match never {},
    }
}
