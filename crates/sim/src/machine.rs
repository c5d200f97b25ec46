//! The simulated machine: sockets (one NUMA node each), CPUs, memory per node, caches, and
//! how its zones are sized so that the pagesets get the published machine's limits.
//!
//! The published runs' machines had 256 GB, and we simulate that memory, 128 GiB per node:
//! `high_max` (`managed / 8 / CPUs`) caps how much a pageset holds from patch 7 on, and
//! kbuild's exit bursts depend on it (1 GiB of descriptors per run, built in ≈ 0.2 s).
//! Both machines set `vm.min_free_kbytes` explicitly so that the low watermark — from
//! which v6.6 sizes `pcp->high` (`high = low / CPUs of the node`) and v6.7 `high_min` —
//! equals what the published machine had. `batch` (63) depends only on the zone being
//! ≥ 688 MiB.

use mmkit_core::internals;
use mmkit_core::page_alloc::watermark;
use mmkit_core::page_alloc::MigrateType;
use mmkit_core::page_alloc::ZoneId;
use mmkit_core::settings::MinFreeKbytes;
use mmkit_core::topology::{CacheInfo, ZoneSize};
use mmkit_core::views::zoneinfo::ZoneInfo;
use mmkit_core::{Order, PageAllocator, Settings, Topology, ZoneType};
use serde::{Deserialize, Serialize};

/// A machine to simulate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MachineSpec {
    /// A short name (e.g. `spr-2s-224`).
    pub name: String,
    /// Sockets; each is one NUMA node with one Normal zone.
    pub sockets: u32,
    /// CPUs per socket (SMT siblings count).
    pub cpus_per_socket: u32,
    /// Hardware threads per core: 2 on the published machines, 1 on one without SMT
    /// (a file written before this field existed reads as 1).
    #[serde(default = "one_thread_per_core")]
    pub threads_per_core: u32,
    /// Managed pages of each node's Normal zone.
    pub node_pages: u64,
    /// Last-level cache per socket, in bytes.
    pub llc_bytes: u64,
    /// Private L2 per CPU, in bytes.
    pub l2_bytes: u64,
    /// Whether the LLC holds a copy of every line in its cores' L2s. Intel's server parts
    /// since Skylake-SP (Ice Lake-SP and Sapphire Rapids among them) have a non-inclusive
    /// L3: a line in a core's L2 is usually not in the L3 as well, so a socket keeps the
    /// L3's lines and its cores' L2s' on chip, and a line in another core's L2 is served by
    /// a snoop, not from memory ([`Self::socket_cache_bytes`]). `true` (a file written
    /// before this field existed reads so): the L2s add nothing to the socket's reach.
    #[serde(default = "inclusive")]
    pub llc_inclusive: bool,
    /// Low watermark per node the published machine had, in pages; `None`: Linux's default
    /// formula on the simulated memory.
    pub low_wmark_pages: Option<u64>,
    /// `CONFIG_PCP_BATCH_SCALE_MAX` (Linux's default 5).
    #[serde(default = "default_pcp_batch_scale_max")]
    pub pcp_batch_scale_max: u8,
    /// `vm.stat_interval` in milliseconds: the vmstat tick's period (Linux's default 1 s).
    #[serde(default = "default_stat_interval_ms")]
    pub stat_interval_ms: u32,
    /// Pagesets to start warm, as a zoneinfo snapshot found them ([`Self::with_warm_pagesets`]);
    /// empty: every pageset starts empty, with `high` at `high_min`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warm_pagesets: Vec<WarmPageset>,
}

/// One CPU's pageset of one node's Normal zone at the start of a run: what a zoneinfo
/// snapshot shows of it (`count`, `high`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WarmPageset {
    /// The node (= socket) whose Normal zone it caches.
    pub node: u16,
    /// The CPU.
    pub cpu: u32,
    /// Pages it holds.
    pub count: u64,
    /// Its `high` (kept by the policies that auto-tune it; the others recompute it).
    pub high: u64,
}

