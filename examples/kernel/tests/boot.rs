//! The example kernel's `boot` on the host: the code `_start` runs on bare metal.

use mmkit_core::page::Page;
use mmkit_core::page_alloc::ZoneType;
use mmkit_core::{Pfn, Topology};
use mmkit_example_kernel::{
    boot, mem_map_pages, mem_map_range, topology, usable, BootError, ZoneSizes, CPU_NODES,
};

/// `len` zeroed descriptors for the rest of the test: the host's stand-in for the carved
/// range.
fn mem_map(len: usize) -> &'static mut [Page] {
    Vec::leak((0..len).map(|_| Page::zeroed()).collect())
}

/// Zones as Linux would size them from the map: DMA spans pfns 1..4096 with the VGA hole
/// (pages 159..256) absent and the first MiB reserved; DMA32 spans to the node's end at
/// 128 MiB with the 48..64 MiB hole absent and the kernel image (512 pages) reserved;
/// node 1 is one hole-free Normal zone at 4 GiB. The mem_map (49151 descriptors of 16
/// bytes: 192 pages) is carved off the top of DMA32 and reserved there.
#[test]
fn boot_sizes_zones_as_linux_and_frees_every_frame_it_took() {
    let report = boot(mem_map(mem_map_pages().unwrap())).expect("the example kernel boots");
    let zone = |node, zone_type, start_pfn, spanned, present, managed| ZoneSizes {
        node,
        zone_type,
        start_pfn,
        spanned,
        present,
        managed,
    };
    assert_eq!(
        report.zones,
        [
            zone(0, ZoneType::Dma, 1, 4095, 158 + 3840, 3840),
            zone(
                0,
                ZoneType::Dma32,
                0x1000,
                0x7000,
                0x6000,
                0x6000 - 512 - 192
            ),
            zone(1, ZoneType::Normal, 0x10_0000, 0x4000, 0x4000, 0x4000),
        ]
    );
    assert_eq!((report.frames_4k, report.frames_2m), (4 * 64, 4 * 2));
    assert_eq!(report.pages_held, 4 * 64 + 4 * 2 * 512 + 16);
    assert_eq!(report.pages_left, 0);
}

#[test]
fn the_mem_map_is_carved_off_the_top_of_node_0_and_sized_by_the_topology() {
    let range = mem_map_range().unwrap();
    assert_eq!((range.start.0, range.end.0), (0x8000 - 192, 0x8000));
    assert_eq!(mem_map_pages().unwrap(), 4095 + 0x7000 + 0x4000);
    assert_eq!(
        topology().unwrap().mem_map_bytes(),
        16 * (4095 + 0x7000 + 0x4000)
    );
    assert!(!usable(range.start, 1), "the mem_map is reserved");
    assert!(usable(Pfn(range.start.0 - 1), 1));
}

#[test]
fn boot_refuses_a_mem_map_one_descriptor_short() {
    let short = mem_map(mem_map_pages().unwrap() - 1);
    let error = boot(short).expect_err("too small");
    assert!(matches!(error, BootError::Init(_)), "{error:?}");
    assert!(error.to_string().contains("mem_map"), "{error}");
}

#[test]
fn cpus_keep_firmwares_numbering() {
    let machine: Topology = topology().unwrap();
    let nodes: Vec<_> = (0..4).map(|cpu| machine.cpu_node(cpu)).collect();
    assert_eq!(nodes, CPU_NODES.map(Some));
    assert_eq!((machine.node_cpus(0), machine.node_cpus(1)), (2, 2));
}

#[test]
fn the_map_check_refuses_holes_and_reserved_pages() {
    assert!(!usable(Pfn(0xa0), 1), "the VGA hole");
    assert!(!usable(Pfn(0x10), 1), "the first MiB");
    assert!(!usable(Pfn(0x1000), 1), "the kernel image at 16 MiB");
    assert!(!usable(Pfn(0x2fff), 2), "runs into the 48 MiB hole");
    assert!(usable(Pfn(0x1200), 1));
}
