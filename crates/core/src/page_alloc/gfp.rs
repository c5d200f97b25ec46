//! GFP flags (what the caller asks for) and alloc flags (what the allocator may do).
//!
//! Linux counterpart: `include/linux/gfp_types.h`, `gfp_zone()`, `gfp_migratetype()`,
//! the `ALLOC_*` flags of `mm/internal.h` and `gfp_to_alloc_flags()` in
//! `mm/page_alloc.c` (v6.7). Bit values follow v6.7 so that traced `gfp_flags` decode.

use super::types::{MigrateType, ZoneType};
use super::watermark::WatermarkKind;
use super::AllocError;
use crate::page::Order;

bitflags::bitflags! {
    /// Get-free-pages flags: the zone, mobility and reclaim rights of a request.
    ///
    /// # What the page allocator does with each bit
    ///
    /// Every bit is acted on, kept by construction, owed by the caller, or refused; none
    /// is accepted and then ignored.
    ///
    /// | bit | the page allocator |
    /// |---|---|
    /// | `DMA`, `DMA32`, `HIGHMEM`, `MOVABLE` | choose the highest zone ([`Gfp::zone`]); two zone modifiers are refused |
    /// | `MOVABLE`, `RECLAIMABLE` | choose the migratetype ([`Gfp::migratetype`]); both at once are refused |
    /// | `HIGH` | may use half the min reserve (`ALLOC_MIN_RESERVE`) |
    /// | `DIRECT_RECLAIM` | the caller may block: before failing, the slow path gives back high-atomic pageblocks and drains the pagesets; without it, more of the reserve (`ALLOC_NON_BLOCK`) and, for high orders, the high-atomic reserve |
    /// | `KSWAPD_RECLAIM` | wake kswapd (a request below the low watermark, a boosted watermark) |
    /// | `NORETRY` | the slow path fails after its first drain and retry, keeping the rest of the high-atomic reserve (Linux gives up before `should_reclaim_retry`) |
    /// | `MEMALLOC`, `NOMEMALLOC` | ignore the watermarks; never use the reserves |
    /// | `THISNODE` | only zones of the preferred node |
    /// | `IO`, `FS` | kept by construction: they limit what direct reclaim may do, and the allocator reclaims nothing itself (kswapd and the mapping layer do) |
    /// | `NOWARN` | kept by construction: the core never warns; a failure is only its error |
    /// | `RETRY_MAYFAIL` | kept by construction: there is no OOM killer, and a failure is an error |
    /// | `HARDWALL` | kept by construction: there are no cpusets, every request is in the root one |
    /// | `ZERO`, `COMP`, `ACCOUNT` | owed by the caller ([`Gfp::OWED_BY_CALLER`]): work on memory or structures the allocator does not own |
    /// | `NOFAIL` | refused ([`AllocError::InvalidGfp`]): the core cannot wait for memory to be freed, so it cannot promise success; a caller that must not fail retries `OutOfMemory` itself, after reclaiming |
    /// | a bit not defined here | refused ([`AllocError::InvalidGfp`]) |
    ///
    /// ```
    /// # use mmkit_core::topology::{CacheInfo, ZoneSize};
    /// # use mmkit_core::{PageAllocator, Policy, Settings, Topology, ZoneType};
    /// use mmkit_core::page_alloc::Caller;
    /// use mmkit_core::page_alloc::MigrateType;
    /// use mmkit_core::{AllocError, Gfp, Order};
    ///
    /// # let zones = [ZoneSize::managed(0, ZoneType::Normal, 16_384)];
    /// # let llc = CacheInfo { llc_bytes: 8 << 20, llc_shared_cpus: 1 };
    /// # let topology = Topology::x86_64(&zones, vec![1], llc, false)?;
    /// # let allocator = PageAllocator::new(topology, Settings::default(), Policy::V6_7)?;
    /// // A user page: movable, from the highest zone, may reclaim.
    /// let gfp = Gfp::HIGHUSER_MOVABLE;
    /// assert!(gfp.contains(Gfp::DIRECT_RECLAIM));
    /// assert_eq!(gfp.migratetype(), Ok(MigrateType::Movable));
    /// let pfn = allocator.alloc_pages(Caller::task(0), gfp, Order::ZERO)?;
    /// allocator.free_pages(Caller::task(0), pfn, Order::ZERO)?;
    /// // A promise the core cannot keep is refused, not ignored.
    /// let nofail = allocator.alloc_pages(Caller::task(0), Gfp::KERNEL | Gfp::NOFAIL, Order::ZERO);
    /// assert!(matches!(nofail, Err(AllocError::InvalidGfp(_))));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[derive(Clone, Copy, PartialEq, Eq, Debug, Default, Hash)]
    pub struct Gfp: u32 {
        /// Zone DMA only (`__GFP_DMA`).
        const DMA = 0x01;
        /// May use highmem; with `MOVABLE` selects ZONE_MOVABLE (`__GFP_HIGHMEM`).
        const HIGHMEM = 0x02;
        /// Zone DMA32 or below (`__GFP_DMA32`).
        const DMA32 = 0x04;
        /// The page can be migrated or reclaimed (`__GFP_MOVABLE`).
        const MOVABLE = 0x08;
        /// Slab memory a shrinker can free (`__GFP_RECLAIMABLE`).
        const RECLAIMABLE = 0x10;
        /// High priority: may dip into half the min reserve (`__GFP_HIGH`).
        const HIGH = 0x20;
        /// May start physical I/O (`__GFP_IO`).
        const IO = 0x40;
        /// May call into the filesystem (`__GFP_FS`).
        const FS = 0x80;
        /// Return zeroed pages (`__GFP_ZERO`).
        const ZERO = 0x100;
        /// May enter direct reclaim: the caller can sleep (`__GFP_DIRECT_RECLAIM`).
        const DIRECT_RECLAIM = 0x400;
        /// Wake kswapd when below the low watermark (`__GFP_KSWAPD_RECLAIM`).
        const KSWAPD_RECLAIM = 0x800;
        /// Do not warn on failure (`__GFP_NOWARN`).
        const NOWARN = 0x2000;
        /// Retry hard but may fail (`__GFP_RETRY_MAYFAIL`).
        const RETRY_MAYFAIL = 0x4000;
        /// Must not fail (`__GFP_NOFAIL`).
        const NOFAIL = 0x8000;
        /// Give up early (`__GFP_NORETRY`).
        const NORETRY = 0x10000;
        /// Ignore watermarks entirely: memory reclaim itself is allocating (`__GFP_MEMALLOC`).
        const MEMALLOC = 0x20000;
        /// Set up a compound page (`__GFP_COMP`).
        const COMP = 0x40000;
        /// Never use the emergency reserves (`__GFP_NOMEMALLOC`).
        const NOMEMALLOC = 0x80000;
        /// Enforce the cpuset hardwall (`__GFP_HARDWALL`).
        const HARDWALL = 0x100000;
        /// Only the requested node (`__GFP_THISNODE`).
        const THISNODE = 0x200000;
        /// Charge to the caller's memcg (`__GFP_ACCOUNT`).
        const ACCOUNT = 0x400000;

        /// Both reclaim kinds (`__GFP_RECLAIM`).
        const RECLAIM = Self::DIRECT_RECLAIM.bits() | Self::KSWAPD_RECLAIM.bits();
        /// Interrupt context, cannot sleep (`GFP_ATOMIC`).
        const ATOMIC = Self::HIGH.bits() | Self::KSWAPD_RECLAIM.bits();
        /// Ordinary kernel allocation (`GFP_KERNEL`).
        const KERNEL = Self::RECLAIM.bits() | Self::IO.bits() | Self::FS.bits();
        /// Kernel allocation charged to a memcg (`GFP_KERNEL_ACCOUNT`).
        const KERNEL_ACCOUNT = Self::KERNEL.bits() | Self::ACCOUNT.bits();
        /// Cannot sleep, no reserves (`GFP_NOWAIT`).
        const NOWAIT = Self::KSWAPD_RECLAIM.bits();
        /// User-space allocation the kernel touches (`GFP_USER`).
        const USER = Self::KERNEL.bits() | Self::HARDWALL.bits();
        /// User pages that can move (`GFP_HIGHUSER_MOVABLE`).
        const HIGHUSER_MOVABLE = Self::USER.bits() | Self::HIGHMEM.bits() | Self::MOVABLE.bits();
        /// A transparent huge page, with direct reclaim (`GFP_TRANSHUGE`).
        const TRANSHUGE = (Self::HIGHUSER_MOVABLE.bits() | Self::COMP.bits()
            | Self::NOMEMALLOC.bits() | Self::NOWARN.bits()) & !Self::KSWAPD_RECLAIM.bits();
    }
}

