//! The simulated machine's page descriptors, in memory the simulator maps itself.
//!
//! The core's own mem_map ([`PageAllocator::new`]) is one large zeroed heap allocation,
//! which glibc serves from a fresh `mmap` with its 16-byte chunk header in front: the
//! descriptors start 16 bytes past a page boundary, so of every four consecutive
//! descriptors one pair straddles two cache lines. A pageset drain reads each block's
//! buddy and the buddy of the block one order up (for order 0, the descriptors at `pfn ^
//! 1` and `pfn ^ 2`: one line when the array starts on a line, two for half of the
//! blocks when it does not), and a refill or a pop reads a block's links.
//!
//! So on Linux the simulator maps the descriptors itself, anonymous memory on a
//! huge-page boundary (zeroed by the kernel and faulted in only where written), and
//! hands them to the core as storage known to be zero
//! ([`PageAllocator::with_zeroed_mem_map`]): every aligned group of four descriptors
//! lies in one cache line, and the huge pages the engine asks for under the reached
//! descriptors (the `huge_pages` module) start at the first one. For the one-socket
//! kbuild run: 7.4 % fewer L1 data misses (callgrind's cache simulation, `--scale 0.3`)
//! and 3.3 % less time (ten alternated pairs, docs/EXPERIMENTS.md, "Speed"); what it
//! computes is unchanged. Elsewhere the core's heap allocation is used.
//!
//! Linux has no counterpart (its `struct page` is a cache line to itself); the
//! simulator's own memory.

use mmkit_core::page::Page;
use mmkit_core::{InitError, PageAllocator, Policy, Settings, Topology};

use crate::engine::SimError;

/// The allocator and the mapping its descriptors live in. The allocator holds the only
/// references into the mapping and is declared first, so it is dropped before the
/// mapping is unmapped.
pub(crate) struct MappedAllocator {
    allocator: PageAllocator,
    _storage: Option<Mapping>,
}

impl MappedAllocator {
    /// [`PageAllocator::new`] of `topology`, with the descriptors in a mapping of their
    /// own where the system gives one. On Linux a mapping the kernel refuses is
    /// [`SimError::HostMemory`]: the heap would ask the same kernel for the same bytes,
    /// and a refused heap allocation aborts the process. Settings the core refuses are
    /// [`SimError::Invalid`].
    pub(crate) fn new(
        topology: Topology,
        settings: Settings,
        policy: Policy,
    ) -> Result<MappedAllocator, SimError> {
        let invalid = |e: InitError| SimError::Invalid(e.to_string());
        let pages = topology.mem_map_pages();
        if cfg!(target_os = "linux") {
            let refused = SimError::HostMemory {
                what: "page descriptors",
                bytes: pages.saturating_mul(size_of::<Page>() as u64),
            };
            let pages = usize::try_from(pages).map_err(|_| refused.clone())?;
            let (mapping, storage) = Mapping::zeroed_pages(pages).ok_or(refused)?;
            let allocator = PageAllocator::with_zeroed_mem_map(topology, settings, policy, storage)
                .map_err(invalid)?;
            return Ok(MappedAllocator {
                allocator,
                _storage: Some(mapping),
            });
        }
        Ok(MappedAllocator {
            allocator: PageAllocator::new(topology, settings, policy)
                .map_err(|e| invalid(e.into()))?,
            _storage: None,
        })
    }
}

impl std::ops::Deref for MappedAllocator {
    type Target = PageAllocator;

    fn deref(&self) -> &PageAllocator {
        &self.allocator
    }
}

/// Anonymous memory mapped for descriptors, unmapped when dropped. The address is kept
/// as a number: the mapping is only ever reached through the slice handed out once.
struct Mapping {
    addr: usize,
    len: usize,
}

/// Where the descriptors start: a huge page's boundary (x86-64's and arm64's PMD size
/// with 4-KiB pages), so that the reached part is covered by huge pages from its first
/// descriptor, and so a cache line's.
#[cfg(target_os = "linux")]
const ALIGN: usize = 2 << 20;

