//! The sysctl-like settings of the page allocator, with Linux's defaults and validity rules.
//!
//! Linux counterpart: `vm.min_free_kbytes`, `vm.watermark_scale_factor`,
//! `vm.watermark_boost_factor`, `vm.percpu_pagelist_high_fraction`,
//! `vm.lowmem_reserve_ratio` and `vm.stat_interval` (`Documentation/admin-guide/sysctl/vm.rst`),
//! plus the two build-time knobs that matter here: `CONFIG_PCP_BATCH_SCALE_MAX` and
//! transparent huge pages (which make khugepaged raise `min_free_kbytes`).

use core::fmt;

use crate::page_alloc::pcp_sizing::MIN_PERCPU_PAGELIST_HIGH_FRACTION;
use crate::page_alloc::MAX_NR_ZONES;

/// How `min_free_kbytes` is chosen.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum MinFreeKbytes {
    /// Linux's boot-time formula, raised by khugepaged when THP is on.
    #[default]
    Default,
    /// An explicit value, as written to `/proc/sys/vm/min_free_kbytes`.
    Explicit(u64),
}

/// The page allocator's settings.
///
/// ```
/// # use mmkit_core::topology::{CacheInfo, ZoneSize};
/// # use mmkit_core::{PageAllocator, Policy, Settings, Topology, ZoneType};
/// # let zones = [ZoneSize::managed(0, ZoneType::Normal, 16_384)];
/// # let llc = CacheInfo { llc_bytes: 8 << 20, llc_shared_cpus: 1 };
/// # let topology = Topology::x86_64(&zones, vec![1], llc, false)?;
/// # let allocator = PageAllocator::new(topology, Settings::default(), Policy::V6_7)?;
/// use mmkit_core::settings::MinFreeKbytes;
///
/// // Boot with the defaults (no THP), then write vm.min_free_kbytes as a sysctl would.
/// assert!(!allocator.settings().transparent_hugepage);
/// let more = Settings { min_free_kbytes: MinFreeKbytes::Explicit(4096), ..allocator.settings() };
/// allocator.set_settings(more)?;
/// assert_eq!(allocator.min_free_kbytes(), 4096);
/// assert!(Settings::DISTRIBUTION_KERNEL.transparent_hugepage);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, PartialEq, Eq, Debug)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Settings {
    /// `vm.min_free_kbytes`.
    pub min_free_kbytes: MinFreeKbytes,
    /// `vm.watermark_scale_factor`, in 1/10000 of a zone: 1..=3000, default 10.
    pub watermark_scale_factor: u32,
    /// `vm.watermark_boost_factor`, in 1/10000 of the high watermark; 0 disables boosting.
    /// Default 15000.
    pub watermark_boost_factor: u32,
    /// `vm.percpu_pagelist_high_fraction`: 0 (auto-tuned `high`) or at least 8.
    pub percpu_pagelist_high_fraction: u32,
    /// `vm.lowmem_reserve_ratio`, per zone type. Default DMA 256, DMA32 256, Normal 32.
    pub lowmem_reserve_ratio: [u32; MAX_NR_ZONES],
    /// Transparent huge pages enabled: khugepaged raises `min_free_kbytes` at start-up.
    /// Off by default ([`Settings::SMALL_KERNEL`]), on in [`Settings::DISTRIBUTION_KERNEL`].
    pub transparent_hugepage: bool,
    /// `CONFIG_PCP_BATCH_SCALE_MAX`: 0..=6, default 5.
    pub pcp_batch_scale_max: u8,
    /// `vm.stat_interval` in milliseconds (the PCP decay cadence); default 1000.
    pub stat_interval_ms: u32,
}

impl Settings {
    /// What a kernel without transparent huge pages expects: Linux's sysctl defaults, and
    /// `min_free_kbytes` from the boot formula alone (`4 × √(lowmem KiB)`, 128 KiB to
    /// 256 MiB). The default.
    pub const SMALL_KERNEL: Settings = Settings {
        min_free_kbytes: MinFreeKbytes::Default,
        watermark_scale_factor: 10,
        watermark_boost_factor: 15_000,
        percpu_pagelist_high_fraction: 0,
        lowmem_reserve_ratio: [256, 256, 32, 0, 0],
        transparent_hugepage: false,
        pcp_batch_scale_max: 5,
        stat_interval_ms: 1000,
    };

