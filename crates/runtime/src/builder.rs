//! Building a pool: memory, CPUs, nodes, zones, policy, sysctls.

use std::sync::Arc;

use mmkit_core::page_alloc::ZoneType;
use mmkit_core::topology::{CacheInfo, ZoneSpec};
use mmkit_core::{PageAllocator, Pfn, Policy, Settings, Topology};

use crate::arena::{page_size, Arena};
use crate::fault::FaultConfig;
use crate::pool::{Inner, PagePool};
use crate::reclaim::{NoReclaim, Reclaim};
use crate::PoolError;
use mmkit_core::page::PAGE_SIZE;

/// Arena alignment: a `MAX_ORDER` block (4 MiB), so every buddy block is aligned in
/// memory as in pfn space, and THP-sized blocks sit on 2 MiB boundaries.
const ARENA_ALIGN: usize = 4 << 20;

/// Builds a [`PagePool`].
///
/// ```
/// use mmkit_core::{Policy, Settings};
/// use mmkit_core::page_alloc::ZoneType;
/// use mmkit_runtime::PagePool;
///
/// let pool = PagePool::builder()
///     .memory_bytes(128 << 20)
///     .cpus(4)
///     .nodes(2)                                  // 64 MiB and 2 CPUs per node
///     .zone(ZoneType::Dma32, 16 << 20)           // per node: 16 MiB DMA32, rest Normal
///     .zone(ZoneType::Normal, 0)
///     .policy(Policy::preset("patch5").unwrap()) // Linux before PCP auto-tuning
///     .settings(Settings { watermark_scale_factor: 100, ..Settings::DISTRIBUTION_KERNEL })
///     .build()?;
/// assert_eq!(pool.nr_nodes(), 2);
/// assert_eq!(pool.policy().name, "patch5");
/// # Ok::<(), mmkit_runtime::PoolError>(())
/// ```
pub struct PagePoolBuilder {
    memory_bytes: usize,
    cpus: Option<u32>,
    nodes: u16,
    zones: Vec<(ZoneType, usize)>,
    policy: Policy,
    settings: Settings,
    llc: Option<CacheInfo>,
    huge_pages: bool,
    background: bool,
    fault: FaultConfig,
    reclaim: Arc<dyn Reclaim>,
}

impl std::fmt::Debug for PagePoolBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PagePoolBuilder")
            .field("memory_bytes", &self.memory_bytes)
            .field("cpus", &self.cpus)
            .field("nodes", &self.nodes)
            .field("policy", &self.policy.name)
            .finish_non_exhaustive()
    }
}

impl Default for PagePoolBuilder {
    fn default() -> PagePoolBuilder {
        PagePoolBuilder {
            memory_bytes: 256 << 20,
            cpus: None,
            nodes: 1,
            zones: Vec::new(),
            policy: Policy::V6_7,
            settings: Settings::DISTRIBUTION_KERNEL,
            llc: None,
            huge_pages: false,
            background: true,
            fault: FaultConfig::default(),
            reclaim: Arc::new(NoReclaim),
        }
    }
}

impl PagePoolBuilder {
    /// Total memory, split evenly between nodes. Default 256 MiB. Rounded down to 4 MiB.
    pub fn memory_bytes(mut self, bytes: usize) -> Self {
        self.memory_bytes = bytes;
        self
    }

    /// Virtual CPUs, each with its own pagesets; threads map to `sched_getcpu() % cpus`.
    /// Default: the machine's CPUs.
    pub fn cpus(mut self, cpus: u32) -> Self {
        self.cpus = Some(cpus);
        self
    }

    /// NUMA nodes (CPUs and memory split evenly). Default 1.
    pub fn nodes(mut self, nodes: u16) -> Self {
        self.nodes = nodes;
        self
    }

    /// Add a zone of `bytes` to each node, in zone order; the last zone of a node gets
    /// whatever memory is left. Default: one Normal zone per node.
    pub fn zone(mut self, zone_type: ZoneType, bytes: usize) -> Self {
        self.zones.push((zone_type, bytes));
        self
    }

    /// The policy (default: Linux v6.7).
    pub fn policy(mut self, policy: Policy) -> Self {
        self.policy = policy;
        self
    }

