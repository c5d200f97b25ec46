//! Named, switchable policies: every behaviour a patch thread adds is a switch here, and
//! presets name the combinations the published tables compare. The threads, and the short
//! names used below ("Huang 2023", "Gorman 2017", …), are in `docs/reference/sources.md`.
//!
//! The PCP presets follow "mm: PCP high auto-tuning" (Huang Ying, v6.7): `base` is v6.6,
//! `patch1` … `patch9` apply the series cumulatively, `v6.7` equals `patch9`. The rules
//! of each step are in `docs/reference/pcp-series.md`; the code that reads these switches is in
//! [`crate::page_alloc::pcp`]. Gorman 2017 (Mel Gorman's 4.11 series) adds two more switches: whether
//! interrupt-context requests bypass the PCP, and how remote drains are done.
//!
//! One preset lies past the series: `linux-6.18` ([`Policy::LINUX_6_18`], listed in
//! [`LATER_PRESETS`]) is `v6.7` plus the later changes of `docs/reference/linux-mm.md` §3.3 that
//! alter PCP refill and drain counts. Modelled: the raised `free_high` threshold
//! (`free_count ≥ batch + high_min/2`, [`PcpPolicy::free_high_needs_high_min`]) and
//! `drain_pages_zone` draining in chunks of `batch << S`
//! ([`PcpPolicy::drain_zone_in_chunks`]). Not modelled: the two THP lists
//! (`NR_PCP_THP = 2`; only an order-9 request of a type other than the one cached can
//! tell them apart), the `FPI_TRYLOCK` free that skips the drain (only the nolock
//! allocator uses it), the re-read of pageblock types on drain and the reworked fallback
//! (which buddy list, not how many pages move), and the post-6.18 batched decay.

use core::fmt;

use crate::views::zoneinfo::ZoneinfoLayout;

/// The PCP series, one switch per patch. Each preset turns on a prefix of them.
///
/// ```
/// use mmkit_core::Policy;
///
/// // v6.7 has the whole series; the base kernel (v6.6) none of it.
/// assert!(Policy::V6_7.pcp.auto_tune && Policy::V6_7.pcp.free_count);
/// assert!(!Policy::BASE.pcp.auto_tune && !Policy::BASE.pcp.free_high_batch);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct PcpPolicy {
    /// Patch 1: a `free_high` drain needs two consecutive frees of cheap high orders
    /// (`PCPF_PREV_FREE_HIGH_ORDER`), so one order-1 free at process exit no longer
    /// empties the PCP.
    pub prev_free_high_order: bool,
    /// Patch 2: compute each CPU's share of the last-level cache. No allocator behaviour
    /// of its own; patch 3 reads it.
    pub cache_slice: bool,
    /// Patch 3: with a large cache slice (`PCPF_FREE_HIGH_BATCH`), keep a batch of pages
    /// on the PCP before a `free_high` drain.
    pub free_high_batch: bool,
    /// Patch 4: cap the free scale factor at `CONFIG_PCP_BATCH_SCALE_MAX`.
    pub cap_free_factor: bool,
    /// Patch 5: scale the refill size with `alloc_factor` on consecutive refills.
    pub alloc_factor: bool,
    /// Patch 6: `high_min`/`high_max` per pageset (no behaviour change by itself).
    pub high_min_max: bool,
    /// Patch 7: tune `pcp->high` automatically: grow on refill, shrink on `free_high`,
    /// decay once per `stat_interval`.
    pub auto_tune: bool,
    /// Patch 8: shrink `pcp->high` while the zone is below its high watermark (`BELOW_HIGH`).
    pub below_high: bool,
    /// Patch 9: detect consecutive frees with `free_count` instead of `free_factor`.
    pub free_count: bool,
    /// After v6.7 (Nikhil Dhama, 2025, in 6.18): a `free_high` drain needs
    /// `free_count ≥ batch + high_min / 2` instead of `free_count ≥ batch`. Reads
    /// `free_count`, so it needs patch 9.
    pub free_high_needs_high_min: bool,
    /// After v6.7 (≈ 6.9): `drain_pages_zone` frees at most `batch << S` pages per pageset
    /// lock hold and loops until the pageset is empty, so one explicit drain is several
    /// `free_pcppages_bulk` calls.
    pub drain_zone_in_chunks: bool,
    /// How the kernel's `clamp()` resolves `lo > hi`, which the PCP rules reach when
    /// `high_min > high_max` (a low watermark above `managed / 8`) or `high < 2 × batch`.
    pub clamp: ClampRule,
}

