//! The example kernel's entry point. Built for x86_64-unknown-none it is a `no_std`,
//! `no_main` ELF: `_start` makes the mem_map's storage from the physical range the
//! library carved for it, runs [`mmkit_example_kernel::boot`] on a heap carved from its
//! own `.bss` and halts (no bootloader is included; `.ci/run` checks that it links). Built
//! for the host it runs the same `boot`, with leaked memory standing in for the carved
//! range, and prints what it did:
//!
//! ```sh
//! cargo run -p mmkit-example-kernel
//! cargo build -p mmkit-example-kernel --target x86_64-unknown-none
//! ```

#![cfg_attr(target_os = "none", no_std)]
#![cfg_attr(target_os = "none", no_main)]

#[cfg(target_os = "none")]
mod bare_metal {
    //! What a hosted program gets from its C library and the kernel gets from itself: a
    //! heap for mmkit-core's `alloc` (zones, pagesets, zonelists; the mem_map is not on
    //! it), a panic handler and the entry point.

    use core::alloc::{GlobalAlloc, Layout};
    use core::cell::UnsafeCell;
    use core::sync::atomic::{AtomicUsize, Ordering::Relaxed};

    /// The boot heap ([`mmkit_example_kernel::BOOT_HEAP_BYTES`]: the mem_map is not on
    /// it).
    const HEAP_BYTES: usize = mmkit_example_kernel::BOOT_HEAP_BYTES;

    #[repr(C, align(4096))]
    struct Heap(UnsafeCell<[u8; HEAP_BYTES]>);

    // SAFETY: `Bump` hands out disjoint ranges of the array, each once, and nothing else
    // reads or writes it; two CPUs never receive the same byte.
    unsafe impl Sync for Heap {}

    static HEAP: Heap = Heap(UnsafeCell::new([0; HEAP_BYTES]));

    /// Offset of the first byte of `HEAP` not handed out yet.
    static NEXT: AtomicUsize = AtomicUsize::new(0);

    /// A bump allocator: boot-time structures live until the machine stops, so frees are
    /// not reused.
    struct Bump;

    // SAFETY: `alloc` returns a range of `HEAP` of `layout.size()` bytes aligned to
    // `layout.align()` that no earlier call returned (the compare-and-swap moves `NEXT`
    // past it before the pointer is returned), or null when the heap is exhausted.
    unsafe impl GlobalAlloc for Bump {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            let base = HEAP.0.get().cast::<u8>();
            let mut next = NEXT.load(Relaxed);
            loop {
                let address = (base as usize + next).next_multiple_of(layout.align());
                let start = address - base as usize;
                let Some(end) = start.checked_add(layout.size()) else {
                    return core::ptr::null_mut();
                };
                if end > HEAP_BYTES {
                    return core::ptr::null_mut();
                }
                match NEXT.compare_exchange_weak(next, end, Relaxed, Relaxed) {
                    Ok(_) => return base.wrapping_add(start),
                    Err(now) => next = now,
                }
            }
        }

        unsafe fn dealloc(&self, _ptr: *mut u8, _layout: Layout) {}
    }

    #[global_allocator]
    static ALLOCATOR: Bump = Bump;

    #[panic_handler]
    fn panic(_info: &core::panic::PanicInfo<'_>) -> ! {
        halt()
    }

    fn halt() -> ! {
        loop {
            core::hint::spin_loop();
        }
    }

    /// Where physical memory is mapped in the kernel's address space. A bootloader would
    /// say (the `bootloader` crate's `physical_memory_offset`); this kernel has none and
    /// assumes an identity mapping.
    const PHYSICAL_MEMORY_OFFSET: u64 = 0;

    /// The mem_map's storage: the range `mem_map_range` carved out of usable memory and
    /// reserved, zeroed and seen as descriptors.
    fn mem_map() -> Option<&'static mut [mmkit_core::page::Page]> {
        use mmkit_core::page::{Page, PAGE_SHIFT};
        let range = mmkit_example_kernel::mem_map_range().ok()?;
        let len = mmkit_example_kernel::mem_map_pages().ok()?;
        if (len * size_of::<Page>()) as u64 > range.pages() << PAGE_SHIFT {
            return None;
        }
        let start = (PHYSICAL_MEMORY_OFFSET + (range.start.0 << PAGE_SHIFT)) as *mut Page;
        // SAFETY: `range` is usable RAM in the firmware's map, mapped at
        // `PHYSICAL_MEMORY_OFFSET`, aligned to a page (more than `Page`'s 4 bytes), at
        // least `len` descriptors long (checked above), and reserved in the topology
        // `boot` builds, so nothing else in this kernel reads or writes it: the slice is
        // its only reference for the rest of the kernel's life. All-zero bytes are a
        // valid `Page` (`Page::zeroed`), so after `write_bytes` every element is one.
        unsafe {
            core::ptr::write_bytes(start, 0, len);
            Some(core::slice::from_raw_parts_mut(start, len))
        }
    }

    /// The entry point the linker looks for. A bootloader would pass the memory map and
    /// the CPUs; this kernel has them as constants.
    #[no_mangle]
    pub extern "C" fn _start() -> ! {
        // Nowhere to print on bare metal without a console driver: a debugger reads the
        // result, and either way the kernel halts.
        if let Some(mem_map) = mem_map() {
            let _report = mmkit_example_kernel::boot(mem_map);
        }
        halt()
    }
}

#[cfg(not(target_os = "none"))]
fn main() -> std::process::ExitCode {
    // The host has no physical memory to carve: leaked zeroed descriptors stand in for
    // the range `mem_map_range` reserves.
    let len = match mmkit_example_kernel::mem_map_pages() {
        Ok(len) => len,
        Err(error) => {
            eprintln!("mmkit-example-kernel: memory map: {error}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let mem_map = Vec::leak((0..len).map(|_| mmkit_core::page::Page::zeroed()).collect());
    match mmkit_example_kernel::boot(mem_map) {
        Ok(report) => {
            for zone in &report.zones {
                println!(
                    "node {} {:6} start_pfn {:#8x} spanned {:6} present {:6} managed {:6}",
                    zone.node,
                    zone.zone_type.to_string(),
                    zone.start_pfn,
                    zone.spanned,
                    zone.present,
                    zone.managed
                );
            }
            println!(
                "{} 4 KiB and {} 2 MiB frames through x86_64::FrameAllocator, none in a hole \
                 or reserved; verify(): {} pages held, {} left after FrameDeallocator",
                report.frames_4k, report.frames_2m, report.pages_held, report.pages_left
            );
            std::process::ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("mmkit-example-kernel: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}