const GFP_ZONE_MASK: Gfp = Gfp::DMA
    .union(Gfp::HIGHMEM)
    .union(Gfp::DMA32)
    .union(Gfp::MOVABLE);

/// The bits no allocation honours: `__GFP_NOFAIL` and those mmkit does not define.
pub(crate) const GFP_REFUSED: Gfp = Gfp::NOFAIL.union(Gfp::from_bits_retain(!Gfp::all().bits()));

/// The bits that send an order-0 request past the pageset fast path to the general
/// path: `__GFP_THISNODE`, whose preferred zone is searched for, and the refused bits,
/// which the general path reports. One test, as `__GFP_THISNODE` alone was.
pub(crate) const GFP_NOT_FAST: Gfp = Gfp::THISNODE.union(GFP_REFUSED);

/// The bits [`Gfp::zone`] and [`Gfp::migratetype`] read: the zone modifiers and the two
/// mobility flags, the low five bits.
const GFP_DECODE_MASK: Gfp = GFP_ZONE_MASK.union(Gfp::RECLAIMABLE);
const _: () = assert!(GFP_DECODE_MASK.bits() == 0x1f);

/// How many values the [`GFP_DECODE_MASK`] bits take: the length of a table indexed by
/// [`Gfp::decode_index`].
pub(crate) const GFP_DECODE_COMBINATIONS: usize = GFP_DECODE_MASK.bits() as usize + 1;