/// `clamp(val, lo, hi)` of `include/linux/minmax.h`, as the PCP rules call it. The two
/// definitions agree whenever `lo ≤ hi`; they differ only when `lo > hi`, which neither
/// checks at run time (only constant arguments are checked, at build time).
///
/// ```
/// use mmkit_core::policy::ClampRule;
///
/// // The rules agree when lo <= hi and differ when lo > hi (here lo 8, hi 4).
/// assert_eq!(ClampRule::HighFirst.clamp(5, 1, 9), ClampRule::MinOfMax.clamp(5, 1, 9));
/// assert_eq!(ClampRule::HighFirst.clamp(2, 8, 4), 8);
/// assert_eq!(ClampRule::MinOfMax.clamp(2, 8, 4), 4);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum ClampRule {
    /// Linux ≥ 6.1 (2122e2a4efc2, "minmax: clamp more efficiently by avoiding extra
    /// comparison"): `val >= hi ? hi : (val <= lo ? lo : val)`. With `lo > hi`, a value
    /// below `hi` gives `lo`, any other gives `hi`; so clamping twice is not clamping once
    /// (`lo` clamps to `hi`). v6.6 and v6.7 have it; David Laight's 2024–2025 rework of the
    /// macros around it kept the expression (the 2025 stable backport that aligns
    /// minmax.h with v6.17-rc6 still has it), and we found no later change, so
    /// `linux-6.18` uses it too.
    #[default]
    HighFirst,
    /// Linux ≤ 6.0: `min(max(val, lo), hi)`; with `lo > hi` always `hi`. No preset uses
    /// it: every kernel the presets model has [`ClampRule::HighFirst`].
    MinOfMax,
}

impl ClampRule {
    /// `clamp(value, lo, hi)` under this rule.
    #[inline(always)]
    pub fn clamp(self, value: u64, lo: u64, hi: u64) -> u64 {
        match self {
            ClampRule::HighFirst if value >= hi => hi,
            ClampRule::HighFirst => value.max(lo),
            ClampRule::MinOfMax => value.max(lo).min(hi),
        }
    }
}

/// How `drain_all_pages` reaches other CPUs' pagesets.
///
/// ```
/// use mmkit_core::topology::{CacheInfo, ZoneSize};
/// use mmkit_core::policy::DrainMode;
/// use mmkit_core::{PageAllocator, Policy, Settings, Topology, ZoneType};
///
/// // v6.7's pagesets with 4.11-5.19's workqueue drains.
/// let policy = Policy { drain: DrainMode::Workqueue, ..Policy::V6_7 };
/// let zones = [ZoneSize::managed(0, ZoneType::Normal, 16_384)];
/// let llc = CacheInfo { llc_bytes: 8 << 20, llc_shared_cpus: 2 };
/// let topology = Topology::x86_64(&zones, vec![2], llc, false)?;
/// let allocator = PageAllocator::new(topology, Settings::default(), policy)?;
/// assert_eq!(allocator.policy().drain, DrainMode::Workqueue);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum DrainMode {
    /// Lock each remote pageset and drain it from the calling CPU (Linux ≥ 6.0).
    #[default]
    Direct,
    /// Queue a work item on each CPU with pages and wait until each CPU has drained
    /// itself (Linux 4.11 – 5.19, Gorman 2017).
    Workqueue,
}

/// Everything switchable about the allocator's behaviour.
///
/// ```
/// use mmkit_core::Policy;
/// use mmkit_core::policy::PRESETS;
///
/// // Every preset by name, as `--policy` takes them.
/// for name in PRESETS {
///     assert_eq!(Policy::preset(name).map(|policy| policy.name), Some(name));
/// }
/// assert_eq!(Policy::preset("v6.7"), Some(Policy::V6_7));
/// assert_eq!(Policy::default(), Policy::V6_7);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Policy {
    /// The preset this came from, or "custom".
    pub name: &'static str,
    /// The PCP series switches.
    pub pcp: PcpPolicy,
    /// Gorman 2017 (4.11-rc1 … rc6, reverted): requests from interrupt context never use the
    /// PCP; they go to the zone under its lock.
    pub irq_bypass: bool,
    /// Remote drain mechanism.
    pub drain: DrainMode,
    /// The pageset lines the preset's kernel prints in `/proc/zoneinfo`.
    pub zoneinfo: ZoneinfoLayout,
}

