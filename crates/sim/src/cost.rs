//! The cost model: what each thing the allocator or a workload does costs in virtual
//! nanoseconds, and the cache sizes the page-reuse classification uses.
//!
//! One model serves every workload and every policy ([`CostModel::calibrated`]): workloads
//! differ in what they do (pages per message, CPU time per message, orders, lifetimes),
//! never in hardware constants. Every parameter has a source ([`PARAMETERS`]): published
//! (where), measured (the command), or fitted by `mmkit sim calibrate` against the base
//! rows of the published tables only (`crates/sim/calibration.json` is what that command
//! wrote; the patch rows are the held-out test). The sources and section numbers are in
//! `docs/reference/workloads.md` §3.1–3.3.

use serde::{Deserialize, Serialize};

use crate::workload::stream::Placement;

/// Costs in nanoseconds and the cache model's constants.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct CostModel {
    /// Order-0 allocation served from the PCP list.
    pub alloc_hit_ns: u64,
    /// Free to the PCP list.
    pub free_hit_ns: u64,
    /// Uncontended zone-lock acquire + release with irqsave.
    pub lock_ns: u64,
    /// Hold time per block moved under the zone lock, by `rmqueue_bulk` or
    /// `free_pcppages_bulk`: the list operations and the block's cold page descriptor.
    pub hold_per_block_ns: f64,
    /// Cache lines another CPU wrote last that one buddy merge level in
    /// `__free_one_page` touches under the lock: the buddy's page descriptor, which
    /// `page_is_buddy` reads and `del_page_from_free_list` clears, and its two list
    /// neighbours, whose links the unlinking rewrites. Each costs a same-socket transfer.
    pub merge_lines: f64,
    /// Such lines of one split level in `expand`: the freed half's descriptor
    /// (`set_buddy_order`) and the list's old first entry, whose back link
    /// `add_to_free_list` rewrites.
    pub split_lines: f64,
    /// Lock cache-line hand-off to another CPU of the same socket.
    pub handoff_socket_ns: u64,
    /// Lock cache-line hand-off to a CPU of the other socket.
    pub handoff_cross_socket_ns: u64,
    /// Cache lines of zone state that follow the lock to a new holder besides the lock
    /// word (the free-area list heads and counts, `NR_FREE_PAGES`, the zone flags and
    /// watermarks), each a hand-off of its own inside the critical section.
    pub lock_lines: f64,
    /// Touching a whole 4 KiB page that is in the CPU's private L2 (64 lines).
    pub touch_l2_ns: u64,
    /// Touching a whole page that is in the socket's last-level cache.
    pub touch_llc_ns: u64,
    /// Touching a whole page from memory (≈ 10 GB/s per core).
    pub touch_cold_ns: u64,
    /// ω: the share of a socket's caches that page data may use; code and other data
    /// hold the rest (`C_llc_eff = ω × (LLC + the cores' L2s if the LLC is not
    /// inclusive)`, [`crate::MachineSpec::socket_cache_bytes`]).
    pub llc_share: f64,
    /// β: weight of a line that was hot in another CPU's cache of the same socket in the
    /// miss count. 0: on Intel such a snoop hit is not a `cache-misses` event.
    pub llc_remote_miss_weight: f64,
    /// R_bg: cache references per µs of the workload's own work (syscall and protocol
    /// code, user code), which hit; the denominator of the miss rate besides page data.
    pub background_refs_per_us: f64,
    /// Y: the throughput of a core running two busy hyperthreads, over one running alone
    /// (`None`: hyperthreads are not modelled). A CPU whose sibling spins on a zone lock
    /// runs its work faster, as if alone: the spin loop's `PAUSE` gives the core's
    /// resources to the other thread. Work times are those of a CPU beside a busy sibling
    /// (kbuild and netperf keep every core's two threads busy; lmbench's pairs have a core
    /// each, so its siblings idle and never spin).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub smt_yield: Option<f64>,
}

