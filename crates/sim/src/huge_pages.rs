//! Transparent huge pages under the part of each zone's mem_map that a run reaches.
//!
//! A simulated node spans tens of millions of pages (a 128-GiB node: 512 MiB of
//! descriptors), and a long run touches the descriptors of the part of it that its
//! allocations have reached, at random: a drain's buddies, a refill's walk down a buddy
//! list, a pop's next block. With 4-KiB pages nearly each of those touches misses the TLB
//! and waits for a page walk, which in a virtual machine walks two page tables. Huge
//! pages for the whole array cost more than they save: the buddy set-up writes a block
//! head every 16 KiB of it, so every 2-MiB page would be faulted in and zeroed (1.2–1.4 s
//! of system time on the 2-vCPU VM of `docs/EXPERIMENTS.md`, "Speed", against 9–10 s of
//! user time for the one-socket kbuild run, which touches only its first 32–64 MiB).
//!
//! So the engine asks the kernel to back with huge pages only what the run has reached,
//! as it grows: the cache model's stamps cover every page a run has touched or freed
//! ([`CacheModel::reach`](crate::cache::CacheModel::reach)), and at each sample the
//! descriptors of the pages they newly cover are collapsed (`MADV_COLLAPSE`, Linux 6.1:
//! the 4-KiB pages of each whole 2-MiB stretch are copied into one huge page, contents
//! unchanged). The stamps themselves, which every touch and free reads or writes at the
//! same random offsets, are reserved for the zone's whole span up front (virtual memory
//! that nothing writes until the run reaches it) and asked for in huge pages before
//! their first write (`MADV_HUGEPAGE`): each 2-MiB stretch is faulted in once, as a huge
//! page, and their growth copies nothing.
//!
//! A hint: nothing the run computes changes, and where the kernel cannot (an older
//! kernel, `transparent_hugepage` set to `never`, no huge page free, another operating
//! system) nothing happens.
//!
//! Linux has no counterpart; the simulator's own memory.

/// The huge page size the collapse works in: x86-64's and arm64's (with 4-KiB pages)
/// PMD size. On a kernel with another, the hint covers fewer pages or none.
const HUGE_PAGE: usize = 2 << 20;

/// The whole huge pages of the bytes `[lo, hi)` not asked for before: those that start
/// at or past `done` (the end of the last range asked for, or 0), as `(start, end)`.
/// A huge page that straddles `lo` or `hi` is left out: its other part is not ours to
/// ask for (below `lo`), or not reached yet (past `hi`, asked for with a later range).
fn huge_range(lo: usize, hi: usize, done: usize) -> Option<(usize, usize)> {
    let start = lo.next_multiple_of(HUGE_PAGE).max(done);
    let end = hi - hi % HUGE_PAGE;
    (end > start).then_some((start, end))
}

/// Ask for huge pages under the bytes `[lo, hi)` of a live allocation, but for what was
/// asked for before (up to `*done`, which moves to the end of this request): its
/// written 4-KiB pages are collapsed into huge ones.
pub(crate) fn collapse(lo: usize, hi: usize, done: &mut usize) {
    let Some((start, end)) = huge_range(lo, hi, *done) else {
        return;
    };
    *done = end;
    advise(start, end - start, Advice::Collapse);
}

/// Ask for huge pages under the bytes `[lo, hi)` of a live allocation that nothing has
/// written yet: each is faulted in as a huge page when first written, with no 4-KiB pages
/// to copy.
pub(crate) fn before_first_write(lo: usize, hi: usize) {
    if let Some((start, end)) = huge_range(lo, hi, 0) {
        advise(start, end - start, Advice::Huge);
    }
}

/// What to ask `madvise` for.
#[derive(Clone, Copy)]
enum Advice {
    /// `MADV_COLLAPSE` (Linux 6.1): copy the range's pages into huge pages now.
    Collapse,
    /// `MADV_HUGEPAGE`: fault the range in as huge pages from now on.
    Huge,
}

#[cfg(target_os = "linux")]
#[expect(
    unsafe_code,
    reason = "`madvise` is a foreign function; both advices keep the memory's contents"
)]
fn advise(start: usize, len: usize, advice: Advice) {
    /// `MADV_COLLAPSE` (`include/uapi/asm-generic/mman-common.h`; the `libc` crate
    /// names it for glibc targets only).
    const MADV_COLLAPSE: libc::c_int = 25;
    let advice = match advice {
        Advice::Collapse => MADV_COLLAPSE,
        Advice::Huge => libc::MADV_HUGEPAGE,
    };
    // SAFETY: `[start, start + len)` lies inside one live heap allocation of this
    // process (the callers derive both ends from that allocation: references to its
    // first and last descriptors, or a vector's pointer and capacity), and both advices
    // change only which physical pages back it, never what it holds (madvise(2)). A
    // refusal (EINVAL before Linux 6.1 or with THP compiled out, EAGAIN or ENOMEM without
    // a free huge page) leaves the memory as it was; it is only a hint, so it is ignored.
    let _ = unsafe { libc::madvise(start as *mut libc::c_void, len, advice) };
}

#[cfg(not(target_os = "linux"))]
fn advise(_start: usize, _len: usize, _advice: Advice) {}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    #[test]
    fn only_whole_huge_pages_inside_the_range_are_asked_for() {
        // An array at 1 MiB (not huge-page aligned) of 8.5 MiB: the pages at 2, 4 and
        // 6 MiB are whole inside it, the one at 8 MiB runs past its end.
        assert_eq!(
            huge_range(MIB, 9 * MIB + MIB / 2, 0),
            Some((2 * MIB, 8 * MIB))
        );
        // Ending on a huge page's end takes that page too.
        assert_eq!(huge_range(MIB, 10 * MIB, 0), Some((2 * MIB, 10 * MIB)));
        // Less than a whole huge page: nothing.
        assert_eq!(huge_range(MIB, 3 * MIB + 1, 0), None);
        assert_eq!(huge_range(2 * MIB, 2 * MIB, 0), None);
    }

    #[test]
    fn a_growing_reach_asks_for_each_huge_page_once() {
        let lo = MIB;
        let mut done = 0;
        let mut asked = Vec::new();
        for hi in [2 * MIB, 5 * MIB, 5 * MIB, 6 * MIB + 1, 11 * MIB] {
            if let Some((start, end)) = huge_range(lo, hi, done) {
                done = end;
                asked.push((start, end));
            }
        }
        // The page at 4 MiB waits for the reach to pass 6 MiB; none is asked twice.
        assert_eq!(
            asked,
            [(2 * MIB, 4 * MIB), (4 * MIB, 6 * MIB), (6 * MIB, 10 * MIB)]
        );
    }

    #[test]
    fn collapsing_a_live_array_keeps_its_contents() {
        // A hint whether or not the kernel grants it: the array reads back unchanged.
        let values: Vec<u64> = (0..(8 * MIB / 8) as u64).map(|i| i * 7 + 1).collect();
        let lo = values.as_ptr() as usize;
        let mut done = 0;
        collapse(lo, lo + values.len() * 8, &mut done);
        assert!(done == 0 || done > lo, "asked for {done:#x} after {lo:#x}");
        assert!(values
            .iter()
            .enumerate()
            .all(|(i, &v)| v == i as u64 * 7 + 1));
    }
}
