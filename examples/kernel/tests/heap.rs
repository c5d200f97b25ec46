//! The bare-metal kernel's bump heap holds what `boot` asks of it: every byte allocated
//! (a bump allocator reuses none) is counted by this binary's global allocator, and the
//! sum stays under `BOOT_HEAP_BYTES`, below the size of the mem_map, which is not on it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};

use mmkit_core::page::Page;
use mmkit_example_kernel::{boot, mem_map_pages, BOOT_HEAP_BYTES};

/// Bytes asked for while counting, each rounded up to its alignment as a bump allocator
/// would pad it.
static BYTES: AtomicUsize = AtomicUsize::new(0);
static COUNTING: AtomicBool = AtomicBool::new(false);

struct Counting;

// SAFETY: every method forwards to `System` unchanged; counting touches only atomics.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Relaxed) {
            BYTES.fetch_add(layout.size() + layout.align() - 1, Relaxed);
        }
        // SAFETY: forwarded unchanged: the caller upholds `GlobalAlloc::alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.load(Relaxed) {
            // A bump allocator's realloc is a new allocation and a copy.
            BYTES.fetch_add(new_size + layout.align() - 1, Relaxed);
        }
        // SAFETY: forwarded unchanged: `ptr` came from this allocator, which is `System`'s.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as in `realloc`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

#[test]
fn boot_fits_the_bare_metal_heap_without_the_mem_map() {
    let len = mem_map_pages().expect("a valid map");
    let mem_map: &'static mut [Page] = Vec::leak((0..len).map(|_| Page::zeroed()).collect());
    // The only test in this binary: no other thread allocates while counting.
    COUNTING.store(true, Relaxed);
    let report = boot(mem_map);
    COUNTING.store(false, Relaxed);
    report.expect("the example kernel boots");
    let bytes = BYTES.load(Relaxed);
    let mem_map_bytes = len * size_of::<Page>();
    assert!(bytes < BOOT_HEAP_BYTES, "{bytes} bytes of heap");
    assert!(
        bytes < mem_map_bytes,
        "{bytes} bytes: less than the mem_map's {mem_map_bytes}"
    );
}