    /// A distribution kernel, as on the published machines the simulator models and on
    /// the live machines `mmkit zoneinfo --live` reads: [`Settings::SMALL_KERNEL`] with
    /// transparent huge pages enabled (`always` or `madvise`), so khugepaged raises
    /// `min_free_kbytes` to two pageblocks per zone plus room for fallbacks, at most 5 % of
    /// lowmem (`set_recommended_min_free_kbytes`). On a 512 MiB PC that is 25,996 KiB
    /// instead of the boot formula's 2,896: (25,996 − 2,896) / 524,288 = 4.4 % more of its
    /// memory held back from `GFP_KERNEL`.
    pub const DISTRIBUTION_KERNEL: Settings = Settings {
        transparent_hugepage: true,
        ..Settings::SMALL_KERNEL
    };
}

impl Default for Settings {
    /// [`Settings::SMALL_KERNEL`]: a kernel that embeds mmkit has no khugepaged unless it
    /// says so.
    fn default() -> Settings {
        Settings::SMALL_KERNEL
    }
}

/// A setting outside what Linux accepts (the sysctl would return `EINVAL`).
///
/// ```
/// # use mmkit_core::topology::{CacheInfo, ZoneSize};
/// # use mmkit_core::{PageAllocator, Policy, Settings, Topology, ZoneType};
/// # let zones = [ZoneSize::managed(0, ZoneType::Normal, 16_384)];
/// # let llc = CacheInfo { llc_bytes: 8 << 20, llc_shared_cpus: 1 };
/// # let topology = Topology::x86_64(&zones, vec![1], llc, false)?;
/// # let allocator = PageAllocator::new(topology, Settings::default(), Policy::V6_7)?;
/// use mmkit_core::SettingsError;
///
/// let bad = Settings { percpu_pagelist_high_fraction: 4, ..Settings::default() };
/// assert_eq!(bad.validate(), Err(SettingsError::PercpuPagelistHighFraction(4)));
/// // The allocator refuses it too, and keeps the settings in force.
/// assert_eq!(allocator.set_settings(bad), Err(SettingsError::PercpuPagelistHighFraction(4)));
/// assert_eq!(allocator.settings(), Settings::default());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum SettingsError {
    /// `watermark_scale_factor` outside 1..=3000.
    WatermarkScaleFactor(u32),
    /// `percpu_pagelist_high_fraction` in 1..=7, or above `INT_MAX` (the sysctl is an
    /// `int`).
    PercpuPagelistHighFraction(u32),
    /// `pcp_batch_scale_max` above 6.
    PcpBatchScaleMax(u8),
    /// `stat_interval_ms` of 0.
    StatInterval,
    /// An explicit `min_free_kbytes` whose min watermarks add up to more than the lowmem
    /// zones manage: no allocation could ever pass a watermark check. Linux accepts the
    /// write and the machine stops allocating; a model has no use for that state.
    MinFreeKbytesAboveMemory {
        /// The value asked for.
        min_free_kbytes: u64,
        /// Σ managed of the lowmem zones, in KiB: the largest value that is possible.
        lowmem_kbytes: u64,
    },
}

impl fmt::Display for SettingsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SettingsError::WatermarkScaleFactor(v) => {
                write!(f, "watermark_scale_factor {v} is outside 1..=3000")
            }
            SettingsError::PercpuPagelistHighFraction(v) => write!(
                f,
                "percpu_pagelist_high_fraction {v} is invalid: use 0 or {MIN_PERCPU_PAGELIST_HIGH_FRACTION} to {}", i32::MAX
            ),
            SettingsError::PcpBatchScaleMax(v) => {
                write!(f, "pcp_batch_scale_max {v} is outside 0..=6")
            }
            SettingsError::StatInterval => write!(f, "stat_interval must be at least 1 ms"),
            SettingsError::MinFreeKbytesAboveMemory {
                min_free_kbytes,
                lowmem_kbytes,
            } => write!(
                f,
                "min_free_kbytes {min_free_kbytes} is impossible: the min watermarks would \
                 exceed the {lowmem_kbytes} KiB the lowmem zones manage"
            ),
        }
    }
}

