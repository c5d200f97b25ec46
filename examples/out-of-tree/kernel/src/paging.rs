//! Page tables built by the `x86_64` crate's mapper, every frame from mmkit: the core's
//! `x86_64` feature implements that crate's `FrameAllocator` and `FrameDeallocator` on
//! `mmkit_core::Frames`, for 4 KiB and 2 MiB frames.
//!
//! Linux counterpart: the page-table allocators of `arch/x86/mm/pgtable.c`
//! (`pte_alloc_one`, `__pud_alloc`), which take their pages from `alloc_pages`. The address
//! space built here is a fresh one, never loaded into CR3, so the same code runs on the
//! host (the direct map is a buffer) and on bare metal.

use mmkit_core::page_alloc::Caller;
use mmkit_core::sync::RawMutex;
use mmkit_core::Gfp;
use x86_64::structures::paging::mapper::CleanUp;
use x86_64::structures::paging::FrameAllocator;
use x86_64::structures::paging::FrameDeallocator;
use x86_64::structures::paging::Mapper;
use x86_64::structures::paging::OffsetPageTable;
use x86_64::structures::paging::Page;
use x86_64::structures::paging::PageTable;
use x86_64::structures::paging::PageTableFlags;
use x86_64::structures::paging::PhysFrame;
use x86_64::structures::paging::Size2MiB;
use x86_64::structures::paging::Size4KiB;
use x86_64::structures::paging::Translate;
use x86_64::VirtAddr;

use crate::selftest::allocated_pages;
use crate::selftest::check;
use crate::selftest::KernelError;
use crate::Kernel;

/// Where the small pages are mapped: a canonical lower-half address; the 2 MiB page
/// follows 2 MiB further on.
pub const MAP_BASE: u64 = 0x0000_1000_0000_0000;

/// Page-table frames one walk from the level-4 table to a level-1 table takes: the level-4
/// table itself, then one table at each of levels 3, 2 and 1.
pub const TABLES_PER_WALK: u64 = 4;

/// Map `pages` 4 KiB pages (at most 512, one level-1 table) from [`MAP_BASE`] and one
/// 2 MiB page after them in a fresh address space, each to a fresh frame; check each
/// translation; unmap everything, free the data frames and let the mapper free its
/// empty tables (`CleanUp`). Every frame, tables included, comes from the kernel's
/// allocator; afterwards as many pages are allocated as before. Returns the page-table
/// frames the mappings took.
pub fn map_unmap<R: RawMutex>(kernel: &Kernel<R>, pages: u64) -> Result<u64, KernelError> {
    check(pages <= 512, "the small pages fit one level-1 table")?;
    let before = allocated_pages(kernel)?;
    let mut frames = kernel.allocator().frames(Caller::task(0), Gfp::KERNEL);
    let l4_frame: PhysFrame<Size4KiB> = frames
        .allocate_frame()
        .ok_or(KernelError::Map("no frame for the level-4 table"))?;
    let l4_address = kernel.phys_offset() + l4_frame.start_address().as_u64();
    let l4_table = l4_address as *mut PageTable;
    // SAFETY: the frame is the allocator's, just handed to us alone, and reachable through
    // the direct map (`boot`'s contract); it is page aligned, as a `PageTable` must be.
    let l4 = unsafe {
        l4_table.write(PageTable::new());
        &mut *l4_table
    };
    // SAFETY: physical memory is mapped at `phys_offset` (`boot`'s contract), and every
    // table the mapper reaches comes from our allocator, so it is nobody else's.
    let mut mapper = unsafe { OffsetPageTable::new(l4, VirtAddr::new(kernel.phys_offset())) };
    let flags = PageTableFlags::PRESENT | PageTableFlags::WRITABLE;
    let small = |i: u64| Page::<Size4KiB>::containing_address(VirtAddr::new(MAP_BASE + i * 4096));
    for i in 0..pages {
        let frame: PhysFrame<Size4KiB> = frames
            .allocate_frame()
            .ok_or(KernelError::Map("no data frame"))?;
        // SAFETY: an address space of our own that no CPU uses, a page not mapped yet, a
        // frame nobody else owns: the mapping aliases nothing.
        let flush = unsafe { mapper.map_to(small(i), frame, flags, &mut frames) };
        // Nothing to flush: the address space is never loaded into CR3.
        flush
            .map_err(|_| KernelError::Map("map_to of a 4 KiB page"))?
            .ignore();
        let translated = mapper.translate_addr(small(i).start_address());
        check(
            translated == Some(frame.start_address()),
            "a page translates to its frame",
        )?;
    }
    let huge_page = Page::<Size2MiB>::containing_address(VirtAddr::new(MAP_BASE + (2 << 20)));
    let huge: PhysFrame<Size2MiB> = frames
        .allocate_frame()
        .ok_or(KernelError::Map("no 2 MiB frame"))?;
    check(
        huge.start_address().is_aligned(2u64 << 20),
        "a 2 MiB frame is 2 MiB aligned",
    )?;
    // SAFETY: as for the small pages.
    let flush = unsafe { mapper.map_to(huge_page, huge, flags, &mut frames) };
    flush
        .map_err(|_| KernelError::Map("map_to of a 2 MiB page"))?
        .ignore();
    let tables = allocated_pages(kernel)? - before - pages - 512;
    check(tables == TABLES_PER_WALK, "one table per level")?;

    for i in 0..pages {
        let (frame, flush) = mapper
            .unmap(small(i))
            .map_err(|_| KernelError::Map("unmap of a 4 KiB page"))?;
        flush.ignore();
        // SAFETY: the frame was mapped only at the page just unmapped.
        unsafe { frames.deallocate_frame(frame) };
    }
    let (frame, flush) = mapper
        .unmap(huge_page)
        .map_err(|_| KernelError::Map("unmap of a 2 MiB page"))?;
    flush.ignore();
    // SAFETY: as for the small frames.
    unsafe { frames.deallocate_frame(frame) };
    // SAFETY: every table below the level-4 one was made by this mapper for this address
    // space alone, and nothing is mapped through them any more.
    unsafe { mapper.clean_up(&mut frames) };
    // SAFETY: the level-4 table is no longer reachable: the mapper that borrowed it is not
    // used again, and it mapped nothing through the table any more.
    unsafe { frames.deallocate_frame(l4_frame) };
    check(
        allocated_pages(kernel)? == before,
        "every page-table frame went back",
    )?;
    Ok(tables)
}
