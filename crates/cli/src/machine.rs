//! The machine a subcommand builds an allocator for: zones, CPUs, sysctls and the
//! last-level cache, as command-line flags shared by `mmkit zoneinfo` and
//! `mmkit pcp-script`; the two PCP knobs (`CONFIG_PCP_BATCH_SCALE_MAX`,
//! `vm.stat_interval`) are shared with `mmkit sim` too ([`PcpKnobArgs`]).
//!
//! The flags only describe the machine; [`Topology::x86_64`] lays the zones out (or
//! [`Topology::from_memory_map`] cuts them from `--usable` ranges) and
//! [`Settings::validate`] applies Linux's sysctl limits. The policy preset is parsed here
//! too, so that every subcommand names presets the same way. Linux learns the same facts
//! at boot (e820, `free_area_init`, cacheinfo) and from `/proc/sys/vm`.

use clap::Args;
use mmkit_core::page_alloc::NodeId;
use mmkit_core::policy::{LATER_PRESETS, PRESETS};
use mmkit_core::settings::MinFreeKbytes;
use mmkit_core::topology::{CacheInfo, MemoryRange, PfnRange, ZoneLimits, ZoneSize};
use mmkit_core::{PageAllocator, Policy, Settings, SettingsError, Topology, TopologyError};

use crate::limits;
use crate::size::{parse_address_range, parse_bytes, parse_zone};
use crate::CliError;

/// The machine flags. `--cpus` has no default of its own: a subcommand gives one (see
/// [`MachineArgs::or_default_machine`]), or sets a clap default with `mut_arg`.
#[derive(Args, Clone, Debug)]
pub struct MachineArgs {
    /// A zone as `[NODE:]NAME=MANAGED[/PRESENT[/SPANNED]]` in 4 KiB pages; repeat, in zone
    /// order (DMA, DMA32, Normal, Movable), node by node. Zones are laid out at the x86-64
    /// boundaries: DMA from pfn 1 below 16 MiB, DMA32 below 4 GiB, Normal from 4 GiB.
    #[arg(long = "zone", value_name = "ZONE")]
    pub zones: Vec<String>,

    /// Instead of --zone: usable RAM as firmware reports it (e820, /proc/iomem's System
    /// RAM), `START-END[@NODE]` in bytes, END inclusive; repeat, in any order. Zones are cut
    /// at the x86-64 boundaries and span their node's memory, holes included, as Linux
    /// sizes them.
    #[arg(long, value_name = "RANGE", conflicts_with = "zones")]
    pub usable: Vec<String>,

    /// With --usable: present memory kept from the buddy allocator (memblock_reserve),
    /// `START-END` in bytes, END inclusive; repeat.
    #[arg(long, value_name = "RANGE", requires = "usable")]
    pub reserve: Vec<String>,

    /// CPUs per node: one number for every node, or one per node separated by commas.
    #[arg(long, value_delimiter = ',')]
    pub cpus: Vec<u32>,

    /// Instead of --cpus: each CPU's node in firmware's numbering, separated by commas
    /// (`0,1,0,1`: CPUs alternate between two nodes).
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "NODES",
        conflicts_with = "cpus"
    )]
    pub cpu_nodes: Vec<NodeId>,

    /// vm.min_free_kbytes; default: Linux's boot formula (raised for THP unless --no-thp).
    #[arg(long, allow_negative_numbers = true)]
    pub min_free_kbytes: Option<i64>,

    /// vm.watermark_scale_factor (1..=3000).
    #[arg(long, default_value_t = 10, allow_negative_numbers = true)]
    pub watermark_scale_factor: i64,

    /// vm.watermark_boost_factor.
    #[arg(long, default_value_t = 15000, allow_negative_numbers = true)]
    pub watermark_boost_factor: i64,

    /// vm.percpu_pagelist_high_fraction (0, or at least 8).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub percpu_pagelist_high_fraction: i64,

    /// Size of the last-level cache (bytes, or with K/M/G).
    #[arg(long, default_value = "32M")]
    pub llc_size: String,

    /// CPUs sharing one last-level cache; default: all CPUs.
    #[arg(long)]
    pub llc_shared_cpus: Option<u32>,

    /// Transparent huge pages off: khugepaged does not raise min_free_kbytes.
    #[arg(long)]
    pub no_thp: bool,

    /// Model CONFIG_ZONE_DEVICE: a fifth, empty zone per node, as distribution kernels have.
    #[arg(long)]
    pub zone_device: bool,

    /// The PCP's build-time and sysctl knobs.
    #[command(flatten)]
    pub pcp: PcpKnobArgs,
}

