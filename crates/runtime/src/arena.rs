//! The arena: one anonymous `mmap` region that backs every page the pool hands out.
//!
//! This is one of the two modules of mmkit with `unsafe` (the other is [`crate::cpu`]).
//! Everything here is about the mapping itself: creating it aligned, handing out raw
//! pointers into it, returning page contents to the OS, and unmapping it. Whether a range
//! may be touched is the allocator's business, not the arena's.

use std::io;
use std::ptr::NonNull;

/// A private anonymous mapping, aligned to `align` bytes.
///
/// # Invariants
///
/// `base .. base + len` lies inside one live mapping created by [`Arena::new`] with
/// read/write protection; `map_base .. map_base + map_len` is exactly that mapping, and it
/// is unmapped only by `Drop`. `base` is a multiple of the alignment given to `new`.
#[derive(Debug)]
pub struct Arena {
    base: NonNull<u8>,
    len: usize,
    map_base: NonNull<u8>,
    map_len: usize,
}

// SAFETY: the arena is a plain memory region; it holds no thread-affine state. Which
// thread may touch which bytes is decided by the page allocator, which is thread-safe.
unsafe impl Send for Arena {}
// SAFETY: as above; shared references only hand out raw pointers.
unsafe impl Sync for Arena {}

impl Arena {
    /// Reserve `len` bytes aligned to `align` (a power of two, at least the page size),
    /// with `MAP_NORESERVE` so untouched pages cost nothing. With `huge_pages`, ask for
    /// transparent huge pages (`MADV_HUGEPAGE`).
    ///
    /// ```
    /// use mmkit_runtime::arena::Arena;
    /// let arena = Arena::new(8 << 20, 2 << 20, true)?;
    /// assert_eq!(arena.base() as usize % (2 << 20), 0);
    /// assert_eq!(arena.offset_of(arena.base() as usize + 4096), Some(4096));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn new(len: usize, align: usize, huge_pages: bool) -> io::Result<Arena> {
        if len == 0 || !align.is_power_of_two() || len % page_size() != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "arena size must be a positive multiple of the page size",
            ));
        }
        let map_len = len
            .checked_add(align)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "arena size overflows"))?;
        // SAFETY: an anonymous private mapping at an address of the kernel's choosing
        // touches no existing memory; the result is checked before use.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let map_base = NonNull::new(raw.cast::<u8>()).ok_or_else(io::Error::last_os_error)?;
        let offset = map_base.as_ptr().align_offset(align);
        // SAFETY: `offset < align`, so `map_base + offset` is inside the mapping of
        // `len + align` bytes, and `len` bytes from there still are.
        let base = unsafe { map_base.add(offset) };
        let arena = Arena {
            base,
            len,
            map_base,
            map_len,
        };
        if huge_pages {
            // Best effort: a kernel without THP says EINVAL, which changes nothing.
            // SAFETY: the range is inside our own live mapping.
            unsafe { libc::madvise(arena.base.as_ptr().cast(), len, libc::MADV_HUGEPAGE) };
        }
        Ok(arena)
    }

    /// The first byte.
    pub fn base(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the arena is empty (never: `new` refuses 0).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The byte offset of `addr` in the arena, if it is inside.
    pub fn offset_of(&self, addr: usize) -> Option<usize> {
        let base = self.base.as_ptr() as usize;
        (addr >= base && addr - base < self.len).then(|| addr - base)
    }

    /// A raw pointer `offset` bytes in. Panics past the end.
    pub fn ptr_at(&self, offset: usize) -> *mut u8 {
        assert!(
            offset < self.len,
            "offset {offset} outside an arena of {} bytes",
            self.len
        );
        // SAFETY: checked to be inside the arena.
        unsafe { self.base.as_ptr().add(offset) }
    }

    /// Give the contents of `offset .. offset + len` back to the OS (`MADV_DONTNEED`):
    /// resident memory drops, and the next touch reads zeros.
    ///
    /// # Safety
    ///
    /// No reference (`&[u8]` or `&mut [u8]`) into the range may be alive: its contents
    /// change without a write through it.
    pub unsafe fn discard(&self, offset: usize, len: usize) -> io::Result<()> {
        assert!(
            offset.checked_add(len).is_some_and(|end| end <= self.len),
            "range outside the arena"
        );
        // SAFETY: the range is inside our mapping (checked); the caller promises no live
        // references into it.
        let rc = unsafe { libc::madvise(self.ptr_at(offset).cast(), len, libc::MADV_DONTNEED) };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: by the type invariant this is exactly our live mapping, and the arena is
        // being dropped, so nothing in the pool can use it any more.
        unsafe { libc::munmap(self.map_base.as_ptr().cast(), self.map_len) };
    }
}

/// The OS page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no memory effects.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).unwrap_or(4096)
}