/// How `try_to_unmap` takes a large folio's pages out of the reverse map (Yin 2023:
/// Yin Fengwei, "batched remove rmap in try_to_unmap_one()").
///
/// ```
/// use mmkit_core::policy::{MmPolicy, RmapRemoval};
///
/// let policy = MmPolicy { rmap_removal: RmapRemoval::Batched, ..MmPolicy::V6_7 };
/// assert_ne!(policy, MmPolicy::V6_7);
/// assert_eq!(MmPolicy::V6_7.rmap_removal, RmapRemoval::PerPage);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum RmapRemoval {
    /// Linux 6.7: after clearing each PTE, remove that page's rmap (map count, the
    /// folio's mapped-page count, the `NR_*_MAPPED` statistic) and drop its reference.
    #[default]
    PerPage,
    /// Yin 2023: clear the PTEs of a run of consecutive pages of one folio, then remove
    /// the run's rmap once (`folio_remove_rmap_range`): one statistic update and one
    /// reference drop per run.
    Batched,
}

/// What `MADV_PAGEOUT` does with a PTE-mapped large folio (`docs/reference/linux-mm.md` §6).
///
/// ```
/// use mmkit_core::policy::{MmPolicy, PageoutSplit};
///
/// let policy = MmPolicy { pageout: PageoutSplit::KeepCovered, ..MmPolicy::V6_7 };
/// assert_ne!(policy, MmPolicy::V6_7);
/// assert_eq!(MmPolicy::V6_7.pageout, PageoutSplit::SplitLarge);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum PageoutSplit {
    /// Linux 6.7: split every exclusively mapped large folio found, then reclaim its pages.
    #[default]
    SplitLarge,
    /// Linux ≥ 6.10 (Ryan Roberts): keep a folio whole when the range's PTEs map all of
    /// it (it is reclaimed as a unit), split it otherwise.
    KeepCovered,
}

/// How reclaim sizes an LRU list (`lruvec_lru_size`, `docs/reference/linux-mm.md` §5.2, Wang 2019).
///
/// ```
/// use mmkit_core::policy::{LruSizePolicy, MmPolicy};
///
/// let policy = MmPolicy { lru_size: LruSizePolicy::PercpuCounters, ..MmPolicy::V6_7 };
/// assert_ne!(policy, MmPolicy::V6_7);
/// assert_eq!(MmPolicy::V6_7.lru_size, LruSizePolicy::ZoneSizes);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum LruSizePolicy {
    /// Linux ≤ 5.1 and ≥ 5.3 with Honglei Wang's fix (b11edebbc967): the sum of the
    /// memcg's per-zone sizes, `MAX_NR_ZONES` reads.
    #[default]
    ZoneSizes,
    /// The 5.2 regression (1a61ab8038e7): the node total summed from a per-CPU counter over
    /// every possible CPU, minus the zones above: a read per CPU, per list, per call.
    PercpuCounters,
}

/// Which congestion bits reclaim sets and clears (`docs/reference/linux-mm.md` §5.4, Yosry Ahmed's congestion-bit fix).
///
/// ```
/// use mmkit_core::policy::{CongestionBits, MmPolicy};
///
/// let policy = MmPolicy { congestion: CongestionBits::Shared, ..MmPolicy::V6_7 };
/// assert_ne!(policy, MmPolicy::V6_7);
/// assert_eq!(MmPolicy::V6_7.congestion, CongestionBits::Separate);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum CongestionBits {
    /// Before Linux 6.5: one `LRUVEC_CONGESTED` bit, set by kswapd and cgroup reclaim, and
    /// cleared by cgroup reclaim too, so a root `memory.reclaim` unthrottles a node
    /// kswapd marked.
    Shared,
    /// Linux ≥ 6.5 (Yosry Ahmed, 1bc545bff45c): `LRUVEC_CGROUP_CONGESTED` and
    /// `LRUVEC_NODE_CONGESTED`; cgroup reclaim clears only its own.
    #[default]
    Separate,
}

