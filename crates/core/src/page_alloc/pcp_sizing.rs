//! How big each per-CPU pageset may grow: `batch`, `high_min`, `high_max`, the
//! `FREE_HIGH_BATCH` flag, and the vmstat threshold printed beside them.
//!
//! Linux counterpart (v6.7): `zone_batchsize`, `zone_highsize` and
//! `zone_set_pageset_high_and_batch` in `mm/page_alloc.c`; `setup_pcp_cacheinfo` (the
//! per-CPU data cache slice, `drivers/base/cacheinfo.c`); `calculate_normal_threshold` in
//! `mm/vmstat.c`. The list behaviour that uses these numbers is in the PCP module.

use crate::page::PAGE_SIZE;

/// Smallest nonzero `vm.percpu_pagelist_high_fraction` (`MIN_PERCPU_PAGELIST_HIGH_FRACTION`).
pub const MIN_PERCPU_PAGELIST_HIGH_FRACTION: u32 = 8;

/// `zone_batchsize`: about a quarter of a thousandth of the zone, capped at 1 MiB of pages
/// (256 / 4 = 64), then rounded to 2^n − 1 so that batches do not alias cache colours.
/// Returns the raw value, which is 0 for zones under 8192 pages; see [`stored_batch`].
pub fn zone_batchsize(managed: u64) -> u64 {
    let mut batch = (managed >> 10).min((1 << 20) / PAGE_SIZE as u64);
    batch /= 4;
    batch = batch.max(1);
    rounddown_pow_of_two(batch + batch / 2) - 1
}

/// The batch a pageset stores: at least 1 (`max(1, zone_batchsize(zone))`).
pub fn stored_batch(managed: u64) -> u64 {
    zone_batchsize(managed).max(1)
}

/// `zone_highsize`: a pageset's share of `total_pages` (the low watermark, or
/// `managed / fraction`), split among the node's CPUs plus `cpu_online` (1 while a CPU is
/// coming online), and never under four batches.
pub fn zone_highsize(
    total_pages: u64,
    batch: u64,
    node_cpus: u32,
    cpu_online: u32,
    online_cpus: u32,
) -> u64 {
    let mut split = node_cpus + cpu_online;
    if split == 0 {
        split = online_cpus;
    }
    let high = total_pages / split.max(1) as u64;
    high.max(batch << 2)
}

/// The PCP limits of one zone, the same for each of its pagesets.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct PcpLimits {
    /// Pages moved per refill or drain step.
    pub batch: u64,
    /// Lowest `high` the auto-tuning may reach.
    pub high_min: u64,
    /// Highest `high` the auto-tuning may reach.
    pub high_max: u64,
}

/// `zone_set_pageset_high_and_batch`: with fraction 0, `high_min` comes from the low
/// watermark and `high_max` from an eighth of the zone, and `pcp->high` auto-tunes between
/// them; a nonzero fraction fixes both at `managed / fraction` per CPU.
pub fn pcp_limits(
    managed: u64,
    low_wmark: u64,
    high_fraction: u32,
    node_cpus: u32,
    cpu_online: u32,
    online_cpus: u32,
) -> PcpLimits {
    let batch = stored_batch(managed);
    let highsize = |total| zone_highsize(total, batch, node_cpus, cpu_online, online_cpus);
    if high_fraction != 0 {
        let high = highsize(managed / high_fraction as u64);
        PcpLimits {
            batch,
            high_min: high,
            high_max: high,
        }
    } else {
        PcpLimits {
            batch,
            high_min: highsize(low_wmark),
            high_max: highsize(managed / MIN_PERCPU_PAGELIST_HIGH_FRACTION as u64),
        }
    }
}

/// The `FREE_HIGH_BATCH` rule (v6.7 patch 3): a CPU whose share of the last-level cache
/// holds more than three batches keeps a batch of pages on its PCP when a run of high-order
/// frees drains it. `slice_bytes` is the LLC size divided by the CPUs sharing it.
pub fn free_high_batch(slice_bytes: u64, batch: u64) -> bool {
    (slice_bytes >> crate::page::PAGE_SHIFT) > 3 * batch
}

