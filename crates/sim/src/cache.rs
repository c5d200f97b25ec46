//! The cache model of `docs/reference/workloads.md` §3.3: reuse distance in bytes touched, per CPU and
//! per socket, decides whether a page a CPU touches is still in its L2, in its socket's
//! LLC, or must come from memory.
//!
//! Each CPU and each socket has a monotone counter of pages touched (`B_cpu`, `B_sock`).
//! Touching a page stamps it with the toucher and both counters. A later touch by CPU `c`
//! finds the page L2-hot if `c` made the stamp and touched at most `C_priv` since, LLC-hot
//! if a CPU of the same socket made it and the socket touched at most `C_llc_eff` since,
//! and cold otherwise (Mattson's LRU stack distance against the cache size). Counters are
//! in lines (64 B) so that partial touches count exactly.

use serde::{Deserialize, Serialize};

use crate::cost::CostModel;

/// Lines per 4 KiB page.
pub const LINES_PER_PAGE: u32 = 64;

/// Where a touched page was found.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub enum CacheClass {
    /// In the toucher's private L2.
    L2,
    /// In the socket's LLC, touched last by this CPU.
    Llc,
    /// In the socket's LLC, touched last by another CPU of the socket.
    LlcRemote,
    /// Not cached (or never touched).
    Cold,
}

/// Every [`CacheClass`], in discriminant order.
const CACHE_CLASSES: [CacheClass; 4] = [
    CacheClass::L2,
    CacheClass::Llc,
    CacheClass::LlcRemote,
    CacheClass::Cold,
];

/// A page's last touch, in 16 bytes so that four stamps share a cache line and none
/// straddles two: the socket's counter, and the CPU's counter (low 48 bits) with the CPU
/// (high 16 bits). A CPU touches far fewer than 2^48 lines in a run (a 224-CPU kbuild
/// touches ≈ 1.5 · 10^9 lines in all); [`check_lines_fit`] asserts it before a counter
/// grows, and [`CacheModel::new`] that every CPU number fits.
#[derive(Clone, Copy, Debug)]
#[repr(C, align(16))]
struct Stamp {
    socket_lines: u64,
    cpu_lines_cpu: u64,
}

const CPU_SHIFT: u32 = 48;
const CPU_LINES_MASK: u64 = (1 << CPU_SHIFT) - 1;
const NEVER: u32 = 0xffff;

const _: () = assert!(core::mem::size_of::<Stamp>() == 16);

impl Stamp {
    /// A stamp of `cpu` (a CPU of the model, so below [`NEVER`]) and a CPU line counter
    /// that [`check_lines_fit`] checked.
    fn packed(cpu: u32, cpu_lines: u64, socket_lines: u64) -> Stamp {
        debug_assert!(cpu < NEVER && cpu_lines <= CPU_LINES_MASK);
        Stamp {
            socket_lines,
            cpu_lines_cpu: (cpu as u64) << CPU_SHIFT | cpu_lines,
        }
    }

    fn cpu(&self) -> u32 {
        (self.cpu_lines_cpu >> CPU_SHIFT) as u32
    }

    fn cpu_lines(&self) -> u64 {
        self.cpu_lines_cpu & CPU_LINES_MASK
    }
}

/// Panics unless a CPU line counter up to `cpu_lines` fits a [`Stamp`]. The counters
/// only grow, so checking the largest value a call will stamp covers the call.
fn check_lines_fit(cpu_lines: u64) {
    assert!(
        cpu_lines <= CPU_LINES_MASK,
        "CPU line counter overflows a stamp"
    );
}

impl Default for Stamp {
    fn default() -> Stamp {
        Stamp {
            socket_lines: 0,
            cpu_lines_cpu: (NEVER as u64) << CPU_SHIFT,
        }
    }
}

/// The stamp at `offset` of a zone's `stamps`, growing them to cover it: the growth
/// check folded into the index's own bounds check, so that a page already covered costs
/// one comparison, not two.
#[inline(always)]
fn stamp_mut(stamps: &mut Vec<Stamp>, offset: usize) -> &mut Stamp {
    if offset >= stamps.len() {
        grow(stamps, offset + 1);
    }
    &mut stamps[offset]
}