/// [`Gfp::decode`] of every value of the [`GFP_DECODE_MASK`] bits.
static GFP_DECODE: [Result<(ZoneType, MigrateType), AllocError>; GFP_DECODE_COMBINATIONS] = {
    let mut table = [Err(AllocError::NoZone); GFP_DECODE_COMBINATIONS];
    let mut bits = 0;
    while bits < GFP_DECODE_COMBINATIONS {
        table[bits] = Gfp::from_bits_retain(bits as u32).decode();
        bits += 1;
    }
    table
};

impl Gfp {
    /// The bits whose work the page allocator leaves to its caller, because it is done
    /// on memory or structures the allocator does not own. A block allocated with any of
    /// them is handed out with that work still to do ([`Gfp::owed_by_caller`]):
    ///
    /// - `__GFP_ZERO`: zero the block's memory. The core never reads or writes page
    ///   contents (it may not even be able to address them); Linux zeroes in
    ///   `post_alloc_hook`. `mmkit-runtime` zeroes before it returns the block.
    /// - `__GFP_COMP`: link the tails to the head (`prep_compound_page`). The core frees
    ///   every block whole by its order anyway; the mapping layer's folios set the links.
    /// - `__GFP_ACCOUNT`: charge a memcg (`__memcg_kmem_charge_page`). The page allocator
    ///   has no memcgs; the mapping layer charges its own. The bulk allocator still takes
    ///   one page at a time for it, as Linux does.
    ///
    /// ```
    /// use mmkit_core::Gfp;
    ///
    /// let gfp = Gfp::KERNEL | Gfp::ZERO;
    /// assert_eq!(gfp.owed_by_caller(), Gfp::ZERO);
    /// assert!(Gfp::KERNEL.owed_by_caller().is_empty());
    /// ```
    pub const OWED_BY_CALLER: Gfp = Gfp::ZERO.union(Gfp::COMP).union(Gfp::ACCOUNT);

    /// What the caller of an allocation with these flags still has to do to the block
    /// ([`Gfp::OWED_BY_CALLER`]).
    #[inline(always)]
    pub const fn owed_by_caller(self) -> Gfp {
        self.intersection(Gfp::OWED_BY_CALLER)
    }

    /// Refuse the flags no allocation can honour: `__GFP_NOFAIL` (the core cannot wait
    /// for memory to be freed) and bits mmkit does not define.
    pub const fn refused(self) -> Result<(), AllocError> {
        if self.contains(Gfp::NOFAIL) {
            return Err(AllocError::InvalidGfp(
                "__GFP_NOFAIL: the allocator cannot wait for memory, so it cannot promise \
                 success; retry OutOfMemory in the caller",
            ));
        }
        if self.intersects(GFP_REFUSED) {
            return Err(AllocError::InvalidGfp("a bit mmkit does not define"));
        }
        Ok(())
    }

