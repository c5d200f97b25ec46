//! The page allocator of a whole machine: zones of every node, zonelists, settings, and the
//! allocation and free entry points.
//!
//! Linux counterpart (v6.7): `__alloc_pages`, `prepare_alloc_pages`,
//! `get_page_from_freelist`, `rmqueue_buddy`, `__alloc_pages_slowpath` (reduced),
//! `__free_pages_ok`, `build_zonelists`, `setup_per_zone_wmarks`,
//! `init_per_zone_wmark_min`, and the sysctl handlers that recompute watermarks and PCP
//! limits. Direct reclaim, compaction and the OOM killer are not in the core yet: the slow
//! path gives back the high-atomic reserve and then reports [`AllocError::OutOfMemory`].

use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

use super::error::{AllocError, FreeError};
use super::free_area::ListEnd;
use super::gfp::{AllocFlags, Gfp};
use super::pcp_sizing;
use super::types::{MigrateType, NodeId, ZoneType, MIGRATE_TYPES};
use super::watermark::{self, WatermarkKind, PAGEBLOCK_PAGES};
use super::zone::{Zone, ZoneFlags};
use crate::page::{Order, PageFlags, PageState, Pfn};
use crate::settings::{MinFreeKbytes, Settings, SettingsError};
use crate::sync::SpinLock;
use crate::topology::{Topology, ZoneSpec};

/// kswapd wake-ups requested for a node. The core only records them; a runtime or
/// simulator runs the reclaim.
#[derive(Debug, Default)]
pub struct KswapdState {
    /// Wake-ups requested.
    pub wakeups: AtomicU64,
    /// A wake-up is pending.
    pub pending: AtomicBool,
}

/// The zones of every node and the allocator's entry points.
#[derive(Debug)]
pub struct PageAllocator {
    topology: Topology,
    /// Node-major: node n's zone of type t is at `n * nr_zone_types + t`.
    zones: Vec<Zone>,
    nr_zone_types: usize,
    /// Per node: zone indices in fallback order (`ZONELIST_FALLBACK`).
    zonelists: Vec<Vec<usize>>,
    /// Spanning zones sorted by start pfn, for pfn → zone.
    pfn_ranges: Vec<(u64, u64, usize)>,
    settings: SpinLock<Settings>,
    min_free_kbytes: AtomicU64,
    kswapd: Vec<KswapdState>,
}

/// A request after `prepare_alloc_pages`.
struct AllocContext<'a> {
    gfp: Gfp,
    order: Order,
    migratetype: MigrateType,
    highest_zoneidx: ZoneType,
    zonelist: &'a [usize],
    preferred: usize,
}

impl PageAllocator {
    /// Build the zones of `topology`, free their managed memory into the buddy lists, and
    /// compute watermarks, reserves and PCP limits as boot does.
    pub fn new(topology: Topology, settings: Settings) -> Result<PageAllocator, SettingsError> {
        settings.validate()?;
        let nr_zone_types = topology.nr_zone_types();
        let nr_cpus = topology.nr_cpus();
        let mut zones = Vec::new();
        for node in 0..topology.nr_nodes() as NodeId {
            for zone_type in &ZoneType::ALL[..nr_zone_types] {
                let spec = topology
                    .zones()
                    .iter()
                    .find(|z| z.node == node && z.zone_type == *zone_type)
                    .copied()
                    .unwrap_or(ZoneSpec {
                        node,
                        zone_type: *zone_type,
                        start_pfn: Pfn(0),
                        spanned: 0,
                        present: 0,
                        managed: 0,
                    });
                zones.push(Zone::new(&spec, nr_cpus));
            }
        }
        let zonelists = build_zonelists(&zones, nr_zone_types, topology.nr_nodes());
        let mut pfn_ranges: Vec<_> = zones
            .iter()
            .enumerate()
            .filter(|(_, z)| z.spanned > 0)
            .map(|(i, z)| (z.start_pfn.0, z.start_pfn.0 + z.spanned, i))
            .collect();
        pfn_ranges.sort_unstable();
        let allocator = PageAllocator {
            kswapd: (0..topology.nr_nodes())
                .map(|_| KswapdState::default())
                .collect(),
            topology,
            zones,
            nr_zone_types,
            zonelists,
            pfn_ranges,
            settings: SpinLock::new(settings),
            min_free_kbytes: AtomicU64::new(0),
        };
        allocator.boot();
        Ok(allocator)
    }