/// Grow `stamps` to cover offsets below `end`, out of line: it happens a few dozen times
/// in a run. Within the zone's reservation ([`reserve`]) nothing moves: the new stamps are
/// written in place, each 2-MiB stretch faulted in as a huge page on its first write.
#[cold]
#[inline(never)]
fn grow(stamps: &mut Vec<Stamp>, end: usize) {
    let len = end.next_power_of_two().min(stamps.capacity()).max(end);
    stamps.resize(len, Stamp::default());
}

/// Empty stamps for a zone of `pages` pages, with room for all of them reserved: virtual
/// memory that nothing has written, asked for in huge pages before the first write (the
/// `huge_pages` module). A run's stamps are read at random over the part of the zone it
/// has reached; they grow in place ([`grow`]), so no growth copies them.
fn reserve(pages: u64) -> Vec<Stamp> {
    let stamps = Vec::with_capacity(pages as usize);
    let lo = stamps.as_ptr() as usize;
    crate::huge_pages::before_first_write(
        lo,
        lo + stamps.capacity() * core::mem::size_of::<Stamp>(),
    );
    stamps
}

/// Lines touched by class, summed over a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheCounts {
    /// Lines found in L2.
    pub l2_lines: u64,
    /// Lines found in the LLC, last touched by the same CPU.
    pub llc_lines: u64,
    /// Lines found in the LLC, last touched by another CPU of the socket.
    pub llc_remote_lines: u64,
    /// Lines from memory.
    pub cold_lines: u64,
}

impl CacheCounts {
    /// What was counted between `earlier` and `self`.
    pub fn since(&self, earlier: &CacheCounts) -> CacheCounts {
        CacheCounts {
            l2_lines: self.l2_lines - earlier.l2_lines,
            llc_lines: self.llc_lines - earlier.llc_lines,
            llc_remote_lines: self.llc_remote_lines - earlier.llc_remote_lines,
            cold_lines: self.cold_lines - earlier.cold_lines,
        }
    }

    /// The miss rate comparable with Huang 2023's in percent (`docs/reference/workloads.md` §3.3):
    /// `(cold + β · LLC-remote) / (lines + R_bg) × 100`, with R_bg the background
    /// references of `work_ns` of the workload's own work (syscalls, protocol code).
    pub fn miss_rate_pct(&self, cost: &CostModel, work_ns: u64) -> f64 {
        let references =
            self.total() as f64 + cost.background_refs_per_us * work_ns as f64 / 1000.0;
        if references == 0.0 {
            return 0.0;
        }
        (self.cold_lines as f64 + cost.llc_remote_miss_weight * self.llc_remote_lines as f64)
            / references
            * 100.0
    }

    /// All lines touched.
    pub fn total(&self) -> u64 {
        self.l2_lines + self.llc_lines + self.llc_remote_lines + self.cold_lines
    }

    /// Count `pages` pages of `class` touched `lines` lines each; returns their time, each
    /// page's rounded down on its own as if they were charged one by one.
    fn add(&mut self, class: CacheClass, pages: u64, lines: u64, cost: &CostModel) -> u64 {
        let (counter, page_ns) = match class {
            CacheClass::L2 => (&mut self.l2_lines, cost.touch_l2_ns),
            CacheClass::Llc => (&mut self.llc_lines, cost.touch_llc_ns),
            CacheClass::LlcRemote => (&mut self.llc_remote_lines, cost.touch_llc_ns),
            CacheClass::Cold => (&mut self.cold_lines, cost.touch_cold_ns),
        };
        *counter += pages * lines;
        pages * (page_ns * lines / LINES_PER_PAGE as u64)
    }
}

/// The caches' sizes and which socket each CPU is on: what classifying a touch needs
/// besides the stamp and the counters.
#[derive(Debug)]
struct Geometry {
    private_lines: u64,
    llc_lines: u64,
    cpu_socket: Vec<u32>,
}

impl Geometry {
    /// Classify a page `cpu` (on `socket`) is about to touch, `cpu_lines` and
    /// `socket_lines` being the CPU's and its socket's counters now.
    fn classify(
        &self,
        cpu: u32,
        socket: u32,
        cpu_lines: u64,
        socket_lines: u64,
        stamp: &Stamp,
    ) -> CacheClass {
        let stamp_cpu = stamp.cpu();
        if stamp_cpu == NEVER {
            return CacheClass::Cold;
        }
        if stamp_cpu == cpu && cpu_lines - stamp.cpu_lines() <= self.private_lines {
            return CacheClass::L2;
        }
        if self.cpu_socket[stamp_cpu as usize] == socket
            && socket_lines - stamp.socket_lines <= self.llc_lines
        {
            return if stamp_cpu == cpu {
                CacheClass::Llc
            } else {
                CacheClass::LlcRemote
            };
        }
        CacheClass::Cold
    }
}