/// An allocated block as memory: `2^order` pages owned by this handle until it drops.
///
/// ```
/// # use mmkit_runtime::PagePool;
/// # use mmkit_core::Order;
/// let pool = PagePool::builder().memory_bytes(16 << 20).cpus(1).build()?;
/// let mut block = pool.alloc(Order::new(1).unwrap())?;
/// block[8191] = 7;                                   // 8 KiB of writable memory
/// let pfn = block.into_raw();                        // keep it past the handle
/// // SAFETY: `into_raw` gave up the handle; the block is freed once.
/// unsafe { pool.free_raw(pfn, Order::new(1).unwrap())? };
/// # Ok::<(), mmkit_runtime::PoolError>(())
/// ```
///
/// # Invariants
///
/// `tagged` is the block's first byte (page-aligned, inside `pool`'s arena) plus its order
/// (`0..=MAX_ORDER`). `ptr() .. ptr() + byte_len()` is an allocated block that nothing
/// else may touch: the page allocator handed it out once, to this handle, and only the
/// `unsafe` raw free could take it away, whose contract forbids that. Dropping the handle
/// frees the block.
pub struct PageBlock<'pool> {
    /// The block's first byte plus its order: a block is page-aligned, so the bits below
    /// the page size are free to hold the order (`MAX_ORDER` < 4096). Two words in all,
    /// so that a block (and an `Option` or `Result` of one) moves in registers. With five
    /// fields LLVM built it on the stack with 8-byte stores and copied it with 16-byte
    /// loads, which cannot be forwarded from them: a store-forwarding stall per
    /// allocation, ≈ 13 ns of `mmkit bench pagealloc`'s `mmkit-handle` (session 4).
    tagged: NonNull<u8>,
    pool: &'pool crate::PagePool,
}

/// The bits of [`PageBlock::tagged`] below the page size: the order.
const ORDER_TAG: usize = mmkit_core::page::PAGE_SIZE - 1;
const _: () = assert!((mmkit_core::page::MAX_ORDER as usize) <= ORDER_TAG);

// SAFETY: the handle owns its memory exclusively (type invariant), like a Box<[u8]>; the
// pool it refers to is Sync.
unsafe impl Send for PageBlock<'_> {}
// SAFETY: shared access only gives `&[u8]`.
unsafe impl Sync for PageBlock<'_> {}

impl<'pool> PageBlock<'pool> {
    /// Wrap a block the allocator just handed out.
    #[inline]
    pub(crate) fn new(
        pool: &'pool crate::PagePool,
        pfn: mmkit_core::Pfn,
        order: mmkit_core::Order,
    ) -> PageBlock<'pool> {
        let ptr = pool.arena().ptr_at(pool.offset_of_pfn(pfn));
        // `wrapping_add`, not an integer round trip: the tag keeps the pointer's provenance.
        let tagged = ptr.wrapping_add(order.get() as usize);
        PageBlock {
            tagged: NonNull::new(tagged).expect("arena pointers are non-null"),
            pool,
        }
    }

    /// The first byte, the tag removed.
    #[inline]
    fn ptr(&self) -> *mut u8 {
        let tagged = self.tagged.as_ptr();
        tagged.wrapping_sub(tagged as usize & ORDER_TAG)
    }

    /// Bytes in the block.
    #[inline]
    fn byte_len(&self) -> usize {
        mmkit_core::page::PAGE_SIZE << (self.tagged.as_ptr() as usize & ORDER_TAG)
    }

    /// The pool the block belongs to.
    pub(crate) fn pool(&self) -> &'pool crate::PagePool {
        self.pool
    }

    /// The block's first pfn.
    #[inline]
    pub fn pfn(&self) -> mmkit_core::Pfn {
        let offset = self
            .pool
            .arena()
            .offset_of(self.addr())
            .expect("a block lies inside its pool's arena");
        mmkit_core::Pfn((offset / mmkit_core::page::PAGE_SIZE) as u64)
    }

    /// The block's order.
    #[inline]
    pub fn order(&self) -> mmkit_core::Order {
        mmkit_core::Order::new((self.tagged.as_ptr() as usize & ORDER_TAG) as u8)
            .expect("the tag holds the order it was given")
    }

    /// The address of the first byte.
    #[inline]
    pub fn addr(&self) -> usize {
        self.ptr() as usize
    }

    /// Write a canary across the block: each 8-byte word gets its address, the
    /// `generation` and its index XORed together, so a stray write anywhere in the block,
    /// or the block handed to two owners, shows up in [`PageBlock::canary_damage`].
    pub fn write_canary(&mut self, generation: u64) {
        let addr = self.addr() as u64;
        for (i, word) in self.chunks_exact_mut(8).enumerate() {
            word.copy_from_slice(&(addr ^ generation ^ i as u64).to_ne_bytes());
        }
    }

    /// Words that no longer hold the canary written with `generation`.
    ///
    /// ```
    /// # use mmkit_runtime::PagePool;
    /// # use mmkit_core::Order;
    /// let pool = PagePool::builder().memory_bytes(16 << 20).cpus(1).build()?;
    /// let mut block = pool.alloc(Order::ZERO)?;
    /// block.write_canary(7);
    /// assert_eq!(block.canary_damage(7), 0);
    /// block[100] ^= 1;
    /// assert_eq!(block.canary_damage(7), 1);
    /// # Ok::<(), mmkit_runtime::PoolError>(())
    /// ```
    pub fn canary_damage(&self, generation: u64) -> u64 {
        let addr = self.addr() as u64;
        self.chunks_exact(8)
            .enumerate()
            .filter(|(i, word)| {
                let value = u64::from_ne_bytes((*word).try_into().expect("8-byte chunks"));
                value != addr ^ generation ^ *i as u64
            })
            .count() as u64
    }

    /// Give up the handle without freeing: the block becomes a raw allocation that
    /// [`crate::PagePool::free_raw`] frees.
    pub fn into_raw(self) -> mmkit_core::Pfn {
        std::mem::ManuallyDrop::new(self).pfn()
    }
}