/// Pages in a GiB.
const GIB_PAGES: u64 = (1 << 30) >> 12;

fn inclusive() -> bool {
    true
}

fn default_pcp_batch_scale_max() -> u8 {
    Settings::DISTRIBUTION_KERNEL.pcp_batch_scale_max
}

fn default_stat_interval_ms() -> u32 {
    Settings::DISTRIBUTION_KERNEL.stat_interval_ms
}

impl MachineSpec {
    /// The kbuild machine: 2-socket Sapphire Rapids, 224 CPUs, 105 MiB LLC and 2 MiB L2
    /// per core. Huang 2023 says its pagesets had `high` 367 with batch 63, so the low
    /// watermark per node is 367 × 112 + 56 = 41,160 pages (the middle of the range that
    /// divides to 367). Simulated memory: the published machine's, 128 GiB per node.
    pub fn spr_224() -> MachineSpec {
        MachineSpec {
            name: "spr-2s-224".into(),
            sockets: 2,
            cpus_per_socket: 112,
            threads_per_core: 2,
            node_pages: 128 * GIB_PAGES,
            llc_bytes: 105 << 20,
            l2_bytes: 2 << 20,
            llc_inclusive: false,
            low_wmark_pages: Some(367 * 112 + 56),
            pcp_batch_scale_max: default_pcp_batch_scale_max(),
            stat_interval_ms: default_stat_interval_ms(),
            warm_pagesets: Vec::new(),
        }
    }

    /// The netperf/lmbench machine: LKP's lkp-icl-2sp2, 2 × Xeon Gold 6338, 128 CPUs,
    /// 48 MiB LLC and 1.25 MiB L2, 256 GB. Huang 2023 states no `high`; the low watermark is
    /// what Linux computes for 128 GB per node (see [`linux_low_wmark_pages`]).
    pub fn icl_128() -> MachineSpec {
        MachineSpec {
            name: "icl-2s-128".into(),
            sockets: 2,
            cpus_per_socket: 64,
            threads_per_core: 2,
            node_pages: 128 * GIB_PAGES,
            llc_bytes: 48 << 20,
            l2_bytes: 1280 << 10,
            llc_inclusive: false,
            low_wmark_pages: Some(linux_low_wmark_pages(128 * GIB_PAGES, 2)),
            pcp_batch_scale_max: default_pcp_batch_scale_max(),
            stat_interval_ms: default_stat_interval_ms(),
            warm_pagesets: Vec::new(),
        }
    }