    /// `init_per_zone_wmark_min` and khugepaged's start: choose `min_free_kbytes`, then set
    /// watermarks, reserves, PCP limits, stat thresholds and the `FREE_HIGH_BATCH` flags.
    fn boot(&self) {
        let settings = self.settings.lock().clone();
        let total: u64 = self
            .zones
            .iter()
            .filter(|z| z.zone_type <= ZoneType::Movable)
            .map(|z| z.managed)
            .sum();
        // page_group_by_mobility_disabled: under one pageblock per migratetype.
        let grouping = total >= PAGEBLOCK_PAGES * MIGRATE_TYPES as u64;
        for zone in &self.zones {
            zone.group_by_mobility.store(grouping, Relaxed);
            zone.watermark_boost_factor
                .store(settings.watermark_boost_factor, Relaxed);
        }
        match settings.min_free_kbytes {
            MinFreeKbytes::Explicit(kbytes) => self.setup_per_zone_wmarks(kbytes, &settings),
            MinFreeKbytes::Default => self.default_min_free_kbytes(&settings),
        }
        self.setup_per_zone_lowmem_reserve(&settings);
        self.refresh_zone_stat_thresholds();
        self.setup_pcp_cacheinfo();
    }

    fn default_min_free_kbytes(&self, settings: &Settings) {
        // At boot the high watermarks are 0, so nr_free_buffer_pages() is Σ managed.
        let kbytes = watermark::default_min_free_kbytes(self.free_buffer_pages() * 4);
        self.setup_per_zone_wmarks(kbytes, settings);
        if settings.transparent_hugepage {
            let nr_zones = self
                .zones
                .iter()
                .filter(|z| z.zone_type <= ZoneType::Normal && z.present > 0)
                .count() as u64;
            let recommended =
                watermark::thp_recommended_min_free_kbytes(nr_zones, self.free_buffer_pages());
            if recommended > kbytes {
                self.setup_per_zone_wmarks(recommended, settings);
            }
        }
    }

    /// `nr_free_buffer_pages`: Σ (managed − high watermark) over zones up to Normal.
    fn free_buffer_pages(&self) -> u64 {
        self.zones
            .iter()
            .filter(|z| z.zone_type <= ZoneType::Normal)
            .map(|z| z.managed.saturating_sub(z.wmark(WatermarkKind::High)))
            .sum()
    }

    /// `setup_per_zone_wmarks`: watermarks from `min_free_kbytes`, then the PCP limits that
    /// depend on them (`zone_pcp_update` with `cpu_online` 0).
    fn setup_per_zone_wmarks(&self, min_free_kbytes: u64, settings: &Settings) {
        self.min_free_kbytes.store(min_free_kbytes, Relaxed);
        let lowmem_pages: u64 = self
            .zones
            .iter()
            .filter(|z| z.zone_type.is_lowmem())
            .map(|z| z.managed)
            .sum();
        for zone in &self.zones {
            let marks = watermark::zone_watermarks(
                zone.zone_type,
                zone.managed,
                min_free_kbytes >> 2,
                lowmem_pages,
                settings.watermark_scale_factor as u64,
            );
            // LOCK ORDER: settings → zone lock. Linux writes the watermarks under the zone
            // lock; readers are lockless and may see a mix, as in Linux.
            let _locked = zone.lock();
            zone.watermarks.set(marks);
        }
        self.update_pcp_limits(settings);
    }

    /// `zone_set_pageset_high_and_batch` for every zone, `cpu_online` 0.
    fn update_pcp_limits(&self, settings: &Settings) {
        let online = self.topology.nr_cpus();
        for zone in &self.zones {
            let limits = pcp_sizing::pcp_limits(
                zone.managed,
                zone.wmark(WatermarkKind::Low),
                settings.percpu_pagelist_high_fraction,
                self.topology.node_cpus(zone.node),
                0,
                online,
            );
            for pageset in zone.pagesets.iter() {
                // LOCK ORDER: settings → pcp lock (Linux: pcp_batch_high_lock → pcp->lock).
                let mut pcp = pageset.lock();
                pcp.batch = limits.batch;
                pcp.high_min = limits.high_min;
                pcp.high_max = limits.high_max;
            }
        }
    }

