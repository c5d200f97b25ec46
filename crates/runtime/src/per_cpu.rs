//! Per-CPU data in user space: a percpu pool on real memory and typed per-CPU handles.
//!
//! One of the modules of mmkit with `unsafe` (the handle turns an allocation into
//! references). [`PercpuPool`] runs `mmkit-core`'s percpu allocator (Linux's
//! `mm/percpu.c`, v5.14) over [`MmapBacking`]: every allocation exists once per CPU, in
//! the same place of each CPU's unit. [`PerCpu<T>`] is Linux's `T __percpu *` with
//! `this_cpu_ptr`/`per_cpu_ptr`, freed when it drops.
//!
//! Where we differ from Linux: a kernel task cannot move to another CPU while it holds
//! `this_cpu_ptr()` with preemption off; a user-space thread can migrate at any moment.
//! So [`PerCpu::this_cpu`] hands out `&T`, never `&mut T`, and only for `T: Sync`: two
//! threads may hold the same CPU's copy at once. Atomics with relaxed ordering are the
//! intended `T` (a per-CPU counter costs an uncontended atomic add on the local copy,
//! summed over CPUs when read).
//!
//! The balance work runs inside the call that schedules it (a kworker that is never
//! late), unless [`PercpuPool::set_auto_balance`] turns that off.

use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard};

use mmkit_core::percpu::{
    AllocError, AllocKind, FreeError, PercpuAllocator, PercpuCensus, PercpuConfig, PercpuPtr,
    PercpuStats, VerifyError,
};

use crate::percpu_area::MmapBacking;

/// Why a percpu pool call failed. A failed call changes nothing.
#[derive(Debug)]
pub enum PercpuError {
    /// The configuration is impossible, in words.
    Config(String),
    /// The allocator refused the request.
    Alloc(AllocError),
    /// The allocator refused the free.
    Free(FreeError),
}

impl std::fmt::Display for PercpuError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PercpuError::Config(why) => write!(f, "invalid percpu configuration: {why}"),
            PercpuError::Alloc(e) => write!(f, "{e}"),
            PercpuError::Free(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for PercpuError {}

/// Types for which all-zero bytes are a valid value, so a fresh percpu area (zeroed in
/// every unit, as Linux's `alloc_percpu` is) can be read as one: `bytemuck`'s trait,
/// implemented for integers, atomics, arrays of any length and `#[derive(Zeroable)]`
/// structs. A `T` that needs `Drop` is dropped once per CPU when its [`PerCpu`] handle
/// drops.
pub use bytemuck::Zeroable;

/// Linux's percpu allocator on real memory, shared by threads.
///
/// ```
/// use std::sync::atomic::AtomicU64;
/// use mmkit_runtime::PercpuPool;
///
/// let pool = PercpuPool::new(4)?;                  // 4 possible CPUs
/// let hits = pool.counter()?;                       // one AtomicU64 per CPU, zeroed
/// std::thread::scope(|s| {
///     for _ in 0..3 {
///         s.spawn(|| (0..1000).for_each(|_| hits.add(1)));
///     }
/// });
/// assert_eq!(hits.sum(), 3000);
/// // The counter's page, plus the 4 empty pages the balance work keeps populated for
/// // atomic requests: 5 pages × 4 units × 4 KiB.
/// assert_eq!(pool.meminfo_percpu_kb(), 80);
/// drop(hits);                                       // frees the percpu area
/// pool.verify()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct PercpuPool {
    allocator: Mutex<PercpuAllocator<MmapBacking>>,
    config: PercpuConfig,
    auto_balance: std::sync::atomic::AtomicBool,
}

impl PercpuPool {
    /// A pool shaped like x86-64 Linux (4 KiB pages, 256 KiB units, v5.14) with one unit
    /// per CPU of `cpus`.
    pub fn new(cpus: usize) -> Result<PercpuPool, PercpuError> {
        PercpuPool::with_config(PercpuConfig::x86_64(cpus))
    }