    /// The machine a `/proc/zoneinfo` snapshot describes (`name` names it): one socket per
    /// node with a populated Normal zone, that zone's managed pages, its low watermark
    /// (boost removed) and the snapshot's CPUs; the caches are not in zoneinfo and come
    /// as arguments. The smaller zones (DMA, DMA32) are left out, as in every simulated
    /// machine: their pagesets are separate and the workloads allocate from Normal. The
    /// pagesets then get the snapshot's `batch`, `high_min` and `high_max`, which derive
    /// from the managed pages, the low watermark and the CPUs alone (a test checks it on
    /// the measuring VM's snapshot).
    pub fn from_zoneinfo(
        name: &str,
        zones: &[ZoneInfo],
        llc_bytes: u64,
        l2_bytes: u64,
    ) -> Result<MachineSpec, String> {
        let normal: Vec<&ZoneInfo> = zones
            .iter()
            .filter(|z| z.zone == ZoneType::Normal && z.managed > 0)
            .collect();
        let first = normal
            .first()
            .ok_or("the zoneinfo has no populated Normal zone")?;
        if let Some(other) = normal
            .iter()
            .find(|z| z.managed != first.managed || z.low != first.low)
        {
            return Err(format!(
                "node {} has {} managed pages and low watermark {}, node {} {} and {}: \
                 the simulator's nodes are equal",
                first.node, first.managed, first.low, other.node, other.managed, other.low
            ));
        }
        let cpus = first.pagesets.len() as u32;
        if cpus == 0 {
            return Err("the zoneinfo's Normal zone lists no pagesets (CPUs)".into());
        }
        let sockets = normal.len() as u32;
        if sockets as usize > crate::engine::MAX_ZONES {
            return Err(format!(
                "{sockets} nodes with a Normal zone: the simulator takes at most {}",
                crate::engine::MAX_ZONES
            ));
        }
        if cpus % sockets != 0 {
            return Err(format!(
                "{cpus} CPUs do not split evenly over {sockets} nodes"
            ));
        }
        let machine = MachineSpec {
            name: name.to_owned(),
            sockets,
            cpus_per_socket: cpus / sockets,
            // Not in zoneinfo either: the measuring VM shows one thread per core (`lscpu`).
            threads_per_core: 1,
            node_pages: first.managed,
            llc_bytes,
            l2_bytes,
            // Not in zoneinfo, and a guest's cache hierarchy is what its host's is; the
            // LLC alone, as before this field existed, keeps the recordings' comparisons
            // (docs/FIDELITY.md) where they were measured.
            llc_inclusive: true,
            low_wmark_pages: Some(first.low.saturating_sub(first.boost)),
            // Not in zoneinfo: the kernel's defaults, which `--pcp-batch-scale-max` and
            // `--stat-interval` change.
            pcp_batch_scale_max: default_pcp_batch_scale_max(),
            stat_interval_ms: default_stat_interval_ms(),
            warm_pagesets: Vec::new(),
        };
        machine.try_topology()?;
        Ok(machine)
    }

    /// This machine with its Normal zones' pagesets starting as `zones` (a zoneinfo
    /// snapshot of it) shows them: each CPU's `count` and `high`. A running kernel's
    /// pagesets are warm: on the 2-CPU VM they held 27,000–78,000 pages against `high`
    /// 58,000–259,000 when the compile-like build was recorded, so the build drew on them
    /// and its exit bursts crossed `high`, where empty ones recycle the build's own pages.
    /// Only nodes and CPUs the machine has are kept.
    pub fn with_warm_pagesets(mut self, zones: &[ZoneInfo]) -> MachineSpec {
        let (nr_cpus, sockets) = (self.nr_cpus(), self.sockets);
        self.warm_pagesets = zones
            .iter()
            .filter(|z| z.zone == ZoneType::Normal && z.managed > 0)
            .filter(|z| u32::from(z.node) < sockets)
            .flat_map(|z| {
                z.pagesets
                    .iter()
                    .filter(move |p| p.cpu < nr_cpus)
                    .map(move |p| WarmPageset {
                        node: z.node,
                        cpu: p.cpu,
                        count: p.count,
                        high: p.high,
                    })
            })
            .collect();
        self
    }

    /// This machine with `sockets` of its sockets, each as it was: the same CPUs, node
    /// memory, LLC and low watermark per socket. A workload whose sockets share no zone,
    /// zone lock or LLC (kbuild: each CPU allocates from its own node) runs the same
    /// experiment on fewer sockets, with proportionally fewer processes and events.
    pub fn with_sockets(mut self, sockets: u32) -> MachineSpec {
        if sockets == self.sockets {
            return self;
        }
        self.sockets = sockets;
        self.name = format!("{}-{}s", self.name, sockets);
        self
    }

    /// This machine with `cpus` CPUs, split evenly over its sockets (one socket if
    /// `cpus` is odd or 1). The low watermark per node stays, so `high` scales as Linux's
    /// would.
    pub fn with_cpus(mut self, cpus: u32) -> MachineSpec {
        if cpus % self.sockets != 0 {
            self.sockets = 1;
        }
        self.cpus_per_socket = cpus / self.sockets;
        self.name = format!("{}-{}cpu", self.name, cpus);
        self
    }