    /// The highest zone the request may use (`gfp_zone`, x86-64: no highmem, so
    /// `__GFP_HIGHMEM` means Normal unless combined with `__GFP_MOVABLE`).
    pub const fn zone(self) -> Result<ZoneType, AllocError> {
        let zone_bits = self.intersection(GFP_ZONE_MASK);
        let movable = zone_bits.contains(Gfp::MOVABLE);
        match zone_bits.difference(Gfp::MOVABLE).bits() {
            0 => Ok(ZoneType::Normal),
            b if b == Gfp::DMA.bits() => Ok(ZoneType::Dma),
            b if b == Gfp::DMA32.bits() => Ok(ZoneType::Dma32),
            b if b == Gfp::HIGHMEM.bits() && movable => Ok(ZoneType::Movable),
            b if b == Gfp::HIGHMEM.bits() => Ok(ZoneType::Normal),
            _ => Err(AllocError::InvalidGfp("more than one zone modifier")),
        }
    }

    /// The migratetype of the request (`gfp_migratetype`).
    pub const fn migratetype(self) -> Result<MigrateType, AllocError> {
        match (self.contains(Gfp::MOVABLE), self.contains(Gfp::RECLAIMABLE)) {
            (false, false) => Ok(MigrateType::Unmovable),
            (true, false) => Ok(MigrateType::Movable),
            (false, true) => Ok(MigrateType::Reclaimable),
            (true, true) => Err(AllocError::InvalidGfp(
                "__GFP_MOVABLE and __GFP_RECLAIMABLE together",
            )),
        }
    }

    /// [`Gfp::zone`] then [`Gfp::migratetype`] (the first error wins), read from a table
    /// of every combination of the five bits they look at, as Linux's `GFP_ZONE_TABLE`
    /// does for the zone: one load on the allocation fast path.
    #[inline]
    pub(crate) fn zone_and_migratetype(self) -> Result<(ZoneType, MigrateType), AllocError> {
        GFP_DECODE[self.decode_index()]
    }

    /// The value of the bits [`Gfp::zone_and_migratetype`] reads: an index into a table
    /// of [`GFP_DECODE_COMBINATIONS`] entries, one per way to decode them.
    #[inline(always)]
    pub(crate) fn decode_index(self) -> usize {
        (self.bits() & GFP_DECODE_MASK.bits()) as usize
    }

    /// The uncached decode behind [`GFP_DECODE`].
    const fn decode(self) -> Result<(ZoneType, MigrateType), AllocError> {
        let zone = match self.zone() {
            Ok(zone) => zone,
            Err(e) => return Err(e),
        };
        match self.migratetype() {
            Ok(mt) => Ok((zone, mt)),
            Err(e) => Err(e),
        }
    }

    /// Whether the caller may sleep (`gfpflags_allow_blocking`).
    pub fn allows_blocking(self) -> bool {
        self.contains(Gfp::DIRECT_RECLAIM)
    }
}

bitflags::bitflags! {
    /// What one pass over the zones may do (`ALLOC_*`). The low two bits select the
    /// watermark; use [`AllocFlags::with_wmark`] and [`AllocFlags::wmark`].
    #[derive(Clone, Copy, PartialEq, Eq, Debug, Default, Hash)]
    pub struct AllocFlags: u32 {
        /// Watermark selector bits (`ALLOC_WMARK_MASK`).
        const WMARK_MASK = 0x03;
        /// Skip the watermark checks (`ALLOC_NO_WATERMARKS`).
        const NO_WATERMARKS = 0x04;
        /// The OOM victim may use more of the reserve (`ALLOC_OOM`).
        const OOM = 0x08;
        /// The caller cannot block: a quarter more of the min reserve (`ALLOC_NON_BLOCK`).
        const NON_BLOCK = 0x10;
        /// `__GFP_HIGH`: half of the min reserve (`ALLOC_MIN_RESERVE`).
        const MIN_RESERVE = 0x20;
        /// Honour cpusets (`ALLOC_CPUSET`).
        const CPUSET = 0x40;
        /// May use CMA areas (`ALLOC_CMA`; CMA is not configured).
        const CMA = 0x80;
        /// Do not fall back to other migratetypes below pageblock order (`ALLOC_NOFRAGMENT`).
        const NOFRAGMENT = 0x100;
        /// A high-order atomic request: may use and grow the high-atomic reserve.
        const HIGHATOMIC = 0x200;
        /// Wake kswapd when a watermark is boosted (`ALLOC_KSWAPD`).
        const KSWAPD = 0x800;

        /// The flags with rights below the min watermark (`ALLOC_RESERVES`).
        const RESERVES = Self::NON_BLOCK.bits() | Self::MIN_RESERVE.bits()
            | Self::HIGHATOMIC.bits() | Self::OOM.bits();
    }
}

