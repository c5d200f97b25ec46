//! The page pool: the core's allocator on the arena, served to the calling thread's CPU.

use std::sync::Arc;

use mmkit_core::page::PAGE_SIZE;
use mmkit_core::page_alloc::verify::{VerifyError, ZoneCensus};
use mmkit_core::page_alloc::{
    AllocError, BatchFreeError, Caller, CpuId, DrainAll, FreeError, Gfp, NodeId, ZoneId, ZoneType,
};
use mmkit_core::views::{buddyinfo, zoneinfo};
use mmkit_core::{Order, PageAllocator, Pfn, Policy, Settings, Topology};

use crate::arena::{Arena, PageBlock};
use crate::background::Background;
use crate::cpu;
use crate::fault::{FaultConfig, FaultInjector};
use crate::reclaim::Reclaim;
use crate::view::{AllocatorView, ZoneView};
use crate::PoolError;

/// How many times a call is retried on another CPU when its CPU goes offline under it.
const HOTPLUG_RETRIES: u32 = 8;

/// State shared by the pool handle and its background threads.
pub(crate) struct Inner {
    pub(crate) allocator: PageAllocator,
    pub(crate) arena: Arena,
    pub(crate) nr_cpus: u32,
    pub(crate) fault: FaultInjector,
    pub(crate) reclaim: Arc<dyn Reclaim>,
    pub(crate) kswapd_runs: std::sync::atomic::AtomicU64,
    /// `cpu_hotplug_lock`: [`PagePool::set_cpu_online`] takes it for writing; work that
    /// picks a CPU once and then makes many calls into the core as that CPU (the mapping
    /// layer's operations, kswapd's reclaim rounds) holds it for reading, so its CPU
    /// cannot go offline halfway through. Single allocations and frees do not take it:
    /// they pick the CPU per call and retry on another if the core refuses the first.
    pub(crate) cpu_hotplug: std::sync::RwLock<()>,
}

impl Inner {
    /// `cpus_read_lock`: keep every CPU's online state as it is while the guard lives.
    pub(crate) fn cpus_read_lock(&self) -> std::sync::RwLockReadGuard<'_, ()> {
        // The lock guards no data, so a panic while it was held leaves nothing to repair.
        self.cpu_hotplug.read().unwrap_or_else(|e| e.into_inner())
    }
}

impl Inner {
    pub(crate) fn new(
        allocator: PageAllocator,
        arena: Arena,
        nr_cpus: u32,
        fault: FaultConfig,
        reclaim: Arc<dyn Reclaim>,
    ) -> Inner {
        let injector = FaultInjector::default();
        injector.configure(fault);
        Inner {
            allocator,
            arena,
            nr_cpus,
            fault: injector,
            reclaim,
            kswapd_runs: Default::default(),
            cpu_hotplug: Default::default(),
        }
    }
}

/// A page pool on real memory. Thread-safe: share it by reference (or in an `Arc`).
pub struct PagePool {
    pub(crate) inner: Arc<Inner>,
    background: Option<Background>,
}

impl std::fmt::Debug for PagePool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PagePool")
            .field("bytes", &self.inner.arena.len())
            .field("cpus", &self.inner.nr_cpus)
            .field("policy", &self.inner.allocator.policy().name)
            .finish_non_exhaustive()
    }
}

/// Counters of the whole pool.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Pages allocated (`PGALLOC`).
    pub pgalloc: u64,
    /// Pages freed through counted paths (`PGFREE`).
    pub pgfree: u64,
    /// Free pages on the buddy lists.
    pub free_pages: u64,
    /// Free pages cached on pagesets.
    pub pcp_pages: u64,
    /// Pages taken from the buddy lists (refills and direct).
    pub alloc_zone: u64,
    /// Pageset refills.
    pub pcp_refills: u64,
    /// Pageset drains of any reason.
    pub pcp_drains: u64,
    /// Pageset try-locks that failed.
    pub pcp_lock_contended: u64,
    /// Allocations failed by fault injection.
    pub injected_failures: u64,
    /// kswapd wake-ups requested, summed over nodes (allocations that found a zone below
    /// its low watermark, or a boosted watermark).
    pub kswapd_wakeups: u64,
    /// kswapd balancing runs.
    pub kswapd_runs: u64,
}

impl PagePool {
    /// Start building a pool.
    pub fn builder() -> crate::PagePoolBuilder {
        crate::PagePoolBuilder::default()
    }

    pub(crate) fn start(inner: Inner, background: bool) -> Result<PagePool, PoolError> {
        let inner = Arc::new(inner);
        let background = if background {
            Some(Background::start(&inner)?)
        } else {
            None
        };
        Ok(PagePool { inner, background })
    }