/// The per-CPU data cache slice: LLC size ÷ CPUs sharing it (`per_cpu_data_slice_size`).
pub fn data_cache_slice(llc_bytes: u64, llc_shared_cpus: u32) -> u64 {
    llc_bytes / llc_shared_cpus.max(1) as u64
}

/// `calculate_normal_threshold`: how far a CPU's vmstat delta may drift before it is
/// folded into the zone counter. Grows with CPUs and with zone size (per 128 MiB), at most
/// 125.
pub fn stat_threshold(managed: u64, online_cpus: u32) -> u32 {
    let mem = managed >> (27 - crate::page::PAGE_SHIFT);
    let threshold = 2 * fls(online_cpus as u64) * (1 + fls(mem));
    threshold.min(125)
}

/// Find last set bit, 1-based; 0 for 0 (`fls`).
fn fls(x: u64) -> u32 {
    64 - x.leading_zeros()
}

fn rounddown_pow_of_two(x: u64) -> u64 {
    if x == 0 {
        0
    } else {
        1 << (63 - x.leading_zeros())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_matches_spec_oracle() {
        let cases: [(u64, u64); 15] = [
            (0, 1),
            (1024, 1),
            (3840, 1),
            (6144, 1),
            (8192, 1),
            (16384, 3),
            (65535, 15),
            (65536, 15),
            (100_000, 31),
            (176_127, 31),
            (176_128, 63),
            (196_608, 63),
            (772_915, 63),
            (4_194_304, 63),
            (u32::MAX as u64, 63),
        ];
        for (managed, batch) in cases {
            assert_eq!(stored_batch(managed), batch, "managed {managed}");
        }
        assert_eq!(zone_batchsize(6144), 0);
        assert_eq!(zone_batchsize(8192), 1);
    }

    #[test]
    fn high_limits_match_spec_oracle() {
        let cases = [
            (3840, 82, 41, 240),
            (772_915, 16770, 8385, 48307),
            (196_608, 4265, 2132, 12288),
            (786_432, 10625, 5312, 49152),
        ];
        for (managed, low, high_min, high_max) in cases {
            let limits = pcp_limits(managed, low, 0, 2, 0, 2);
            assert_eq!(
                (limits.high_min, limits.high_max),
                (high_min, high_max),
                "{managed}"
            );
        }
    }

    #[test]
    fn fraction_fixes_high() {
        let limits = pcp_limits(196_608, 4265, 8, 2, 0, 2);
        assert_eq!((limits.high_min, limits.high_max), (12288, 12288));
    }

    #[test]
    fn cpu_coming_online_counts_in_the_split() {
        let limits = pcp_limits(196_608, 4265, 0, 2, 1, 2);
        assert_eq!((limits.high_min, limits.high_max), (1421, 8192));
    }

    #[test]
    fn high_is_at_least_four_batches() {
        assert_eq!(zone_highsize(10, 63, 2, 0, 2), 252);
    }

    #[test]
    fn free_high_batch_needs_three_batches_of_cache() {
        // 266240 KiB shared by 2 CPUs: 33280 pages each > 189.
        assert!(free_high_batch(data_cache_slice(266_240 * 1024, 2), 63));
        // Spec O11: needs a slice of at least 778240 bytes for batch 63.
        assert!(free_high_batch(778_240, 63));
        assert!(!free_high_batch(778_239, 63));
    }

    #[test]
    fn stat_threshold_matches_live_zoneinfo() {
        assert_eq!(stat_threshold(3840, 2), 4);
        assert_eq!(stat_threshold(772_915, 2), 24);
        assert_eq!(stat_threshold(196_608, 2), 16);
        assert_eq!(stat_threshold(u32::MAX as u64, 256), 125);
    }
}
