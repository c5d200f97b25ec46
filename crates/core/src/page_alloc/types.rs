//! Zone types and migratetypes: the two axes of every free list.
//!
//! Linux counterpart: `enum zone_type` and `enum migratetype` in `include/linux/mmzone.h`.

use core::fmt;

/// A zone type, in Linux's order (lowest addresses first). x86-64 configures DMA, DMA32,
/// Normal and Movable; a kernel with `CONFIG_ZONE_DEVICE` adds Device, which never holds
/// allocatable memory.
///
/// ```
/// use mmkit_core::ZoneType;
///
/// assert_eq!(ZoneType::from_name("DMA32"), Some(ZoneType::Dma32));
/// assert_eq!(ZoneType::Normal.name(), "Normal");
/// assert!(ZoneType::Dma32 < ZoneType::Normal); // Linux's order: lowest addresses first
/// assert!(ZoneType::Normal.is_lowmem());
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum ZoneType {
    /// Below 16 MiB, for ISA DMA.
    Dma = 0,
    /// Below 4 GiB, for 32-bit DMA.
    Dma32 = 1,
    /// Everything else the kernel may use.
    Normal = 2,
    /// Only movable allocations (hot-removable memory, `kernelcore=`).
    Movable = 3,
    /// Device memory (`CONFIG_ZONE_DEVICE`); shown by zoneinfo, never allocated from.
    Device = 4,
}

/// The most zone types a node can have (Linux `MAX_NR_ZONES` with `CONFIG_ZONE_DEVICE`).
pub const MAX_NR_ZONES: usize = 5;

impl ZoneType {
    /// All zone types in order.
    pub const ALL: [ZoneType; MAX_NR_ZONES] = [
        ZoneType::Dma,
        ZoneType::Dma32,
        ZoneType::Normal,
        ZoneType::Movable,
        ZoneType::Device,
    ];

    /// The zone index (`zone_idx`).
    pub const fn index(self) -> usize {
        self as usize
    }

    /// The zone type at `index`.
    pub fn from_index(index: usize) -> Option<ZoneType> {
        ZoneType::ALL.get(index).copied()
    }

    /// Linux's name for the zone, as `/proc/zoneinfo` prints it.
    pub const fn name(self) -> &'static str {
        match self {
            ZoneType::Dma => "DMA",
            ZoneType::Dma32 => "DMA32",
            ZoneType::Normal => "Normal",
            ZoneType::Movable => "Movable",
            ZoneType::Device => "Device",
        }
    }

    /// Parse Linux's zone name (case-insensitive).
    pub fn from_name(name: &str) -> Option<ZoneType> {
        ZoneType::ALL
            .into_iter()
            .find(|z| z.name().eq_ignore_ascii_case(name))
    }

    /// Zones counted as "lowmem" by the watermark code: all but Movable (and HighMem,
    /// which x86-64 does not have) and Device.
    pub const fn is_lowmem(self) -> bool {
        matches!(self, ZoneType::Dma | ZoneType::Dma32 | ZoneType::Normal)
    }
}

impl fmt::Display for ZoneType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A migratetype: which free lists a block belongs on, grouping pages by mobility.
/// CMA is not configured.
///
/// ```
/// use mmkit_core::page_alloc::MigrateType;
///
/// // An unmovable request short of unmovable blocks steals from these, in order.
/// let fallbacks = MigrateType::Unmovable.fallbacks();
/// assert_eq!(fallbacks, [MigrateType::Reclaimable, MigrateType::Movable]);
/// assert_eq!(MigrateType::from_index(1), Some(MigrateType::Movable));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum MigrateType {
    /// Kernel allocations that cannot move.
    Unmovable = 0,
    /// User pages and page cache: can be migrated or reclaimed.
    Movable = 1,
    /// Slab caches that a shrinker can free.
    Reclaimable = 2,
    /// Pageblocks reserved for high-order atomic allocations.
    HighAtomic = 3,
    /// Pageblocks being isolated (memory offline, `zone_pcp_disable`, contiguous allocation).
    Isolate = 4,
}

/// Number of migratetypes, and so of free lists per order.
pub const MIGRATE_TYPES: usize = 5;
/// The migratetypes that have per-CPU lists (Linux `MIGRATE_PCPTYPES`).
pub const MIGRATE_PCPTYPES: usize = 3;

impl MigrateType {
    /// All migratetypes, in Linux's order.
    pub const ALL: [MigrateType; MIGRATE_TYPES] = [
        MigrateType::Unmovable,
        MigrateType::Movable,
        MigrateType::Reclaimable,
        MigrateType::HighAtomic,
        MigrateType::Isolate,
    ];

