//! Mapped memory on real pages and real files: the core's mapping layer
//! ([`mmkit_core::mm::Memory`]) over a [`PagePool`], with file pages read from and
//! written to files on disk and anonymous pages swapped to a real swap file.
//!
//! Address spaces here are not the process's own: "virtual pages" are numbers in an
//! [`MmId`]'s space, and reads and writes go through [`MappedMemory::read`] and
//! [`MappedMemory::write`], which fault pages in (allocating, reading the file or the
//! swap file) and copy bytes under one lock. Reclaim really writes dirty data out, and
//! data read back after a swap-out or a page-cache eviction is what was written.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use mmkit_core::mm::memcg::MemcgId;
use mmkit_core::mm::pageout::PageoutOutcome;
use mmkit_core::mm::vmscan::ReclaimOutcome;
use mmkit_core::mm::{
    AllocatorSource, FileId, Memory, MmError, MmId, MmStats, PageIo, SwapEntry, Vpn,
};
use mmkit_core::page::PAGE_SIZE;
use mmkit_core::policy::MmPolicy;
use mmkit_core::{Order, PageAllocator, Pfn};

use crate::pool::{Inner, PagePool};

impl AllocatorSource for Inner {
    fn page_allocator(&self) -> &PageAllocator {
        &self.allocator
    }
}

/// The data side: frames of the pool's arena, files in a directory, one swap file.
struct DiskIo {
    pool: Arc<Inner>,
    files: Vec<File>,
    swap: File,
}

impl DiskIo {
    /// The bytes of frame `pfn`.
    ///
    /// Only the mapping layer's frames are passed here (it allocated them and hands them
    /// to no one else), and every caller holds [`MappedMemory`]'s lock, which serialises
    /// all access to those frames.
    fn frame(&mut self, pfn: Pfn, pages: u64) -> &mut [u8] {
        let offset = pfn.0 as usize * PAGE_SIZE;
        let len = pages as usize * PAGE_SIZE;
        let arena = &self.pool.arena;
        assert!(
            offset + len <= arena.len(),
            "frames {pfn:?}+{pages} outside the arena"
        );
        // SAFETY: the range is inside the arena (checked above); the frames belong to the
        // mapping layer, which lends them to nobody while the lock is held, so this is
        // the only reference to them for the borrow of `self`.
        unsafe { std::slice::from_raw_parts_mut(arena.ptr_at(offset), len) }
    }
}

fn io_failed(what: &str, error: std::io::Error) -> ! {
    // A failing disk under the page cache has no recovery here (Linux would mark the
    // folio with an error and, for swap, kill the task); stop loudly rather than lose
    // data silently.
    panic!("mapped memory: {what} failed: {error}")
}

impl PageIo for DiskIo {
    fn read_file(&mut self, file: FileId, index: u64, pfn: Pfn, pages: u64) {
        let handle = self.files[file.0 as usize]
            .try_clone()
            .unwrap_or_else(|e| io_failed("file handle", e));
        let frame = self.frame(pfn, pages);
        let mut done = 0;
        while done < frame.len() {
            match handle.read_at(&mut frame[done..], index * PAGE_SIZE as u64 + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) => io_failed("file read", e),
            }
        }
        // Past the end of the file: zeros, as Linux reads.
        frame[done..].fill(0);
    }

    fn write_file(&mut self, file: FileId, index: u64, pfn: Pfn, pages: u64) {
        let handle = self.files[file.0 as usize]
            .try_clone()
            .unwrap_or_else(|e| io_failed("file handle", e));
        let frame = self.frame(pfn, pages);
        handle
            .write_all_at(frame, index * PAGE_SIZE as u64)
            .unwrap_or_else(|e| io_failed("file write", e));
    }

    fn write_swap(&mut self, entry: SwapEntry, pfn: Pfn) {
        let swap = self
            .swap
            .try_clone()
            .unwrap_or_else(|e| io_failed("swap handle", e));
        swap.write_all_at(self.frame(pfn, 1), entry.0 * PAGE_SIZE as u64)
            .unwrap_or_else(|e| io_failed("swap write", e));
    }

    fn read_swap(&mut self, entry: SwapEntry, pfn: Pfn) {
        let swap = self
            .swap
            .try_clone()
            .unwrap_or_else(|e| io_failed("swap handle", e));
        swap.read_exact_at(self.frame(pfn, 1), entry.0 * PAGE_SIZE as u64)
            .unwrap_or_else(|e| io_failed("swap read", e));
    }

    fn zero(&mut self, pfn: Pfn, pages: u64) {
        self.frame(pfn, pages).fill(0);
    }

    fn copy(&mut self, from: Pfn, to: Pfn) {
        // Through a buffer: `frame` lends one frame at a time.
        let data = self.frame(from, 1).to_vec();
        self.frame(to, 1).copy_from_slice(&data);
    }
}