    /// This machine with `bytes` of memory per node; the low watermark is kept only while it
    /// stays under an eighth of the node, else Linux's default applies.
    pub fn with_node_bytes(mut self, bytes: u64) -> MachineSpec {
        self.node_pages = bytes >> 12;
        if self
            .low_wmark_pages
            .is_some_and(|low| low * 8 > self.node_pages)
        {
            self.low_wmark_pages = None;
        }
        self
    }

    /// This machine built with `CONFIG_PCP_BATCH_SCALE_MAX` = `scale_max` and running with
    /// `vm.stat_interval` = `stat_interval_ms`; the name says so when they are not Linux's
    /// defaults (`-S3`, `-stat250ms`).
    pub fn with_pcp_knobs(mut self, scale_max: u8, stat_interval_ms: u32) -> MachineSpec {
        if scale_max != self.pcp_batch_scale_max {
            self.name = format!("{}-S{scale_max}", self.name);
        }
        if stat_interval_ms != self.stat_interval_ms {
            self.name = format!("{}-stat{stat_interval_ms}ms", self.name);
        }
        self.pcp_batch_scale_max = scale_max;
        self.stat_interval_ms = stat_interval_ms;
        self
    }

    /// Start `allocator`'s pagesets as this machine's [`WarmPageset`]s say, before a run's
    /// first step: each CPU's `count` spread evenly over its order-0 to order-3 lists of
    /// the three pageset migratetypes (a zoneinfo snapshot does not say which lists held
    /// the pages; what the rounding leaves goes on the order-0 lists), and its `high`. The
    /// pages come off the buddy lists through the core's `seed_pageset`, the trace
    /// replayer's mechanism, and count as no refill. Returns the pages placed.
    pub fn warm_pagesets(&self, allocator: &PageAllocator) -> u64 {
        const TYPES: [MigrateType; 3] = [
            MigrateType::Unmovable,
            MigrateType::Movable,
            MigrateType::Reclaimable,
        ];
        let lists = 4 * TYPES.len() as u64;
        let mut placed = 0;
        for warm in &self.warm_pagesets {
            let id = ZoneId {
                node: warm.node,
                zone_type: ZoneType::Normal,
            };
            let per_list = warm.count / lists;
            let planned: u64 = (0..4)
                .map(|o| (per_list >> o << o) * TYPES.len() as u64)
                .sum();
            let left = warm.count - planned;
            for order in (0..4).map(|o| Order::new(o).expect("orders 0-3 exist")) {
                for (i, &mt) in TYPES.iter().enumerate() {
                    let mut blocks = per_list >> order.get();
                    if order == Order::ZERO {
                        blocks += left / 3 + u64::from((i as u64) < left % 3);
                    }
                    placed += internals::seed_pageset(
                        allocator,
                        warm.cpu,
                        id,
                        (order, mt),
                        blocks,
                        warm.high,
                    )
                    .unwrap_or(0);
                }
            }
        }
        placed
    }

    /// All CPUs.
    pub fn nr_cpus(&self) -> u32 {
        self.sockets * self.cpus_per_socket
    }

    /// Bytes of page data a socket's caches can hold between them, before the cost
    /// model's share for page data: the LLC, and with a non-inclusive LLC also its cores'
    /// L2s (one per core, which its hardware threads share). Ice Lake-SP (Xeon Gold 6338:
    /// 32 cores of 1.25 MiB L2 beside a 48 MiB L3) holds 88 MiB; Sapphire Rapids (56
    /// cores of 2 MiB beside 105 MiB) 217 MiB.
    pub fn socket_cache_bytes(&self) -> u64 {
        if self.llc_inclusive {
            return self.llc_bytes;
        }
        let cores = u64::from(self.cpus_per_socket / self.threads_per_core.max(1));
        self.llc_bytes + cores * self.l2_bytes
    }

