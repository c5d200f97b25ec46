//! The first chunk's layout: `<static | reserved | dynamic>` at the start of every unit.
//!
//! Linux counterpart: `pcpu_build_alloc_info` (the sizes), `pcpu_setup_first_chunk` and
//! `pcpu_alloc_first_chunk` in `mm/percpu.c`, and the constants of
//! `include/linux/percpu.h`. At boot the kernel image's static per-CPU variables are
//! copied to the start of each unit; the reserved region after them serves the static
//! per-CPU variables of modules (`__alloc_reserved_percpu`), the dynamic region after that
//! serves `alloc_percpu` until the first dynamic chunk is needed. The whole first chunk is
//! memory from boot: `pcpu_nr_populated` starts at `PFN_DOWN(size_sum)`, and neither region
//! is ever depopulated or freed. Boot prints the layout:
//! `percpu: Embedded 57 pages/cpu s202520 r0 d30952 u1048576` (this project's measuring
//! machine, Linux 6.18, no modules) reads static 202,520 bytes, reserved 0, dynamic 30,952,
//! unit 1 MiB.

/// `PERCPU_MODULE_RESERVE` with `CONFIG_MODULES`: 8 KiB for modules' static per-CPU data
/// (v5.14 and 6.18 alike; 0 without modules).
pub const PERCPU_MODULE_RESERVE: usize = 8 << 10;

/// `PERCPU_DYNAMIC_RESERVE` on 64-bit: the dynamic room the architectures ask for in the
/// first chunk, 28 KiB (v5.14; 6.18 without `CONFIG_RANDOM_KMALLOC_CACHES`, which
/// multiplies it by 4).
pub const PERCPU_DYNAMIC_RESERVE: usize = 28 << 10;

/// `PERCPU_DYNAMIC_EARLY_SIZE`: the least dynamic room `pcpu_setup_first_chunk` accepts,
/// 20 KiB (what the allocations made before slab is up need).
pub const PERCPU_DYNAMIC_EARLY_SIZE: usize = 20 << 10;

/// The sizes of the first chunk's three regions, in bytes per unit, as boot prints them
/// (`s… r… d…`).
///
/// ```
/// use mmkit_core::percpu::{FirstChunkLayout, PERCPU_DYNAMIC_RESERVE};
/// // x86-64, 4 KiB pages: the static data of this project's 6.18 kernel, no modules.
/// let layout = FirstChunkLayout::embedded(202_520, 0, PERCPU_DYNAMIC_RESERVE, 4096);
/// assert_eq!(layout.dynamic_size, 30_952);          // 28 KiB grown to the page end
/// assert_eq!(layout.size_sum(), 57 * 4096);         // "Embedded 57 pages/cpu"
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct FirstChunkLayout {
    /// `ai->static_size`: the kernel image's `.data..percpu`.
    pub static_size: usize,
    /// `ai->reserved_size`: served only to reserved requests (0: no reserved chunk).
    pub reserved_size: usize,
    /// `ai->dyn_size`: the first chunk proper.
    pub dynamic_size: usize,
}

impl FirstChunkLayout {
    /// The sizes `pcpu_build_alloc_info` derives for an embedded first chunk: the dynamic
    /// region is at least `dynamic_min` (and [`PERCPU_DYNAMIC_EARLY_SIZE`]) and grows to the
    /// end of the last page.
    pub fn embedded(
        static_size: usize,
        reserved_size: usize,
        dynamic_min: usize,
        page_size: usize,
    ) -> FirstChunkLayout {
        let dynamic_min = dynamic_min.max(PERCPU_DYNAMIC_EARLY_SIZE);
        let size_sum = (static_size + reserved_size + dynamic_min).next_multiple_of(page_size);
        FirstChunkLayout {
            static_size,
            reserved_size,
            dynamic_size: size_sum - static_size - reserved_size,
        }
    }