/// Where a parameter's value comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// A published figure: where.
    Published(&'static str),
    /// Measured on this kind of machine: the command.
    Measured(&'static str),
    /// Fitted by `mmkit sim calibrate` against the declared training set.
    Fitted(&'static str),
}

/// A parameter of the model with its source.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Parameter {
    /// The field of [`CostModel`] (or of a workload) it sets.
    pub name: &'static str,
    /// Where its value comes from.
    pub source: Source,
}

/// Every parameter and its source, in [`CostModel`]'s field order, then the workload
/// parameters that `mmkit sim calibrate` fits.
pub const PARAMETERS: &[Parameter] = &[
    Parameter { name: "alloc_hit_ns", source: Source::Published("Gorman 2017, pagealloc: order-0 alloc 116-138 cycles per page after the irq-safe patch (docs/reference/workloads.md §1a)") },
    Parameter { name: "free_hit_ns", source: Source::Published("Gorman 2017, pagealloc: order-0 free 42-83 cycles per page (§1a)") },
    Parameter { name: "lock_ns", source: Source::Published("Brouer 2017, time_bench: spin_lock_unlock_irqsave 62 cycles (§1a)") },
    Parameter { name: "hold_per_block_ns", source: Source::Published("Huang 2023, patch 4: locked sections of rmqueue_bulk and free_pcppages_bulk timed at 2.0-3.5 µs per 63 pages, 32-56 ns per page (§1a); 40, as in §3.1") },
    Parameter { name: "merge_lines", source: Source::Published("counted in Linux v6.7 mm/page_alloc.c, __free_one_page: the buddy's descriptor and its two list neighbours; Lu 2018: cache misses on struct page dominate zone-lock hold (docs/EXPERIMENTS.md, \"A buddy level's cost\")") },
    Parameter { name: "split_lines", source: Source::Published("counted in Linux v6.7 mm/page_alloc.c, expand: the freed half's descriptor and the list's old first entry") },
    Parameter { name: "handoff_socket_ns", source: Source::Published("core-to-core latency literature, same socket (§3.1); `mmkit bench handoff` measured 59-67 ns on a Sapphire Rapids VM (docs/EXPERIMENTS.md)") },
    Parameter { name: "handoff_cross_socket_ns", source: Source::Published("core-to-core latency literature, cross socket (§3.1)") },
    Parameter { name: "lock_lines", source: Source::Fitted("base lock contend% of lmbench (51.4) and netperf (2.1), and the ratio of netperf's free_pcppages_bulk share to its spin in LKP's profile (2.04 / 5.97)") },
    Parameter { name: "touch_l2_ns", source: Source::Published("64 lines from L2 (§3.1)") },
    Parameter { name: "touch_llc_ns", source: Source::Published("64 lines from the LLC (§3.1)") },
    Parameter { name: "touch_cold_ns", source: Source::Published("64 lines from memory at ~10 GB/s per core (§3.1)") },
    Parameter { name: "llc_share", source: Source::Published("§3.3: ω ≈ 0.5 for code and other data") },
    Parameter { name: "llc_remote_miss_weight", source: Source::Published("Intel: a snoop hit in another core's cache is not an LLC miss event") },
    Parameter { name: "smt_yield", source: Source::Published("Intel: Hyper-Threading gives 15-30 % more throughput on multithreaded work, 1.225 the middle; the PAUSE of a spin-wait loop yields the core to the sibling (Intel SDM, PAUSE)") },
    Parameter { name: "background_refs_per_us", source: Source::Fitted("base cache miss rate% of netperf (1.3) and lmbench (0.2)") },
    Parameter { name: "unix.placement", source: Source::Fitted("lmbench's base lock contend% (51.4): spread or one-node, whichever fits stage 1 better") },
    Parameter { name: "kbuild.faults_per_s", source: Source::Fitted("kbuild's base lock contend% (14.0); measured 36k/s on a 2-CPU VM for small gcc runs (§2.1)") },
];

/// What `mmkit sim calibrate` fits, as it writes them to `crates/sim/calibration.json`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Fitted {
    /// [`CostModel::lock_lines`].
    pub lock_lines: f64,
    /// [`CostModel::background_refs_per_us`].
    pub background_refs_per_us: f64,
    /// kbuild's page faults per second of a running process.
    pub kbuild_faults_per_s: f64,
    /// Where lmbench's pairs run: a discrete choice the first stage makes on lmbench's
    /// base lock contend% (a calibration written before it existed read as `spread`).
    #[serde(default)]
    pub unix_placement: Placement,
}

/// The committed calibration: what `mmkit sim calibrate` wrote.
pub const CALIBRATION_JSON: &str = include_str!("../calibration.json");

