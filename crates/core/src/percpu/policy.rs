//! The percpu policies: mainline v5.13 and v5.14, and the two variants of the 2021 thread
//! that were not merged.
//!
//! Sources: `docs/reference/linux-mm.md` §4.5–§4.7 and the thread (Gushchin/Zhou 2021: "percpu: partial chunk
//! depopulation", Roman Gushchin / Dennis Zhou, v4 of April 2021, with Dennis Zhou's
//! "percpu: convert free page float to bytes" reply to Pratik Sampat's POWER9 test).
//! One implementation reads these switches ([`super::PercpuAllocator`]); there is no
//! per-policy copy of a path.

use core::fmt;

/// Everything switchable about the percpu allocator's reclaim.
///
/// ```
/// use mmkit_core::percpu::{MemoryBacking, PercpuAllocator, PercpuConfig};
/// use mmkit_core::percpu::PercpuPolicy;
///
/// // v5.13: no partial chunk depopulation, for a before/after comparison with v5.14.
/// let policy = PercpuPolicy::preset("v5.13").unwrap();
/// assert_eq!(policy, PercpuPolicy::V5_13);
/// let config = PercpuConfig { policy, ..PercpuConfig::x86_64(4) };
/// let pcpu = PercpuAllocator::new(config, MemoryBacking::new())?;
/// pcpu.verify()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct PercpuPolicy {
    /// The preset this came from.
    pub name: &'static str,
    /// v5.14 (Roman Gushchin's patch 3 of the series): a free that leaves a chunk with
    /// enough empty populated pages isolates it, and the balance work depopulates its
    /// empty pages (`pcpu_reclaim_populated`). Without it (v5.13) only whole free chunks
    /// give memory back.
    pub partial_depopulation: bool,
    /// v4 patch 4 ("use reclaim threshold instead of running for every page"): isolated
    /// chunks wait on the sidelined slot and move to to_depopulate together, only when
    /// they hold `reclaim_threshold` empty populated pages or one became fully free.
    pub reclaim_threshold: bool,
    /// Dennis Zhou's reply to the POWER9 numbers: the low/high marks are 8 KiB / 16 KiB of
    /// memory converted to pages, not 2 / 4 pages.
    pub thresholds_in_bytes: bool,
}

/// The preset names.
pub const PERCPU_PRESETS: [&str; 4] = ["v5.13", "v5.14", "reclaim-threshold", "bytes-thresholds"];

/// `PCPU_EMPTY_POP_PAGES_LOW` in v5.14: below this many empty populated pages after an
/// allocation, the balance work is scheduled.
pub const PCPU_EMPTY_POP_PAGES_LOW: usize = 2;
/// `PCPU_EMPTY_POP_PAGES_HIGH` in v5.14: the balance work populates up to this many, and
/// reclaim stops below it.
pub const PCPU_EMPTY_POP_PAGES_HIGH: usize = 4;
/// `PCPU_EMPTY_POP_RECLAIM_THRESHOLD` of v4 patch 4.
pub const PCPU_EMPTY_POP_RECLAIM_THRESHOLD: usize = 4;
/// The bytes variant's low mark: `SZ_8K`.
pub const EMPTY_POP_LOW_BYTES: usize = 8 << 10;
/// The bytes variant's high mark: `SZ_16K`.
pub const EMPTY_POP_HIGH_BYTES: usize = 16 << 10;

/// What [`PercpuPolicy::should_reclaim`] looks at in a chunk.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ReclaimCandidate {
    /// Pages of the chunk (one unit).
    pub nr_pages: usize,
    /// Its empty populated pages.
    pub nr_empty_pop_pages: usize,
    /// Whether it is isolated already.
    pub isolated: bool,
}

