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
    pub transparent_hugepage: bool,
    /// `CONFIG_PCP_BATCH_SCALE_MAX`: 0..=6, default 5.
    pub pcp_batch_scale_max: u8,
    /// `vm.stat_interval` in milliseconds (the PCP decay cadence); default 1000.
    pub stat_interval_ms: u32,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            min_free_kbytes: MinFreeKbytes::Default,
            watermark_scale_factor: 10,
            watermark_boost_factor: 15_000,
            percpu_pagelist_high_fraction: 0,
            lowmem_reserve_ratio: [256, 256, 32, 0, 0],
            transparent_hugepage: true,
            pcp_batch_scale_max: 5,
            stat_interval_ms: 1000,
        }
    }
}

/// A setting outside what Linux accepts (the sysctl would return `EINVAL`).
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum SettingsError {
    /// `watermark_scale_factor` outside 1..=3000.
    WatermarkScaleFactor(u32),
    /// `percpu_pagelist_high_fraction` in 1..=7.
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
                "percpu_pagelist_high_fraction {v} is invalid: use 0 or at least {MIN_PERCPU_PAGELIST_HIGH_FRACTION}"
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
        if fraction != 0 && fraction < MIN_PERCPU_PAGELIST_HIGH_FRACTION {
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

    #[test]
    fn fraction_below_eight_is_rejected() {
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