    /// The core allocator underneath, read only: the machine, settings and policy, the
    /// zones with their watermarks and counters, `pgdat_balanced`, `verify()`, zoneinfo
    /// and the pool's counters. Nothing reached through it allocates or frees a page, so
    /// it cannot take a page from a live [`PageBlock`].
    ///
    /// ```
    /// # use mmkit_runtime::PagePool;
    /// # use mmkit_core::{Order, ZoneType};
    /// let pool = PagePool::builder().memory_bytes(16 << 20).cpus(1).build()?;
    /// let allocator = pool.allocator();
    /// assert!(allocator.pgdat_balanced(0, Order::ZERO, ZoneType::Movable));
    /// assert_eq!(allocator.settings(), pool.settings());
    /// # Ok::<(), mmkit_runtime::PoolError>(())
    /// ```
    ///
    /// The core's `free_pages` is not reachable this way:
    ///
    /// ```compile_fail,E0599
    /// # use mmkit_runtime::PagePool;
    /// # use mmkit_core::Order;
    /// let pool = PagePool::builder().memory_bytes(16 << 20).cpus(1).build().unwrap();
    /// let block = pool.alloc(Order::ZERO).unwrap();
    /// pool.allocator().free_pages(pool.caller(), block.pfn(), Order::ZERO).unwrap();
    /// ```
    pub fn allocator(&self) -> AllocatorView<'_> {
        AllocatorView::new(&self.inner)
    }

    /// The pool's allocator as the core's mapping layer takes it
    /// ([`mmkit_core::mm::Memory::new`]), for a `Memory` that does its own data movement
    /// (or none, in experiments that only measure the bookkeeping). This is the one way
    /// to the full `&PageAllocator` of a pool
    /// ([`mmkit_core::mm::AllocatorSource::page_allocator`]).
    ///
    /// # Safety
    ///
    /// The pool's memory safety rests on one owner per allocated page: the
    /// [`PageBlock`] or the raw caller it was handed to. The core's safe API keeps its own
    /// books consistent (`verify()` holds whatever safe code does), but its allocation,
    /// free and split calls change page ownership without the pool knowing, and a page
    /// freed behind a live [`PageBlock`] is handed out again while the block still reaches
    /// its memory. The `Memory` built on the source may allocate and free the pages its
    /// own operations own; through the allocator it reaches
    /// ([`mmkit_core::mm::Memory::allocator`], [`mmkit_core::mm::AllocatorSource`]) the
    /// caller must not allocate, free or split a page, nor make any other call that
    /// changes which owner a page of the pool has. Reads, and calls that move only free
    /// pages (draining pagesets, the core's kswapd loop with a hook that frees nothing),
    /// are allowed. Reading alone needs none of this: [`PagePool::allocator`].
    pub unsafe fn allocator_source(&self) -> Arc<dyn mmkit_core::mm::AllocatorSource> {
        self.inner.clone()
    }

    /// The pool's zones in zonelist order, read only.
    ///
    /// ```
    /// # use mmkit_runtime::PagePool;
    /// # use mmkit_core::page_alloc::ZoneType;
    /// let pool = PagePool::builder().memory_bytes(16 << 20).cpus(2).build()?;
    /// let normal = pool.zone(0, ZoneType::Normal).unwrap();
    /// assert_eq!(normal.managed(), 4096);
    /// assert_eq!(normal.pageset(1).unwrap().batch, 1, "a 16 MiB zone has batch 1");
    /// assert_eq!(pool.zones().map(|z| z.managed()).sum::<u64>(), 4096);
    /// # Ok::<(), mmkit_runtime::PoolError>(())
    /// ```
    pub fn zones(&self) -> impl Iterator<Item = ZoneView<'_>> {
        self.allocator().zones()
    }

    /// Zone `zone_type` of `node`, read only.
    pub fn zone(&self, node: NodeId, zone_type: ZoneType) -> Option<ZoneView<'_>> {
        self.allocator().zone(node, zone_type)
    }

    /// The machine the pool lays out: nodes, CPUs, zone sizes.
    pub fn topology(&self) -> &Topology {
        self.inner.allocator.topology()
    }

    /// The allocation policy in force (v6.7 or a patch preset).
    pub fn policy(&self) -> &Policy {
        self.inner.allocator.policy()
    }

    pub(crate) fn arena(&self) -> &Arena {
        &self.inner.arena
    }

    /// The caller as the core sees it: this thread's CPU (rseq, `sched_getcpu`, or the
    /// pinned CPU), folded into the pool's CPUs, skipping offline ones.
    ///
    /// ```
    /// # use mmkit_runtime::{cpu, PagePool};
    /// let pool = PagePool::builder().memory_bytes(16 << 20).cpus(2).build()?;
    /// cpu::pin_thread(Some(3));                       // 3 % 2 = CPU 1
    /// assert_eq!(pool.caller().cpu, 1);
    /// pool.set_cpu_online(1, false);                  // CPU 1 goes away: served by CPU 0
    /// assert_eq!(pool.caller().cpu, 0);
    /// cpu::pin_thread(None);
    /// # Ok::<(), mmkit_runtime::PoolError>(())
    /// ```
    #[inline]
    pub fn caller(&self) -> Caller {
        let first = self.this_cpu();
        // The CPU we run on is almost always online: test it before the search.
        if self.inner.allocator.is_cpu_online(first) {
            return Caller::task(first);
        }
        let nr = self.inner.nr_cpus;
        let cpu = (0..nr)
            .map(|i| (first + i) % nr)
            .find(|&c| self.inner.allocator.is_cpu_online(c))
            .unwrap_or(first);
        Caller::task(cpu)
    }

    /// This thread's CPU folded into the pool's CPUs, online or not.
    #[inline(always)]
    fn this_cpu(&self) -> CpuId {
        let nr = self.inner.nr_cpus;
        let cpu = cpu::current_cpu();
        // A pool usually has a pageset for every CPU the machine has; the division that
        // folds larger CPU numbers costs more than the rest of the lookup.
        if cpu < nr {
            cpu
        } else {
            cpu % nr
        }
    }

    /// The caller for an operation that makes many calls into the core as one CPU, with
    /// the CPU hotplug lock held for reading so that the CPU stays online until the guard
    /// drops (Linux's `cpus_read_lock`; the mapping layer holds it across a fault, an
    /// unmap or a reclaim). Take it before any lock the operation needs: hotplug takes
    /// it for writing and then the core's locks.
    pub(crate) fn caller_for_operation(&self) -> (std::sync::RwLockReadGuard<'_, ()>, Caller) {
        let guard = self.inner.cpus_read_lock();
        (guard, self.caller())
    }

    /// After the core refused `caller`'s CPU (`refused`): whether to try again, and on
    /// which CPU. The runtime's CPU hotplug does not stop the threads that run "on" a CPU
    /// (Linux migrates a task off a CPU before it goes), so a CPU that
    /// [`PagePool::caller`] saw online can be offline when the core checks it; the core
    /// refuses such a call before it changes anything, so running it again on the CPU
    /// `caller()` picks now is what the task would have done. Bounded by `retries`, in
    /// case every CPU keeps going away. Out of line: a fast path only tests for the refusal
    /// and loops back to its one call into the core.
    #[cold]
    #[inline(never)]
    fn retry_after_hotplug(&self, caller: &mut Caller, refused: CpuId, retries: &mut u32) -> bool {
        // Whether `refused` is online again says nothing: another thread may have brought
        // it back between the core's refusal and this test, and then the retry is exactly
        // right (until session 6 that case returned the refusal to the caller).
        if refused != caller.cpu || refused >= self.inner.nr_cpus || *retries == HOTPLUG_RETRIES {
            // Refused for another reason (a CPU the pool does not have), or for too long.
            return false;
        }
        *retries += 1;
        *caller = self.caller();
        true
    }

    /// [`PagePool::alloc_raw`] after the core refused the caller's CPU: again while
    /// [`PagePool::retry_after_hotplug`] says so. Written out for allocation and for
    /// free (`free_after_hotplug`) rather than once over a closure: the generic form,
    /// tried twice, cost +24 instructions per allocation and +42 per free on the fast
    /// paths (`crates/bench/callgrind-check.sh`).
    #[cold]
    #[inline(never)]
    fn alloc_after_hotplug(
        &self,
        mut caller: Caller,
        refused: CpuId,
        gfp: Gfp,
        order: Order,
    ) -> Result<Pfn, AllocError> {
        let mut retries = 0;
        let mut refused = refused;
        while self.retry_after_hotplug(&mut caller, refused, &mut retries) {
            match self.inner.allocator.alloc_pages(caller, gfp, order) {
                Err(AllocError::InvalidCpu(cpu)) => refused = cpu,
                done => return done,
            }
        }
        Err(AllocError::InvalidCpu(refused))
    }

    /// Allocate a block of 2^`order` pages for user data (`GFP_USER | __GFP_MOVABLE`:
    /// movable, may block for drains). The block is freed when the handle drops.
    ///
    /// ```
    /// # use mmkit_runtime::PagePool;
    /// # use mmkit_core::Order;
    /// let pool = PagePool::builder().memory_bytes(16 << 20).cpus(1).build()?;
    /// let mut huge = pool.alloc(Order::new(9).unwrap())?;          // 2 MiB
    /// assert_eq!(huge.len(), 2 << 20);
    /// assert_eq!(huge.addr() % (2 << 20), 0, "blocks are aligned to their size");
    /// huge.fill(0xab);
    /// # Ok::<(), mmkit_runtime::PoolError>(())
    /// ```
    pub fn alloc(&self, order: Order) -> Result<PageBlock<'_>, PoolError> {
        self.alloc_gfp(Gfp::USER | Gfp::MOVABLE, order)
    }

    /// Allocate with explicit GFP flags (zone, mobility, reserve rights). What the core
    /// leaves to its caller ([`Gfp::OWED_BY_CALLER`]) the pool does: `__GFP_ZERO`
    /// blocks are zeroed before they are returned; `__GFP_COMP` needs nothing, a block is
    /// one unit freed whole by its order and the pool shows no tail pages; `__GFP_ACCOUNT`
    /// is refused ([`AllocError::InvalidGfp`]): a pool has no memcgs to charge
    /// ([`crate::MappedMemory`] charges its own). The same holds for
    /// [`PagePool::alloc_raw`] and [`PagePool::alloc_bulk_gfp`].
    ///
    /// ```
    /// # use mmkit_runtime::PagePool;
    /// # use mmkit_core::{Gfp, Order};
    /// // No vmstat tick to drain the pageset in between: the page below stays on it.
    /// let pool = PagePool::builder().memory_bytes(16 << 20).cpus(1).background(false).build()?;
    /// let mut dirty = pool.alloc_gfp(Gfp::KERNEL, Order::ZERO)?;
    /// dirty.fill(0xab);
    /// let pfn = dirty.pfn();
    /// drop(dirty);                                // onto the pageset's unmovable list
    /// // The same flags but __GFP_ZERO: the same page comes back, zeroed. (With other
    /// // flags, say `pool.alloc`'s movable ones, it would come off another list.)
    /// let clean = pool.alloc_gfp(Gfp::KERNEL | Gfp::ZERO, Order::ZERO)?;
    /// assert_eq!(clean.pfn(), pfn);
    /// assert!(clean.iter().all(|&byte| byte == 0));
    /// # Ok::<(), mmkit_runtime::PoolError>(())
    /// ```
    ///
    /// ```
    /// # use mmkit_runtime::PagePool;
    /// # use mmkit_core::{Gfp, Order};
    /// let pool = PagePool::builder().memory_bytes(16 << 20).cpus(1).build()?;
    /// // An atomic request may dip into the min reserve, and cannot block.
    /// let block = pool.alloc_gfp(Gfp::ATOMIC, Order::ZERO)?;
    /// assert_eq!(block.len(), 4096);
    /// # Ok::<(), mmkit_runtime::PoolError>(())
    /// ```
    pub fn alloc_gfp(&self, gfp: Gfp, order: Order) -> Result<PageBlock<'_>, PoolError> {
        let pfn = if gfp.owed_by_caller().is_empty() {
            self.alloc_pfn(gfp, order)
        } else {
            self.alloc_pfn_owed(gfp, order)
        }?;
        Ok(PageBlock::new(self, pfn, order))
    }

    /// Allocate a block the caller will free with [`PagePool::free_raw`]; returns its pfn.
    /// Its memory is at [`PagePool::pfn_to_addr`].
    ///
    /// ```
    /// # use mmkit_runtime::{PagePool, PoolError};
    /// # use mmkit_core::{Gfp, Order};
    /// let pool = PagePool::builder().memory_bytes(16 << 20).cpus(1).build()?;
    /// let pfn = pool.alloc_raw(Gfp::KERNEL, Order::new(2).unwrap())?;
    /// let addr = pool.pfn_to_addr(pfn)?;
    /// assert_eq!(pool.addr_to_pfn(addr)?, pfn);
    /// // SAFETY: allocated raw above, freed once, never referenced.
    /// unsafe { pool.free_raw(pfn, Order::new(2).unwrap())? };
    /// // A second free is refused, and changes nothing.
    /// // SAFETY: refused by the allocator before anything is freed.
    /// assert!(matches!(unsafe { pool.free_raw(pfn, Order::new(2).unwrap()) }, Err(PoolError::Free(_))));
    /// # Ok::<(), PoolError>(())
    /// ```
    pub fn alloc_raw(&self, gfp: Gfp, order: Order) -> Result<Pfn, PoolError> {
        if !gfp.owed_by_caller().is_empty() {
            return self.alloc_pfn_owed(gfp, order);
        }
        self.alloc_pfn(gfp, order)
    }

    /// [`PagePool::alloc_pfn`] with flags whose work the core leaves to its caller
    /// ([`Gfp::OWED_BY_CALLER`]), done as [`PagePool::alloc_gfp`] says. Out of line, and
    /// tested for in the public entry points rather than in `alloc_pfn`: there the test
    /// changed the code generated for the whole plain path (+6 instructions per order-0
    /// allocation, `crates/bench/callgrind-check.sh`), here it costs +2.
    #[inline(never)]
    fn alloc_pfn_owed(&self, gfp: Gfp, order: Order) -> Result<Pfn, PoolError> {
        refuse_account(gfp)?;
        let pfn = self.alloc_pfn(gfp, order)?;
        if gfp.contains(Gfp::ZERO) {
            self.zero_block(pfn, order);
        }
        Ok(pfn)
    }

    /// Zero a block just allocated, before anyone else knows it (Linux:
    /// `kernel_init_pages` in `post_alloc_hook`), through a handle held for the write.
    fn zero_block(&self, pfn: Pfn, order: Order) {
        let mut block = PageBlock::new(self, pfn, order);
        block.fill(0);
        block.into_raw();
    }

    fn alloc_pfn(&self, gfp: Gfp, order: Order) -> Result<Pfn, PoolError> {
        if self.inner.fault.should_fail(order) {
            return Err(PoolError::Injected);
        }
        // This CPU without `caller()`'s online test: the core makes that test first and
        // refuses an offline CPU before changing anything, and the refusal goes to
        // `alloc_on_online_cpu`, which starts over from `caller()`: what `caller()` would
        // have picked, without the test on every call.
        let caller = Caller::task(self.this_cpu());
        match self.inner.allocator.alloc_pages(caller, gfp, order) {
            Ok(pfn) => {
                self.kick_kswapd();
                Ok(pfn)
            }
            Err(refused) => self.alloc_refused(refused, gfp, order),
        }
    }

    /// [`PagePool::alloc_pfn`] after the core refused: an offline CPU is retried from
    /// the online CPU `caller()` picks (see [`PagePool::alloc_on_online_cpu`]); any other
    /// refusal is the answer. Either way kswapd is kicked, as after a success. Out of
    /// line, so the fast path carries no error conversion.
    #[cold]
    #[inline(never)]
    fn alloc_refused(&self, refused: AllocError, gfp: Gfp, order: Order) -> Result<Pfn, PoolError> {
        let result = match refused {
            AllocError::InvalidCpu(_) => self.alloc_on_online_cpu(gfp, order),
            other => Err(other),
        };
        self.kick_kswapd();
        Ok(result?)
    }

    /// [`PagePool::alloc_pfn`] after the core refused this thread's CPU, offline: from
    /// the online CPU `caller()` picks, then retried as `alloc_after_hotplug` decides.
    fn alloc_on_online_cpu(&self, gfp: Gfp, order: Order) -> Result<Pfn, AllocError> {
        let caller = self.caller();
        match self.inner.allocator.alloc_pages(caller, gfp, order) {
            Err(AllocError::InvalidCpu(cpu)) => self.alloc_after_hotplug(caller, cpu, gfp, order),
            done => done,
        }
    }

    /// Fill the empty slots of `out` with order-0 pages under one pageset lock hold
    /// (`alloc_pages_bulk_array`); returns how many slots are filled. Free them with
    /// [`PagePool::free_raw`] or [`PagePool::free_batch`].
    ///
    /// ```
    /// # use mmkit_runtime::PagePool;
    /// let pool = PagePool::builder().memory_bytes(16 << 20).cpus(1).build()?;
    /// let mut slots = [None; 32];
    /// assert_eq!(pool.alloc_bulk(&mut slots)?, 32);
    /// let pfns: Vec<_> = slots.iter().flatten().copied().collect();
    /// // SAFETY: the pages were allocated raw above and are freed once, unreferenced.
    /// unsafe { pool.free_batch(&pfns)? };
    /// # Ok::<(), mmkit_runtime::PoolError>(())
    /// ```
    pub fn alloc_bulk(&self, out: &mut [Option<Pfn>]) -> Result<usize, PoolError> {
        self.alloc_bulk_gfp(Gfp::USER | Gfp::MOVABLE, out)
    }

    /// [`PagePool::alloc_bulk`] with the caller's GFP flags (zone, mobility, reserve
    /// rights); [`crate::PoolCache`] refills through it.
    ///
    /// ```
    /// # use mmkit_runtime::PagePool;
    /// # use mmkit_core::Gfp;
    /// let pool = PagePool::builder().memory_bytes(16 << 20).cpus(1).build()?;
    /// let mut slots = [None; 8];
    /// assert_eq!(pool.alloc_bulk_gfp(Gfp::KERNEL, &mut slots)?, 8);
    /// let pfns: Vec<_> = slots.iter().flatten().copied().collect();
    /// // SAFETY: the pages were allocated raw above and are freed once, unreferenced.
    /// unsafe { pool.free_batch(&pfns)? };
    /// # Ok::<(), mmkit_runtime::PoolError>(())
    /// ```
    pub fn alloc_bulk_gfp(&self, gfp: Gfp, out: &mut [Option<Pfn>]) -> Result<usize, PoolError> {
        if !gfp.owed_by_caller().is_empty() {
            return self.alloc_bulk_owed(gfp, out);
        }
        self.alloc_bulk_as_task(|allocator, caller| {
            allocator.alloc_pages_bulk_array(caller, gfp, None, out)
        })
    }

    /// [`PagePool::alloc_bulk_gfp`] with flags whose work the core leaves to its caller,
    /// done as [`PagePool::alloc_gfp`] says: the slots this call fills are zeroed for
    /// `__GFP_ZERO`, the ones already full are left alone.
    #[inline(never)]
    fn alloc_bulk_owed(&self, gfp: Gfp, out: &mut [Option<Pfn>]) -> Result<usize, PoolError> {
        refuse_account(gfp)?;
        let empty: Vec<usize> = (0..out.len()).filter(|&i| out[i].is_none()).collect();
        let filled = self.alloc_bulk_as_task(|allocator, caller| {
            allocator.alloc_pages_bulk_array(caller, gfp, None, out)
        })?;
        if gfp.contains(Gfp::ZERO) {
            for pfn in empty.into_iter().filter_map(|i| out[i]) {
                self.zero_block(pfn, Order::ZERO);
            }
        }
        Ok(filled)
    }

    /// Append up to `nr_pages` order-0 pages to `list` under one pageset lock hold
    /// (`alloc_pages_bulk_list`, with [`PagePool::alloc_bulk`]'s flags); returns how many
    /// were appended, at least one when memory allows any. The list flavour costs less
    /// per page than the array: nothing is scanned for empty slots and a pfn is 8 bytes
    /// where a slot is 16. `list` grows before the pageset is locked, never under it.
    /// Free the pages with [`PagePool::free_raw`] or [`PagePool::free_batch`].
    ///
    /// ```
    /// # use mmkit_runtime::PagePool;
    /// let pool = PagePool::builder().memory_bytes(16 << 20).cpus(1).build()?;
    /// let mut pfns = Vec::new();
    /// assert_eq!(pool.alloc_bulk_list(32, &mut pfns)?, 32);
    /// assert_eq!(pfns.len(), 32);
    /// // SAFETY: the pages were allocated raw above and are freed once, unreferenced.
    /// unsafe { pool.free_batch(&pfns)? };
    /// # Ok::<(), mmkit_runtime::PoolError>(())
    /// ```
    pub fn alloc_bulk_list(
        &self,
        nr_pages: usize,
        list: &mut Vec<Pfn>,
    ) -> Result<usize, PoolError> {
        self.alloc_bulk_as_task(|allocator, caller| {
            allocator.alloc_pages_bulk_list(caller, Gfp::USER | Gfp::MOVABLE, None, nr_pages, list)
        })
    }

    /// One bulk allocation `bulk` from the CPU `caller()` picks, retried as
    /// [`PagePool::retry_after_hotplug`] decides when the core refuses that CPU; kswapd is
    /// kicked after it, as after any allocation.
    #[inline(always)]
    fn alloc_bulk_as_task(
        &self,
        mut bulk: impl FnMut(&PageAllocator, Caller) -> Result<usize, AllocError>,
    ) -> Result<usize, PoolError> {
        let (mut caller, mut retries) = (self.caller(), 0);
        let filled = loop {
            match bulk(&self.inner.allocator, caller) {
                Err(AllocError::InvalidCpu(cpu))
                    if self.retry_after_hotplug(&mut caller, cpu, &mut retries) => {}
                done => break done,
            }
        }?;
        self.kick_kswapd();
        Ok(filled)
    }

    /// Up to `n` order-0 pages as handles, from one bulk allocation (the list flavour,
    /// [`PagePool::alloc_bulk_list`]: no slots to clear and scan). Fewer (at least one)
    /// when memory is short.
    ///
    /// ```
    /// # use mmkit_runtime::PagePool;
    /// let pool = PagePool::builder().memory_bytes(16 << 20).cpus(1).build()?;
    /// let mut pages = pool.alloc_bulk_blocks(64)?;
    /// assert_eq!(pages.len(), 64);
    /// pages.iter_mut().for_each(|page| page[0] = 1);
    /// pool.free_blocks(pages);                        // one batched free
    /// # Ok::<(), mmkit_runtime::PoolError>(())
    /// ```
    pub fn alloc_bulk_blocks(&self, n: usize) -> Result<Vec<PageBlock<'_>>, PoolError> {
        let mut pfns = Vec::with_capacity(n);
        let filled = self.alloc_bulk_list(n, &mut pfns)?;
        if filled == 0 && n > 0 {
            return Err(PoolError::Alloc(
                mmkit_core::page_alloc::AllocError::OutOfMemory { order: Order::ZERO },
            ));
        }
        Ok(pfns
            .into_iter()
            .map(|pfn| PageBlock::new(self, pfn, Order::ZERO))
            .collect())
    }

    /// Free order-0 handles together through the batched free (`free_unref_page_list`).
    /// Handles of other orders are freed one by one.
    pub fn free_blocks(&self, blocks: Vec<PageBlock<'_>>) {
        let (order0, others): (Vec<_>, Vec<_>) =
            blocks.into_iter().partition(|b| b.order() == Order::ZERO);
        drop(others);
        let pfns: Vec<Pfn> = order0.into_iter().map(PageBlock::into_raw).collect();
        if let Err(e) = self.free_pfns_batch(&pfns) {
            panic!("a batched free of handle-owned blocks failed: {e}");
        }
    }

    /// The batched free behind [`PagePool::free_batch`], [`PagePool::free_blocks`] and
    /// the pool cache's releases. Every page is owned by the caller (a handle, a raw
    /// caller bound by `free_batch`'s contract, or the cache), so no other thread frees
    /// it at the same time: the core's exclusive free, without a compare-and-swap per
    /// page. A page freed before is still refused.
    pub(crate) fn free_pfns_batch(&self, pfns: &[Pfn]) -> Result<(), PoolError> {
        let (mut caller, mut retries) = (self.caller(), 0);
        loop {
            // SAFETY: the caller owns every page of `pfns` (see above), so no other
            // thread frees or splits them meanwhile.
            let freed = unsafe {
                mmkit_core::internals::free_pages_batch_exclusive(
                    &self.inner.allocator,
                    caller,
                    pfns,
                )
            };
            match freed {
                Err(BatchFreeError {
                    error: FreeError::InvalidCpu(cpu),
                    ..
                }) if self.retry_after_hotplug(&mut caller, cpu, &mut retries) => {}
                done => break done,
            }
        }
        .map_err(|e| PoolError::Free(e.error))
    }

    pub(crate) fn free_pfn(&self, pfn: Pfn, order: Order) -> Result<(), PoolError> {
        if pfn.0 >= (self.inner.arena.len() / PAGE_SIZE) as u64 {
            return Err(PoolError::OutsideArena(
                self.inner.arena.base() as usize + pfn.0 as usize * PAGE_SIZE,
            ));
        }
        Ok(self.free_pages_as_task(pfn, order)?)
    }

    /// `free_pages` from the current task (see [`PagePool::retry_after_hotplug`]). As
    /// `alloc_pfn`, on this CPU without `caller()`'s online test, which the core makes
    /// before anything else.
    ///
    /// The core's exclusive free: the block's owner frees it (a dropped handle, or a raw
    /// caller bound by `free_raw`'s contract), so no other thread frees or splits it at
    /// the same time, and the claim needs no compare-and-swap. A second free after this
    /// one is still refused.
    #[inline(always)]
    fn free_pages_as_task(&self, pfn: Pfn, order: Order) -> Result<(), FreeError> {
        let caller = Caller::task(self.this_cpu());
        // SAFETY: the block's owner frees it (see above): no other thread frees or
        // splits it meanwhile.
        let freed = unsafe {
            mmkit_core::internals::free_pages_exclusive(&self.inner.allocator, caller, pfn, order)
        };
        match freed {
            Err(FreeError::InvalidCpu(_)) => self.free_on_online_cpu(pfn, order),
            done => done,
        }
    }

    /// [`PagePool::free_pages_as_task`] after the core refused this thread's CPU, offline:
    /// from the online CPU `caller()` picks, then retried as `free_after_hotplug` decides.
    #[cold]
    #[inline(never)]
    fn free_on_online_cpu(&self, pfn: Pfn, order: Order) -> Result<(), FreeError> {
        let caller = self.caller();
        // SAFETY: as in `free_pages_as_task`, whose caller owns the block.
        let freed = unsafe {
            mmkit_core::internals::free_pages_exclusive(&self.inner.allocator, caller, pfn, order)
        };
        match freed {
            Err(FreeError::InvalidCpu(cpu)) => self.free_after_hotplug(caller, cpu, pfn, order),
            done => done,
        }
    }

    /// [`PagePool::free_pages_as_task`] after the core refused the caller's CPU: again
    /// while [`PagePool::retry_after_hotplug`] says so.
    #[cold]
    #[inline(never)]
    fn free_after_hotplug(
        &self,
        mut caller: Caller,
        refused: CpuId,
        pfn: Pfn,
        order: Order,
    ) -> Result<(), FreeError> {
        let mut retries = 0;
        let mut refused = refused;
        while self.retry_after_hotplug(&mut caller, refused, &mut retries) {
            // SAFETY: as in `free_pages_as_task`, whose caller owns the block.
            let freed = unsafe {
                mmkit_core::internals::free_pages_exclusive(
                    &self.inner.allocator,
                    caller,
                    pfn,
                    order,
                )
            };
            match freed {
                Err(FreeError::InvalidCpu(cpu)) => refused = cpu,
                done => return done,
            }
        }
        Err(FreeError::InvalidCpu(refused))
    }

    /// Free a block whose handle dropped. The handle owned it, so refusal is corruption;
    /// and it was the only owner (handles are not `Clone`, and safe code cannot reach the
    /// core's free), so no other thread frees it at the same time: the exclusive free.
    pub(crate) fn free_handle(&self, pfn: Pfn, order: Order) {
        if let Err(e) = self.free_pages_as_task(pfn, order) {
            panic!("freeing a block owned by a handle failed: {e}");
        }
    }

    /// The arena offset of `pfn`.
    pub(crate) fn offset_of_pfn(&self, pfn: Pfn) -> usize {
        pfn.0 as usize * PAGE_SIZE
    }

    /// The address of `pfn`'s first byte.
    pub fn pfn_to_addr(&self, pfn: Pfn) -> Result<usize, PoolError> {
        let offset = pfn.0 as usize * PAGE_SIZE;
        if offset >= self.inner.arena.len() {
            return Err(PoolError::Invalid(format!("pfn {pfn} is outside the pool")));
        }
        Ok(self.inner.arena.base() as usize + offset)
    }

    /// The pfn of the page at `addr`.
    pub fn addr_to_pfn(&self, addr: usize) -> Result<Pfn, PoolError> {
        let offset = self
            .inner
            .arena
            .offset_of(addr)
            .ok_or(PoolError::OutsideArena(addr))?;
        if offset % PAGE_SIZE != 0 {
            return Err(PoolError::Misaligned(addr));
        }
        Ok(Pfn((offset / PAGE_SIZE) as u64))
    }

    /// Wake the kswapd of any node the allocator asked for.
    pub(crate) fn kick_kswapd(&self) {
        if let Some(background) = &self.background {
            background.kick(&self.inner);
        }
    }

    /// Drain this CPU's pagesets; returns the pages given back to the zones.
    ///
    /// ```
    /// # use mmkit_runtime::PagePool;
    /// # use mmkit_core::Order;
    /// let pool = PagePool::builder().memory_bytes(16 << 20).cpus(1).build()?;
    /// drop(pool.alloc(Order::ZERO)?);
    /// assert!(pool.drain_local() > 0);
    /// # Ok::<(), mmkit_runtime::PoolError>(())
    /// ```
    pub fn drain_local(&self) -> u64 {
        self.inner
            .allocator
            .drain_local_pages(self.caller().cpu, None)
    }

    /// Drain every CPU's pagesets (of one zone, or all).
    ///
    /// ```
    /// # use mmkit_runtime::PagePool;
    /// # use mmkit_core::Order;
    /// let pool = PagePool::builder().memory_bytes(16 << 20).cpus(2).build()?;
    /// drop(pool.alloc(Order::ZERO)?);             // the page is cached on a pageset
    /// assert!(pool.stats().pcp_pages > 0);
    /// pool.drain_all(None);
    /// assert_eq!(pool.stats().pcp_pages, 0);
    /// # Ok::<(), mmkit_runtime::PoolError>(())
    /// ```
    pub fn drain_all(&self, zone: Option<ZoneId>) -> DrainAll {
        self.inner.allocator.drain_all_pages(zone)
    }

    /// One vmstat tick of `cpu` (the background thread does this every `stat_interval`):
    /// the PCP `high` decay. Returns whether anything changed.
    ///
    /// ```
    /// # use mmkit_runtime::PagePool;
    /// # use mmkit_core::Order;
    /// # use mmkit_core::page_alloc::ZoneType;
    /// let pool = PagePool::builder().memory_bytes(512 << 20).cpus(1).background(false).build()?;
    /// let blocks: Vec<_> = (0..3000).map(|_| pool.alloc(Order::ZERO)).collect::<Result<_, _>>()?;
    /// drop(blocks);                                   // high grew during the refills
    /// let zone = pool.zone(0, ZoneType::Normal).unwrap();
    /// let before = zone.pageset(0).unwrap().high;
    /// pool.vmstat_tick(0);
    /// assert!(zone.pageset(0).unwrap().high < before, "decays by up to an eighth per tick");
    /// # Ok::<(), mmkit_runtime::PoolError>(())
    /// ```
    pub fn vmstat_tick(&self, cpu: u32) -> bool {
        self.inner.allocator.vmstat_tick(cpu)
    }

    /// Change the sysctls at run time; watermarks and pageset limits are recomputed.
    /// Invalid values are refused and nothing changes.
    ///
    /// ```
    /// # use mmkit_runtime::PagePool;
    /// let pool = PagePool::builder().memory_bytes(64 << 20).cpus(2).build()?;
    /// let mut settings = pool.settings();
    /// settings.percpu_pagelist_high_fraction = 8;    // fixed high: managed / 8 / CPUs
    /// pool.set_settings(settings.clone())?;
    /// settings.percpu_pagelist_high_fraction = 3;    // Linux says EINVAL
    /// assert!(pool.set_settings(settings).is_err());
    /// assert_eq!(pool.settings().percpu_pagelist_high_fraction, 8);
    /// # Ok::<(), mmkit_runtime::PoolError>(())
    /// ```
    pub fn set_settings(&self, settings: Settings) -> Result<(), PoolError> {
        self.inner
            .allocator
            .set_settings(settings)
            .map_err(PoolError::Settings)
    }

    /// The sysctls in force.
    pub fn settings(&self) -> Settings {
        self.inner.allocator.settings()
    }

    /// Change fault injection at run time.
    ///
    /// ```
    /// # use mmkit_runtime::{FaultConfig, PagePool, PoolError};
    /// # use mmkit_core::Order;
    /// let pool = PagePool::builder().memory_bytes(16 << 20).cpus(1).build()?;
    /// pool.set_fault_injection(FaultConfig { probability: 1.0, times: 1, ..FaultConfig::default() });
    /// assert!(matches!(pool.alloc(Order::ZERO), Err(PoolError::Injected)));
    /// assert!(pool.alloc(Order::ZERO).is_ok(), "only one failure was asked for");
    /// # Ok::<(), PoolError>(())
    /// ```
    pub fn set_fault_injection(&self, fault: FaultConfig) {
        self.inner.fault.configure(fault);
    }

    /// Take a CPU offline (its pagesets drain and every zone's limits are recomputed) or
    /// back online. Returns false if nothing changed (already so, unknown CPU, or the last
    /// online CPU).
    ///
    /// ```
    /// # use mmkit_runtime::PagePool;
    /// let pool = PagePool::builder().memory_bytes(16 << 20).cpus(2).build()?;
    /// assert!(pool.set_cpu_online(1, false));
    /// assert!(!pool.set_cpu_online(0, false), "the last CPU stays");
    /// assert!(pool.set_cpu_online(1, true));
    /// # Ok::<(), mmkit_runtime::PoolError>(())
    /// ```
    pub fn set_cpu_online(&self, cpu: u32, online: bool) -> bool {
        let _hotplug = self
            .inner
            .cpu_hotplug
            .write()
            .unwrap_or_else(|e| e.into_inner());
        if online {
            self.inner.allocator.cpu_up(cpu)
        } else {
            self.inner.allocator.cpu_down(cpu)
        }
    }

    /// Check every page of every zone; returns each zone's census.
    ///
    /// ```
    /// # use mmkit_runtime::PagePool;
    /// # use mmkit_core::Order;
    /// let pool = PagePool::builder().memory_bytes(16 << 20).cpus(1).build()?;
    /// let block = pool.alloc(Order::new(3).unwrap())?;
    /// let census = pool.verify()?;
    /// assert_eq!(census.iter().map(|zone| zone.allocated).sum::<u64>(), 8);
    /// drop(block);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn verify(&self) -> Result<Vec<ZoneCensus>, VerifyError> {
        self.allocator().verify()
    }

    /// Counters of the whole pool.
    ///
    /// ```
    /// # use mmkit_runtime::PagePool;
    /// # use mmkit_core::Order;
    /// let pool = PagePool::builder().memory_bytes(16 << 20).cpus(1).background(false).build()?;
    /// drop(pool.alloc(Order::new(1).unwrap())?);
    /// let stats = pool.stats();
    /// assert_eq!((stats.pgalloc, stats.pgfree), (2, 2));
    /// assert!(stats.pcp_refills >= 1, "the first allocation refilled the pageset");
    /// # Ok::<(), mmkit_runtime::PoolError>(())
    /// ```
    pub fn stats(&self) -> PoolStats {
        self.allocator().stats()
    }

    /// `/proc/zoneinfo` of the live pool.
    ///
    /// ```
    /// # use mmkit_runtime::PagePool;
    /// let pool = PagePool::builder().memory_bytes(16 << 20).cpus(2).build()?;
    /// let text = pool.zoneinfo();
    /// assert!(text.starts_with("Node 0, zone      DMA\n"));
    /// assert!(text.contains("        managed  4096\n"));
    /// # Ok::<(), mmkit_runtime::PoolError>(())
    /// ```
    pub fn zoneinfo(&self) -> String {
        let allocator = self.allocator();
        zoneinfo::render(&allocator.zoneinfo(), allocator.policy().zoneinfo)
    }

    /// `/proc/buddyinfo` of the live pool.
    ///
    /// ```
    /// # use mmkit_runtime::PagePool;
    /// let pool = PagePool::builder().memory_bytes(16 << 20).cpus(1).build()?;
    /// // 4096 free pages: four free blocks of order 10.
    /// assert!(pool.buddyinfo().trim_end().ends_with("     4"));
    /// # Ok::<(), mmkit_runtime::PoolError>(())
    /// ```
    pub fn buddyinfo(&self) -> String {
        buddyinfo::render(&self.inner.allocator)
    }

    /// `/proc/vmstat`'s page-allocator lines for the live pool.
    ///
    /// ```
    /// # use mmkit_runtime::PagePool;
    /// # use mmkit_core::Order;
    /// let pool = PagePool::builder().memory_bytes(16 << 20).cpus(1).build()?;
    /// drop(pool.alloc(Order::new(2).unwrap())?);
    /// let vmstat = pool.vmstat();
    /// assert!(vmstat.contains("pgalloc_normal 4\n") && vmstat.contains("pgfree 4\n"));
    /// # Ok::<(), mmkit_runtime::PoolError>(())
    /// ```
    pub fn vmstat(&self) -> String {
        mmkit_core::views::vmstat::render(&self.inner.allocator)
    }

    /// Number of nodes.
    pub fn nr_nodes(&self) -> NodeId {
        self.inner.allocator.topology().nr_nodes() as NodeId
    }
}

