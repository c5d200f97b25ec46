//! Chunk memory for the percpu allocator: one address-space reservation per chunk, pages
//! committed on populate and handed back to the OS on depopulate.
//!
//! One of the modules of mmkit with `unsafe` (with [`crate::arena`], [`crate::cpu`] and
//! [`crate::per_cpu`]). Linux counterpart: `mm/percpu-vm.c`, which maps pages into a
//! vmalloc area per unit. Here a chunk is one anonymous mapping of `units × unit_size`
//! bytes, reserved `PROT_NONE` with `MAP_NORESERVE`. Populating a page range makes it
//! read/write in every unit and touches each OS page so it is really resident, as
//! Linux's populate allocates the pages; depopulating gives the pages back with
//! `MADV_DONTNEED` and makes them `PROT_NONE` again, so a stray access through a stale
//! pointer faults instead of reading zeros. [`MmapBacking::resident_bytes`] asks the OS
//! (`mincore`) what is resident.
//!
//! The first and the reserved chunk are reserved and populated like the others when the
//! allocator is built, and the static region's whole pages before them get a mapping of
//! their own, committed and never returned, so [`MmapBacking::resident_bytes`] follows
//! `Percpu:` from boot on (a page the static region shares with the first chunk belongs
//! to the chunk; with a reserved chunk the page it shares with the first chunk is resident
//! in both mappings, one page per unit above `Percpu:`).
//!
//! The model's page size may be larger than the OS page (64 KiB on a 4 KiB x86 host, to
//! model POWER9); a model page is then several OS pages, populated together.
//!
//! Every mapping splits at each populated/unpopulated edge, and each piece counts against
//! `vm.max_map_count` (65530 by default). Re-protecting after a depopulate can fail for
//! that reason; the memory is still returned, the pages stay read/write, and
//! [`MmapBacking::protect_failures`] counts it.

use std::collections::HashMap;
use std::ops::Range;
use std::ptr::NonNull;

use mmkit_core::percpu::{BackingError, ChunkBacking, ChunkId};

use crate::arena::page_size;

/// One chunk's reservation.
///
/// # Invariants
///
/// `base .. base + len` is exactly one live anonymous mapping made by
/// [`Reservation::new`], unmapped only by `Drop`.
#[derive(Debug)]
struct Reservation {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: the reservation is address space owned by one chunk; which bytes may be touched
// is decided by the percpu allocator behind the pool's lock.
unsafe impl Send for Reservation {}

impl Reservation {
    fn new(len: usize) -> Result<Reservation, BackingError> {
        // SAFETY: an anonymous private mapping at an address of the kernel's choosing
        // touches no existing memory; the result is checked before use.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return Err(BackingError);
        }
        let base = NonNull::new(raw.cast::<u8>()).ok_or(BackingError)?;
        // Linux backs percpu chunks with single pages; a transparent huge page would make
        // the resident figure jump past what is populated. Best effort: a kernel without
        // THP says EINVAL, which changes nothing.
        // SAFETY: the range is exactly the mapping just made.
        unsafe { libc::madvise(raw, len, libc::MADV_NOHUGEPAGE) };
        Ok(Reservation { base, len })
    }

    /// The address of `range` (bytes) inside the reservation. Panics past the end.
    fn addr(&self, range: &Range<usize>) -> *mut libc::c_void {
        assert!(range.start <= range.end && range.end <= self.len);
        // SAFETY: checked to be inside the mapping.
        unsafe { self.base.as_ptr().add(range.start).cast() }
    }

    /// Make `range` read/write and touch each OS page so it is resident.
    fn commit(&self, range: Range<usize>) -> Result<(), BackingError> {
        let addr = self.addr(&range);
        // SAFETY: the range is inside our own mapping; nothing holds a reference into
        // pages that are not populated.
        let rc = unsafe { libc::mprotect(addr, range.len(), libc::PROT_READ | libc::PROT_WRITE) };
        if rc != 0 {
            return Err(BackingError);
        }
        for offset in range.step_by(page_size()) {
            // SAFETY: inside the mapping, now writable; the page is unpopulated in the
            // allocator's books, so no reference into it exists. Writing the zero it
            // already reads commits it.
            unsafe { self.base.as_ptr().add(offset).write_volatile(0) };
        }
        Ok(())
    }

    /// Hand `range` back to the OS and protect it again. Returns whether the protection
    /// could be restored.
    fn release(&self, range: Range<usize>) -> bool {
        let addr = self.addr(&range);
        // SAFETY: inside our mapping; the allocator depopulates only pages with no
        // allocation, so no reference into them exists.
        unsafe {
            libc::madvise(addr, range.len(), libc::MADV_DONTNEED);
            libc::mprotect(addr, range.len(), libc::PROT_NONE) == 0
        }
    }

