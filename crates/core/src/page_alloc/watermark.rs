//! Watermarks, the lowmem reserve and the watermark checks.
//!
//! Linux counterpart (v6.7): `calculate_min_free_kbytes`, `__setup_per_zone_wmarks`,
//! `setup_per_zone_lowmem_reserve`, `boost_watermark`, `__zone_watermark_ok` and
//! `zone_watermark_fast` in `mm/page_alloc.c`; `set_recommended_min_free_kbytes` in
//! `mm/khugepaged.c`. The formulas are pure functions here so tests can check them against
//! `docs/reference/linux-mm.md` §8 without building a zone; [`super::Zone`] stores their results.

use core::sync::atomic::Ordering::Relaxed;

use super::gfp::AllocFlags;
use super::types::ZoneType;
use crate::page::Order;
use crate::sync::AtomicU64;

/// Pages per pageblock: the unit of migratetype grouping (`pageblock_nr_pages`, order 9).
pub const PAGEBLOCK_ORDER: u8 = 9;
/// Pages per pageblock.
pub const PAGEBLOCK_PAGES: u64 = 1 << PAGEBLOCK_ORDER;

/// Which watermark (`enum zone_watermarks`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum WatermarkKind {
    /// Below this only reserve-right callers allocate; direct reclaim happens.
    Min = 0,
    /// kswapd wakes below this.
    Low = 1,
    /// kswapd sleeps above this; the PCP shrinks below it (v6.7 `BELOW_HIGH`).
    High = 2,
    /// Memory tiering promotion target.
    Promo = 3,
}

/// The four stored watermarks of a zone and its boost, in pages. Written under the zone
/// lock, read without it (Linux reads `_watermark[]` racily too).
#[derive(Debug, Default)]
pub struct Watermarks {
    marks: [AtomicU64; 4],
    boost: AtomicU64,
}

impl Watermarks {
    /// The stored value of `kind`, without boost.
    #[inline]
    pub fn stored(&self, kind: WatermarkKind) -> u64 {
        self.marks[kind as usize].load(Relaxed)
    }

    /// The effective value: stored + boost (`wmark_pages`).
    #[inline]
    pub fn get(&self, kind: WatermarkKind) -> u64 {
        self.stored(kind) + self.boost()
    }

    /// The current watermark boost.
    #[inline]
    pub fn boost(&self) -> u64 {
        self.boost.load(Relaxed)
    }

    pub(crate) fn set(&self, values: ZoneWatermarks) {
        self.marks[0].store(values.min, Relaxed);
        self.marks[1].store(values.low, Relaxed);
        self.marks[2].store(values.high, Relaxed);
        self.marks[3].store(values.promo, Relaxed);
        // __setup_per_zone_wmarks resets the boost with the watermarks.
        self.boost.store(0, Relaxed);
    }

    pub(crate) fn set_boost(&self, boost: u64) {
        self.boost.store(boost, Relaxed)
    }
}

/// The watermarks computed for one zone.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ZoneWatermarks {
    /// `WMARK_MIN`.
    pub min: u64,
    /// `WMARK_LOW`.
    pub low: u64,
    /// `WMARK_HIGH`.
    pub high: u64,
    /// `WMARK_PROMO`.
    pub promo: u64,
}

/// Linux's default `min_free_kbytes` (`calculate_min_free_kbytes`): the integer square root
/// of 16 × the lowmem size in KiB, clamped to [128, 262144]. `lowmem_kbytes` is
/// `nr_free_buffer_pages() × 4`: Σ(managed − high) over zones ≤ Normal (at boot the high
/// watermarks are still 0).
pub fn default_min_free_kbytes(lowmem_kbytes: u64) -> u64 {
    isqrt(lowmem_kbytes * 16).clamp(128, 262_144)
}

/// What khugepaged raises `min_free_kbytes` to when transparent huge pages are enabled
/// (`set_recommended_min_free_kbytes`): per populated zone ≤ Normal, two free pageblocks
/// plus a pageblock for each pair of PCP migratetypes (3 × 3), capped at 5 % of
/// `free_buffer_pages`. In KiB. Linux applies it only if larger than the current value.
pub fn thp_recommended_min_free_kbytes(nr_zones: u64, free_buffer_pages: u64) -> u64 {
    let pcp_types = super::types::MIGRATE_PCPTYPES as u64;
    let pages = PAGEBLOCK_PAGES * nr_zones * 2 + PAGEBLOCK_PAGES * nr_zones * pcp_types * pcp_types;
    pages.min(free_buffer_pages / 20) * 4
}