impl Mapping {
    /// A zero-filled mapping for `pages` descriptors starting on [`ALIGN`], and the
    /// descriptors; `None` if the system refuses.
    #[cfg(target_os = "linux")]
    #[expect(
        unsafe_code,
        reason = "`mmap` and `munmap` are foreign functions; the slice is made from the \
                  mapping's address"
    )]
    fn zeroed_pages(pages: usize) -> Option<(Mapping, &'static mut [Page])> {
        let len = pages.checked_mul(size_of::<Page>())?.max(1);
        let reserve = len.checked_add(ALIGN)?;
        // SAFETY: a new private anonymous mapping at an address the kernel chooses, so it
        // overlaps nothing of this process. MAP_NORESERVE: most of it is never touched.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                reserve,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return None;
        }
        let raw = raw as usize;
        let addr = raw.next_multiple_of(ALIGN);
        let end = addr + len.next_multiple_of(4096);
        // SAFETY: both ranges are page-aligned parts of the mapping just made, outside
        // `[addr, end)`, and nothing refers to them.
        unsafe {
            if addr > raw {
                libc::munmap(raw as *mut libc::c_void, addr - raw);
            }
            if raw + reserve > end {
                libc::munmap(end as *mut libc::c_void, raw + reserve - end);
            }
        }
        let mapping = Mapping {
            addr,
            len: end - addr,
        };
        // SAFETY: `[addr, addr + pages × 16)` lies in the mapping, readable and writable,
        // zero-filled by the kernel, and aligned far beyond a `Page`'s 4 bytes; all-zero
        // bytes are a valid `Page` (`bytemuck::Zeroable`). The slice is the only
        // reference to that memory. It is not truly `'static`: it is given to the one
        // allocator a `MappedAllocator` holds, which drops it before the `Mapping` (field
        // order), and the allocator lends its descriptors only for as long as it is
        // borrowed itself.
        let storage = unsafe { std::slice::from_raw_parts_mut(addr as *mut Page, pages) };
        Some((mapping, storage))
    }

    /// Elsewhere: the core's heap allocation.
    #[cfg(not(target_os = "linux"))]
    fn zeroed_pages(_pages: usize) -> Option<(Mapping, &'static mut [Page])> {
        None
    }
}

impl Drop for Mapping {
    #[cfg(target_os = "linux")]
    #[expect(unsafe_code, reason = "`munmap` is a foreign function")]
    fn drop(&mut self) {
        // SAFETY: `[addr, addr + len)` is this mapping, and nothing refers to it any more:
        // the allocator whose descriptors it held was dropped first (`MappedAllocator`).
        unsafe {
            libc::munmap(self.addr as *mut libc::c_void, self.len);
        }
    }

    #[cfg(not(target_os = "linux"))]
    fn drop(&mut self) {
        let _ = (self.addr, self.len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MachineSpec;
    use mmkit_core::page_alloc::Caller;
    use mmkit_core::{Gfp, Order};

    /// The mapped allocator is the heap-backed one, block for block, and on Linux its
    /// descriptors start on a cache line.
    #[test]
    fn a_mapped_allocator_builds_and_allocates_as_the_heap_backed_one() {
        let machine = MachineSpec::spr_224().with_cpus(8).with_node_bytes(1 << 30);
        let mapped =
            MappedAllocator::new(machine.topology(), machine.settings(), Policy::V6_7).unwrap();
        let heap =
            PageAllocator::new(machine.topology(), machine.settings(), Policy::V6_7).unwrap();
        for (a, b) in mapped.zones().iter().zip(heap.zones()) {
            assert_eq!(a.free_blocks(), b.free_blocks());
            if let Some((_, first)) = a.mem_map().iter().next() {
                assert_eq!(a.mem_map().in_caller_storage(), cfg!(target_os = "linux"));
                if cfg!(target_os = "linux") {
                    let address = first as *const Page as usize;
                    assert_eq!(address % 64, 0, "on a cache line");
                }
            }
        }
        let mut held = Vec::new();
        for cpu in 0..8 {
            for order in [0, 0, 1, 3, 9, 0] {
                let order = Order::new(order).unwrap();
                let a = mapped.alloc_pages(Caller::task(cpu), Gfp::KERNEL, order);
                let b = heap.alloc_pages(Caller::task(cpu), Gfp::KERNEL, order);
                assert_eq!(a, b);
                held.push((cpu, a.unwrap(), order));
            }
        }
        for (cpu, pfn, order) in held {
            mapped.free_pages(Caller::task(cpu), pfn, order).unwrap();
        }
        mapped.verify().unwrap();
    }
}