/// The fitted values of [`CALIBRATION_JSON`].
pub fn calibrated_fit() -> Fitted {
    #[derive(Deserialize)]
    struct File {
        fitted: Fitted,
    }
    let file: File = serde_json::from_str(CALIBRATION_JSON)
        .expect("crates/sim/calibration.json is what `mmkit sim calibrate` writes");
    file.fitted
}

impl CostModel {
    /// The published and measured values, with the fitted ones at `fit`.
    pub fn with_fit(fit: &Fitted) -> CostModel {
        CostModel {
            alloc_hit_ns: 30,
            free_hit_ns: 15,
            lock_ns: 20,
            hold_per_block_ns: 40.0,
            merge_lines: 3.0,
            split_lines: 2.0,
            handoff_socket_ns: 70,
            handoff_cross_socket_ns: 180,
            lock_lines: fit.lock_lines,
            touch_l2_ns: 80,
            touch_llc_ns: 200,
            touch_cold_ns: 400,
            llc_share: 0.5,
            llc_remote_miss_weight: 0.0,
            background_refs_per_us: fit.background_refs_per_us,
            smt_yield: Some(1.225),
        }
    }

    /// The model every run uses unless a sensitivity run changes a parameter: the
    /// committed calibration.
    pub fn calibrated() -> CostModel {
        CostModel::with_fit(&calibrated_fit())
    }

    /// Zone-lock hold for moving `blocks` blocks with `merges` buddy merge levels and
    /// `splits` split levels: `c_lock + n · h_page + (merges · L_merge + splits ·
    /// L_split) · t_xfer` (§3.1, with h_merge counted in lines).
    pub fn hold_ns(&self, blocks: u64, merges: u64, splits: u64) -> u64 {
        let level_lines = merges as f64 * self.merge_lines + splits as f64 * self.split_lines;
        self.lock_ns
            + (blocks as f64 * self.hold_per_block_ns).round() as u64
            + (level_lines * self.handoff_socket_ns as f64).round() as u64
    }

    /// Of each ns a CPU spins, the ns of work its hyperthread sibling gains, and of each ns
    /// of work, the most it can gain (all of it run alone): `(2/Y − 1, 1 − Y/2)`. Two busy
    /// siblings each run at `Y/2` of a lone thread's speed; while one spins the other runs
    /// alone, so work of `w` ns (at the shared speed) with `o` ns of the sibling's spin
    /// beside it takes `w − o · (2/Y − 1)`, and at least `w · Y/2`.
    pub fn smt_gain(&self) -> Option<(f64, f64)> {
        self.smt_yield.map(|y| (2.0 / y - 1.0, 1.0 - y / 2.0))
    }

    /// The hand-off of the lock and its zone lines to a new holder `line_ns` away.
    pub fn handoff_ns(&self, line_ns: u64) -> u64 {
        ((1.0 + self.lock_lines) * line_ns as f64).round() as u64
    }
}

impl Default for CostModel {
    fn default() -> CostModel {
        CostModel::calibrated()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_has_a_source() {
        let json = serde_json::to_value(CostModel::calibrated()).unwrap();
        let fields: Vec<&String> = json.as_object().unwrap().keys().collect();
        for field in fields {
            assert!(
                PARAMETERS.iter().any(|p| p.name == field),
                "{field} has no source"
            );
        }
    }

    #[test]
    fn a_buddy_level_costs_its_lines_transfers() {
        let cost = CostModel::calibrated();
        let t = cost.handoff_socket_ns;
        let plain = cost.hold_ns(3, 0, 0);
        assert_eq!(plain, 20 + 120, "c_lock + 3 blocks at h_page");
        // A merge level: the buddy and its two list neighbours; a split level: the freed
        // half and the list's old first entry.
        assert_eq!(cost.hold_ns(3, 1, 0) - plain, 3 * t);
        assert_eq!(cost.hold_ns(3, 0, 1) - plain, 2 * t);
        assert_eq!(cost.hold_ns(3, 4, 2) - plain, (4 * 3 + 2 * 2) * t);
        let cross = CostModel {
            handoff_socket_ns: 100,
            ..cost
        };
        assert_eq!(
            cross.hold_ns(0, 1, 1),
            20 + 500,
            "lines are priced at t_xfer"
        );
    }

    #[test]
    fn committed_calibration_parses() {
        let fit = calibrated_fit();
        assert!(fit.lock_lines >= 0.0 && fit.kbuild_faults_per_s > 0.0);
    }
}
