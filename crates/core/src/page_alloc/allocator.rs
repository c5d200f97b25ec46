//! The page allocator of a whole machine: zones of every node, zonelists, settings,
//! policy, online CPUs, and everything recomputed when one of them changes.
//!
//! Linux counterpart (v6.7): `build_zonelists`, `init_per_zone_wmark_min`,
//! `setup_per_zone_wmarks`, `setup_per_zone_lowmem_reserve`,
//! `zone_set_pageset_high_and_batch`, `setup_pcp_cacheinfo`, the sysctl handlers, and the
//! CPU hotplug callbacks (`page_alloc_cpu_online`, `page_alloc_cpu_dead`). The entry
//! points live beside this file: `alloc.rs` (allocation), `free.rs` (free), `bulk.rs`
//! (bulk allocation), `drain.rs` (drains, decay, `zone_pcp_disable`).

use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

use core::sync::atomic::{AtomicU32, AtomicU8};

use super::drain::DrainWorkState;
use super::pcp_sizing::{self, PcpLimits};
use super::types::{CpuId, NodeId, ZoneType, MAX_NR_ZONES, MIGRATE_TYPES};
use super::watermark::{self, WatermarkKind, PAGEBLOCK_PAGES};
use super::zone::Zone;
use crate::page::Pfn;
use crate::policy::Policy;
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
    pub(crate) topology: Topology,
    /// Node-major: node n's zone of type t is at `n * nr_zone_types + t`.
    pub(crate) zones: Vec<Zone>,
    pub(crate) nr_zone_types: usize,
    /// Per node: zone indices in fallback order (`ZONELIST_FALLBACK`).
    pub(crate) zonelists: Vec<Vec<usize>>,
    /// Per node and highest zone type: the first zonelist entry a request may use
    /// (`first_zones_zonelist`), computed once so the fast path does not search.
    pub(crate) preferred_zones: Vec<[Option<usize>; MAX_NR_ZONES]>,
    /// The node of each CPU (`cpu_to_node`), a table so the fast path does not search
    /// the topology.
    cpu_nodes: Vec<NodeId>,
    /// Spanning zones sorted by start pfn, for pfn → zone.
    pfn_ranges: Vec<(u64, u64, usize)>,
    settings: SpinLock<Settings>,
    pub(crate) policy: Policy,
    min_free_kbytes: AtomicU64,
    /// `CONFIG_PCP_BATCH_SCALE_MAX`, copied from the settings for the hot paths.
    pub(crate) scale_max: AtomicU8,
    /// `cpu_online_mask`.
    pub(crate) online: Vec<AtomicBool>,
    pub(crate) nr_online: AtomicU32,
    pub(crate) kswapd: Vec<KswapdState>,
    /// `pcpu_drain_mutex` and the queued drain work of the workqueue drain mode.
    pub(crate) drain_work: DrainWorkState,
}