    /// The sysctls. Default: [`Settings::DISTRIBUTION_KERNEL`], Linux's with THP on, so the
    /// pagesets (whose `high` follows the low watermark) are sized as on the machines the
    /// benchmarks compare with; [`Settings::SMALL_KERNEL`] holds back less memory.
    pub fn settings(mut self, settings: Settings) -> Self {
        self.settings = settings;
        self
    }

    /// The last-level cache (default: 32 MiB shared by every CPU).
    pub fn llc(mut self, llc: CacheInfo) -> Self {
        self.llc = Some(llc);
        self
    }

    /// Ask the kernel for transparent huge pages under the arena.
    pub fn huge_pages(mut self, on: bool) -> Self {
        self.huge_pages = on;
        self
    }

    /// Run the background threads (vmstat tick, kswapd). Default on; tests that want
    /// exact counts turn it off and call [`PagePool::vmstat_tick`] themselves.
    pub fn background(mut self, on: bool) -> Self {
        self.background = on;
        self
    }

    /// Fault injection (default: none).
    pub fn fault_injection(mut self, fault: FaultConfig) -> Self {
        self.fault = fault;
        self
    }

    /// The reclaim hook kswapd calls (default: [`NoReclaim`]).
    pub fn reclaim(mut self, reclaim: Arc<dyn Reclaim>) -> Self {
        self.reclaim = reclaim;
        self
    }

    /// Map the arena, build the zones and start the background threads.
    pub fn build(self) -> Result<PagePool, PoolError> {
        if page_size() != PAGE_SIZE {
            return Err(PoolError::Invalid(format!(
                "the OS page size is {} bytes; mmkit models 4 KiB pages",
                page_size()
            )));
        }
        let cpus = match self.cpus {
            Some(cpus) => cpus,
            None => std::thread::available_parallelism()
                .map(|n| n.get() as u32)
                .unwrap_or(1),
        };
        if cpus == 0 || self.nodes == 0 || cpus < self.nodes as u32 {
            return Err(PoolError::Invalid(format!(
                "{cpus} CPUs over {} nodes: need at least one CPU per node",
                self.nodes
            )));
        }
        let node_bytes = (self.memory_bytes / self.nodes as usize) / ARENA_ALIGN * ARENA_ALIGN;
        if node_bytes == 0 {
            return Err(PoolError::Invalid(format!(
                "{} bytes over {} nodes leaves under 4 MiB per node",
                self.memory_bytes, self.nodes
            )));
        }
        let zones = self.layout(node_bytes)?;
        let node_cpus: Vec<u32> = (0..self.nodes as u32)
            .map(|n| cpus / self.nodes as u32 + u32::from(n < cpus % self.nodes as u32))
            .collect();
        let llc = self.llc.unwrap_or(CacheInfo {
            llc_bytes: 32 << 20,
            llc_shared_cpus: cpus,
        });
        let topology = Topology::new(zones, node_cpus, llc, false).map_err(PoolError::Topology)?;
        let allocator = PageAllocator::new(topology, self.settings, self.policy)
            .map_err(PoolError::Settings)?;
        let arena = Arena::new(
            node_bytes * self.nodes as usize,
            ARENA_ALIGN,
            self.huge_pages,
        )?;
        let inner = Inner::new(allocator, arena, cpus, self.fault, self.reclaim);
        PagePool::start(inner, self.background)
    }

    /// Zones of every node over consecutive pfns from 0.
    fn layout(&self, node_bytes: usize) -> Result<Vec<ZoneSpec>, PoolError> {
        let page = PAGE_SIZE;
        let node_pages = (node_bytes / page) as u64;
        let requested = if self.zones.is_empty() {
            vec![(ZoneType::Normal, node_bytes)]
        } else {
            self.zones.clone()
        };
        let mut specs = Vec::new();
        for node in 0..self.nodes {
            let mut start = node as u64 * node_pages;
            let mut left = node_pages;
            for (i, &(zone_type, bytes)) in requested.iter().enumerate() {
                let last = i + 1 == requested.len();
                let pages = if last { left } else { (bytes / page) as u64 };
                if pages > left {
                    return Err(PoolError::Invalid(format!(
                        "zones ask for more than the {node_bytes} bytes of node {node}"
                    )));
                }
                specs.push(ZoneSpec {
                    node,
                    zone_type,
                    start_pfn: Pfn(start),
                    spanned: pages,
                    present: pages,
                    managed: pages,
                });
                start += pages;
                left -= pages;
            }
        }
        Ok(specs)
    }
}