    /// Resident OS pages of the reservation (`mincore`).
    fn resident_pages(&self) -> usize {
        let os_page = page_size();
        let mut vec = vec![0u8; self.len.div_ceil(os_page)];
        // SAFETY: the range is exactly our mapping; `vec` has one byte per OS page of it.
        let rc = unsafe { libc::mincore(self.base.as_ptr().cast(), self.len, vec.as_mut_ptr()) };
        if rc != 0 {
            return 0;
        }
        vec.iter().filter(|&&b| b & 1 != 0).count()
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        // SAFETY: by the type invariant this is exactly our live mapping, and the chunk is
        // being destroyed, so the allocator hands out nothing inside it any more.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

/// The runtime's [`ChunkBacking`]: real address space and pages.
#[derive(Debug)]
pub struct MmapBacking {
    nr_units: usize,
    unit_size: usize,
    page_size: usize,
    chunks: HashMap<ChunkId, Reservation>,
    /// The static region of the first chunk, if the allocator has one.
    static_area: Option<Reservation>,
    protect_failures: u64,
}

impl MmapBacking {
    /// Chunks of `nr_units` units of `unit_size` bytes, populated in pages of `page_size`
    /// bytes (a multiple of the OS page size).
    pub fn new(nr_units: usize, unit_size: usize, page_size: usize) -> MmapBacking {
        assert!(page_size % crate::arena::page_size() == 0 && unit_size % page_size == 0);
        MmapBacking {
            nr_units,
            unit_size,
            page_size,
            chunks: HashMap::new(),
            static_area: None,
            protect_failures: 0,
        }
    }

    /// The address of byte `offset` of `chunk`'s unit `unit`, or `None` if the chunk does
    /// not exist.
    pub fn unit_addr(&self, chunk: ChunkId, unit: usize, offset: usize) -> Option<NonNull<u8>> {
        assert!(unit < self.nr_units && offset < self.unit_size);
        let reservation = self.chunks.get(&chunk)?;
        NonNull::new(
            reservation
                .addr(&(unit * self.unit_size + offset..unit * self.unit_size + offset))
                .cast(),
        )
    }

    /// Write zeros over `offset .. offset + len` of every unit of `chunk`, as `pcpu_alloc`
    /// clears a new area in every unit.
    ///
    /// # Safety
    ///
    /// The area must lie on populated pages and no reference into it may be alive (the
    /// allocator has just handed it out and nobody has seen it yet).
    pub(crate) unsafe fn clear_area(&self, chunk: ChunkId, offset: usize, len: usize) {
        let reservation = &self.chunks[&chunk];
        for unit in 0..self.nr_units {
            let start = unit * self.unit_size + offset;
            let addr = reservation.addr(&(start..start + len)).cast::<u8>();
            // SAFETY: inside the mapping (checked by `addr`), populated hence writable,
            // and unreferenced (the caller's promise).
            unsafe { addr.write_bytes(0, len) };
        }
    }

    /// Bytes of every chunk that the OS reports resident (`mincore`).
    pub fn resident_bytes(&self) -> u64 {
        let pages: usize = self
            .chunks
            .values()
            .chain(&self.static_area)
            .map(Reservation::resident_pages)
            .sum();
        (pages * page_size()) as u64
    }

    /// Bytes of address space reserved.
    pub fn reserved_bytes(&self) -> u64 {
        self.chunks.values().map(|r| r.len as u64).sum()
    }

    /// Depopulated ranges whose protection could not be restored (see the module
    /// comment).
    pub fn protect_failures(&self) -> u64 {
        self.protect_failures
    }

    /// The byte range of `pages` in `unit`.
    fn unit_range(&self, unit: usize, pages: &Range<usize>) -> Range<usize> {
        let base = unit * self.unit_size;
        base + pages.start * self.page_size..base + pages.end * self.page_size
    }
}

impl ChunkBacking for MmapBacking {
    fn create_chunk(&mut self, chunk: ChunkId, nr_pages: usize) -> Result<(), BackingError> {
        // The first and the reserved chunk map only the pages around their regions; every
        // chunk keeps the unit stride, so unit `u` of any chunk starts at `u × unit_size`.
        debug_assert!(nr_pages * self.page_size <= self.unit_size);
        let reservation = Reservation::new(self.nr_units * self.unit_size)?;
        self.chunks.insert(chunk, reservation);
        Ok(())
    }

    fn destroy_chunk(&mut self, chunk: ChunkId) {
        self.chunks.remove(&chunk);
    }

    fn populate(&mut self, chunk: ChunkId, pages: Range<usize>) -> Result<(), BackingError> {
        let reservation = self.chunks.get(&chunk).ok_or(BackingError)?;
        for unit in 0..self.nr_units {
            if let Err(err) = reservation.commit(self.unit_range(unit, &pages)) {
                // Undo the units done so far: the allocator counts the range unpopulated.
                for done in 0..unit {
                    reservation.release(self.unit_range(done, &pages));
                }
                return Err(err);
            }
        }
        Ok(())
    }

    fn back_static(&mut self, pages: usize) -> Result<(), BackingError> {
        let reservation = Reservation::new(self.nr_units * self.unit_size)?;
        for unit in 0..self.nr_units {
            reservation.commit(self.unit_range(unit, &(0..pages)))?;
        }
        self.static_area = Some(reservation);
        Ok(())
    }

    fn depopulate(&mut self, chunk: ChunkId, pages: Range<usize>) {
        let Some(reservation) = self.chunks.get(&chunk) else {
            return;
        };
        let mut failures = 0;
        for unit in 0..self.nr_units {
            if !reservation.release(self.unit_range(unit, &pages)) {
                failures += 1;
            }
        }
        self.protect_failures += failures;
    }
}