    /// A pool with any geometry and policy. The page size must be a multiple of the OS
    /// page size.
    pub fn with_config(config: PercpuConfig) -> Result<PercpuPool, PercpuError> {
        config
            .validate()
            .map_err(|e| PercpuError::Config(e.to_string()))?;
        if config.page_size % crate::arena::page_size() != 0 {
            return Err(PercpuError::Config(format!(
                "page size {} is not a multiple of the OS page size {}",
                config.page_size,
                crate::arena::page_size()
            )));
        }
        let backing = MmapBacking::new(config.nr_units, config.unit_size, config.page_size);
        let allocator = PercpuAllocator::new(config, backing)
            .map_err(|e| PercpuError::Config(e.to_string()))?;
        Ok(PercpuPool {
            allocator: Mutex::new(allocator),
            config,
            auto_balance: std::sync::atomic::AtomicBool::new(true),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &PercpuConfig {
        &self.config
    }

    /// Run the balance work inside the call that schedules it (the default), or only when
    /// [`balance`](Self::balance) is called.
    pub fn set_auto_balance(&self, on: bool) {
        self.auto_balance.store(on, Relaxed);
    }

    fn lock(&self) -> MutexGuard<'_, PercpuAllocator<MmapBacking>> {
        // A panic inside the allocator is a bug that verify() reports; keep going.
        self.allocator.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn after_call(&self, allocator: &mut PercpuAllocator<MmapBacking>) {
        if allocator.balance_pending() && self.auto_balance.load(Relaxed) {
            allocator.balance();
        }
    }

    /// Allocate `size` bytes at `align` in every unit, zeroed. The area stays allocated
    /// until [`free_raw`](Self::free_raw).
    pub fn alloc_raw(
        &self,
        size: usize,
        align: usize,
        kind: AllocKind,
    ) -> Result<PercpuPtr, PercpuError> {
        let mut allocator = self.lock();
        let ptr = allocator
            .alloc(size, align, kind)
            .map_err(PercpuError::Alloc)?;
        // SAFETY: the allocator has just handed the area out, on populated pages, and
        // nobody else knows it.
        unsafe {
            allocator
                .backing()
                .clear_area(ptr.chunk, ptr.offset, size.next_multiple_of(4))
        };
        self.after_call(&mut allocator);
        Ok(ptr)
    }

    /// Free an area from [`alloc_raw`](Self::alloc_raw). A pointer that is not a live
    /// allocation is refused and nothing changes.
    ///
    /// # Safety
    ///
    /// No reference into the area (in any unit) may be used after this call, and no
    /// [`PerCpu`] handle may own it.
    pub unsafe fn free_raw(&self, ptr: PercpuPtr) -> Result<usize, PercpuError> {
        self.free_ptr(ptr)
    }

    fn free_ptr(&self, ptr: PercpuPtr) -> Result<usize, PercpuError> {
        let mut allocator = self.lock();
        let bytes = allocator.free(ptr).map_err(PercpuError::Free)?;
        self.after_call(&mut allocator);
        Ok(bytes)
    }

    /// The address of `ptr`'s copy for `cpu`.
    pub fn unit_addr(&self, ptr: PercpuPtr, cpu: usize) -> Option<NonNull<u8>> {
        self.lock().backing().unit_addr(ptr.chunk, cpu, ptr.offset)
    }

    /// A zeroed `T` for every CPU.
    pub fn alloc<T: Zeroable>(&self) -> Result<PerCpu<'_, T>, PercpuError> {
        let size = std::mem::size_of::<T>().max(1);
        let ptr = self.alloc_raw(size, std::mem::align_of::<T>(), AllocKind::Kernel)?;
        let base = self
            .unit_addr(ptr, 0)
            .expect("a fresh allocation's chunk exists")
            .cast::<T>();
        Ok(PerCpu {
            pool: self,
            ptr,
            base,
            _owns: PhantomData,
        })
    }

    /// A per-CPU counter: one zeroed `AtomicU64` per CPU.
    pub fn counter(&self) -> Result<PerCpu<'_, AtomicU64>, PercpuError> {
        self.alloc()
    }

    /// Run the balance work now, and again while it schedules itself (a work item that
    /// requeues itself runs again soon; at most 64 rounds).
    pub fn balance(&self) {
        let mut allocator = self.lock();
        allocator.balance();
        for _ in 0..64 {
            if !allocator.balance_pending() {
                break;
            }
            allocator.balance();
        }
    }

    /// The `Percpu:` line of `/proc/meminfo` for this pool, in kB.
    pub fn meminfo_percpu_kb(&self) -> u64 {
        self.lock().meminfo_percpu_kb()
    }

    /// Bytes of the pool's chunks the OS reports resident (`mincore`).
    pub fn resident_bytes(&self) -> u64 {
        self.lock().backing().resident_bytes()
    }

    /// Bytes of address space the chunks reserve.
    pub fn reserved_bytes(&self) -> u64 {
        self.lock().backing().reserved_bytes()
    }

    /// Depopulated ranges left read/write because `mprotect` failed.
    pub fn protect_failures(&self) -> u64 {
        self.lock().backing().protect_failures()
    }

    /// The allocator's event counts.
    pub fn stats(&self) -> PercpuStats {
        self.lock().stats()
    }

    /// Populated pages (per unit) and empty populated pages.
    pub fn populated_pages(&self) -> (usize, usize) {
        let allocator = self.lock();
        (
            allocator.nr_populated_pages(),
            allocator.nr_empty_pop_pages(),
        )
    }

    /// Walk every chunk (see `PercpuAllocator::verify`).
    pub fn verify(&self) -> Result<PercpuCensus, VerifyError> {
        self.lock().verify()
    }
}

/// A `T` for every CPU, in a percpu area of a [`PercpuPool`]; freed when dropped.
///
/// # Invariants
///
/// `ptr` is a live allocation of at least `size_of::<T>()` bytes at `T`'s alignment that
/// this handle owns; `base` is its address in unit 0, and unit `cpu`'s copy is
/// `unit_size × cpu` bytes further. The pages under it stay populated and the chunk stays
/// mapped while the allocation lives (the allocator depopulates only empty pages and
/// destroys only free chunks), and every copy started zeroed, which is a valid `T`.
pub struct PerCpu<'pool, T> {
    pool: &'pool PercpuPool,
    ptr: PercpuPtr,
    base: NonNull<T>,
    _owns: PhantomData<T>,
}