    /// `setup_per_zone_lowmem_reserve`.
    fn setup_per_zone_lowmem_reserve(&self, settings: &Settings) {
        for node_zones in self.zones.chunks(self.nr_zone_types) {
            let managed: Vec<u64> = node_zones.iter().map(|z| z.managed).collect();
            for (i, zone) in node_zones.iter().enumerate() {
                let reserve =
                    watermark::lowmem_reserve(i, &managed, settings.lowmem_reserve_ratio[i]);
                for (slot, value) in zone.lowmem_reserve.iter().zip(reserve) {
                    slot.store(value, Relaxed);
                }
            }
        }
    }

    /// `refresh_zone_stat_thresholds`.
    fn refresh_zone_stat_thresholds(&self) {
        let online = self.topology.nr_cpus();
        for zone in &self.zones {
            let threshold = pcp_sizing::stat_threshold(zone.managed, online);
            zone.stat_threshold.store(threshold, Relaxed);
        }
    }

    /// `setup_pcp_cacheinfo`: set `FREE_HIGH_BATCH` on every pageset whose CPU's share of
    /// the LLC holds more than three batches. Linux runs this on CPU online and pre-down
    /// only, not when `batch` changes; so do we.
    fn setup_pcp_cacheinfo(&self) {
        let llc = self.topology.llc();
        let slice = pcp_sizing::data_cache_slice(llc.llc_bytes, llc.llc_shared_cpus);
        for zone in &self.zones {
            for pageset in zone.pagesets.iter() {
                let mut pcp = pageset.lock();
                pcp.flags.free_high_batch = pcp_sizing::free_high_batch(slice, pcp.batch);
            }
        }
    }

    /// Apply new settings, recomputing what each changed value feeds, as the sysctl
    /// handlers do. Invalid settings are refused and nothing changes.
    pub fn set_settings(&self, new: Settings) -> Result<(), SettingsError> {
        new.validate()?;
        let mut current = self.settings.lock();
        let old = core::mem::replace(&mut *current, new.clone());
        for zone in &self.zones {
            zone.watermark_boost_factor
                .store(new.watermark_boost_factor, Relaxed);
        }
        let watermarks_changed = old.min_free_kbytes != new.min_free_kbytes
            || old.watermark_scale_factor != new.watermark_scale_factor
            || old.transparent_hugepage != new.transparent_hugepage;
        if watermarks_changed {
            match new.min_free_kbytes {
                MinFreeKbytes::Explicit(kbytes) => self.setup_per_zone_wmarks(kbytes, &new),
                MinFreeKbytes::Default => self.default_min_free_kbytes(&new),
            }
        } else if old.percpu_pagelist_high_fraction != new.percpu_pagelist_high_fraction {
            self.update_pcp_limits(&new);
        }
        if old.lowmem_reserve_ratio != new.lowmem_reserve_ratio {
            self.setup_per_zone_lowmem_reserve(&new);
        }
        Ok(())
    }

    /// The settings in force.
    pub fn settings(&self) -> Settings {
        self.settings.lock().clone()
    }

    /// The `min_free_kbytes` in force (computed when the settings ask for the default).
    pub fn min_free_kbytes(&self) -> u64 {
        self.min_free_kbytes.load(Relaxed)
    }

    /// The machine.
    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    /// Every zone, node by node, each node's zone types in order (empty zones included).
    pub fn zones(&self) -> &[Zone] {
        &self.zones
    }

    /// The zone of `node` of type `zone_type`.
    pub fn zone(&self, node: NodeId, zone_type: ZoneType) -> Option<&Zone> {
        if zone_type.index() >= self.nr_zone_types {
            return None;
        }
        self.zones
            .get(node as usize * self.nr_zone_types + zone_type.index())
    }

    /// The zone spanning `pfn` (`page_zone`).
    pub fn find_zone(&self, pfn: Pfn) -> Option<&Zone> {
        let i = self
            .pfn_ranges
            .partition_point(|&(start, _, _)| start <= pfn.0);
        let &(_, end, zone) = self.pfn_ranges.get(i.checked_sub(1)?)?;
        (pfn.0 < end).then(|| &self.zones[zone])
    }

    /// kswapd wake-up requests of `node`.
    pub fn kswapd(&self, node: NodeId) -> Option<&KswapdState> {
        self.kswapd.get(node as usize)
    }