    /// The socket (= node) of `cpu`: CPUs are numbered socket by socket.
    pub fn socket_of(&self, cpu: u32) -> u32 {
        cpu / self.cpus_per_socket
    }

    /// The hyperthread sibling of `cpu` ([`smt_sibling`]); `None` on a machine with one
    /// thread per core.
    pub fn sibling_of(&self, cpu: u32) -> Option<u32> {
        if self.threads_per_core != 2 {
            return None;
        }
        smt_sibling(cpu, self.cpus_per_socket)
    }

    /// The core's machine description: one Normal zone per node, at x86-64 addresses.
    pub fn topology(&self) -> Topology {
        self.try_topology()
            .expect("simulated machines are valid x86-64 layouts (RunSpec::validate)")
    }

    /// [`MachineSpec::topology`], or why the core has no such layout: a node too large
    /// for the mem_map (a `--zoneinfo` snapshot can name any size).
    pub fn try_topology(&self) -> Result<Topology, String> {
        let sizes: Vec<ZoneSize> = (0..self.sockets)
            .map(|node| ZoneSize::managed(node as u16, ZoneType::Normal, self.node_pages))
            .collect();
        let llc = CacheInfo {
            llc_bytes: self.llc_bytes,
            llc_shared_cpus: self.cpus_per_socket,
        };
        Topology::x86_64(
            &sizes,
            vec![self.cpus_per_socket; self.sockets as usize],
            llc,
            false,
        )
        .map_err(|e| e.to_string())
    }

    /// The sysctls: a distribution kernel's (THP on, as on the published machines), with
    /// `min_free_kbytes` chosen so that each node's
    /// low watermark is [`MachineSpec::low_wmark_pages`], and this machine's PCP knobs.
    pub fn settings(&self) -> Settings {
        let mut settings = Settings {
            pcp_batch_scale_max: self.pcp_batch_scale_max,
            stat_interval_ms: self.stat_interval_ms,
            ..Settings::DISTRIBUTION_KERNEL
        };
        if let Some(low) = self.low_wmark_pages {
            settings.min_free_kbytes = MinFreeKbytes::Explicit(self.min_free_kbytes_for(low));
        }
        settings
    }

    /// `min_free_kbytes` giving low watermark `low` per node: with equal nodes each gets
    /// `min = pages_min / nodes`, and `low = min + max(min / 4, managed × wsf / 10000)`.
    fn min_free_kbytes_for(&self, low: u64) -> u64 {
        let wsf = Settings::DISTRIBUTION_KERNEL.watermark_scale_factor as u64;
        let dist = self.node_pages * wsf / 10_000;
        let mut min = low.saturating_sub(dist);
        if min / 4 > dist {
            min = low * 4 / 5;
        }
        min * self.sockets as u64 * 4
    }
}

/// The low watermark Linux v6.6 computes for each node of a machine with `nodes` nodes of
/// `node_pages` pages, THP on (khugepaged's recommendation), `watermark_scale_factor` 10,
/// counting node 0's DMA and DMA32 zones in the recommendation but not in the shares.
pub fn linux_low_wmark_pages(node_pages: u64, nodes: u64) -> u64 {
    let lowmem = node_pages * nodes;
    let mut kbytes = watermark::default_min_free_kbytes(lowmem * 4);
    kbytes = kbytes.max(watermark::thp_recommended_min_free_kbytes(
        nodes + 2,
        lowmem,
    ));
    let marks = watermark::zone_watermarks(ZoneType::Normal, node_pages, kbytes / 4, lowmem, 10);
    marks.low
}

fn one_thread_per_core() -> u32 {
    1
}