/// The watermarks of one zone (`__setup_per_zone_wmarks`). `pages_min` is
/// `min_free_kbytes / 4`; `lowmem_pages` is Σ managed over lowmem zones (all nodes). The
/// min is the zone's proportional share of `pages_min`; Movable (and highmem) zones get a
/// small fixed min instead, `clamp(managed / 1024, 32, 128)`. The gap between marks is the
/// larger of a quarter of the share and `watermark_scale_factor` / 10000 of the zone.
pub fn zone_watermarks(
    zone_type: ZoneType,
    managed: u64,
    pages_min: u64,
    lowmem_pages: u64,
    watermark_scale_factor: u64,
) -> ZoneWatermarks {
    let share = if lowmem_pages == 0 {
        0
    } else {
        // 64-bit in Linux too (u64 tmp, do_div).
        (pages_min as u128 * managed as u128 / lowmem_pages as u128) as u64
    };
    let min = if zone_type == ZoneType::Movable {
        (managed / 1024).clamp(32, 128)
    } else {
        share
    };
    let dist = (share >> 2).max(mult_frac(managed, watermark_scale_factor, 10_000));
    ZoneWatermarks {
        min,
        low: min + dist,
        high: min + 2 * dist,
        promo: min + 3 * dist,
    }
}

/// `lowmem_reserve[]` of the zone at `zone_index` in a node whose zones have `managed`
/// pages (`setup_per_zone_lowmem_reserve`): for each higher zone j, the pages of the zones
/// above this one up to j, divided by this zone's ratio; all zero when the ratio is 0 or
/// the zone is empty.
///
/// Every index up to `MAX_NR_ZONES` gets its entry, also those of zone types the node
/// does not have (`managed` shorter: a machine without `ZONE_DEVICE`), which add no pages:
/// kswapd checks its node at the highest zone index there is
/// (`kswapd_highest_zoneidx`'s `MAX_NR_ZONES - 1`), and a zero reserve there would let a
/// lower zone above its high watermark balance the node while the zones above it are
/// below their low one.
pub fn lowmem_reserve(
    zone_index: usize,
    managed: &[u64],
    ratio: u32,
) -> [u64; super::MAX_NR_ZONES] {
    let mut reserve = [0; super::MAX_NR_ZONES];
    if ratio == 0 || managed[zone_index] == 0 {
        return reserve;
    }
    let mut above = 0;
    for (j, slot) in reserve.iter_mut().enumerate().skip(zone_index + 1) {
        above += managed.get(j).copied().unwrap_or(0);
        *slot = above / ratio as u64;
    }
    reserve
}

/// The new boost after a fragmenting fallback (`boost_watermark`), or `None` when Linux
/// would not boost: factor 0, a zone under four pageblocks, or no high watermark yet.
pub fn boosted(boost: u64, high: u64, managed: u64, watermark_boost_factor: u64) -> Option<u64> {
    if watermark_boost_factor == 0 || PAGEBLOCK_PAGES * 4 > managed {
        return None;
    }
    let max_boost = mult_frac(high, watermark_boost_factor, 10_000);
    if max_boost == 0 {
        return None;
    }
    let max_boost = max_boost.max(PAGEBLOCK_PAGES);
    Some((boost + PAGEBLOCK_PAGES).min(max_boost))
}

/// The state of a zone that a watermark check reads.
#[derive(Clone, Copy, Debug)]
pub struct WatermarkInput<'a> {
    /// `NR_FREE_PAGES`.
    pub free_pages: i64,
    /// `nr_reserved_highatomic`.
    pub reserved_highatomic: u64,
    /// `lowmem_reserve[highest_zoneidx]`.
    pub lowmem_reserve: u64,
    /// For each order, whether a block is free on a list the caller may use:
    /// `[order] = (on a PCP-type list, on the high-atomic list)`.
    pub free_blocks: &'a [(bool, bool)],
}

/// Pages the caller may not count as free (`__zone_watermark_unusable_free`): the part of
/// an order-n request that a smaller block cannot serve, and the high-atomic reserve unless
/// the caller has reserve rights.
pub fn unusable_free(order: Order, flags: AllocFlags, reserved_highatomic: u64) -> i64 {
    let mut unusable = order.pages() as i64 - 1;
    if !flags.intersects(AllocFlags::RESERVES) {
        unusable += reserved_highatomic as i64;
    }
    unusable
}