    /// The index of this type's free list.
    pub const fn index(self) -> usize {
        self as usize
    }

    /// The migratetype with index `index`. A match rather than a lookup in
    /// [`MigrateType::ALL`]: it compiles to one range check, with no table load, on every
    /// free's pageblock lookup.
    #[inline]
    pub fn from_index(index: usize) -> Option<MigrateType> {
        match index {
            0 => Some(MigrateType::Unmovable),
            1 => Some(MigrateType::Movable),
            2 => Some(MigrateType::Reclaimable),
            3 => Some(MigrateType::HighAtomic),
            4 => Some(MigrateType::Isolate),
            _ => None,
        }
    }

    /// Whether blocks of this type may merge with blocks of another mergeable type at
    /// pageblock order and above (`migratetype_is_mergeable`: the PCP types).
    pub const fn is_mergeable(self) -> bool {
        (self as usize) < MIGRATE_PCPTYPES
    }

    /// The types a request of this type falls back to, in order (`fallbacks[]`).
    pub const fn fallbacks(self) -> [MigrateType; 2] {
        match self {
            MigrateType::Unmovable => [MigrateType::Reclaimable, MigrateType::Movable],
            MigrateType::Movable => [MigrateType::Reclaimable, MigrateType::Unmovable],
            MigrateType::Reclaimable => [MigrateType::Unmovable, MigrateType::Movable],
            // Linux never falls back for these; callers do not ask.
            MigrateType::HighAtomic | MigrateType::Isolate => {
                [MigrateType::Isolate, MigrateType::Isolate]
            }
        }
    }

    /// Linux's name (`migratetype_names`), as `/proc/pagetypeinfo` prints it.
    pub const fn name(self) -> &'static str {
        match self {
            MigrateType::Unmovable => "Unmovable",
            MigrateType::Movable => "Movable",
            MigrateType::Reclaimable => "Reclaimable",
            MigrateType::HighAtomic => "HighAtomic",
            MigrateType::Isolate => "Isolate",
        }
    }
}

impl fmt::Display for MigrateType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A NUMA node id.
pub type NodeId = u16;

/// A CPU id, `0..nr_cpus`.
pub type CpuId = u32;

/// Where a request runs: Linux's "current CPU" and execution context, made explicit.
///
/// ```
/// # use mmkit_core::topology::{CacheInfo, ZoneSize};
/// # use mmkit_core::{PageAllocator, Policy, Settings, Topology, ZoneType};
/// # let zones = [ZoneSize::managed(0, ZoneType::Normal, 16_384)];
/// # let llc = CacheInfo { llc_bytes: 8 << 20, llc_shared_cpus: 1 };
/// # let topology = Topology::x86_64(&zones, vec![1], llc, false)?;
/// # let allocator = PageAllocator::new(topology, Settings::default(), Policy::V6_7)?;
/// use mmkit_core::page_alloc::Caller;
/// use mmkit_core::{Gfp, Order};
///
/// // A task and a network softirq on CPU 0 allocate through the same pageset (v6.7).
/// let task = Caller::task(0);
/// let softirq = Caller::softirq(0);
/// assert!(!task.in_interrupt() && softirq.in_interrupt());
/// let pfn = allocator.alloc_pages(softirq, Gfp::ATOMIC, Order::ZERO)?;
/// allocator.free_pages(task, pfn, Order::ZERO)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Caller {
    /// The CPU whose pagesets serve the request.
    pub cpu: CpuId,
    /// Task or interrupt context.
    pub context: Context,
}

/// Execution context of a request.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Context {
    /// Process context.
    Task,
    /// Softirq (e.g. network receive).
    SoftIrq,
    /// Hard interrupt.
    HardIrq,
}

impl Caller {
    /// A request from a task on `cpu`.
    pub const fn task(cpu: CpuId) -> Caller {
        Caller {
            cpu,
            context: Context::Task,
        }
    }

    /// A request from softirq context on `cpu`.
    pub const fn softirq(cpu: CpuId) -> Caller {
        Caller {
            cpu,
            context: Context::SoftIrq,
        }
    }

    /// Linux's `in_interrupt()`: any context but a task.
    pub const fn in_interrupt(&self) -> bool {
        !matches!(self.context, Context::Task)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migratetype_from_index_inverts_index() {
        for index in 0..MIGRATE_TYPES + 3 {
            assert_eq!(
                MigrateType::from_index(index),
                MigrateType::ALL.get(index).copied()
            );
        }
        for mt in MigrateType::ALL {
            assert_eq!(MigrateType::from_index(mt.index()), Some(mt));
        }
    }
}