    /// Allocate a block of 2^`order` pages for a request running on `node`
    /// (`__alloc_pages`). The block's first page is marked allocated with a reference
    /// count of 1.
    pub fn alloc_pages(&self, gfp: Gfp, order: Order, node: NodeId) -> Result<Pfn, AllocError> {
        let ac = self.prepare_alloc_pages(gfp, order, node)?;
        let flags =
            AllocFlags::empty().with_wmark(WatermarkKind::Low) | self.alloc_flags_nofragment(&ac);
        if let Some(pfn) = self.get_page_from_freelist(&ac, flags) {
            return Ok(pfn);
        }
        self.alloc_pages_slowpath(&ac)
    }

    fn prepare_alloc_pages(
        &self,
        gfp: Gfp,
        order: Order,
        node: NodeId,
    ) -> Result<AllocContext<'_>, AllocError> {
        let zonelist = self
            .zonelists
            .get(node as usize)
            .ok_or(AllocError::InvalidNode(node))?;
        let highest_zoneidx = gfp.zone()?;
        let mut migratetype = gfp.migratetype()?;
        if !self.zones[0].group_by_mobility() {
            migratetype = MigrateType::Unmovable;
        }
        let eligible = |&&i: &&usize| {
            let zone = &self.zones[i];
            zone.zone_type <= highest_zoneidx && (!gfp.contains(Gfp::THISNODE) || zone.node == node)
        };
        let preferred = *zonelist.iter().find(eligible).ok_or(AllocError::NoZone)?;
        Ok(AllocContext {
            gfp,
            order,
            migratetype,
            highest_zoneidx,
            zonelist,
            preferred,
        })
    }

    /// `alloc_flags_nofragment`: a request whose preferred zone is Normal avoids splitting
    /// pageblocks of other types on its first pass, since DMA32 can absorb it (on a
    /// multi-node machine only when this node has a populated DMA32).
    fn alloc_flags_nofragment(&self, ac: &AllocContext<'_>) -> AllocFlags {
        let mut flags = AllocFlags::empty();
        if ac.gfp.contains(Gfp::KSWAPD_RECLAIM) {
            flags |= AllocFlags::KSWAPD;
        }
        let preferred = &self.zones[ac.preferred];
        if preferred.zone_type != ZoneType::Normal {
            return flags;
        }
        if self.topology.nr_nodes() > 1 {
            let dma32 = self.zone(preferred.node, ZoneType::Dma32);
            if !dma32.is_some_and(|z| z.present > 0) {
                return flags;
            }
        }
        flags | AllocFlags::NOFRAGMENT
    }

    fn eligible_zones<'a>(
        &'a self,
        ac: &'a AllocContext<'_>,
    ) -> impl Iterator<Item = (usize, &'a Zone)> + 'a {
        let this_node = self.zones[ac.preferred].node;
        ac.zonelist
            .iter()
            .map(|&i| (i, &self.zones[i]))
            .filter(move |(_, zone)| {
                zone.zone_type <= ac.highest_zoneidx
                    && (!ac.gfp.contains(Gfp::THISNODE) || zone.node == this_node)
            })
    }

    /// `get_page_from_freelist` (v6.7): walk the zonelist; a zone above its high watermark
    /// is used at once, one below it gets `BELOW_HIGH` (which makes the PCP shrink) and is
    /// then checked against the caller's watermark.
    fn get_page_from_freelist(&self, ac: &AllocContext<'_>, flags: AllocFlags) -> Option<Pfn> {
        let mut flags = flags;
        'retry: loop {
            let no_fallback = flags.contains(AllocFlags::NOFRAGMENT);
            for (index, zone) in self.eligible_zones(ac) {
                if no_fallback
                    && self.topology.nr_nodes() > 1
                    && index != ac.preferred
                    && zone.node != self.zones[ac.preferred].node
                {
                    // Fragmenting the local node beats using a remote one.
                    flags -= AllocFlags::NOFRAGMENT;
                    continue 'retry;
                }
                if !self.zone_allows(zone, ac, flags) {
                    continue;
                }
                if let Some(pfn) = self.rmqueue_buddy(zone, ac, flags) {
                    if flags.contains(AllocFlags::HIGHATOMIC) {
                        zone.lock().reserve_highatomic_pageblock(pfn);
                    }
                    return Some(pfn);
                }
            }
            if no_fallback {
                flags -= AllocFlags::NOFRAGMENT;
                continue 'retry;
            }
            return None;
        }
    }

    /// The watermark part of `get_page_from_freelist` for one zone.
    fn zone_allows(&self, zone: &Zone, ac: &AllocContext<'_>, flags: AllocFlags) -> bool {
        if !zone.is_managed() {
            return false;
        }
        if !zone.flags().contains(ZoneFlags::BELOW_HIGH) {
            if self.zone_watermark_fast(zone, ac, zone.wmark(WatermarkKind::High), flags) {
                return true;
            }
            zone.set_flag(ZoneFlags::BELOW_HIGH);
        }
        let mark = zone.wmark(flags.wmark());
        self.zone_watermark_fast(zone, ac, mark, flags) || flags.contains(AllocFlags::NO_WATERMARKS)
    }

    fn zone_watermark_fast(
        &self,
        zone: &Zone,
        ac: &AllocContext<'_>,
        mark: u64,
        flags: AllocFlags,
    ) -> bool {
        let summary;
        let blocks: &[(bool, bool)] = if ac.order == Order::ZERO {
            &[]
        } else {
            summary = zone.free_block_summary();
            &summary
        };
        let input = zone.watermark_input(ac.highest_zoneidx, blocks);
        let marks = zone.watermarks();
        watermark::watermark_fast(
            ac.order,
            mark,
            flags,
            marks.stored(WatermarkKind::Min),
            marks.boost(),
            &input,
        )
    }

    /// `rmqueue_buddy` and the tail of `rmqueue`: take a block under the zone lock, using
    /// the high-atomic reserve first for high-order atomic requests and last for any
    /// request that cannot block.
    fn rmqueue_buddy(&self, zone: &Zone, ac: &AllocContext<'_>, flags: AllocFlags) -> Option<Pfn> {
        let order = ac.order;
        let mut locked = zone.lock();
        let mut pfn = None;
        if flags.contains(AllocFlags::HIGHATOMIC) {
            pfn = locked.rmqueue_smallest(order, MigrateType::HighAtomic);
        }
        if pfn.is_none() {
            pfn = locked.rmqueue(order, ac.migratetype, flags);
            if pfn.is_none() && flags.intersects(AllocFlags::OOM | AllocFlags::NON_BLOCK) {
                pfn = locked.rmqueue_smallest(order, MigrateType::HighAtomic);
            }
        }
        let pfn = pfn?;
        let page = zone.mem_map.page(pfn);
        if page.cached_migratetype() != MigrateType::Isolate as u8 {
            zone.nr_free_pages.fetch_sub(order.pages() as i64, Relaxed);
        }
        page.set_state(PageState::Allocated, order);
        page.init_refcount(1);
        drop(locked);
        zone.events.pgalloc.fetch_add(order.pages(), Relaxed);
        if flags.contains(AllocFlags::KSWAPD) && zone.clear_flag(ZoneFlags::BOOSTED_WATERMARK) {
            self.wakeup_kswapd(zone.node, Order::ZERO, zone.zone_type);
        }
        Some(pfn)
    }

    /// The reduced slow path: wake kswapd, retry at the min watermark with the caller's
    /// reserve rights, then (for callers that may block, in place of direct reclaim) give
    /// back high-atomic pageblocks and retry.
    fn alloc_pages_slowpath(&self, ac: &AllocContext<'_>) -> Result<Pfn, AllocError> {
        let mut flags = AllocFlags::slow_path(ac.gfp, ac.order);
        if flags.contains(AllocFlags::KSWAPD) {
            self.wake_all_kswapds(ac);
        }
        if let Some(pfn) = self.get_page_from_freelist(ac, flags) {
            return Ok(pfn);
        }
        let reserve = AllocFlags::pfmemalloc(ac.gfp);
        if !reserve.is_empty() {
            flags = reserve | (flags & AllocFlags::KSWAPD);
            if let Some(pfn) = self.get_page_from_freelist(ac, flags) {
                return Ok(pfn);
            }
        }
        if !ac.gfp.allows_blocking() {
            return Err(AllocError::OutOfMemory { order: ac.order });
        }
        for force in [false, true] {
            while self.unreserve_highatomic_pageblock(ac, force) {
                if let Some(pfn) = self.get_page_from_freelist(ac, flags) {
                    return Ok(pfn);
                }
            }
        }
        Err(AllocError::OutOfMemory { order: ac.order })
    }

    fn unreserve_highatomic_pageblock(&self, ac: &AllocContext<'_>, force: bool) -> bool {
        self.eligible_zones(ac).any(|(_, zone)| {
            zone.lock()
                .unreserve_highatomic_pageblock(ac.migratetype, force)
        })
    }

    fn wake_all_kswapds(&self, ac: &AllocContext<'_>) {
        let mut woken = [false; 64];
        for (_, zone) in self.eligible_zones(ac) {
            let node = zone.node as usize;
            if node < woken.len() && !woken[node] {
                woken[node] = true;
                self.wakeup_kswapd(zone.node, ac.order, ac.highest_zoneidx);
            }
        }
    }

    /// `wakeup_kswapd`: record a wake-up unless the node is balanced (some eligible zone
    /// above its high watermark) and no zone is boosted.
    fn wakeup_kswapd(&self, node: NodeId, order: Order, highest_zoneidx: ZoneType) {
        let node_zones = &self.zones[node as usize * self.nr_zone_types..]
            [..=highest_zoneidx.index().min(self.nr_zone_types - 1)];
        let boosted = node_zones.iter().any(|z| z.watermarks.boost() > 0);
        let balanced = !node_zones.iter().any(|z| z.is_managed())
            || node_zones.iter().filter(|z| z.is_managed()).any(|z| {
                let summary = z.free_block_summary();
                let input = z.watermark_input(highest_zoneidx, &summary);
                watermark::watermark_ok(
                    order,
                    z.wmark(WatermarkKind::High),
                    AllocFlags::empty(),
                    &input,
                )
            });
        if balanced && !boosted {
            return;
        }
        let kswapd = &self.kswapd[node as usize];
        kswapd.wakeups.fetch_add(1, Relaxed);
        kswapd.pending.store(true, Relaxed);
    }

    /// Free a block allocated with [`PageAllocator::alloc_pages`] (`__free_pages_ok`). A
    /// bad free (never allocated, already free, wrong order, inside another block, outside
    /// every zone, misaligned) is refused with an error and changes nothing.
    pub fn free_pages(&self, pfn: Pfn, order: Order) -> Result<(), FreeError> {
        let zone = self.find_zone(pfn).ok_or(FreeError::OutsideZones { pfn })?;
        if !pfn.is_aligned(order) {
            return Err(FreeError::Misaligned { pfn, order });
        }
        let page = zone.mem_map.page(pfn);
        if let Err((state, found)) =
            page.transition(PageState::Allocated, order, PageState::Freeing)
        {
            return Err(diagnose_bad_free(zone, pfn, order, state, found));
        }
        page.set_flags(PageFlags::empty());
        page.set_memcg_id(0);
        let mut locked = zone.lock();
        let mt = zone.mem_map.pageblock_migratetype(pfn);
        locked.free_one_page(pfn, order, mt, ListEnd::Head);
        drop(locked);
        zone.events.pgfree.fetch_add(order.pages(), Relaxed);
        Ok(())
    }
}