/// `CONFIG_PCP_BATCH_SCALE_MAX` and `vm.stat_interval`, which the core keeps in
/// [`Settings`] but no sysctl flag above sets.
#[derive(Args, Clone, Debug)]
pub struct PcpKnobArgs {
    /// CONFIG_PCP_BATCH_SCALE_MAX (0..=6): caps the refill and free scale factors, so a
    /// refill, a drain and a decay step move at most batch << S pages.
    #[arg(
        long,
        value_name = "S",
        default_value_t = 5,
        allow_negative_numbers = true
    )]
    pub pcp_batch_scale_max: i64,

    /// vm.stat_interval: the period of the vmstat tick that decays pcp->high. Seconds, as
    /// the sysctl takes them, or with a unit (500ms, 2s).
    #[arg(long, value_name = "TIME", default_value = "1")]
    pub stat_interval: String,
}

impl PcpKnobArgs {
    /// `CONFIG_PCP_BATCH_SCALE_MAX`, checked against its Kconfig range.
    pub fn pcp_batch_scale_max(&self) -> Result<u8, CliError> {
        match u8::try_from(self.pcp_batch_scale_max) {
            Ok(scale_max) if scale_max <= 6 => Ok(scale_max),
            _ => Err(CliError::usage(format!(
                "--pcp-batch-scale-max {} is outside 0..=6 (CONFIG_PCP_BATCH_SCALE_MAX's range)",
                self.pcp_batch_scale_max
            ))),
        }
    }

    /// `vm.stat_interval` in milliseconds: at least 1 ms, at most what a `u32` holds.
    pub fn stat_interval_ms(&self) -> Result<u32, CliError> {
        let text = self.stat_interval.trim();
        let (number, ms_per_unit) = match text.strip_suffix("ms") {
            Some(number) => (number, 1),
            None => (text.strip_suffix('s').unwrap_or(text), 1000),
        };
        let ms = number
            .parse::<u64>()
            .ok()
            .and_then(|n| n.checked_mul(ms_per_unit))
            .and_then(|ms| u32::try_from(ms).ok());
        match ms {
            Some(ms) if ms > 0 => Ok(ms),
            _ => Err(CliError::usage(format!(
                "--stat-interval {:?} is invalid: give whole seconds (1, as vm.stat_interval) \
                 or a time of at least 1ms (500ms, 2s) up to 49 days",
                self.stat_interval
            ))),
        }
    }

    /// These knobs written into `settings`.
    pub fn apply(&self, settings: &mut Settings) -> Result<(), CliError> {
        settings.pcp_batch_scale_max = self.pcp_batch_scale_max()?;
        settings.stat_interval_ms = self.stat_interval_ms()?;
        Ok(())
    }
}

/// A machine to use when the user names no zone.
#[derive(Clone, Copy, Debug)]
pub struct DefaultMachine {
    /// The zone, as `--zone` takes it.
    pub zone: &'static str,
    /// CPUs, unless `--cpus` is given.
    pub cpus: u32,
    /// `vm.min_free_kbytes`, unless `--min-free-kbytes` is given.
    pub min_free_kbytes: i64,
}

impl MachineArgs {
    /// These flags with the gaps filled: without `--zone`, `default`'s zone, CPUs and
    /// `min_free_kbytes` (each unless given); with `--zone`, `cpus_with_zones` CPUs per
    /// node unless `--cpus` is given.
    pub fn or_default_machine(
        &self,
        default: &DefaultMachine,
        cpus_with_zones: u32,
    ) -> MachineArgs {
        let mut args = self.clone();
        let described = !args.zones.is_empty() || !args.usable.is_empty();
        if !described {
            args.zones = vec![default.zone.to_owned()];
            args.min_free_kbytes = args.min_free_kbytes.or(Some(default.min_free_kbytes));
            if args.cpus.is_empty() {
                args.cpus = vec![default.cpus];
            }
        } else if args.cpus.is_empty() && args.cpu_nodes.is_empty() {
            args.cpus = vec![cpus_with_zones];
        }
        args
    }

