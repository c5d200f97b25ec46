//! Set-up shared by the core's integration tests of the mapping layer: a one-zone machine
//! and page data as tokens.

use std::collections::HashMap;
use std::sync::Arc;

use mmkit_core::mm::{FileId, PageIo, SwapEntry};
use mmkit_core::topology::CacheInfo;
use mmkit_core::{PageAllocator, Pfn, Policy, Settings, Topology, ZoneSpec, ZoneType};

/// A one-node machine of two CPUs with one Normal zone of `zone_pages` pages.
pub fn allocator(zone_pages: u64) -> Arc<PageAllocator> {
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
        llc_shared_cpus: 2,
    };
    let topology = Topology::new(vec![spec], vec![2], llc, false).expect("valid topology");
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
