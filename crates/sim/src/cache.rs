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
use crate::engine::SimError;

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

/// A page's last touch, in 8 bytes so that eight stamps share a cache line: the low 32
/// bits of its socket's line counter, and the CPU in the high bits of the second word
/// beside the low bits of the CPU's counter ([`StampFormat`]). A distance read from a
/// stamp is a difference modulo its field's width, so it is the true one only while it is
/// below the width; a CPU touches millions of lines in a run, more than its field holds.
/// Classifying a touch asks only whether a distance is within the L2's lines (the CPU's
/// counter) or the LLC's (the socket's), so [`CacheModel::sweep`] rewrites every stamp
/// past a threshold to the threshold plus one, still past it, and runs before any counter
/// could carry a stored distance past its width ([`Geometry::cpu_limit`],
/// [`Geometry::socket_limit`]): every classification is the one full counters give. Half
/// the 16 bytes the stamp had, whose misses are a share of a long run's time
/// (docs/EXPERIMENTS.md, "Speed").
#[derive(Clone, Copy, Debug)]
#[repr(C, align(8))]
struct Stamp {
    socket_lines: u32,
    cpu_lines_cpu: u32,
}

const _: () = assert!(core::mem::size_of::<Stamp>() == 8);

/// A page never stamped: its CPU field all ones, the never-CPU of every format.
impl Default for Stamp {
    fn default() -> Stamp {
        Stamp {
            socket_lines: 0,
            cpu_lines_cpu: u32::MAX,
        }
    }
}

/// The most lines one touch adds to a counter: a `MAX_ORDER` block of 64-line pages.
const MAX_TOUCH_LINES: u64 = (LINES_PER_PAGE as u64) << mmkit_core::page::MAX_ORDER;

/// What a model's stamps can hold for its CPUs and caches: the CPU field's format, the
/// caches' lines (the L2's, and the share of a socket's cache page data may use), and how
/// far each counter may advance between sweeps ([`Geometry::cpu_limit`],
/// [`Geometry::socket_limit`]).
struct StampLimits {
    format: StampFormat,
    private_lines: u64,
    llc_lines: u64,
    cpu_limit: u64,
    socket_limit: u64,
}

/// [`StampLimits`] of a model of `cpus` CPUs with these caches, or why its stamps cannot
/// be kept in 8 bytes: between two sweeps each counter must be able to take at least one
/// touch (a `MAX_ORDER` block of 64-line pages) beyond its cache's lines.
fn stamp_limits(
    cpus: usize,
    l2_bytes: u64,
    socket_bytes: u64,
    cost: &CostModel,
) -> Result<StampLimits, String> {
    if cpus >= 1 << 16 {
        return Err(format!("{cpus} CPUs do not fit a cache stamp"));
    }
    let format = StampFormat::for_cpus(cpus as u32);
    let private_lines = l2_bytes / 64;
    let llc_lines = (socket_bytes as f64 * cost.llc_share) as u64 / 64;
    let cpu_limit = u64::from(format.mask).saturating_sub(private_lines + 1);
    let socket_limit = u64::from(u32::MAX).saturating_sub(llc_lines + 1);
    if cpu_limit < MAX_TOUCH_LINES {
        return Err(format!(
            "an L2 of {l2_bytes} bytes on {cpus} CPUs does not fit a cache stamp: use fewer \
             CPUs or a smaller L2"
        ));
    }
    if socket_limit < MAX_TOUCH_LINES {
        return Err(format!(
            "a socket cache of {socket_bytes} bytes does not fit a cache stamp"
        ));
    }
    Ok(StampLimits {
        format,
        private_lines,
        llc_lines,
        cpu_limit,
        socket_limit,
    })
}

/// Why a model of `cpus` CPUs with these caches cannot keep its stamps in 8 bytes, if it
/// cannot ([`RunSpec::validate`](crate::RunSpec::validate) asks before a run). The CPU's
/// counter gets the bits its number does not need: a 2-MiB L2 fits up to 32,767 CPUs.
pub fn check_geometry(
    cpus: usize,
    l2_bytes: u64,
    socket_bytes: u64,
    cost: &CostModel,
) -> Result<(), String> {
    stamp_limits(cpus, l2_bytes, socket_bytes, cost).map(|_| ())
}