    /// The sysctls, validated as the sysctl handlers would.
    pub fn settings(&self) -> Result<Settings, CliError> {
        let non_negative = |flag: &str, value: i64| {
            u32::try_from(value).map_err(|_| {
                CliError::usage(format!(
                    "{flag} {value} is invalid: must be between 0 and {}",
                    u32::MAX
                ))
            })
        };
        let min_free_kbytes =
            match self.min_free_kbytes {
                None => MinFreeKbytes::Default,
                Some(kbytes) => MinFreeKbytes::Explicit(u64::try_from(kbytes).map_err(|_| {
                    CliError::usage(format!("--min-free-kbytes {kbytes} is negative"))
                })?),
            };
        let mut settings = Settings {
            min_free_kbytes,
            watermark_scale_factor: non_negative(
                "--watermark-scale-factor",
                self.watermark_scale_factor,
            )?,
            watermark_boost_factor: non_negative(
                "--watermark-boost-factor",
                self.watermark_boost_factor,
            )?,
            percpu_pagelist_high_fraction: non_negative(
                "--percpu-pagelist-high-fraction",
                self.percpu_pagelist_high_fraction,
            )?,
            transparent_hugepage: !self.no_thp,
            ..Settings::DISTRIBUTION_KERNEL
        };
        self.pcp.apply(&mut settings)?;
        settings.validate().map_err(settings_error)?;
        Ok(settings)
    }

    /// The nodes, zones, CPUs and cache. An empty `--cpus` counts as one CPU per node.
    pub fn topology(&self) -> Result<Topology, CliError> {
        let (topology, flags) = if self.usable.is_empty() {
            (self.topology_of_zones()?, "--zone and --cpus")
        } else {
            (self.topology_of_memory_map()?, "--usable and --cpus")
        };
        limits::check_memory(
            &format!("{flags}: the machine's mem_map and pagesets"),
            u128::from(PageAllocator::boot_bytes(&topology)),
        )?;
        Ok(topology)
    }

    /// `--zone`s laid out at the x86-64 boundaries.
    fn topology_of_zones(&self) -> Result<Topology, CliError> {
        let sizes: Vec<ZoneSize> = self
            .zones
            .iter()
            .map(|z| parse_zone(z))
            .collect::<Result<_, _>>()
            .map_err(|e| CliError::usage(format!("--zone: {e}")))?;
        let nr_nodes = sizes.iter().map(|s| s.node as usize + 1).max().unwrap_or(1);
        let node_cpus = self.node_cpus(nr_nodes)?;
        let llc = self.llc(self.nr_cpus(&node_cpus))?;
        let topology = Topology::x86_64(&sizes, node_cpus, llc, self.zone_device)
            .map_err(|e| self.refused(e))?;
        if self.cpu_nodes.is_empty() {
            return Ok(topology);
        }
        topology
            .with_cpu_nodes(self.cpu_nodes.clone())
            .map_err(|e| self.refused(e))
    }

    /// `--usable` and `--reserve` ranges cut into zones as Linux's `free_area_init` does.
    fn topology_of_memory_map(&self) -> Result<Topology, CliError> {
        let usable: Vec<MemoryRange> = self
            .usable
            .iter()
            .map(|text| {
                let (start, end, node) = parse_address_range(text)?;
                Ok(MemoryRange::from_bytes(start, end, node.unwrap_or(0)))
            })
            .collect::<Result<_, String>>()
            .map_err(|e| CliError::usage(format!("--usable: {e}")))?;
        let reserved: Vec<PfnRange> = self
            .reserve
            .iter()
            .map(|text| match parse_address_range(text)? {
                (start, end, None) => Ok(PfnRange::covering_bytes(start, end)),
                (_, _, Some(_)) => Err(format!("{text:?}: a reservation belongs to no node")),
            })
            .collect::<Result<_, String>>()
            .map_err(|e| CliError::usage(format!("--reserve: {e}")))?;
        // CPU counts stay counts (a table of 2^32 CPUs would be built before the memory
        // check could refuse the machine): the table is only what --cpu-nodes lists.
        let nr_nodes = usable.iter().map(|r| usize::from(r.node) + 1).max();
        let node_cpus = self.node_cpus(nr_nodes.unwrap_or(1))?;
        let llc = self.llc(self.nr_cpus(&node_cpus))?;
        let table: &[NodeId] = if self.cpu_nodes.is_empty() {
            &[0]
        } else {
            &self.cpu_nodes
        };
        let topology =
            Topology::from_memory_map(&usable, &reserved, ZoneLimits::X86_64, table, llc)
                .map_err(|e| self.refused(e))?;
        let topology = if self.cpu_nodes.is_empty() {
            topology
                .with_node_cpus(node_cpus)
                .map_err(|e| self.refused(e))?
        } else {
            topology
        };
        Ok(topology.with_zone_device(self.zone_device))
    }