    /// The unit size Linux picks for this first chunk when it embeds it in `atom_size`
    /// allocations for `nr_cpus` CPUs of one NUMA node (`pcpu_build_alloc_info`): the most
    /// units per atom that leave at most a third of the CPUs' worth of units unused, without
    /// needing more allocations. x86-64 uses 2 MiB atoms.
    ///
    /// ```
    /// use mmkit_core::percpu::FirstChunkLayout;
    /// let layout = FirstChunkLayout::embedded(202_520, 0, 28 << 10, 4096);
    /// assert_eq!(layout.embedded_unit_size(2, 2 << 20, 4096), 1 << 20); // "u1048576"
    /// assert_eq!(layout.embedded_unit_size(4, 2 << 20, 4096), 512 << 10);
    /// assert_eq!(layout.embedded_unit_size(8, 2 << 20, 4096), 256 << 10);
    /// ```
    pub fn embedded_unit_size(&self, nr_cpus: usize, atom_size: usize, page_size: usize) -> usize {
        let min_unit_size = self.size_sum().max(super::PCPU_MIN_UNIT_SIZE);
        let alloc_size = min_unit_size.next_multiple_of(atom_size);
        let fits = |upa: usize| alloc_size % upa == 0 && (alloc_size / upa) % page_size == 0;
        let max_upa = (1..=alloc_size / min_unit_size)
            .rev()
            .find(|&upa| fits(upa))
            .unwrap_or(1);
        let mut best_upa = 1;
        let mut last_allocs = usize::MAX;
        for upa in (1..=max_upa).rev().filter(|&upa| fits(upa)) {
            let allocs = nr_cpus.div_ceil(upa);
            // Linux: "Don't accept if wastage is over 1/3", then "don't consume more memory".
            if allocs * upa - nr_cpus > nr_cpus / 3 {
                continue;
            }
            if allocs > last_allocs {
                break;
            }
            last_allocs = allocs;
            best_upa = upa;
        }
        alloc_size / best_upa
    }

    /// `size_sum`: static + reserved + dynamic bytes per unit.
    pub fn size_sum(&self) -> usize {
        self.static_size + self.reserved_size + self.dynamic_size
    }

    /// Where the reserved region starts: `pcpu_setup_first_chunk` rounds the static size
    /// up to `PCPU_MIN_ALLOC_SIZE`.
    pub(crate) fn reserved_start(&self) -> usize {
        self.static_size
            .next_multiple_of(super::PCPU_MIN_ALLOC_SIZE)
    }

    /// Where the dynamic region starts, and its size once the static rounding is taken
    /// out of it (`dyn_size = ai->dyn_size - (static_size - ai->static_size)`).
    pub(crate) fn dynamic_region(&self) -> (usize, usize) {
        let rounding = self.reserved_start() - self.static_size;
        (
            self.reserved_start() + self.reserved_size,
            self.dynamic_size - rounding,
        )
    }

    /// What `pcpu_setup_first_chunk`'s `PCPU_SETUP_BUG_ON`s (and the embedding that built
    /// the layout) guarantee, in words when it does not hold.
    pub(crate) fn check(&self, page_size: usize, unit_size: usize) -> Result<(), &'static str> {
        if self.static_size == 0 {
            return Err("first chunk: the static size must not be 0 (a kernel always has static per-CPU data)");
        }
        if self.reserved_size % super::PCPU_MIN_ALLOC_SIZE != 0 {
            return Err("first chunk: the reserved size must be a multiple of 4 bytes");
        }
        if self.dynamic_size < PERCPU_DYNAMIC_EARLY_SIZE {
            return Err(
                "first chunk: the dynamic size must be at least 20 KiB (PERCPU_DYNAMIC_EARLY_SIZE)",
            );
        }
        if self.size_sum() % page_size != 0 {
            return Err("first chunk: static + reserved + dynamic must end on a page boundary (the dynamic region fills the last page)");
        }
        if self.size_sum() > unit_size {
            return Err("first chunk: static + reserved + dynamic must fit in a unit");
        }
        Ok(())
    }
}