/// Name the mistake of a refused free, looking at the block that holds `pfn`.
fn diagnose_bad_free(
    zone: &Zone,
    pfn: Pfn,
    order: Order,
    state: PageState,
    found: Order,
) -> FreeError {
    match state {
        PageState::Allocated => FreeError::WrongOrder {
            pfn,
            allocated: found,
            given: order,
        },
        PageState::Buddy | PageState::Pcp | PageState::Freeing => FreeError::NotAllocated { pfn },
        PageState::Reserved | PageState::Hole => FreeError::Reserved { pfn },
        PageState::Tail => {
            // The zone lock keeps free blocks from merging or splitting under the walk.
            let _locked = zone.lock();
            let covering = Order::all().skip(1).find_map(|o| {
                let head = pfn.align_down(o);
                let (state, order) = zone.mem_map.get(head)?.state_order();
                (state != PageState::Tail && order >= o).then_some((head, state))
            });
            match covering {
                Some((block, PageState::Allocated)) => FreeError::NotBlockStart { pfn, block },
                _ => FreeError::NotAllocated { pfn },
            }
        }
    }
}

/// `build_zonelists`: for each node, its own zones from the highest type down, then each
/// other node's in turn (nearest first; with no distance table, by id after this node).
fn build_zonelists(zones: &[Zone], nr_zone_types: usize, nr_nodes: usize) -> Vec<Vec<usize>> {
    (0..nr_nodes)
        .map(|node| {
            (0..nr_nodes)
                .map(|k| (node + k) % nr_nodes)
                .flat_map(|n| (0..nr_zone_types).rev().map(move |t| n * nr_zone_types + t))
                .filter(|&i| zones[i].is_managed())
                .collect()
        })
        .collect()
}