/// The hyperthread sibling of `cpu` when sockets have `cpus_per_socket` CPUs, two threads
/// to a core: CPUs are numbered socket by socket, and within a socket the cores' first
/// threads come before their second ones (the order Linux gives the threads of Intel's
/// servers), so the sibling is half a socket away. `None` when a socket's CPUs do not
/// pair up.
pub fn smt_sibling(cpu: u32, cpus_per_socket: u32) -> Option<u32> {
    if cpus_per_socket < 2 || cpus_per_socket % 2 != 0 {
        return None;
    }
    let first = cpu / cpus_per_socket * cpus_per_socket;
    Some(first + (cpu - first + cpus_per_socket / 2) % cpus_per_socket)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mmkit_core::page_alloc::pcp::order_to_pindex;
    use mmkit_core::{PageAllocator, Policy};

    #[test]
    fn kbuild_machine_has_the_seed_pageset_limits() {
        // The whole published machine, and the one socket of it kbuild simulates by
        // default: a node and its pagesets are the same either way.
        let one_socket = crate::WorkloadKind::Kbuild.machine();
        assert_eq!((one_socket.sockets, one_socket.nr_cpus()), (1, 112));
        for spec in [MachineSpec::spr_224(), one_socket] {
            let allocator =
                PageAllocator::new(spec.topology(), spec.settings(), Policy::BASE).unwrap();
            let zone = allocator.zones().iter().find(|z| z.managed() > 0).unwrap();
            let pcp = zone.pageset(0).unwrap();
            assert_eq!((pcp.high, pcp.batch), (367, 63), "{}", spec.name);
            assert!(pcp.flags.free_high_batch, "105 MiB / 112 CPUs > 3 batches");
        }
    }

    /// The Normal zone of the measuring VM (2 CPUs, Linux 6.18) as its `/proc/zoneinfo`
    /// showed it on 2026-12-02, with DMA32 before it.
    const VM_ZONEINFO: &str = "Node 0, zone    DMA32
  pages free     23151
        min      2115
        low      2887
        high     3659
        managed  772798
  pagesets
    cpu: 0
              count:    0
              high:     2885
              batch:    63
              high_min: 1443
              high_max: 48299
Node 0, zone   Normal
  pages free     221452
        boost    0
        min      14769
        low      20163
        high     25557
        spanned  5505024
        present  5505024
        managed  5394258
  pagesets
    cpu: 0
              count:    8308
              high:     10081
              batch:    63
              high_min: 10081
              high_max: 337141
    cpu: 1
              count:    9861
              high:     10270
              batch:    63
              high_min: 10081
              high_max: 337141
";

    #[test]
    fn warm_pagesets_start_with_the_snapshot_count_and_high() {
        let zones = mmkit_core::views::zoneinfo::parse(VM_ZONEINFO).unwrap();
        let snapshot: Vec<(u64, u64)> = zones
            .iter()
            .find(|z| z.zone == ZoneType::Normal)
            .unwrap()
            .pagesets
            .iter()
            .map(|p| (p.count, p.high))
            .collect();
        let cold = MachineSpec::from_zoneinfo("vm", &zones, 480 << 20, 2 << 20).unwrap();
        let warm = cold.clone().with_warm_pagesets(&zones);
        assert!(cold.warm_pagesets.is_empty());
        assert_eq!(warm.warm_pagesets.len(), 2);
        for (spec, placed) in [(&cold, 0), (&warm, snapshot.iter().map(|s| s.0).sum())] {
            let allocator =
                PageAllocator::new(spec.topology(), spec.settings(), Policy::LINUX_6_18).unwrap();
            assert_eq!(spec.warm_pagesets(&allocator), placed);
            let zone = allocator.zones().iter().find(|z| z.managed() > 0).unwrap();
            for (cpu, &(count, high)) in snapshot.iter().enumerate() {
                let pcp = zone.pageset(cpu as u32).unwrap();
                if placed == 0 {
                    assert_eq!(pcp.count, 0);
                    continue;
                }
                assert_eq!((pcp.count, pcp.high), (count, high), "CPU {cpu}");
                // A twelfth of the pages on the list the faults of a build come from, and a
                // third of what the rounding left: under 18 pages (7 of order 3, 3 of
                // order 2, 1 of order 1 per type, 11 of the division, over 3 lists).
                let movable0 = order_to_pindex(MigrateType::Movable, Order::ZERO);
                let on_list = pcp.list_len(movable0);
                assert!(on_list >= count / 12, "{on_list} of {count}");
                assert!(on_list - count / 12 < 18, "{on_list} of {count}");
            }
        }
    }

    #[test]
    fn a_machine_from_zoneinfo_has_the_snapshot_pageset_limits() {
        let zones = mmkit_core::views::zoneinfo::parse(VM_ZONEINFO).unwrap();
        let spec = MachineSpec::from_zoneinfo("vm", &zones, 480 << 20, 2 << 20).unwrap();
        assert_eq!((spec.sockets, spec.nr_cpus()), (1, 2));
        // The measuring VM's two CPUs are cores of their own, not hyperthreads.
        assert_eq!(spec.threads_per_core, 1);
        assert_eq!(spec.sibling_of(0), None);
        assert_eq!(spec.node_pages, 5_394_258);
        let allocator =
            PageAllocator::new(spec.topology(), spec.settings(), Policy::LINUX_6_18).unwrap();
        let zone = allocator.zones().iter().find(|z| z.managed() > 0).unwrap();
        for cpu in 0..2 {
            let pcp = zone.pageset(cpu).unwrap();
            assert_eq!(
                (pcp.batch, pcp.high_min, pcp.high_max),
                (63, 10_081, 337_141)
            );
        }
        let low = zone.wmark(mmkit_core::page_alloc::WatermarkKind::Low);
        assert_eq!(low, 20_163);
    }

    #[test]
    fn a_zoneinfo_without_a_normal_zone_or_with_unequal_nodes_is_refused() {
        let dma32 = &VM_ZONEINFO[..VM_ZONEINFO.find("Node 0, zone   Normal").unwrap()];
        let zones = mmkit_core::views::zoneinfo::parse(dma32).unwrap();
        let error = MachineSpec::from_zoneinfo("vm", &zones, 1, 1).unwrap_err();
        assert!(error.contains("no populated Normal zone"), "{error}");
        let two = format!(
            "{VM_ZONEINFO}{}",
            VM_ZONEINFO[VM_ZONEINFO.find("Node 0, zone   Normal").unwrap()..]
                .replacen("Node 0", "Node 1", 1)
                .replacen("5394258", "5394000", 1)
        );
        let zones = mmkit_core::views::zoneinfo::parse(&two).unwrap();
        let error = MachineSpec::from_zoneinfo("vm", &zones, 1, 1).unwrap_err();
        assert!(error.contains("nodes are equal"), "{error}");
    }

    #[test]
    fn icl_machine_uses_linux_watermarks_for_256_gb() {
        let low = linux_low_wmark_pages(128 * GIB_PAGES, 2);
        assert!((40_000..50_000).contains(&low), "{low}");
    }

    /// A socket with a non-inclusive L3 reaches its L3 and one L2 per core, not per
    /// hardware thread; an inclusive one (and a machine file from before the field) its
    /// LLC alone.
    #[test]
    fn a_non_inclusive_llc_adds_its_cores_l2s_to_the_sockets_reach() {
        let icl = MachineSpec::icl_128();
        assert_eq!(icl.socket_cache_bytes(), (48 + 40) << 20);
        assert_eq!(
            MachineSpec::spr_224().socket_cache_bytes(),
            (105 + 112) << 20
        );
        let inclusive = MachineSpec {
            llc_inclusive: true,
            ..icl.clone()
        };
        assert_eq!(inclusive.socket_cache_bytes(), 48 << 20);
        let mut old = serde_json::to_value(&icl).unwrap();
        old.as_object_mut().unwrap().remove("llc_inclusive");
        let old: MachineSpec = serde_json::from_value(old).unwrap();
        assert_eq!(old.socket_cache_bytes(), 48 << 20);
    }
}