/// How a model packs a CPU and its counter into a stamp's second word: the CPU in as
/// few high bits as its CPUs need, with one value more for a page never stamped
/// ([`StampFormat::never`]), and the counter's low bits below it (25 bits for the
/// 112 CPUs of a one-socket kbuild run, 24 for 224).
#[derive(Clone, Copy, Debug)]
struct StampFormat {
    shift: u32,
    mask: u32,
}

impl StampFormat {
    /// The format of a model of `cpus` CPUs (at most 2^16 − 1).
    fn for_cpus(cpus: u32) -> StampFormat {
        debug_assert!(cpus < 1 << 16);
        let shift = cpus.leading_zeros().min(31);
        StampFormat {
            shift,
            mask: (1 << shift) - 1,
        }
    }

    /// The CPU of a page never stamped; the model's CPUs are below it.
    fn never(&self) -> u32 {
        u32::MAX >> self.shift
    }

    /// A stamp of `cpu` (below [`Self::never`]) and the counters now.
    fn pack(&self, cpu: u32, cpu_lines: u64, socket_lines: u64) -> Stamp {
        debug_assert!(cpu < self.never());
        Stamp {
            socket_lines: socket_lines as u32,
            cpu_lines_cpu: cpu << self.shift | (cpu_lines as u32 & self.mask),
        }
    }

    fn cpu(&self, stamp: &Stamp) -> u32 {
        stamp.cpu_lines_cpu >> self.shift
    }

    /// Lines the stamp's CPU has touched since, its counter being `cpu_lines` now, modulo
    /// the field's width (the CPU bits above drop out of the difference).
    fn cpu_distance(&self, stamp: &Stamp, cpu_lines: u64) -> u64 {
        u64::from((cpu_lines as u32).wrapping_sub(stamp.cpu_lines_cpu) & self.mask)
    }
}

