//! The example kernel's entry point. Built for x86_64-unknown-none it is a `no_std`,
//! `no_main` ELF: `_start` runs [`mmkit_example_kernel::boot`] on a heap carved from its
//! own `.bss` and halts (no bootloader is included; `.ci/run` checks that it links). Built
//! for the host it runs the same `boot` and prints what it did:
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
    //! heap for mmkit-core's `alloc` (the mem_map, zones and pagesets), a panic handler
    //! and the entry point.

    use core::alloc::{GlobalAlloc, Layout};
    use core::cell::UnsafeCell;
    use core::sync::atomic::{AtomicUsize, Ordering::Relaxed};

    /// The boot heap: the mem_map of a 128 MiB node and a 64 MiB node at 16 bytes a page
    /// is 768 KiB (spanned pages, holes included); zones, pagesets and zonelists fit in
    /// the rest.
    const HEAP_BYTES: usize = 4 << 20;

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

    /// The entry point the linker looks for. A bootloader would pass the memory map and
    /// the CPUs; this kernel has them as constants.
    #[no_mangle]
    pub extern "C" fn _start() -> ! {
        // Nowhere to print on bare metal without a console driver: a debugger reads the
        // result, and either way the kernel halts.
        let _report = mmkit_example_kernel::boot();
        halt()
    }
}

#[cfg(not(target_os = "none"))]
fn main() -> std::process::ExitCode {
    match mmkit_example_kernel::boot() {
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