impl std::ops::Deref for PageBlock<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: the range is inside the arena and owned by this handle (invariant).
        unsafe { std::slice::from_raw_parts(self.ptr(), self.byte_len()) }
    }
}

impl std::ops::DerefMut for PageBlock<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as for Deref, and `&mut self` makes this the only access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr(), self.byte_len()) }
    }
}

impl Drop for PageBlock<'_> {
    fn drop(&mut self) {
        self.pool.free_handle(self.pfn(), self.order());
    }
}

impl std::fmt::Debug for PageBlock<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageBlock")
            .field("pfn", &self.pfn())
            .field("order", &self.order())
            .field("addr", &format_args!("{:#x}", self.addr()))
            .finish()
    }
}

impl crate::PagePool {
    /// Free a block obtained from [`crate::PagePool::alloc_raw`] or
    /// [`PageBlock::into_raw`]. Bad calls (a double free, a wrong order, a pfn outside the
    /// arena or not at a block start) are refused with an error and change nothing, as
    /// long as they come one after the other: a free racing this one is not detected.
    ///
    /// # Safety
    ///
    /// The caller owns the block: it came from `alloc_raw` or `into_raw` and has not been
    /// freed since, and no reference into its memory is used after this call. (A block
    /// owned by a live [`PageBlock`] must not be freed this way.) No other thread frees
    /// the block at the same time: the pool frees with the core's
    /// [`free_pages_exclusive`](mmkit_core::internals::free_pages_exclusive), which
    /// refuses a second free made after this one returned but does not detect one
    /// racing it, and two racing frees could both pass and hand the block out twice.
    pub unsafe fn free_raw(
        &self,
        pfn: mmkit_core::Pfn,
        order: mmkit_core::Order,
    ) -> Result<(), crate::PoolError> {
        self.free_pfn(pfn, order)
    }

    /// Free many order-0 raw pages at once (`free_unref_page_list`): all of them, or none
    /// when one is refused (its error is returned).
    ///
    /// # Safety
    ///
    /// As for [`free_raw`](Self::free_raw), for every page: the caller owns each one, and
    /// no other thread frees any of them at the same time (a page freed before, or twice
    /// in the batch, is still refused).
    pub unsafe fn free_batch(&self, pfns: &[mmkit_core::Pfn]) -> Result<(), crate::PoolError> {
        self.free_pfns_batch(pfns)
    }

    /// [`free_raw`](Self::free_raw) by address.
    ///
    /// # Safety
    ///
    /// As for `free_raw`.
    pub unsafe fn free_raw_addr(
        &self,
        addr: usize,
        order: mmkit_core::Order,
    ) -> Result<(), crate::PoolError> {
        let pfn = self.addr_to_pfn(addr)?;
        self.free_pfn(pfn, order)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arena_is_aligned_and_writable() {
        let arena = Arena::new(8 << 20, 4 << 20, false).unwrap();
        assert_eq!(arena.base() as usize % (4 << 20), 0);
        // SAFETY: inside the arena; no references exist.
        unsafe {
            arena.ptr_at(0).write(7);
            arena.ptr_at(arena.len() - 1).write(9);
            assert_eq!(arena.ptr_at(0).read(), 7);
        }
        assert_eq!(arena.offset_of(arena.base() as usize + 10), Some(10));
        assert_eq!(arena.offset_of(arena.base() as usize + arena.len()), None);
    }

    #[test]
    fn discard_reads_back_zero() {
        let arena = Arena::new(1 << 20, 4096, false).unwrap();
        // SAFETY: inside the arena; no references exist.
        unsafe {
            arena.ptr_at(4096).write(42);
            arena.discard(4096, 4096).unwrap();
            assert_eq!(arena.ptr_at(4096).read(), 0);
        }
    }

    #[test]
    fn zero_size_is_refused() {
        assert!(Arena::new(0, 4096, false).is_err());
    }
}