struct State {
    memory: Memory,
    io: DiskIo,
}

/// The pool's reclaim hook when kswapd reclaims mapped memory. It holds the layer weakly:
/// the layer owns the pool, whose kswapd threads hold the hook.
#[derive(Default)]
struct KswapdHook {
    state: std::sync::OnceLock<std::sync::Weak<Mutex<State>>>,
}

impl crate::Reclaim for KswapdHook {
    fn reclaim(&self, cx: &crate::ReclaimContext<'_>) -> u64 {
        let Some(state) = self.state.get().and_then(std::sync::Weak::upgrade) else {
            cx.allocator.drain_all_pages(None);
            return 0;
        };
        let mut guard = state.lock().unwrap_or_else(|e| e.into_inner());
        let State { memory, io } = &mut *guard;
        // kswapd runs on its node: charge its per-CPU counters to the node's first online
        // CPU (the kswapd thread holds the CPU hotplug lock for reading: it stays online),
        // or to any online CPU if the node has none left.
        let topology = cx.allocator.topology();
        let online = |c: &u32| cx.allocator.is_cpu_online(*c);
        let cpu = (0..topology.nr_cpus())
            .filter(online)
            .find(|&c| topology.cpu_node(c) == Some(cx.scan.node))
            .or_else(|| (0..topology.nr_cpus()).find(online))
            .unwrap_or(0);
        let caller = mmkit_core::page_alloc::Caller::task(cpu);
        memory
            .kswapd_shrink_node(caller, &cx.scan, io)
            .map_or(0, |outcome| outcome.reclaimed)
    }
}

/// The mapping layer on a page pool, with files in a directory and a swap file there.
/// One lock serialises it (the core's [`Memory`] takes `&mut self`).
pub struct MappedMemory {
    state: Arc<Mutex<State>>,
    pool: PagePool,
    dir: PathBuf,
    /// `dir` did not exist before: it is removed on drop, once its files are.
    made_dir: bool,
}

/// Why a mapped-memory call failed.
#[derive(Debug)]
pub enum MappedError {
    /// The mapping layer refused (bad address, out of memory, ...).
    Mm(MmError),
    /// Creating a file failed.
    Io(std::io::Error),
}

impl std::fmt::Display for MappedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MappedError::Mm(e) => write!(f, "{e}"),
            MappedError::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for MappedError {}

impl From<MmError> for MappedError {
    fn from(e: MmError) -> MappedError {
        MappedError::Mm(e)
    }
}

impl From<std::io::Error> for MappedError {
    fn from(e: std::io::Error) -> MappedError {
        MappedError::Io(e)
    }
}