impl core::error::Error for SettingsError {}

impl Settings {
    /// Check every value against Linux's limits.
    pub fn validate(&self) -> Result<(), SettingsError> {
        if !(1..=3000).contains(&self.watermark_scale_factor) {
            return Err(SettingsError::WatermarkScaleFactor(
                self.watermark_scale_factor,
            ));
        }
        let fraction = self.percpu_pagelist_high_fraction;
        // An `int` sysctl (`proc_dointvec_minmax`): nothing above `INT_MAX` parses.
        if fraction != 0
            && !(MIN_PERCPU_PAGELIST_HIGH_FRACTION..=i32::MAX as u32).contains(&fraction)
        {
            return Err(SettingsError::PercpuPagelistHighFraction(fraction));
        }
        if self.pcp_batch_scale_max > 6 {
            return Err(SettingsError::PcpBatchScaleMax(self.pcp_batch_scale_max));
        }
        if self.stat_interval_ms == 0 {
            return Err(SettingsError::StatInterval);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        assert_eq!(Settings::default().validate(), Ok(()));
    }

    /// A 512 MiB PC (DMA and DMA32): the default keeps the boot formula, the distribution
    /// kernel's khugepaged raises `min_free_kbytes` to 5 % of what `GFP_KERNEL` can use.
    #[test]
    fn small_kernel_default_holds_back_what_the_boot_formula_says_and_thp_raises_it() {
        use crate::page_alloc::{PageAllocator, ZoneType};
        use crate::topology::{CacheInfo, Topology, ZoneSize};
        let machine = || {
            let sizes = [
                ZoneSize::managed(0, ZoneType::Dma, 3840),
                ZoneSize::managed(0, ZoneType::Dma32, (512 << 8) - 3840),
            ];
            let llc = CacheInfo {
                llc_bytes: 8 << 20,
                llc_shared_cpus: 1,
            };
            Topology::x86_64(&sizes, alloc::vec![1], llc, false).unwrap()
        };
        let boot = |settings| {
            PageAllocator::new(machine(), settings, crate::Policy::V6_7)
                .unwrap()
                .min_free_kbytes()
        };
        assert_eq!(Settings::default(), Settings::SMALL_KERNEL);
        assert_eq!(boot(Settings::default()), 2896);
        assert_eq!(boot(Settings::DISTRIBUTION_KERNEL), 25_996);
    }

    #[test]
    fn fraction_below_eight_or_above_int_max_is_rejected() {
        for fraction in 1..8 {
            let settings = Settings {
                percpu_pagelist_high_fraction: fraction,
                ..Settings::default()
            };
            assert_eq!(
                settings.validate(),
                Err(SettingsError::PercpuPagelistHighFraction(fraction))
            );
        }
        let eight = Settings {
            percpu_pagelist_high_fraction: 8,
            ..Settings::default()
        };
        assert_eq!(eight.validate(), Ok(()));
        // The sysctl is an `int`: `INT_MAX` is the largest Linux takes.
        let int_max = Settings {
            percpu_pagelist_high_fraction: i32::MAX as u32,
            ..Settings::default()
        };
        assert_eq!(int_max.validate(), Ok(()));
        for above in [1 << 31, u32::MAX] {
            let settings = Settings {
                percpu_pagelist_high_fraction: above,
                ..Settings::default()
            };
            assert_eq!(
                settings.validate(),
                Err(SettingsError::PercpuPagelistHighFraction(above))
            );
        }
    }

    #[test]
    fn scale_factor_range_is_enforced() {
        for bad in [0, 3001] {
            let settings = Settings {
                watermark_scale_factor: bad,
                ..Settings::default()
            };
            assert!(settings.validate().is_err());
        }
    }
}