/// Lines the stamp's socket has touched since, its counter being `socket_lines` now,
/// modulo 2^32.
fn socket_distance(stamp: &Stamp, socket_lines: u64) -> u64 {
    u64::from((socket_lines as u32).wrapping_sub(stamp.socket_lines))
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
/// has reached; they grow in place ([`grow`]), so no growth copies them. `None` if the
/// host refuses the reservation (a machine of terabytes asks for gigabytes), which the
/// caller reports instead of aborting.
fn reserve(pages: u64) -> Option<Vec<Stamp>> {
    let mut stamps = Vec::new();
    stamps
        .try_reserve_exact(usize::try_from(pages).ok()?)
        .ok()?;
    let lo = stamps.as_ptr() as usize;
    crate::huge_pages::before_first_write(
        lo,
        lo + stamps.capacity() * core::mem::size_of::<Stamp>(),
    );
    Some(stamps)
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
    format: StampFormat,
    /// The most a CPU's counter may advance between two sweeps: a stored distance is at
    /// most `private_lines + 1` after a sweep, and must stay within the field.
    cpu_limit: u64,
    /// The same for a socket's counter: `llc_lines + 1` after a sweep, below 2^32.
    socket_limit: u64,
}

impl Geometry {
    /// The budget right after a sweep (or at the start): every counter may advance by its
    /// limit.
    fn swept_budget(&self) -> u64 {
        self.cpu_limit.min(self.socket_limit)
    }

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
        let stamp_cpu = self.format.cpu(stamp);
        if stamp_cpu == self.format.never() {
            return CacheClass::Cold;
        }
        if stamp_cpu == cpu && self.format.cpu_distance(stamp, cpu_lines) <= self.private_lines {
            return CacheClass::L2;
        }
        if self.cpu_socket[stamp_cpu as usize] == socket
            && socket_distance(stamp, socket_lines) <= self.llc_lines
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
    /// The CPUs' and the sockets' counters at the last [`Self::sweep`].
    swept_cpu: Vec<u64>,
    swept_socket: Vec<u64>,
    /// Sweeps so far.
    sweeps: u64,
    /// Lines touches may still add, all counters together, before the headroom of each
    /// is looked up again ([`Self::make_room`]).
    budget: u64,
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
    ) -> Result<CacheModel, SimError> {
        let cpus = cpu_socket.len();
        let limits = stamp_limits(cpus, l2_bytes, socket_bytes, cost).map_err(SimError::Invalid)?;
        let sockets = cpu_socket.iter().max().map_or(1, |s| *s as usize + 1);
        let geometry = Geometry {
            private_lines: limits.private_lines,
            llc_lines: limits.llc_lines,
            cpu_socket,
            format: limits.format,
            cpu_limit: limits.cpu_limit,
            socket_limit: limits.socket_limit,
        };
        let stamps = zone_pages
            .iter()
            .map(|&pages| reserve(pages))
            .collect::<Option<_>>()
            .ok_or(SimError::HostMemory {
                what: "cache stamps",
                bytes: zone_pages
                    .iter()
                    .fold(0u64, |sum, &pages| sum.saturating_add(pages))
                    .saturating_mul(core::mem::size_of::<Stamp>() as u64),
            })?;
        Ok(CacheModel {
            cpu_touched: vec![0; cpus],
            socket_touched: vec![0; sockets],
            swept_cpu: vec![0; cpus],
            swept_socket: vec![0; sockets],
            sweeps: 0,
            budget: geometry.swept_budget(),
            geometry,
            stamps,
            counts: CacheCounts::default(),
        })
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
        let socket = self.geometry.cpu_socket[cpu as usize];
        let lines64 = lines as u64;
        self.make_room(lines64);
        let CacheModel {
            geometry,
            cpu_touched,
            socket_touched,
            stamps,
            counts,
            ..
        } = self;
        let cpu_lines = &mut cpu_touched[cpu as usize];
        let socket_lines = &mut socket_touched[socket as usize];
        let stamp = stamp_mut(&mut stamps[zone], offset);
        let class = geometry.classify(cpu, socket, *cpu_lines, *socket_lines, stamp);
        *cpu_lines += lines64;
        if AGES_LLC {
            *socket_lines += lines64;
        }
        *stamp = geometry.format.pack(cpu, *cpu_lines, *socket_lines);
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
        self.make_room(pages * lines64);
        let mut cpu_lines = self.cpu_touched[cpu as usize];
        let mut socket_lines = self.socket_touched[socket as usize];
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
            *stamp = geometry.format.pack(cpu, cpu_lines, socket_lines);
        }
        self.cpu_touched[cpu as usize] = cpu_lines;
        self.socket_touched[socket as usize] = socket_lines;
        CACHE_CLASSES
            .iter()
            .zip(class_pages)
            .map(|(&class, pages)| self.counts.add(class, pages, lines64, cost))
            .sum()
    }

    /// Make sure a touch may advance one CPU's counter, and at most its socket's, by
    /// `lines`: [`Self::budget`] is at most what any counter may still advance before a
    /// sweep, and a touch takes `lines` from it, so it stays so. When it runs out, the
    /// real headroom is looked up ([`Self::renew_budget`]). Before every touch: one
    /// comparison.
    #[inline(always)]
    fn make_room(&mut self, lines: u64) {
        debug_assert!(lines <= MAX_TOUCH_LINES);
        if lines > self.budget {
            self.renew_budget(lines);
        }
        self.budget -= lines;
    }

    /// The least any counter may still advance before a sweep, sweeping first if that is
    /// less than `lines`. A few dozen times a run: every counter's headroom shrinks by
    /// what its CPU or socket touches, the budget by what all touch.
    #[cold]
    #[inline(never)]
    fn renew_budget(&mut self, lines: u64) {
        let headroom = |limit: u64, counters: &[u64], swept: &[u64]| {
            counters
                .iter()
                .zip(swept)
                .map(|(now, then)| limit - (now - then))
                .min()
                .unwrap_or(limit)
        };
        let g = &self.geometry;
        self.budget = headroom(g.cpu_limit, &self.cpu_touched, &self.swept_cpu).min(headroom(
            g.socket_limit,
            &self.socket_touched,
            &self.swept_socket,
        ));
        if self.budget < lines {
            self.sweep();
            self.budget = self.geometry.swept_budget();
        }
    }

    /// Rewrite every stamp whose CPU distance is past the L2's lines to exactly one past
    /// them, and every stamp whose socket distance is past the LLC's likewise: each
    /// classifies as before (not within), and every stored distance is now at most its
    /// threshold plus one, so the counters may advance by the limits of [`Geometry`]
    /// before a stored distance could reach its field's width. Out of line: a few a run.
    #[cold]
    #[inline(never)]
    fn sweep(&mut self) {
        let geometry = &self.geometry;
        let format = geometry.format;
        let (private, llc) = (geometry.private_lines, geometry.llc_lines);
        for stamps in &mut self.stamps {
            for stamp in stamps.iter_mut() {
                let cpu = format.cpu(stamp);
                if cpu == format.never() {
                    continue;
                }
                let cpu_lines = self.cpu_touched[cpu as usize];
                if format.cpu_distance(stamp, cpu_lines) > private {
                    let socket_lines = stamp.socket_lines;
                    *stamp = format.pack(cpu, cpu_lines.wrapping_sub(private + 1), 0);
                    stamp.socket_lines = socket_lines;
                }
                let socket = geometry.cpu_socket[cpu as usize] as usize;
                let socket_lines = self.socket_touched[socket];
                if socket_distance(stamp, socket_lines) > llc {
                    stamp.socket_lines = socket_lines.wrapping_sub(llc + 1) as u32;
                }
            }
        }
        self.swept_cpu.copy_from_slice(&self.cpu_touched);
        self.swept_socket.copy_from_slice(&self.socket_touched);
        self.sweeps += 1;
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

    /// [`Self::stamp`] of single pages of zone `zone`, at `offsets`, freed together by
    /// `cpu` (an exit's quiet batch): one stamp, since a free advances no counter, stored
    /// at each.
    pub fn stamp_pages(&mut self, cpu: u32, zone: usize, offsets: impl Iterator<Item = u64>) {
        let stamp = self.stamp_now(cpu);
        let stamps = &mut self.stamps[zone];
        for offset in offsets {
            *stamp_mut(stamps, offset as usize) = stamp;
        }
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
        self.geometry.format.pack(
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
        CacheModel::new(vec![0, 0, 1], &[1 << 12], 2 * 4096, 4 * 4096, &cost).unwrap()
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
        let mut stamps = reserve(64).unwrap();
        let format = StampFormat::for_cpus(5);
        stamps.extend((0..5u32).map(|i| format.pack(i, u64::from(i) * 3, u64::from(i) * 5)));
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
                let kept = (
                    format.cpu(stamp),
                    stamp.cpu_lines_cpu & format.mask,
                    stamp.socket_lines,
                );
                assert_eq!(kept, (i, i * 3, i * 5));
            } else {
                let cpu = format.cpu(stamp);
                assert_eq!(cpu, format.never(), "offset {i} was never stamped");
            }
        }
    }

    /// The model with 64-bit counters in every stamp that [`Stamp`] narrows, with no
    /// sweeps: what every classification must agree with.
    struct FullCounters {
        cpu_socket: Vec<u32>,
        private_lines: u64,
        llc_lines: u64,
        cpu_touched: Vec<u64>,
        socket_touched: Vec<u64>,
        /// Per page: the last toucher, its counter and its socket's, then.
        stamps: Vec<Option<(u32, u64, u64)>>,
        counts: CacheCounts,
    }

    impl FullCounters {
        fn of(model: &CacheModel, pages: usize) -> FullCounters {
            let g = &model.geometry;
            FullCounters {
                cpu_socket: g.cpu_socket.clone(),
                private_lines: g.private_lines,
                llc_lines: g.llc_lines,
                cpu_touched: vec![0; g.cpu_socket.len()],
                socket_touched: vec![0; model.socket_touched.len()],
                stamps: vec![None; pages],
                counts: CacheCounts::default(),
            }
        }

        fn classify(&self, cpu: u32, offset: usize) -> CacheClass {
            let Some((by, cpu_lines, socket_lines)) = self.stamps[offset] else {
                return CacheClass::Cold;
            };
            let socket = self.cpu_socket[cpu as usize] as usize;
            if by == cpu && self.cpu_touched[cpu as usize] - cpu_lines <= self.private_lines {
                return CacheClass::L2;
            }
            if self.cpu_socket[by as usize] as usize == socket
                && self.socket_touched[socket] - socket_lines <= self.llc_lines
            {
                return if by == cpu {
                    CacheClass::Llc
                } else {
                    CacheClass::LlcRemote
                };
            }
            CacheClass::Cold
        }

        fn touch(&mut self, cpu: u32, first: u64, pages: u64, lines: u32, ages_llc: bool) -> u64 {
            let cost = CostModel::calibrated();
            let socket = self.cpu_socket[cpu as usize] as usize;
            let mut ns = 0;
            for offset in first as usize..(first + pages) as usize {
                let class = self.classify(cpu, offset);
                ns += self.counts.add(class, 1, u64::from(lines), &cost);
                self.cpu_touched[cpu as usize] += u64::from(lines);
                if ages_llc {
                    self.socket_touched[socket] += u64::from(lines);
                }
                self.stamps[offset] = Some((
                    cpu,
                    self.cpu_touched[cpu as usize],
                    self.socket_touched[socket],
                ));
            }
            ns
        }

        fn stamp(&mut self, cpu: u32, first: u64, pages: u64) {
            let socket = self.cpu_socket[cpu as usize] as usize;
            let now = (
                cpu,
                self.cpu_touched[cpu as usize],
                self.socket_touched[socket],
            );
            self.stamps[first as usize..(first + pages) as usize].fill(Some(now));
        }
    }

    /// The 8-byte stamps classify every touch as 64-bit counters would, across sweeps
    /// and wrapped fields: [`FullCounters`] runs the same random touches, reads and frees,
    /// and each touch's time and the class counts agree. The model has 2,048 CPUs (of
    /// which three touch), so its CPU counters get 20 bits; half the touches are of 1,024
    /// pages of 64 lines, which carries socket 0's counter past 2^32 lines (the width of
    /// its field) and each CPU's past 2^20 many times over, so the model sweeps often.
    #[test]
    fn narrow_stamps_classify_as_full_counters_across_sweeps() {
        let cost = CostModel {
            llc_share: 1.0,
            ..CostModel::calibrated()
        };
        let mut rng = crate::rng::Rng::new(11, 0);
        let mut cpu_socket = vec![0, 0, 1];
        cpu_socket.resize(2048, 1);
        let mut narrow =
            CacheModel::new(cpu_socket, &[1 << 12], 2 * 4096, 4 * 4096, &cost).unwrap();
        assert_eq!(narrow.geometry.format.mask, (1 << 20) - 1);
        let pages = 1 << 12;
        let mut full = FullCounters::of(&narrow, pages);
        for step in 0..300_000 {
            let cpu = rng.below(3) as u32;
            let (n, lines) = if rng.chance(0.5) {
                (1024, 64)
            } else {
                (1 << rng.below(11), [1, 7, 40, 64][rng.below(4) as usize])
            };
            let first = rng.below(pages as u64 / n) * n;
            if rng.chance(0.15) {
                narrow.stamp(cpu, 0, first, n);
                full.stamp(cpu, first, n);
                continue;
            }
            let ages_llc = rng.chance(0.8);
            let ns = if ages_llc {
                narrow.touch(cpu, 0, first, n, lines, &cost)
            } else {
                narrow.read(cpu, 0, first, n, lines, &cost)
            };
            assert_eq!(
                ns,
                full.touch(cpu, first, n, lines, ages_llc),
                "step {step}"
            );
            assert_eq!(narrow.counts, full.counts, "step {step}");
        }
        assert!(
            full.socket_touched[0] > 1 << 32,
            "{:?}",
            full.socket_touched
        );
        assert!(narrow.sweeps > 100, "{} sweeps", narrow.sweeps);
        assert_eq!(narrow.cpu_touched, full.cpu_touched);
        assert_eq!(narrow.socket_touched, full.socket_touched);
    }

    /// A distance of exactly a field's width is still far: page 0 is touched again after
    /// its CPU, then its socket, touched exactly the width of the stamp's CPU counter
    /// (2^30 lines for three CPUs), then of its socket counter (2^32) more, where the
    /// field's difference alone would read 0, an L2 (an LLC) hit.
    #[test]
    fn a_distance_of_exactly_a_fields_width_is_still_far() {
        let cost = CostModel::calibrated();
        let mut m = model();
        let width = u64::from(m.geometry.format.mask) + 1;
        assert_eq!(width, 1 << 30);
        m.touch(0, 0, 0, 1, 64, &cost);
        // CPU 0 reads that many lines, which age its L2 only, in blocks of 1,024 pages.
        for _ in 0..width / MAX_TOUCH_LINES {
            m.read(0, 0, 1024, 1024, 64, &cost);
        }
        assert_eq!(m.cpu_touched[0], 64 + width);
        assert_eq!(
            m.touch(0, 0, 0, 1, 64, &cost),
            cost.touch_llc_ns,
            "out of the L2, still in the LLC"
        );
        // CPU 1, on the same socket, touches 2^32 lines elsewhere, then page 0.
        for _ in 0..1 << 16 {
            m.touch(1, 0, 1024, 1024, 64, &cost);
        }
        assert_eq!(m.socket_touched[0], 128 + (1 << 32));
        assert_eq!(
            m.touch(1, 0, 0, 1, 64, &cost),
            cost.touch_cold_ns,
            "out of the LLC"
        );
        assert!(m.sweeps >= 2, "{} sweeps", m.sweeps);
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