impl MappedMemory {
    /// Mapped memory over `pool` (which it keeps), with its files and a swap file of
    /// `swap_pages` pages in `dir`. The files are removed on drop; so is `dir` if this
    /// created it (its parents stay) and nothing else was put there.
    pub fn new(
        pool: PagePool,
        dir: &Path,
        swap_pages: u64,
        policy: MmPolicy,
    ) -> Result<MappedMemory, MappedError> {
        let made_dir = !dir.exists();
        std::fs::create_dir_all(dir)?;
        let swap_path = dir.join("swap");
        let swap = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&swap_path)?;
        swap.set_len(swap_pages * PAGE_SIZE as u64)?;
        let source: Arc<dyn AllocatorSource> = pool.inner.clone();
        let memory = Memory::new(source, policy, swap_pages);
        let io = DiskIo {
            pool: pool.inner.clone(),
            files: Vec::new(),
            swap,
        };
        Ok(MappedMemory {
            state: Arc::new(Mutex::new(State { memory, io })),
            pool,
            dir: dir.to_path_buf(),
            made_dir,
        })
    }

    /// Mapped memory on a pool built from `builder`, whose kswapd threads reclaim from
    /// the mapping layer: woken below a zone's low watermark (or by a watermark boost),
    /// they run the core's kswapd loop with [`Memory::kswapd_shrink_node`] as each pass,
    /// `RECLAIM_ACTIVE` set, until the node is above its high watermark, alongside the
    /// direct reclaim of faulting threads.
    pub fn with_kswapd(
        builder: crate::PagePoolBuilder,
        dir: &Path,
        swap_pages: u64,
        policy: MmPolicy,
    ) -> Result<MappedMemory, MappedError> {
        let hook = Arc::new(KswapdHook::default());
        let pool = builder
            .reclaim(hook.clone())
            .build()
            .map_err(|e| MappedError::Io(std::io::Error::other(e.to_string())))?;
        let memory = MappedMemory::new(pool, dir, swap_pages, policy)?;
        let _ = hook.state.set(Arc::downgrade(&memory.state));
        Ok(memory)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic under the lock leaves the layer as the panic found it; the data is
        // still consistent enough to drop, so carry on with it.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The page pool underneath.
    pub fn pool(&self) -> &PagePool {
        &self.pool
    }

    /// Run `f` on the core's mapping layer (for statistics, policies, cgroups, `verify`).
    ///
    /// # Safety
    ///
    /// `f` must not change which pages the mapping layer owns or where they are mapped:
    /// no mapping, unmapping, faulting, reclaim or write-back through `Memory`, and only
    /// reads through [`Memory::allocator`]. Those go through this type's methods, which
    /// move the data with them; done behind its back, a frame could be freed and handed
    /// to a [`crate::PageBlock`] while this type still copies into it (see
    /// [`PagePool::allocator_source`]).
    pub unsafe fn with_memory<R>(&self, f: impl FnOnce(&mut Memory) -> R) -> R {
        f(&mut self.lock().memory)
    }

    /// A file of `pages` pages on disk, filled with `contents` (zeros after it), whose page
    /// cache uses folios of `folio_order`.
    pub fn create_file(
        &self,
        pages: u64,
        folio_order: Order,
        contents: &[u8],
    ) -> Result<FileId, MappedError> {
        let mut state = self.lock();
        let path = self.dir.join(format!("file-{}", state.io.files.len()));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)?;
        file.set_len(pages * PAGE_SIZE as u64)?;
        file.write_all_at(contents, 0)?;
        let id = state.memory.create_file(pages, folio_order);
        debug_assert_eq!(id.0 as usize, state.io.files.len());
        state.io.files.push(file);
        Ok(id)
    }

    /// An empty address space.
    pub fn create_mm(&self) -> MmId {
        self.lock().memory.create_mm()
    }

    /// Anonymous memory at `start`.
    pub fn mmap_anon(
        &self,
        mm: MmId,
        start: Vpn,
        pages: u64,
        folio_order: Order,
    ) -> Result<(), MmError> {
        self.lock().memory.mmap_anon(mm, start, pages, folio_order)
    }

    /// A file mapping at `start`.
    pub fn mmap_file(
        &self,
        mm: MmId,
        start: Vpn,
        pages: u64,
        file: FileId,
        pgoff: u64,
    ) -> Result<(), MmError> {
        self.lock().memory.mmap_file(mm, start, pages, file, pgoff)
    }

    /// `fork`: a child address space sharing `mm`'s anonymous pages copy-on-write.
    pub fn fork(&self, mm: MmId) -> Result<MmId, MmError> {
        let (_hotplug, caller) = self.pool.caller_for_operation();
        self.lock().memory.fork(caller, mm)
    }

    /// The process of `mm` exits: every mapping is unmapped and the address space goes.
    pub fn exit_mm(&self, mm: MmId) -> Result<(), MmError> {
        let (_hotplug, caller) = self.pool.caller_for_operation();
        self.lock().memory.exit_mm(caller, mm)
    }

    /// Remove the mapping at `start`.
    pub fn munmap(&self, mm: MmId, start: Vpn) -> Result<(), MmError> {
        let (_hotplug, caller) = self.pool.caller_for_operation();
        self.lock().memory.munmap(caller, mm, start)
    }

    /// Copy bytes from address `addr` (page `addr / 4096`) of `mm` into `buf`, faulting
    /// pages in as needed.
    pub fn read(&self, mm: MmId, addr: u64, buf: &mut [u8]) -> Result<(), MmError> {
        let (_hotplug, caller) = self.pool.caller_for_operation();
        let mut state = self.lock();
        let State { memory, io } = &mut *state;
        let mut done = 0;
        while done < buf.len() {
            let at = addr + done as u64;
            let (vpn, offset) = (at / PAGE_SIZE as u64, at as usize % PAGE_SIZE);
            let fault = memory.access(caller, mm, vpn, false, io)?;
            if !fault.was_present {
                // An allocation may have found a zone below its low watermark.
                self.pool.kick_kswapd();
            }
            let n = (PAGE_SIZE - offset).min(buf.len() - done);
            buf[done..done + n].copy_from_slice(&io.frame(fault.pfn, 1)[offset..offset + n]);
            done += n;
        }
        Ok(())
    }

    /// Copy `data` to address `addr` of `mm`, faulting pages in and dirtying them.
    pub fn write(&self, mm: MmId, addr: u64, data: &[u8]) -> Result<(), MmError> {
        let (_hotplug, caller) = self.pool.caller_for_operation();
        let mut state = self.lock();
        let State { memory, io } = &mut *state;
        let mut done = 0;
        while done < data.len() {
            let at = addr + done as u64;
            let (vpn, offset) = (at / PAGE_SIZE as u64, at as usize % PAGE_SIZE);
            let fault = memory.access(caller, mm, vpn, true, io)?;
            if !fault.was_present {
                self.pool.kick_kswapd();
            }
            let n = (PAGE_SIZE - offset).min(data.len() - done);
            io.frame(fault.pfn, 1)[offset..offset + n].copy_from_slice(&data[done..done + n]);
            done += n;
        }
        Ok(())
    }

    /// `madvise(MADV_PAGEOUT)` on `pages` pages from `start`.
    pub fn madvise_pageout(
        &self,
        mm: MmId,
        start: Vpn,
        pages: u64,
    ) -> Result<PageoutOutcome, MmError> {
        let (_hotplug, caller) = self.pool.caller_for_operation();
        let mut state = self.lock();
        let State { memory, io } = &mut *state;
        memory.madvise_pageout(caller, mm, start, pages, io)
    }

    /// Write `pages` to `memory.reclaim` of `memcg`.
    pub fn memory_reclaim(&self, memcg: MemcgId, pages: u64) -> Result<ReclaimOutcome, MmError> {
        let (_hotplug, caller) = self.pool.caller_for_operation();
        let mut state = self.lock();
        let State { memory, io } = &mut *state;
        memory.memory_reclaim(caller, memcg, pages, io)
    }

    /// Set `memory.max` of `memcg`, reclaiming down to it.
    pub fn set_memory_max(&self, memcg: MemcgId, pages: u64) -> Result<(), MmError> {
        let (_hotplug, caller) = self.pool.caller_for_operation();
        let mut state = self.lock();
        let State { memory, io } = &mut *state;
        memory.set_memory_max(caller, memcg, pages, io)
    }

    /// The mapping layer's statistics.
    pub fn stats(&self) -> MmStats {
        self.lock().memory.stats()
    }

    /// Every count checked against the page tables, then the allocator's walker.
    pub fn verify(&self) -> Result<(), String> {
        self.lock().memory.verify()
    }
}

impl Drop for MappedMemory {
    fn drop(&mut self) {
        let state = self.lock();
        for i in 0..state.io.files.len() {
            let _ = std::fs::remove_file(self.dir.join(format!("file-{i}")));
        }
        let _ = std::fs::remove_file(self.dir.join("swap"));
        if self.made_dir {
            // Fails, harmlessly, if something else was put there.
            let _ = std::fs::remove_dir(&self.dir);
        }
    }
}