/// `__zone_watermark_ok`: is the zone above `mark` for this request? Strict: exactly at
/// `mark + reserve` fails. Reserve rights lower the mark: `__GFP_HIGH` by half, and a
/// non-blocking one a further quarter; the OOM victim by half again.
pub fn watermark_ok(order: Order, mark: u64, flags: AllocFlags, zone: &WatermarkInput<'_>) -> bool {
    let free = zone.free_pages - unusable_free(order, flags, zone.reserved_highatomic);
    let mut min = mark as i64;
    if flags.intersects(AllocFlags::RESERVES) {
        if flags.contains(AllocFlags::MIN_RESERVE) {
            min -= min / 2;
            if flags.contains(AllocFlags::NON_BLOCK) {
                min -= min / 4;
            }
        }
        if flags.contains(AllocFlags::OOM) {
            min -= min / 2;
        }
    }
    if free <= min + zone.lowmem_reserve as i64 {
        return false;
    }
    if order == Order::ZERO {
        return true;
    }
    let may_use_highatomic = flags.intersects(AllocFlags::HIGHATOMIC | AllocFlags::OOM);
    zone.free_blocks[order.index()..]
        .iter()
        .any(|&(pcp_types, highatomic)| pcp_types || (may_use_highatomic && highatomic))
}

/// `zone_watermark_fast`: an order-0 shortcut that needs no free-list walk, then the full
/// check; an order-0 `__GFP_HIGH` request at the min watermark ignores the boost. The
/// stored min and the boost are read from `watermarks` only in that last case, as Linux
/// reads `z->watermark_boost` only there.
#[inline]
pub fn watermark_fast(
    order: Order,
    mark: u64,
    flags: AllocFlags,
    watermarks: &Watermarks,
    zone: &WatermarkInput<'_>,
) -> bool {
    if order == Order::ZERO && order0_above(mark, flags, zone) {
        return true;
    }
    if watermark_ok(order, mark, flags, zone) {
        return true;
    }
    if order == Order::ZERO
        && flags.contains(AllocFlags::MIN_RESERVE)
        && watermarks.boost() != 0
        && flags.wmark() == WatermarkKind::Min
    {
        return watermark_ok(order, watermarks.stored(WatermarkKind::Min), flags, zone);
    }
    false
}

/// The order-0 shortcut at the start of `zone_watermark_fast`: the free pages the caller
/// may use are above `mark` plus the lowmem reserve.
#[inline(always)]
pub fn order0_above(mark: u64, flags: AllocFlags, zone: &WatermarkInput<'_>) -> bool {
    let reserved = unusable_free(Order::ZERO, flags, zone.reserved_highatomic);
    let usable = zone.free_pages - zone.free_pages.min(reserved);
    usable > (mark + zone.lowmem_reserve) as i64
}

/// `mult_frac(x, n, d)`: x × n / d without overflowing x × n.
pub const fn mult_frac(x: u64, numerator: u64, denominator: u64) -> u64 {
    let quotient = x / denominator;
    let remainder = x % denominator;
    quotient * numerator + remainder * numerator / denominator
}