impl PercpuPolicy {
    /// Linux v5.13: no partial depopulation.
    pub const V5_13: PercpuPolicy = PercpuPolicy {
        name: "v5.13",
        partial_depopulation: false,
        reclaim_threshold: false,
        thresholds_in_bytes: false,
    };
    /// Linux v5.14 (mainline, with partial depopulation).
    pub const V5_14: PercpuPolicy = PercpuPolicy {
        name: "v5.14",
        partial_depopulation: true,
        reclaim_threshold: false,
        thresholds_in_bytes: false,
    };
    /// v5.14 with v4 patch 4's reclaim threshold.
    pub const RECLAIM_THRESHOLD: PercpuPolicy = PercpuPolicy {
        name: "reclaim-threshold",
        partial_depopulation: true,
        reclaim_threshold: true,
        thresholds_in_bytes: false,
    };
    /// The reclaim threshold with Dennis Zhou's byte-based marks (the patch he sent on top
    /// of v4 for POWER9).
    pub const BYTES_THRESHOLDS: PercpuPolicy = PercpuPolicy {
        name: "bytes-thresholds",
        partial_depopulation: true,
        reclaim_threshold: true,
        thresholds_in_bytes: true,
    };

    /// The preset called `name` (see [`PERCPU_PRESETS`]).
    pub fn preset(name: &str) -> Option<PercpuPolicy> {
        [
            PercpuPolicy::V5_13,
            PercpuPolicy::V5_14,
            PercpuPolicy::RECLAIM_THRESHOLD,
            PercpuPolicy::BYTES_THRESHOLDS,
        ]
        .into_iter()
        .find(|p| p.name == name)
    }

    /// `PCPU_EMPTY_POP_PAGES_LOW` for pages of `page_size` bytes:
    /// 2, or `max(8 KiB / page_size, 1)` (4 KiB pages: 2; 64 KiB pages: 1).
    pub fn empty_pop_pages_low(&self, page_size: usize) -> usize {
        if self.thresholds_in_bytes {
            (EMPTY_POP_LOW_BYTES / page_size).max(1)
        } else {
            PCPU_EMPTY_POP_PAGES_LOW
        }
    }

    /// `PCPU_EMPTY_POP_PAGES_HIGH`: 4, or `max(16 KiB / page_size, low + 1)`
    /// (4 KiB pages: 4; 64 KiB pages: 2).
    pub fn empty_pop_pages_high(&self, page_size: usize) -> usize {
        if self.thresholds_in_bytes {
            (EMPTY_POP_HIGH_BYTES / page_size).max(self.empty_pop_pages_low(page_size) + 1)
        } else {
            PCPU_EMPTY_POP_PAGES_HIGH
        }
    }

    /// `PCPU_EMPTY_POP_RECLAIM_THRESHOLD`: 4, or the high mark in the bytes variant.
    pub fn reclaim_threshold_pages(&self, page_size: usize) -> usize {
        if self.thresholds_in_bytes {
            self.empty_pop_pages_high(page_size)
        } else {
            PCPU_EMPTY_POP_RECLAIM_THRESHOLD
        }
    }

    /// `pcpu_should_reclaim_chunk` (vm backend): reclaim an isolated chunk that still has
    /// empty populated pages, or one holding at least a quarter of its pages empty while
    /// the other chunks hold more than the high mark (`global_empty` counts this chunk's
    /// pages too). Always false without partial depopulation.
    pub fn should_reclaim(
        &self,
        page_size: usize,
        chunk: ReclaimCandidate,
        global_empty: usize,
    ) -> bool {
        if !self.partial_depopulation {
            return false;
        }
        let high = self.empty_pop_pages_high(page_size);
        (chunk.isolated && chunk.nr_empty_pop_pages > 0)
            || (global_empty > high + chunk.nr_empty_pop_pages
                && chunk.nr_empty_pop_pages >= chunk.nr_pages / 4)
    }
}

impl Default for PercpuPolicy {
    fn default() -> PercpuPolicy {
        PercpuPolicy::V5_14
    }
}

impl fmt::Display for PercpuPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}
