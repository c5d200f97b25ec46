//! Per-CPU pagesets: the state each CPU keeps for each zone.
//!
//! Linux counterpart: `struct per_cpu_pages` (`include/linux/mmzone.h`, v6.7). This module
//! holds the sizing state that `/proc/zoneinfo` prints (`count`, `high`, `batch`,
//! `high_min`, `high_max`) and the flags. The per-order lists and the allocation, free and
//! decay paths that move pages through them build on this struct (the PCP issue).

/// Pageset flags (`PCPF_*`).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct PcpFlags {
    /// The previous free was of a cheap high order (`PCPF_PREV_FREE_HIGH_ORDER`).
    pub prev_free_high_order: bool,
    /// Keep a batch on the list when a run of high-order frees drains it
    /// (`PCPF_FREE_HIGH_BATCH`, from the per-CPU data cache slice).
    pub free_high_batch: bool,
}

/// One CPU's pageset for one zone.
#[derive(Clone, Debug, Default)]
pub struct PerCpuPages {
    /// Pages on all lists.
    pub count: u64,
    /// Current drain threshold; auto-tuned within `[high_min, high_max]`, clamped lazily on
    /// use, so a pageset that was never used shows 0, as on Linux.
    pub high: u64,
    /// Pages moved per refill or drain step.
    pub batch: u64,
    /// Lower bound of `high`.
    pub high_min: u64,
    /// Upper bound of `high`.
    pub high_max: u64,
    /// Flags.
    pub flags: PcpFlags,
}