/// The switches of the mapping layer ([`crate::mm`]).
///
/// ```
/// # use mmkit_core::topology::{CacheInfo, ZoneSize};
/// # use mmkit_core::{PageAllocator, Policy, Settings, Topology, ZoneType};
/// # let zones = [ZoneSize::managed(0, ZoneType::Normal, 16_384)];
/// # let llc = CacheInfo { llc_bytes: 8 << 20, llc_shared_cpus: 1 };
/// # let topology = Topology::x86_64(&zones, vec![1], llc, false)?;
/// # let allocator = PageAllocator::new(topology, Settings::default(), Policy::V6_7)?;
/// use mmkit_core::mm::Memory;
/// use mmkit_core::policy::{MmPolicy, RmapRemoval};
/// use std::sync::Arc;
///
/// // The mapping layer with Yin 2023's batched rmap removal.
/// let policy = MmPolicy { rmap_removal: RmapRemoval::Batched, ..MmPolicy::V6_7 };
/// let memory = Memory::new(Arc::new(allocator), policy, 0);
/// assert_eq!(memory.policy(), policy);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct MmPolicy {
    /// Per-page or batched rmap removal in `try_to_unmap`.
    pub rmap_removal: RmapRemoval,
    /// Large folios under `MADV_PAGEOUT`.
    pub pageout: PageoutSplit,
    /// How reclaim sizes an LRU list.
    pub lru_size: LruSizePolicy,
    /// One congestion bit or two.
    pub congestion: CongestionBits,
}

impl MmPolicy {
    /// Linux v6.7.
    pub const V6_7: MmPolicy = MmPolicy {
        rmap_removal: RmapRemoval::PerPage,
        pageout: PageoutSplit::SplitLarge,
        lru_size: LruSizePolicy::ZoneSizes,
        congestion: CongestionBits::Separate,
    };
}

/// Presets past the series (not in [`PRESETS`], whose every entry the oracle suites check
/// against the series' rules).
pub const LATER_PRESETS: [&str; 1] = ["linux-6.18"];

/// The preset names, in series order.
pub const PRESETS: [&str; 11] = [
    "base", "patch1", "patch2", "patch3", "patch4", "patch5", "patch6", "patch7", "patch8",
    "patch9", "v6.7",
];

impl Policy {
    /// Linux v6.7: every patch of the series, direct drains, no interrupt bypass.
    pub const V6_7: Policy = Policy::patches("v6.7", 9);

    /// Linux v6.6, before the series.
    pub const BASE: Policy = Policy::patches("base", 0);

    /// Linux 6.18 as far as PCP counts go: v6.7 plus the raised `free_high` threshold and
    /// chunked `drain_pages_zone` (the module documentation lists what is not modelled).
    /// Its `clamp()` is v6.7's expression ([`ClampRule::HighFirst`]).
    pub const LINUX_6_18: Policy = {
        let mut policy = Policy::patches("linux-6.18", 9);
        policy.pcp.free_high_needs_high_min = true;
        policy.pcp.drain_zone_in_chunks = true;
        policy.pcp.clamp = ClampRule::HighFirst;
        policy.zoneinfo = ZoneinfoLayout::WithHighMinMax;
        policy
    };

    /// The first `n` patches of the series.
    const fn patches(name: &'static str, n: u8) -> Policy {
        Policy {
            name,
            pcp: PcpPolicy {
                prev_free_high_order: n >= 1,
                cache_slice: n >= 2,
                free_high_batch: n >= 3,
                cap_free_factor: n >= 4,
                alloc_factor: n >= 5,
                high_min_max: n >= 6,
                auto_tune: n >= 7,
                below_high: n >= 8,
                free_count: n >= 9,
                free_high_needs_high_min: false,
                drain_zone_in_chunks: false,
                // v6.6 and v6.7 both have 6.1's definition.
                clamp: ClampRule::HighFirst,
            },
            irq_bypass: false,
            drain: DrainMode::Direct,
            // v6.6 and v6.7 print count, high and batch only.
            zoneinfo: ZoneinfoLayout::CountHighBatch,
        }
    }