    /// `--cpus` for `nr_nodes` nodes: one count for all, or one per node.
    fn node_cpus(&self, nr_nodes: usize) -> Result<Vec<u32>, CliError> {
        match self.cpus[..] {
            [] => Ok(vec![1; nr_nodes]),
            [each] => Ok(vec![each; nr_nodes]),
            ref list if list.len() == nr_nodes => Ok(list.to_vec()),
            ref list => Err(CliError::usage(format!(
                "--cpus lists {} nodes but the zones use {nr_nodes}",
                list.len()
            ))),
        }
    }

    fn nr_cpus(&self, node_cpus: &[u32]) -> u32 {
        if !self.cpu_nodes.is_empty() {
            return u32::try_from(self.cpu_nodes.len()).unwrap_or(u32::MAX);
        }
        node_cpus
            .iter()
            .try_fold(0u32, |sum, &cpus| sum.checked_add(cpus))
            .unwrap_or(u32::MAX)
    }

    /// The last-level cache, shared by every CPU unless `--llc-shared-cpus` says otherwise.
    fn llc(&self, nr_cpus: u32) -> Result<CacheInfo, CliError> {
        Ok(CacheInfo {
            llc_bytes: parse_bytes(&self.llc_size)
                .map_err(|e| CliError::usage(format!("--llc-size: {e}")))?,
            llc_shared_cpus: self.llc_shared_cpus.unwrap_or(nr_cpus.max(1)),
        })
    }

    /// The allocator of this machine under `policy`.
    pub fn allocator(&self, policy: Policy) -> Result<PageAllocator, CliError> {
        let settings = self.settings()?;
        let topology = self.topology()?;
        PageAllocator::new(topology, settings, policy).map_err(settings_error)
    }
}

/// A refused setting, naming the flag that set it.
fn settings_error(error: SettingsError) -> CliError {
    let flag = match error {
        SettingsError::WatermarkScaleFactor(_) => "--watermark-scale-factor",
        SettingsError::PercpuPagelistHighFraction(_) => "--percpu-pagelist-high-fraction",
        SettingsError::MinFreeKbytesAboveMemory { .. } => "--min-free-kbytes",
        SettingsError::PcpBatchScaleMax(_) => "--pcp-batch-scale-max",
        SettingsError::StatInterval => "--stat-interval",
    };
    CliError::usage(format!("{flag}: {error}"))
}

impl MachineArgs {
    /// A machine that cannot be built, naming the flag that described what was wrong.
    fn refused(&self, error: TopologyError) -> CliError {
        let zones = if self.usable.is_empty() {
            "--zone"
        } else {
            "--usable"
        };
        let cpus = if self.cpu_nodes.is_empty() {
            "--cpus"
        } else {
            "--cpu-nodes"
        };
        let flag = match error {
            TopologyError::NoZones => {
                return CliError::usage("no zones: give at least one --zone or --usable range")
            }
            TopologyError::NoCpus | TopologyError::TooManyCpus | TopologyError::UnknownNode(_) => {
                cpus
            }
            TopologyError::TooManyNodes(_) if !self.cpu_nodes.is_empty() => {
                "--usable or --cpu-nodes"
            }
            TopologyError::LlcSharedCpus => "--llc-shared-cpus",
            TopologyError::DeviceZone => "--zone (ZONE_DEVICE)",
            _ => zones,
        };
        CliError::usage(format!("{flag}: {error}"))
    }
}

/// The policy preset called `name` (see [`PRESETS`] and [`LATER_PRESETS`]).
pub fn policy_preset(name: &str) -> Result<Policy, CliError> {
    Policy::preset(name).ok_or_else(|| {
        CliError::usage(format!(
            "unknown policy {name:?}: use one of {}, {}",
            PRESETS.join(", "),
            LATER_PRESETS.join(", ")
        ))
    })
}
