//! The cost model: what each thing the allocator or a workload does costs in virtual
//! nanoseconds, and the cache sizes the page-reuse classification uses.
//!
//! Every number is the "default (server)" column of `workloads.md` §3.1, with its source
//! there; [`CostModel::SERVER`] is the only instance the simulator uses, for every workload
//! and every policy. No parameter is fitted to a seed table.

use serde::Serialize;

/// Costs in nanoseconds (§3.1) and the cache model's constants (§3.3).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct CostModel {
    /// Order-0 allocation served from the PCP list (Mel Gorman 2017: 116–138 cycles;
    /// Jesper Brouer 2021: 194–207 cycles per alloc+free pair).
    pub alloc_hit_ns: u64,
    /// Free to the PCP list (Mel Gorman 2017: 42–83 cycles).
    pub free_hit_ns: u64,
    /// Uncontended zone-lock acquire + release with irqsave (Jesper: 62 cycles).
    pub lock_ns: u64,
    /// Hold time per block moved under the zone lock, by `rmqueue_bulk` or
    /// `free_pcppages_bulk` (Huang Ying 2023: 2.0–3.5 µs per 63 pages).
    pub hold_per_block_ns: u64,
    /// h_merge: extra hold per buddy merge level in `__free_one_page`, whose buddy's page
    /// descriptor is cold (Aaron Lu 2018: cache misses on `struct page` are "the most time
    /// consuming part of operations under zone->lock"). §3.1 gives 20–80 ns and no
    /// default; 50 is the middle of that range, charged on every level: in a zone of
    /// millions of pages a buddy's descriptor is rarely in the cache. EXPERIMENTS.md shows
    /// the tables at both ends of the range.
    pub merge_ns: u64,
    /// Lock cache-line hand-off to another CPU of the same socket (core-to-core latency).
    pub handoff_socket_ns: u64,
    /// Lock cache-line hand-off to a CPU of the other socket.
    pub handoff_cross_socket_ns: u64,
    /// Touching a whole 4 KiB page that is in the CPU's private L2 (64 lines).
    pub touch_l2_ns: u64,
    /// Touching a whole page that is in the socket's last-level cache.
    pub touch_llc_ns: u64,
    /// Touching a whole page from memory (≈ 10 GB/s per core).
    pub touch_cold_ns: u64,
    /// ω: the share of the LLC that page data may use; code and other data hold the rest
    /// (§3.3: `C_llc_eff = slice × CPUs on socket × ω`).
    pub llc_share: f64,
    /// β: weight of a line that was hot in another CPU's cache of the same socket in the
    /// miss count. 0: on Intel such a snoop hit is not a `cache-misses` event.
    pub llc_remote_miss_weight: f64,
    /// R_bg: background cache references per page-data line. 0: the miss rate is over page
    /// data only, so its absolute value is not comparable with perf's; see EXPERIMENTS.md.
    pub background_lines_per_line: f64,
}

impl CostModel {
    /// The "default (server)" column of `workloads.md` §3.1 (a ~3 GHz server).
    pub const SERVER: CostModel = CostModel {
        alloc_hit_ns: 30,
        free_hit_ns: 15,
        lock_ns: 20,
        hold_per_block_ns: 40,
        merge_ns: 50,
        handoff_socket_ns: 70,
        handoff_cross_socket_ns: 180,
        touch_l2_ns: 80,
        touch_llc_ns: 200,
        touch_cold_ns: 400,
        llc_share: 0.5,
        llc_remote_miss_weight: 0.0,
        background_lines_per_line: 0.0,
    };

    /// Zone-lock hold for moving `blocks` blocks with `merges` buddy merge levels:
    /// `c_lock + n · h_page + merges · h_merge` (§3.1).
    pub fn hold_ns(&self, blocks: u64, merges: u64) -> u64 {
        self.lock_ns + blocks * self.hold_per_block_ns + merges * self.merge_ns
    }
}

impl Default for CostModel {
    fn default() -> CostModel {
        CostModel::SERVER
    }
}