/// Integer square root, rounding down (`int_sqrt`).
pub fn isqrt(x: u64) -> u64 {
    if x < 2 {
        return x;
    }
    // Newton's iteration from an upper bound converges down to floor(sqrt(x)).
    let mut guess = 1u64 << (64 - x.leading_zeros()).div_ceil(2);
    loop {
        let next = (guess + x / guess) / 2;
        if next >= guess {
            return guess;
        }
        guess = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ZONES: [(ZoneType, u64); 3] = [
        (ZoneType::Dma, 3840),
        (ZoneType::Dma32, 772_915),
        (ZoneType::Normal, 196_608),
    ];

    fn marks(zones: &[(ZoneType, u64)], min_free_kbytes: u64) -> alloc::vec::Vec<ZoneWatermarks> {
        let lowmem: u64 = zones.iter().filter(|z| z.0.is_lowmem()).map(|z| z.1).sum();
        zones
            .iter()
            .map(|&(t, m)| zone_watermarks(t, m, min_free_kbytes / 4, lowmem, 10))
            .collect()
    }

    #[test]
    fn watermarks_match_spec_oracle() {
        let w = marks(&ZONES, 67_584);
        let got: alloc::vec::Vec<_> = w.iter().map(|w| (w.min, w.low, w.high, w.promo)).collect();
        assert_eq!(
            got,
            [
                (66, 82, 98, 114),
                (13416, 16770, 20124, 23478),
                (3412, 4265, 5118, 5971)
            ]
        );
    }

    #[test]
    fn watermarks_follow_a_grown_normal_zone() {
        let zones = [ZONES[0], ZONES[1], (ZoneType::Normal, 786_432)];
        let w = marks(&zones, 67_584);
        assert_eq!((w[0].min, w[0].low, w[0].high), (41, 51, 61));
        assert_eq!((w[1].min, w[1].low, w[1].high), (8354, 10442, 12530));
        assert_eq!(
            (w[2].min, w[2].low, w[2].high, w[2].promo),
            (8500, 10625, 12750, 14875)
        );
    }

    #[test]
    fn empty_movable_zone_gets_the_fixed_minimum() {
        let w = zone_watermarks(ZoneType::Movable, 0, 16896, 973_363, 10);
        assert_eq!((w.min, w.low, w.high, w.promo), (32, 32, 32, 32));
    }

    #[test]
    fn thp_raises_min_free_kbytes_for_three_zones() {
        // 512·3·2 + 512·3·9 = 16896 pages = 67584 KiB, below 5 % of ~973k pages.
        assert_eq!(thp_recommended_min_free_kbytes(3, 973_363), 67_584);
        assert_eq!(thp_recommended_min_free_kbytes(3, 100_000), 5_000 * 4);
    }

    #[test]
    fn default_min_free_kbytes_is_sqrt_of_16x_lowmem() {
        // 973363 pages = 3893452 KiB; sqrt(62295232) = 7892.7.
        assert_eq!(default_min_free_kbytes(973_363 * 4), 7892);
        assert_eq!(default_min_free_kbytes(100), 128);
        assert_eq!(default_min_free_kbytes(u32::MAX as u64 * 4096), 262_144);
    }

    #[test]
    fn lowmem_reserve_matches_live_protection() {
        let managed = [3840, 772_915, 196_608, 0];
        assert_eq!(lowmem_reserve(0, &managed, 256)[..4], [0, 3019, 3787, 3787]);
        assert_eq!(lowmem_reserve(1, &managed, 256)[..4], [0, 0, 768, 768]);
        assert_eq!(lowmem_reserve(2, &managed, 32)[..4], [0, 0, 0, 0]);
        assert_eq!(lowmem_reserve(0, &[0, 10, 10, 0], 256), [0; 5]);
    }

    #[test]
    fn watermark_check_is_strict_and_reserve_rights_lower_it() {
        let zone = WatermarkInput {
            free_pages: 100,
            reserved_highatomic: 0,
            lowmem_reserve: 40,
            free_blocks: &[(true, false); 11],
        };
        assert!(!watermark_ok(Order::ZERO, 60, AllocFlags::empty(), &zone));
        assert!(watermark_ok(
            Order::ZERO,
            60,
            AllocFlags::MIN_RESERVE,
            &zone
        ));
    }

    #[test]
    fn high_order_check_needs_a_block_of_that_order() {
        let mut blocks = [(false, false); 11];
        blocks[2] = (false, true);
        let zone = WatermarkInput {
            free_pages: 1000,
            reserved_highatomic: 0,
            lowmem_reserve: 0,
            free_blocks: &blocks,
        };
        let order2 = Order::new(2).unwrap();
        assert!(!watermark_ok(order2, 10, AllocFlags::empty(), &zone));
        assert!(watermark_ok(order2, 10, AllocFlags::HIGHATOMIC, &zone));
        assert!(!watermark_ok(
            Order::new(3).unwrap(),
            10,
            AllocFlags::OOM,
            &zone
        ));
    }

    #[test]
    fn boost_grows_by_a_pageblock_up_to_the_factor() {
        // high 5118 × 15000 / 10000 = 7677.
        assert_eq!(boosted(0, 5118, 196_608, 15_000), Some(512));
        assert_eq!(boosted(7600, 5118, 196_608, 15_000), Some(7677));
        assert_eq!(boosted(0, 5118, 196_608, 0), None);
        assert_eq!(boosted(0, 98, 2047, 15_000), None);
    }

    #[test]
    fn isqrt_rounds_down() {
        for x in [0u64, 1, 2, 3, 4, 15, 16, 17, 1 << 40, u64::MAX] {
            let r = isqrt(x);
            assert!(r * r <= x, "{x}");
            assert!((r + 1).checked_mul(r + 1).is_none_or(|sq| sq > x), "{x}");
        }
    }
}