// SAFETY: shared access hands out `&T` to any thread, so T must be Sync; the handle owns
// its copies like a Box<[T]>, so moving it needs T: Send as well.
unsafe impl<T: Send + Sync> Send for PerCpu<'_, T> {}
// SAFETY: as above; `&PerCpu` only gives `&T`.
unsafe impl<T: Sync> Sync for PerCpu<'_, T> {}

impl<T: Zeroable + Sync> PerCpu<'_, T> {
    /// Units (possible CPUs).
    pub fn cpus(&self) -> usize {
        self.pool.config.nr_units
    }

    /// The allocation.
    pub fn ptr(&self) -> PercpuPtr {
        self.ptr
    }

    /// `cpu`'s copy (`per_cpu_ptr`). Panics if `cpu` is not a unit of the pool.
    pub fn per_cpu(&self, cpu: usize) -> &T {
        assert!(cpu < self.cpus(), "cpu {cpu} of {}", self.cpus());
        let offset = cpu * self.pool.config.unit_size;
        // SAFETY: by the invariant, the copy of `cpu` lives at `base + offset bytes`, is
        // populated, valid and owned by this handle; only shared references are made
        // from `&self`.
        unsafe { &*self.base.as_ptr().byte_add(offset) }
    }

    /// The copy of the CPU the calling thread runs on (`this_cpu_ptr`), or of the CPU it
    /// is pinned to ([`crate::cpu::pin_thread`]); a CPU beyond the pool's units uses
    /// `cpu % units`. The thread may migrate right after: the
    /// reference stays valid, it just may not be "this" CPU's any more.
    pub fn this_cpu(&self) -> &T {
        self.per_cpu(crate::cpu::current_cpu() as usize % self.cpus())
    }

    /// Every CPU's copy, in CPU order.
    pub fn iter(&self) -> impl Iterator<Item = &T> + '_ {
        (0..self.cpus()).map(|cpu| self.per_cpu(cpu))
    }
}

impl PerCpu<'_, AtomicU64> {
    /// Add `n` to this CPU's copy (relaxed).
    pub fn add(&self, n: u64) {
        self.this_cpu().fetch_add(n, Relaxed);
    }

    /// The sum over CPUs (`percpu_counter_sum`): exact once adders have stopped, a snapshot
    /// while they run.
    pub fn sum(&self) -> u64 {
        self.iter().map(|c| c.load(Relaxed)).sum()
    }
}

impl<T> Drop for PerCpu<'_, T> {
    fn drop(&mut self) {
        if std::mem::needs_drop::<T>() {
            for cpu in 0..self.pool.config.nr_units {
                let offset = cpu * self.pool.config.unit_size;
                // SAFETY: by the invariant, `cpu`'s copy lives at `base + offset bytes`
                // and is a valid `T` this handle owns (it started zeroed, a valid `T` by
                // `Zeroable`, and only `&T` were handed out since); `&mut self` means no
                // reference to it is alive, and the memory is freed below, so no copy is
                // used or dropped again.
                unsafe { std::ptr::drop_in_place(self.base.as_ptr().byte_add(offset)) };
            }
        }
        // The handle owns the allocation (invariant), so the free cannot be refused.
        self.pool
            .free_ptr(self.ptr)
            .expect("a PerCpu handle owns its allocation");
    }
}

impl<T> std::fmt::Debug for PerCpu<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PerCpu").field("ptr", &self.ptr).finish()
    }
}
