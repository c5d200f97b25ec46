//! Set-up shared by the core's integration tests: a one-zone machine and page data as
//! tokens for the mapping layer's tests, and for the embedding tests a memory map with
//! holes over two nodes, as a kernel's firmware reports one, with mem_map storage outside
//! the allocator's heap.
#![allow(
    dead_code,
    reason = "each test binary uses a different part of this module"
)]

use std::collections::HashMap;
use std::sync::Arc;

use mmkit_core::mm::{FileId, PageIo, SwapEntry};
use mmkit_core::page::Page;
use mmkit_core::page_alloc::NodeId;
use mmkit_core::topology::ZoneSpec;
use mmkit_core::topology::{CacheInfo, MemoryRange, PfnRange, ZoneLimits};
use mmkit_core::{PageAllocator, Pfn, Policy, Settings, Topology, ZoneType};

/// A one-node machine of two CPUs with one Normal zone of `zone_pages` pages.
pub fn allocator(zone_pages: u64) -> Arc<PageAllocator> {
    allocator_cpus(zone_pages, 2)
}

/// A one-node machine of `cpus` CPUs, which share one LLC, with one Normal zone of
/// `zone_pages` pages.
pub fn allocator_cpus(zone_pages: u64, cpus: u32) -> Arc<PageAllocator> {
    let spec = ZoneSpec {
        node: 0,
        zone_type: ZoneType::Normal,
        start_pfn: Pfn(0x10000),
        spanned: zone_pages,
        present: zone_pages,
        managed: zone_pages,
    };
    let llc = CacheInfo {
        llc_bytes: 8 << 20,
        llc_shared_cpus: cpus,
    };
    let topology = Topology::new(vec![spec], vec![cpus], llc, false).expect("valid topology");
    Arc::new(PageAllocator::new(topology, Settings::default(), Policy::V6_7).expect("valid"))
}

/// Page contents as tokens: what the runtime would copy, checked by the model.
#[derive(Default)]
pub struct TokenIo {
    /// The token each frame holds.
    pub frames: HashMap<Pfn, u64>,
    /// The token each swap slot holds.
    pub swap: HashMap<SwapEntry, u64>,
    /// The token each file page holds on disk.
    pub files: HashMap<(FileId, u64), u64>,
}

impl PageIo for TokenIo {
    fn read_file(&mut self, file: FileId, index: u64, pfn: Pfn, pages: u64) {
        for i in 0..pages {
            let token = self.files.get(&(file, index + i)).copied().unwrap_or(0);
            self.frames.insert(pfn.add(i), token);
        }
    }
    fn write_file(&mut self, file: FileId, index: u64, pfn: Pfn, pages: u64) {
        for i in 0..pages {
            let token = self.frames[&pfn.add(i)];
            self.files.insert((file, index + i), token);
        }
    }
    fn write_swap(&mut self, entry: SwapEntry, pfn: Pfn) {
        self.swap.insert(entry, self.frames[&pfn]);
    }
    fn read_swap(&mut self, entry: SwapEntry, pfn: Pfn) {
        self.frames.insert(pfn, self.swap[&entry]);
    }
    fn zero(&mut self, pfn: Pfn, pages: u64) {
        for i in 0..pages {
            self.frames.insert(pfn.add(i), 0);
        }
    }
    fn copy(&mut self, from: Pfn, to: Pfn) {
        let token = self.frames[&from];
        self.frames.insert(to, token);
    }
}

/// Usable RAM (first byte, one past the last, node): node 0 has 47 MiB from 1 MiB and
/// 32 MiB from 64 MiB (a 16 MiB hole between them), node 1 has 16 MiB at 4 GiB.
pub const USABLE: [(u64, u64, NodeId); 3] = [
    (0x10_0000, 0x300_0000, 0),
    (0x400_0000, 0x600_0000, 0),
    (0x1_0000_0000, 0x1_0100_0000, 1),
];

/// `cpu_to_node` in firmware's numbering: alternately on each node.
pub const CPU_NODES: [NodeId; 4] = [0, 1, 0, 1];

/// The machine of [`USABLE`] and [`CPU_NODES`], with `reserved` pfn ranges.
pub fn topology(reserved: &[PfnRange]) -> Topology {
    let usable: Vec<MemoryRange> = USABLE
        .iter()
        .map(|&(start, end, node)| MemoryRange::from_bytes(start, end, node))
        .collect();
    let llc = CacheInfo {
        llc_bytes: 8 << 20,
        llc_shared_cpus: 2,
    };
    Topology::from_memory_map(&usable, reserved, ZoneLimits::X86_64, &CPU_NODES, llc)
        .expect("a valid memory map")
}

/// `len` descriptors that live as long as the program, in whatever state `fill` leaves
/// them: what a kernel gets by casting the address of a memory range it carved out.
pub fn leaked_mem_map(len: usize, fill: fn() -> Page) -> &'static mut [Page] {
    Vec::leak((0..len).map(|_| fill()).collect())
}