    /// The preset called `name` (see [`PRESETS`] and [`LATER_PRESETS`]).
    pub fn preset(name: &str) -> Option<Policy> {
        if name == Policy::LINUX_6_18.name {
            return Some(Policy::LINUX_6_18);
        }
        let index = PRESETS.iter().position(|&p| p == name)?;
        let name = PRESETS[index];
        Some(match index {
            10 => Policy::patches(name, 9),
            n => Policy::patches(name, n as u8),
        })
    }
}

impl Default for Policy {
    fn default() -> Policy {
        Policy::V6_7
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_are_cumulative() {
        let mut previous = Policy::preset("base").unwrap();
        assert_eq!(previous.pcp, PcpPolicy::default());
        for name in &PRESETS[1..10] {
            let policy = Policy::preset(name).unwrap();
            let flags = |p: &PcpPolicy| {
                [
                    p.prev_free_high_order,
                    p.cache_slice,
                    p.free_high_batch,
                    p.cap_free_factor,
                    p.alloc_factor,
                    p.high_min_max,
                    p.auto_tune,
                    p.below_high,
                    p.free_count,
                ]
            };
            let (old, new) = (flags(&previous.pcp), flags(&policy.pcp));
            let added = old.iter().zip(new).filter(|(o, n)| !**o && *n).count();
            assert_eq!(added, 1, "{name} adds exactly one patch");
            assert!(
                old.iter().zip(new).all(|(o, n)| !*o || n),
                "{name} keeps earlier patches"
            );
            previous = policy;
        }
        assert_eq!(
            Policy::preset("v6.7").unwrap().pcp,
            Policy::preset("patch9").unwrap().pcp
        );
        assert!(Policy::preset("patch10").is_none());
    }

    #[test]
    fn every_preset_clamps_as_its_kernel_when_lo_exceeds_hi() {
        // v6.7's `__clamp(0, 2604, 2000)`: 0 < hi, so lo. A value at or above hi gives hi.
        for name in PRESETS.iter().chain(&LATER_PRESETS) {
            let rule = Policy::preset(name).unwrap().pcp.clamp;
            assert_eq!(rule, ClampRule::HighFirst, "{name}");
            assert_eq!(rule.clamp(0, 2604, 2000), 2604, "{name}");
            assert_eq!(rule.clamp(2604, 2604, 2000), 2000, "{name}: clamping twice");
            assert_eq!(rule.clamp(2100, 2604, 2000), 2000, "{name}");
        }
        assert_eq!(ClampRule::MinOfMax.clamp(0, 2604, 2000), 2000);
        for (value, lo, hi) in [(0, 367, 2000), (500, 367, 2000), (2500, 367, 2000)] {
            assert_eq!(
                ClampRule::HighFirst.clamp(value, lo, hi),
                ClampRule::MinOfMax.clamp(value, lo, hi),
                "the rules agree when lo ≤ hi"
            );
        }
    }

    #[test]
    fn zoneinfo_shows_high_min_and_high_max_only_for_kernels_that_print_them() {
        for name in PRESETS {
            let layout = Policy::preset(name).unwrap().zoneinfo;
            assert_eq!(layout, ZoneinfoLayout::CountHighBatch, "{name}");
        }
        assert_eq!(Policy::LINUX_6_18.zoneinfo, ZoneinfoLayout::WithHighMinMax);
    }

    #[test]
    fn linux_6_18_is_v6_7_plus_the_later_switches() {
        let later = Policy::preset("linux-6.18").unwrap();
        assert_eq!(later, Policy::LINUX_6_18);
        let v6_7 = Policy::V6_7.pcp;
        assert_eq!(
            later.pcp,
            PcpPolicy {
                free_high_needs_high_min: true,
                drain_zone_in_chunks: true,
                ..v6_7
            }
        );
        for name in PRESETS {
            let pcp = Policy::preset(name).unwrap().pcp;
            assert!(!pcp.free_high_needs_high_min && !pcp.drain_zone_in_chunks);
        }
    }
}