/// The per-pfn stamps and the counters.
#[derive(Debug)]
pub struct CacheModel {
    geometry: Geometry,
    cpu_touched: Vec<u64>,
    socket_touched: Vec<u64>,
    /// Per zone, indexed by pfn − zone start; grown on demand.
    stamps: Vec<Vec<Stamp>>,
    /// The run's totals.
    pub counts: CacheCounts,
}

impl CacheModel {
    /// A model for CPUs on `cpu_socket` sockets, zones of `zone_pages` pages (the stamps'
    /// reservations), an L2 of `l2_bytes` and `socket_bytes` of cache per socket
    /// ([`MachineSpec::socket_cache_bytes`]) of which page data may use `cost.llc_share`.
    ///
    /// [`MachineSpec::socket_cache_bytes`]: crate::MachineSpec::socket_cache_bytes
    pub fn new(
        cpu_socket: Vec<u32>,
        zone_pages: &[u64],
        l2_bytes: u64,
        socket_bytes: u64,
        cost: &CostModel,
    ) -> CacheModel {
        // Every CPU number fits a stamp: the hot paths check only the line counters.
        assert!(
            cpu_socket.len() <= NEVER as usize,
            "{} CPUs do not fit a stamp",
            cpu_socket.len()
        );
        let sockets = cpu_socket.iter().max().map_or(1, |s| *s as usize + 1);
        CacheModel {
            cpu_touched: vec![0; cpu_socket.len()],
            socket_touched: vec![0; sockets],
            geometry: Geometry {
                private_lines: l2_bytes / 64,
                llc_lines: (socket_bytes as f64 * cost.llc_share) as u64 / 64,
                cpu_socket,
            },
            stamps: zone_pages.iter().map(|&pages| reserve(pages)).collect(),
            counts: CacheCounts::default(),
        }
    }

    /// The offsets from zone `zone`'s start that its stamps cover: every page the run has
    /// touched or freed there is below it (the stamps grow in powers of two, so it may be
    /// up to twice the furthest such page).
    pub fn reach(&self, zone: usize) -> u64 {
        self.stamps[zone].len() as u64
    }

    /// Grow zone `zone`'s stamps to cover offsets below `end`.
    fn cover(&mut self, zone: usize, end: usize) {
        if self.stamps[zone].len() < end {
            grow(&mut self.stamps[zone], end);
        }
    }

    /// `cpu` touches `lines` lines of each of `pages` pages starting at offset `first` of
    /// zone `zone`. Returns the time it takes.
    ///
    /// This runs after every allocation: one page takes a short path that inlines into the
    /// caller; a block keeps the counters in locals, checks a stamp's fit once, and counts
    /// pages by class in a local array, charged after the loop.
    #[inline]
    pub fn touch(
        &mut self,
        cpu: u32,
        zone: usize,
        first: u64,
        pages: u64,
        lines: u32,
        cost: &CostModel,
    ) -> u64 {
        self.touch_as::<true>(cpu, zone, first, pages, lines, cost)
    }

    /// [`Self::touch`] of a block that a CPU of the same socket wrote moments before and
    /// `cpu` now reads (a stream's receiver copying a message out): classified and stamped
    /// as a touch, and its lines age `cpu`'s private cache, but not the socket's LLC. The
    /// LLC holds them already, near the top of its LRU stack (a message's lines and the
    /// few messages in flight since, against thousands of pages of LLC), and re-touching a
    /// line at depth `k` moves only the `k − 1` lines above it: counting the read's lines
    /// again would count each of the stream's lines twice, making its reuse distances
    /// twice what they are.
    #[inline]
    pub fn read(
        &mut self,
        cpu: u32,
        zone: usize,
        first: u64,
        pages: u64,
        lines: u32,
        cost: &CostModel,
    ) -> u64 {
        self.touch_as::<false>(cpu, zone, first, pages, lines, cost)
    }