impl PageAllocator {
    /// Build the zones of `topology`, free their managed memory into the buddy lists, and
    /// compute watermarks, reserves and PCP limits as boot does.
    /// `policy` selects the behaviour of each seed (see [`crate::policy`]).
    pub fn new(
        topology: Topology,
        settings: Settings,
        policy: Policy,
    ) -> Result<PageAllocator, SettingsError> {
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
        let preferred_zones = zonelists
            .iter()
            .map(|list| {
                core::array::from_fn(|highest| {
                    list.iter()
                        .copied()
                        .find(|&i| zones[i].zone_type.index() <= highest)
                })
            })
            .collect();
        let mut pfn_ranges: Vec<_> = zones
            .iter()
            .enumerate()
            .filter(|(_, z)| z.spanned > 0)
            .map(|(i, z)| (z.start_pfn.0, z.start_pfn.0 + z.spanned, i))
            .collect();
        pfn_ranges.sort_unstable();
        let cpu_nodes = (0..nr_cpus)
            .map(|cpu| {
                topology
                    .cpu_node(cpu)
                    .expect("CPUs are numbered below nr_cpus")
            })
            .collect();
        let allocator = PageAllocator {
            kswapd: (0..topology.nr_nodes())
                .map(|_| KswapdState::default())
                .collect(),
            topology,
            zones,
            nr_zone_types,
            zonelists,
            preferred_zones,
            cpu_nodes,
            pfn_ranges,
            scale_max: AtomicU8::new(settings.pcp_batch_scale_max),
            settings: SpinLock::new(settings),
            policy,
            min_free_kbytes: AtomicU64::new(0),
            online: (0..nr_cpus).map(|_| AtomicBool::new(true)).collect(),
            nr_online: AtomicU32::new(nr_cpus),
            drain_work: DrainWorkState::new(nr_cpus),
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

    /// The node of `cpu` (`cpu_to_node`), `None` for a CPU the machine does not have.
    #[inline]
    pub(crate) fn cpu_node(&self, cpu: CpuId) -> Option<NodeId> {
        self.cpu_nodes.get(cpu as usize).copied()
    }

    /// Whether `cpu` exists and is online.
    pub fn cpu_online(&self, cpu: CpuId) -> bool {
        self.online
            .get(cpu as usize)
            .is_some_and(|o| o.load(Relaxed))
    }

    /// Online CPUs of `node` (`cpumask_of_node`).
    pub(crate) fn node_online_cpus(&self, node: NodeId) -> u32 {
        (0..self.topology.nr_cpus())
            .filter(|&cpu| self.topology.cpu_node(cpu) == Some(node) && self.cpu_online(cpu))
            .count() as u32
    }

    /// The policy in force.
    pub fn policy(&self) -> &Policy {
        &self.policy
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
        self.update_pcp_limits(settings, 0);
    }

    /// `zone_set_pageset_high_and_batch` for every zone. `cpu_online` is 1 while a CPU is
    /// coming online (it is not yet in its node's mask), else 0.
    pub(crate) fn update_pcp_limits(&self, settings: &Settings, cpu_online: u32) {
        let online = self.nr_online.load(Relaxed);
        for zone in &self.zones {
            let limits = pcp_sizing::pcp_limits(
                zone.managed,
                zone.wmark(WatermarkKind::Low),
                settings.percpu_pagelist_high_fraction,
                self.node_online_cpus(zone.node),
                cpu_online,
                online,
            );
            *zone.pcp_limits.lock() = limits;
            // A disabled zone keeps (0, 0, 1) until zone_pcp_enable applies the new limits
            // (Linux holds pcp_batch_high_lock across the disabled period instead).
            if zone.pcp_disabled.load(Relaxed) == 0 {
                self.set_pagesets(zone, limits);
            }
        }
    }

    /// `__zone_set_pageset_high_and_batch`: write the limits into every pageset.
    pub(crate) fn set_pagesets(&self, zone: &Zone, limits: PcpLimits) {
        for pageset in zone.pagesets.iter() {
            // LOCK ORDER: settings → pcp lock (Linux: pcp_batch_high_lock → pcp->lock).
            let mut pcp = pageset.lock();
            pcp.update_limits(
                &self.policy.pcp,
                limits.batch,
                limits.high_min,
                limits.high_max,
            );
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
    pub(crate) fn refresh_zone_stat_thresholds(&self) {
        let online = self.nr_online.load(Relaxed);
        for zone in &self.zones {
            let threshold = pcp_sizing::stat_threshold(zone.managed, online);
            zone.stat_threshold.store(threshold, Relaxed);
        }
    }

    /// `setup_pcp_cacheinfo`: set `FREE_HIGH_BATCH` on every pageset whose CPU's share of
    /// the LLC holds more than three batches. The share counts the online CPUs of the CPU's
    /// LLC group (CPUs are grouped `llc_shared_cpus` at a time). Linux runs this on CPU
    /// online and pre-down only, not when `batch` changes; so do we.
    pub(crate) fn setup_pcp_cacheinfo(&self) {
        let llc = self.topology.llc();
        let group = llc.llc_shared_cpus.max(1);
        for zone in &self.zones {
            for (cpu, pageset) in zone.pagesets.iter().enumerate() {
                let first = cpu as u32 / group * group;
                let sharing = (first..first + group)
                    .filter(|&c| self.cpu_online(c))
                    .count() as u32;
                let slice = pcp_sizing::data_cache_slice(llc.llc_bytes, sharing.max(1));
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
        self.scale_max.store(new.pcp_batch_scale_max, Relaxed);
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
            self.update_pcp_limits(&new, 0);
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

// The allocator is shared by every CPU: it must be usable from several threads at once.
const _: fn() = || {
    fn shared<T: Send + Sync>() {}
    shared::<PageAllocator>();
};