impl AllocFlags {
    /// The watermark this pass checks.
    pub fn wmark(self) -> WatermarkKind {
        match (self & AllocFlags::WMARK_MASK).bits() {
            0 => WatermarkKind::Min,
            1 => WatermarkKind::Low,
            2 => WatermarkKind::High,
            _ => WatermarkKind::Promo,
        }
    }

    /// These flags checking `kind` instead.
    pub fn with_wmark(self, kind: WatermarkKind) -> AllocFlags {
        (self - AllocFlags::WMARK_MASK) | AllocFlags::from_bits_retain(kind as u32)
    }

    /// The slow path's flags (`gfp_to_alloc_flags`, v6.7): the min watermark, reserve
    /// rights from `__GFP_HIGH`, and for callers that cannot block, more reserve and the
    /// high-atomic reserve for high orders.
    pub fn slow_path(gfp: Gfp, order: Order) -> AllocFlags {
        let mut flags = AllocFlags::CPUSET.with_wmark(WatermarkKind::Min);
        if gfp.contains(Gfp::HIGH) {
            flags |= AllocFlags::MIN_RESERVE;
        }
        if gfp.contains(Gfp::KSWAPD_RECLAIM) {
            flags |= AllocFlags::KSWAPD;
        }
        if !gfp.allows_blocking() {
            // Not worth trying harder for __GFP_NOMEMALLOC even if it cannot sleep.
            if !gfp.contains(Gfp::NOMEMALLOC) {
                flags |= AllocFlags::NON_BLOCK;
                if order.get() > 0 {
                    flags |= AllocFlags::HIGHATOMIC;
                }
            }
            // Non-blocking __GFP_HIGH (GFP_ATOMIC) ignores cpuset placement.
            if flags.contains(AllocFlags::MIN_RESERVE) {
                flags -= AllocFlags::CPUSET;
            }
        }
        flags
    }