    /// [`Self::touch`] (`AGES_LLC`) or [`Self::read`]: one page by the short path, more by
    /// the block loop.
    #[inline(always)]
    fn touch_as<const AGES_LLC: bool>(
        &mut self,
        cpu: u32,
        zone: usize,
        first: u64,
        pages: u64,
        lines: u32,
        cost: &CostModel,
    ) -> u64 {
        if pages == 1 {
            return self.touch_page::<AGES_LLC>(cpu, zone, first as usize, lines, cost);
        }
        self.touch_block::<AGES_LLC>(cpu, zone, first, pages, lines, cost)
    }

    /// [`Self::touch`] of one page (order 0: nearly every touch), without the block loop's
    /// set-up, so that it inlines into the caller (always: in the engine's allocation path,
    /// which grew when its own calls were inlined, the compiler made it a call again, ≈ 15
    /// instructions of register saves per touch). The same arithmetic as the loop's body.
    #[inline(always)]
    fn touch_page<const AGES_LLC: bool>(
        &mut self,
        cpu: u32,
        zone: usize,
        offset: usize,
        lines: u32,
        cost: &CostModel,
    ) -> u64 {
        // Each counter is looked up once, read and written through the one reference
        // (through `self`, every access was an index and a bounds check of its own).
        let CacheModel {
            geometry,
            cpu_touched,
            socket_touched,
            stamps,
            counts,
        } = self;
        let socket = geometry.cpu_socket[cpu as usize];
        let lines64 = lines as u64;
        let cpu_lines = &mut cpu_touched[cpu as usize];
        let socket_lines = &mut socket_touched[socket as usize];
        check_lines_fit(*cpu_lines + lines64);
        let stamp = stamp_mut(&mut stamps[zone], offset);
        let class = geometry.classify(cpu, socket, *cpu_lines, *socket_lines, stamp);
        *cpu_lines += lines64;
        if AGES_LLC {
            *socket_lines += lines64;
        }
        *stamp = Stamp::packed(cpu, *cpu_lines, *socket_lines);
        counts.add(class, 1, lines64, cost)
    }

    /// [`Self::touch`] of a block of more than one page.
    #[inline(never)]
    fn touch_block<const AGES_LLC: bool>(
        &mut self,
        cpu: u32,
        zone: usize,
        first: u64,
        pages: u64,
        lines: u32,
        cost: &CostModel,
    ) -> u64 {
        let end = (first + pages) as usize;
        self.cover(zone, end);
        let socket = self.geometry.cpu_socket[cpu as usize];
        let lines64 = lines as u64;
        let mut cpu_lines = self.cpu_touched[cpu as usize];
        let mut socket_lines = self.socket_touched[socket as usize];
        check_lines_fit(cpu_lines + pages * lines64);
        let CacheModel {
            geometry, stamps, ..
        } = self;
        // Pages by class, indexed as `CACHE_CLASSES`: counted in locals, not through a
        // pointer to one of four counters per page.
        let mut class_pages = [0u64; 4];
        for stamp in &mut stamps[zone][first as usize..end] {
            let class = geometry.classify(cpu, socket, cpu_lines, socket_lines, stamp);
            class_pages[class as usize] += 1;
            cpu_lines += lines64;
            if AGES_LLC {
                socket_lines += lines64;
            }
            *stamp = Stamp::packed(cpu, cpu_lines, socket_lines);
        }
        self.cpu_touched[cpu as usize] = cpu_lines;
        self.socket_touched[socket as usize] = socket_lines;
        CACHE_CLASSES
            .iter()
            .zip(class_pages)
            .map(|(&class, pages)| self.counts.add(class, pages, lines64, cost))
            .sum()
    }

    /// `cpu` frees `pages` pages at offset `first` of zone `zone`: stamp them as last
    /// touched now (§3.3: "on free (or last touch) stamp the page"), without touching.
    ///
    /// This runs after every free: one page (nearly every free) is a plain store that
    /// inlines into the caller; a block goes out of line to `fill`, whose unrolled loop
    /// costs ≈ 20 instructions more than the store.
    #[inline]
    pub fn stamp(&mut self, cpu: u32, zone: usize, first: u64, pages: u64) {
        if pages != 1 {
            return self.stamp_block(cpu, zone, first, pages);
        }
        let stamp = self.stamp_now(cpu);
        *stamp_mut(&mut self.stamps[zone], first as usize) = stamp;
    }

    /// [`Self::stamp`] of a block of more than one page.
    #[inline(never)]
    fn stamp_block(&mut self, cpu: u32, zone: usize, first: u64, pages: u64) {
        let end = (first + pages) as usize;
        self.cover(zone, end);
        let stamp = self.stamp_now(cpu);
        self.stamps[zone][first as usize..end].fill(stamp);
    }