impl Drop for PagePool {
    fn drop(&mut self) {
        if let Some(background) = self.background.take() {
            background.stop();
        }
    }
}

/// Refuse `__GFP_ACCOUNT`: a pool has no memcgs to charge, and the core leaves the
/// charge to its caller ([`Gfp::OWED_BY_CALLER`]).
pub(crate) fn refuse_account(gfp: Gfp) -> Result<(), PoolError> {
    if gfp.contains(Gfp::ACCOUNT) {
        return Err(PoolError::Alloc(AllocError::InvalidGfp(
            "__GFP_ACCOUNT: a page pool has no memory cgroups to charge",
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A refusal whose CPU another thread brought back online before the runtime looked
    /// is retried (the hotplug stress of `tests/pool.rs` hit this about once in 30 runs),
    /// and only refusals that no retry can cure are returned.
    #[test]
    fn retry_after_hotplug_retries_every_pool_cpu_until_the_bound() {
        let pool = PagePool::builder()
            .memory_bytes(16 << 20)
            .cpus(2)
            .background(false)
            .build()
            .unwrap();
        let (mut caller, mut retries) = (Caller::task(1), 0);
        assert!(pool.inner.allocator.is_cpu_online(1), "back online already");
        assert!(pool.retry_after_hotplug(&mut caller, 1, &mut retries));
        assert_eq!(retries, 1);
        let mut other = Caller::task(0);
        assert!(
            !pool.retry_after_hotplug(&mut other, 1, &mut 0),
            "refused for another CPU than the caller's"
        );
        let mut foreign = Caller::task(7);
        assert!(
            !pool.retry_after_hotplug(&mut foreign, 7, &mut 0),
            "a CPU the pool does not have"
        );
        let mut tired = Caller::task(1);
        assert!(!pool.retry_after_hotplug(&mut tired, 1, &mut { HOTPLUG_RETRIES }));
    }
}
