//! Mapped memory on real pages and real files: data written, paged out to the swap file
//! or the file on disk, and read back, is what was written; a cgroup limit swaps the
//! group's own pages; every count checks out after each step.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use mmkit_core::mm::memcg::MemcgId;
use mmkit_core::policy::{MmPolicy, PageoutSplit};
use mmkit_core::Order;
use mmkit_runtime::{MappedMemory, PagePool};

fn dir(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("mmkit-mapped-{name}-{}", std::process::id()))
}

fn mapped(name: &str, policy: MmPolicy) -> MappedMemory {
    let pool = PagePool::builder()
        .memory_bytes(16 << 20)
        .cpus(1)
        .build()
        .unwrap();
    MappedMemory::new(pool, &dir(name), 1024, policy).unwrap()
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

#[test]
fn anonymous_data_survives_swap_out_and_in() {
    let policy = MmPolicy {
        pageout: PageoutSplit::KeepCovered,
        ..MmPolicy::V6_7
    };
    let m = mapped("anon", policy);
    let mm = m.create_mm();
    m.mmap_anon(mm, 0x100, 32, Order::new(2).unwrap()).unwrap();
    let data = pattern(7, 32 * 4096 - 100);
    m.write(mm, 0x100 * 4096 + 50, &data).unwrap();
    m.verify().unwrap();
    let outcome = m.madvise_pageout(mm, 0x100, 32).unwrap();
    assert_eq!(outcome.reclaimed, 32);
    assert_eq!(m.stats().swap_out, 32);
    m.verify().unwrap();
    let mut back = vec![0; data.len()];
    m.read(mm, 0x100 * 4096 + 50, &mut back).unwrap();
    assert!(back == data, "swapped data came back changed");
    assert_eq!(m.stats().swap_in, 32);
    m.verify().unwrap();
}

#[test]
fn a_forked_child_reads_the_parents_bytes_and_keeps_its_writes_to_itself() {
    let m = mapped("fork", MmPolicy::V6_7);
    let parent = m.create_mm();
    m.mmap_anon(parent, 0x100, 16, Order::new(2).unwrap())
        .unwrap();
    let data = pattern(5, 16 * 4096);
    m.write(parent, 0x100 * 4096, &data).unwrap();
    let child = m.fork(parent).unwrap();
    let mut back = vec![0; data.len()];
    m.read(child, 0x100 * 4096, &mut back).unwrap();
    assert!(back == data, "the child sees the parent's bytes");
    // Copy-on-write: the child's write goes to a copy of the page, byte for byte.
    let update = pattern(11, 100);
    m.write(child, 0x103 * 4096 + 8, &update).unwrap();
    m.verify().unwrap();
    assert_eq!(m.stats().wp_copies, 1);
    m.read(parent, 0x100 * 4096, &mut back).unwrap();
    assert!(back == data, "the parent's page is unchanged");
    let mut page = vec![0; 4096];
    m.read(child, 0x103 * 4096, &mut page).unwrap();
    assert!(
        page[..8] == data[3 * 4096..3 * 4096 + 8],
        "copied, not zeroed"
    );
    assert!(page[8..108] == update[..]);
    m.exit_mm(child).unwrap();
    m.verify().unwrap();
}

#[test]
fn file_pages_are_read_from_and_written_back_to_the_file_on_disk() {
    let m = mapped("file", MmPolicy::V6_7);
    let contents = pattern(3, 5 * 4096);
    let file = m.create_file(8, Order::new(2).unwrap(), &contents).unwrap();
    let mm = m.create_mm();
    m.mmap_file(mm, 0x200, 8, file, 0).unwrap();
    let mut back = vec![0; contents.len()];
    m.read(mm, 0x200 * 4096, &mut back).unwrap();
    assert!(back == contents);
    let update = pattern(9, 4096);
    m.write(mm, 0x201 * 4096, &update).unwrap();
    let outcome = m.madvise_pageout(mm, 0x200, 8).unwrap();
    assert!(outcome.reclaimed > 0);
    assert!(m.stats().file_writes > 0);
    let on_disk = std::fs::read(dir("file").join("file-0")).unwrap();
    assert!(
        on_disk[4096..8192] == update[..],
        "written back to the real file"
    );
    m.read(mm, 0x201 * 4096, &mut back[..4096]).unwrap();
    assert!(back[..4096] == update[..]);
    m.verify().unwrap();
    // The directory it made goes with its files: nothing is left behind.
    drop(m);
    assert!(!dir("file").exists(), "the scratch directory is removed");
}

/// A directory that was there before stays, with what else it holds.
#[test]
fn a_directory_that_existed_stays_after_drop() {
    let path = dir("kept");
    std::fs::create_dir_all(&path).unwrap();
    std::fs::write(path.join("other"), b"not ours").unwrap();
    let m = mapped("kept", MmPolicy::V6_7);
    m.verify().unwrap();
    drop(m);
    assert!(!path.join("swap").exists(), "its swap file is removed");
    assert_eq!(std::fs::read(path.join("other")).unwrap(), b"not ours");
    std::fs::remove_dir_all(&path).unwrap();
}

#[test]
fn a_cgroup_limit_swaps_its_own_pages_and_keeps_their_data() {
    let m = mapped("memcg", MmPolicy::V6_7);
    let mm = m.create_mm();
    // SAFETY: creates a cgroup and moves an empty mm into it; no page changes owner.
    let group = unsafe {
        m.with_memory(|memory| {
            let group = memory.create_memcg(MemcgId::ROOT)?;
            memory.set_mm_memcg(mm, group)?;
            Ok::<_, mmkit_core::mm::MmError>(group)
        })
    }
    .unwrap();
    m.set_memory_max(group, 64).unwrap();
    m.mmap_anon(mm, 0x1000, 256, Order::ZERO).unwrap();
    let data = pattern(11, 256 * 4096);
    m.write(mm, 0x1000 * 4096, &data).unwrap();
    // SAFETY: reads a counter.
    let usage = unsafe { m.with_memory(|memory| memory.memcgs().get(group).unwrap().usage) };
    assert!(usage <= 64, "usage {usage} over memory.max");
    assert!(m.stats().swap_out >= 256 - 64);
    let mut back = vec![0; data.len()];
    m.read(mm, 0x1000 * 4096, &mut back).unwrap();
    assert!(back == data);
    m.verify().unwrap();
}

#[test]
fn kswapd_reclaims_mapped_memory_in_the_background() {
    let builder = PagePool::builder().memory_bytes(8 << 20).cpus(1);
    let m = MappedMemory::with_kswapd(builder, &dir("kswapd"), 4096, MmPolicy::V6_7).unwrap();
    let mm = m.create_mm();
    // More anonymous memory than the pool has: faults must reclaim (directly or through
    // kswapd) and every byte must come back.
    let pages = 3000;
    m.mmap_anon(mm, 0x1000, pages, Order::ZERO).unwrap();
    let data = pattern(5, (pages * 4096) as usize);
    m.write(mm, 0x1000 * 4096, &data).unwrap();
    assert!(m.stats().swap_out > 0);
    // Waking kswapd is the faulting thread's own act; that the woken thread has run by
    // now is up to the scheduler (direct reclaim may have done all the work first), so
    // the test waits for its run instead of expecting it.
    assert!(
        m.pool().stats().kswapd_wakeups > 0,
        "allocations below the low watermark woke kswapd"
    );
    common::wait_until(
        "kswapd never ran",
        || m.pool().stats().kswapd_runs > 0,
        || std::thread::sleep(Duration::from_millis(10)),
    );
    let mut back = vec![0; data.len()];
    m.read(mm, 0x1000 * 4096, &mut back).unwrap();
    assert!(back == data);
    m.verify().unwrap();
}

/// A fault, a pageout or an unmap makes many calls into the core as the CPU it started
/// on; CPU hotplug waits for it (`cpus_read_lock`), so none of them is refused halfway
/// and every operation succeeds while another thread takes the CPU down and up.
#[test]
fn operations_finish_while_their_cpu_goes_offline_and_back() {
    let pool = PagePool::builder()
        .memory_bytes(16 << 20)
        .cpus(2)
        .background(false)
        .build()
        .unwrap();
    let m = MappedMemory::new(pool, &dir("hotplug"), 1024, MmPolicy::V6_7).unwrap();
    common::toggle_cpu1_while(m.pool(), || {
        let mm = m.create_mm();
        for round in 0..40u8 {
            let start = 0x100 + u64::from(round) * 64;
            m.mmap_anon(mm, start, 64, Order::new(2).unwrap()).unwrap();
            let data = pattern(round, 64 * 4096);
            m.write(mm, start * 4096, &data).unwrap();
            m.madvise_pageout(mm, start, 32).unwrap();
            let mut back = vec![0; data.len()];
            m.read(mm, start * 4096, &mut back).unwrap();
            assert!(back == data, "round {round}: data came back changed");
            m.munmap(mm, start).unwrap();
        }
    });
    m.verify().unwrap();
}