    /// The stamp of a page `cpu` lets go of now: its and its socket's counters.
    #[inline]
    fn stamp_now(&self, cpu: u32) -> Stamp {
        let socket = self.geometry.cpu_socket[cpu as usize] as usize;
        // The CPU's counter was checked by the touch that raised it.
        Stamp::packed(
            cpu,
            self.cpu_touched[cpu as usize],
            self.socket_touched[socket],
        )
    }

    /// Prefetch the stamp of the page at offset `first` of zone `zone`, ahead of the
    /// [`Self::stamp`] or [`Self::touch`] that will need it, so that its cache miss
    /// overlaps with the work in between. Changes nothing.
    #[inline]
    pub fn prefetch(&self, zone: usize, first: u64) {
        if let Some(stamp) = self.stamps[zone].get(first as usize) {
            crate::prefetch::prefetch(stamp);
        }
    }

    /// [`Self::prefetch`] of the stamps of the pages at `offsets` of zone `zone`: the
    /// zone's stamps looked up once.
    #[inline]
    pub fn prefetch_all(&self, zone: usize, offsets: impl Iterator<Item = u64>) {
        let stamps = &self.stamps[zone];
        for offset in offsets {
            if let Some(stamp) = stamps.get(offset as usize) {
                crate::prefetch::prefetch(stamp);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model() -> CacheModel {
        // 2 CPUs on socket 0, 1 on socket 1; L2 = 2 pages, LLC share = 4 pages.
        let cost = CostModel {
            llc_share: 1.0,
            ..CostModel::calibrated()
        };
        CacheModel::new(vec![0, 0, 1], &[1 << 12], 2 * 4096, 4 * 4096, &cost)
    }

    /// Touch `n` pages from `first` of zone 0 by `cpu`, `lines` lines each: as one block in
    /// `blocks`, page after page in `pages`; both must charge the same and count the same.
    fn touch_whole_and_by_page(
        blocks: &mut CacheModel,
        pages: &mut CacheModel,
        (cpu, first, n, lines): (u32, u64, u64, u32),
        cost: &CostModel,
    ) {
        let ns_block = blocks.touch(cpu, 0, first, n, lines, cost);
        let ns_pages: u64 = (first..first + n)
            .map(|offset| pages.touch(cpu, 0, offset, 1, lines, cost))
            .sum();
        assert_eq!(ns_block, ns_pages);
        assert_eq!(blocks.counts, pages.counts);
    }

    /// The block path and the one-page path must agree: a block is charged as its pages
    /// touched one after another.
    #[test]
    fn block_touch_equals_page_touches() {
        let cost = CostModel::calibrated();
        let (mut blocks, mut pages) = (model(), model());
        for (cpu, first, n, lines) in [(0, 0, 4, 64), (1, 2, 4, 10), (2, 1, 8, 40), (0, 0, 8, 7)] {
            touch_whole_and_by_page(&mut blocks, &mut pages, (cpu, first, n, lines), &cost);
        }
        assert_eq!(blocks.cpu_touched, pages.cpu_touched);
        assert_eq!(blocks.socket_touched, pages.socket_touched);
    }

    /// Random touches and frees of random blocks by random CPUs: touching blocks whole
    /// charges what touching their pages one by one charges, and leaves the same stamps.
    #[test]
    fn block_touches_equal_page_touches_for_any_history() {
        let cost = CostModel::calibrated();
        let mut rng = crate::rng::Rng::new(3, 0);
        for _ in 0..50 {
            let (mut blocks, mut pages) = (model(), model());
            for _ in 0..200 {
                let cpu = rng.below(3) as u32;
                let n = 1 << rng.below(4);
                let first = rng.below(64 / n) * n;
                if rng.chance(0.3) {
                    blocks.stamp(cpu, 0, first, n);
                    pages.stamp(cpu, 0, first, n);
                    continue;
                }
                let lines = [1, 7, 10, 40, 64][rng.below(5) as usize];
                if rng.chance(0.3) {
                    let ns_block = blocks.read(cpu, 0, first, n, lines, &cost);
                    let ns_pages: u64 = (first..first + n)
                        .map(|offset| pages.read(cpu, 0, offset, 1, lines, &cost))
                        .sum();
                    assert_eq!(ns_block, ns_pages);
                    continue;
                }
                touch_whole_and_by_page(&mut blocks, &mut pages, (cpu, first, n, lines), &cost);
            }
            assert_eq!(blocks.counts, pages.counts);
            assert_eq!(blocks.socket_touched, pages.socket_touched);
            assert_eq!(blocks.cpu_touched, pages.cpu_touched);
            let same = |a: &Stamp, b: &Stamp| {
                a.socket_lines == b.socket_lines && a.cpu_lines_cpu == b.cpu_lines_cpu
            };
            assert!(blocks.stamps[0]
                .iter()
                .zip(&pages.stamps[0])
                .all(|(a, b)| same(a, b)));
        }
    }

    /// A stream's receiver reading what a CPU of its socket wrote moments before ages its
    /// own L2 but not the LLC, which held those lines already: counted twice, a stream's
    /// lines would make every reuse distance on the socket twice what it is.
    #[test]
    fn a_read_of_fresh_lines_ages_the_l2_not_the_llc() {
        let cost = CostModel::calibrated();
        let mut m = model();
        m.touch(0, 0, 0, 1, 64, &cost);
        m.touch(1, 0, 1, 1, 64, &cost);
        for page in [10, 11] {
            m.touch(0, 0, page, 1, 64, &cost);
            m.read(1, 0, page, 1, 64, &cost);
        }
        assert_eq!(m.socket_touched[0], 4 * 64, "writes only");
        assert_eq!(m.cpu_touched[1], 3 * 64, "CPU 1's write and reads");
        // Three pages came into the 4-page LLC after page 0: still there.
        assert_eq!(
            m.read(1, 0, 0, 1, 64, &cost),
            cost.touch_llc_ns,
            "the reads did not evict it"
        );
        assert_eq!(m.counts.cold_lines, 4 * 64, "only the first touches");
        // CPU 1 read three pages since it wrote page 1 (a 2-page L2): in the LLC only.
        assert_eq!(
            m.touch(1, 0, 1, 1, 64, &cost),
            cost.touch_llc_ns,
            "the reads aged the L2"
        );
        assert_eq!(m.counts.l2_lines, 0);
    }

    #[test]
    fn growing_the_stamps_keeps_them_in_place_and_covers_the_offset() {
        let mut stamps = reserve(64);
        stamps.extend((0..5u32).map(|i| Stamp::packed(i, u64::from(i) * 3, u64::from(i) * 5)));
        let at = stamps.as_ptr();
        grow(&mut stamps, 9);
        assert_eq!(stamps.len(), 16);
        assert_eq!(stamps.as_ptr(), at, "grown within the reservation");
        // Past a power of two, no further than the reservation.
        grow(&mut stamps, 40);
        assert_eq!((stamps.len(), stamps.as_ptr()), (64, at));
        for (i, stamp) in stamps.iter().enumerate() {
            let i = i as u32;
            if i < 5 {
                let kept = (stamp.cpu(), stamp.cpu_lines(), stamp.socket_lines);
                assert_eq!(kept, (i, u64::from(i) * 3, u64::from(i) * 5));
            } else {
                assert_eq!(stamp.cpu(), NEVER, "offset {i} was never stamped");
            }
        }
    }

    #[test]
    fn reuse_distance_decides_the_class() {
        let cost = CostModel::calibrated();
        let mut m = model();
        assert_eq!(m.touch(0, 0, 0, 1, 64, &cost), cost.touch_cold_ns);
        assert_eq!(m.touch(0, 0, 0, 1, 64, &cost), cost.touch_l2_ns);
        m.touch(0, 0, 10, 3, 64, &cost);
        assert_eq!(
            m.touch(0, 0, 0, 1, 64, &cost),
            cost.touch_llc_ns,
            "3 pages later"
        );
        assert_eq!(
            m.touch(1, 0, 0, 1, 64, &cost),
            cost.touch_llc_ns,
            "same socket"
        );
        assert_eq!(m.counts.llc_remote_lines, 64);
        assert_eq!(
            m.touch(2, 0, 0, 1, 64, &cost),
            cost.touch_cold_ns,
            "other socket"
        );
        m.touch(0, 0, 20, 6, 64, &cost);
        assert_eq!(
            m.touch(1, 0, 20, 1, 64, &cost),
            cost.touch_cold_ns,
            "evicted"
        );
    }
}