    /// Extra rights for callers that reclaim memory themselves (`__gfp_pfmemalloc_flags`:
    /// `__GFP_MEMALLOC` ignores watermarks unless `__GFP_NOMEMALLOC` forbids it).
    pub fn pfmemalloc(gfp: Gfp) -> AllocFlags {
        if gfp.contains(Gfp::NOMEMALLOC) || !gfp.contains(Gfp::MEMALLOC) {
            AllocFlags::empty()
        } else {
            AllocFlags::NO_WATERMARKS
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gfp_zone_follows_the_x86_64_table() {
        assert_eq!(Gfp::KERNEL.zone(), Ok(ZoneType::Normal));
        assert_eq!((Gfp::KERNEL | Gfp::DMA).zone(), Ok(ZoneType::Dma));
        assert_eq!((Gfp::KERNEL | Gfp::DMA32).zone(), Ok(ZoneType::Dma32));
        assert_eq!(Gfp::HIGHUSER_MOVABLE.zone(), Ok(ZoneType::Movable));
        assert_eq!((Gfp::USER | Gfp::MOVABLE).zone(), Ok(ZoneType::Normal));
        assert_eq!((Gfp::USER | Gfp::HIGHMEM).zone(), Ok(ZoneType::Normal));
        assert!((Gfp::DMA | Gfp::DMA32).zone().is_err());
    }

    #[test]
    fn gfp_migratetype_rejects_two_mobilities() {
        assert_eq!(Gfp::KERNEL.migratetype(), Ok(MigrateType::Unmovable));
        assert_eq!(
            Gfp::HIGHUSER_MOVABLE.migratetype(),
            Ok(MigrateType::Movable)
        );
        assert_eq!(
            (Gfp::KERNEL | Gfp::RECLAIMABLE).migratetype(),
            Ok(MigrateType::Reclaimable)
        );
        assert!((Gfp::MOVABLE | Gfp::RECLAIMABLE).migratetype().is_err());
    }

    #[test]
    fn decode_table_agrees_with_zone_and_migratetype() {
        for bits in 0..1u32 << 6 {
            let gfp = Gfp::from_bits_retain(bits) | Gfp::KERNEL;
            let expected = gfp.zone().and_then(|z| Ok((z, gfp.migratetype()?)));
            assert_eq!(gfp.zone_and_migratetype(), expected, "{gfp:?}");
        }
    }

    /// The table in [`Gfp`]'s documentation, as sets: every defined bit is in exactly
    /// one, so a bit added later must be given a row; only the refused ones are refused.
    #[test]
    fn every_gfp_bit_is_acted_on_kept_owed_or_refused() {
        let acted = Gfp::DMA
            | Gfp::HIGHMEM
            | Gfp::DMA32
            | Gfp::MOVABLE
            | Gfp::RECLAIMABLE
            | Gfp::HIGH
            | Gfp::DIRECT_RECLAIM
            | Gfp::KSWAPD_RECLAIM
            | Gfp::NORETRY
            | Gfp::MEMALLOC
            | Gfp::NOMEMALLOC
            | Gfp::THISNODE;
        let kept = Gfp::IO | Gfp::FS | Gfp::NOWARN | Gfp::RETRY_MAYFAIL | Gfp::HARDWALL;
        let owed = Gfp::OWED_BY_CALLER;
        let refused = Gfp::NOFAIL;
        let rows = [acted, kept, owed, refused];
        for (i, a) in rows.iter().enumerate() {
            for b in &rows[i + 1..] {
                assert!(!a.intersects(*b), "{a:?} and {b:?} share a bit");
            }
        }
        assert_eq!(acted | kept | owed | refused, Gfp::all());
        for bit in Gfp::all().iter() {
            let expected = bit.intersects(refused);
            assert_eq!(bit.refused().is_err(), expected, "{bit:?}");
            assert_eq!((Gfp::KERNEL | bit).refused().is_err(), expected, "{bit:?}");
        }
        for shift in 0..32 {
            let bit = Gfp::from_bits_retain(1 << shift);
            if !Gfp::all().contains(bit) {
                assert!(bit.refused().is_err(), "undefined bit {shift}");
            }
        }
        assert_eq!(GFP_NOT_FAST, Gfp::THISNODE | GFP_REFUSED);
    }

    #[test]
    fn atomic_high_order_gets_reserve_rights() {
        let flags = AllocFlags::slow_path(Gfp::ATOMIC, Order::new(2).unwrap());
        assert_eq!(flags.wmark(), WatermarkKind::Min);
        assert!(flags.contains(AllocFlags::MIN_RESERVE | AllocFlags::NON_BLOCK));
        assert!(flags.contains(AllocFlags::HIGHATOMIC | AllocFlags::KSWAPD));
        assert!(!flags.contains(AllocFlags::CPUSET));
        // __GFP_NOMEMALLOC: no extra reserves, no high-atomic reserve.
        let nomemalloc =
            AllocFlags::slow_path(Gfp::ATOMIC | Gfp::NOMEMALLOC, Order::new(2).unwrap());
        assert!(!nomemalloc.intersects(AllocFlags::NON_BLOCK | AllocFlags::HIGHATOMIC));
        let kernel = AllocFlags::slow_path(Gfp::KERNEL, Order::ZERO);
        assert!(!kernel.intersects(AllocFlags::RESERVES));
        // GFP_NOWAIT cannot block but has no __GFP_HIGH: ALLOC_NON_BLOCK only.
        let nowait = AllocFlags::slow_path(Gfp::NOWAIT, Order::ZERO);
        assert!(nowait.contains(AllocFlags::NON_BLOCK));
        assert!(!nowait.contains(AllocFlags::MIN_RESERVE));
        assert!(
            nowait.contains(AllocFlags::CPUSET),
            "only __GFP_HIGH ignores cpusets"
        );
    }
}
