//! Workload parameters measured on a real machine instead of taken from the published
//! runs: what `mmkit trace compare-sim` feeds the simulator so that it runs the work a
//! trace of this machine shows, and then compares the refills and drains it predicts with
//! the kernel's (`docs/FIDELITY.md`, "Checked against the simulator").
//!
//! The measured quantities are inputs (how much work, of what shape, at what pace); the
//! refill and drain pages are the prediction, and nothing here looks at them. The cost
//! model is not touched: counts of pages moved do not depend on it except through the
//! timeline, which the measured pace sets.
//!
//! Linux counterpart: none (the measuring instrument).

use crate::workload::kbuild::KbuildParams;
use crate::workload::stream::StreamParams;

/// Of a recorded build's frees of orders 1–3 to the pagesets, the share (%) whose
/// pageset's previous free was of order 1–3 too (patch 1's condition for a `free_high`
/// drain), by virtual CPUs of the QEMU guest that ran it, twice where a CPU count was
/// recorded more than once: compile-like builds (`crates/trace/workloads/compile.sh`) on Debian's
/// 6.1 kernel (order-1 PGDs) under TCG, recorded with
/// `crates/trace/workloads/many-cpu-vm.sh` and counted with `mmkit trace high-order`
/// (docs/EXPERIMENTS.md, "kbuild's high-order frees on more CPUs"; the third 16- and
/// 32-CPU figures, "What puts two high-order frees together"). What the simulator's
/// kbuild does is [`crate::engine::SimStats::high_order_after_high`]; the published
/// 224-CPU machine's share is not known.
pub const KBUILD_RECORDED_AFTER_HIGH_PCT: [(u32, f64); 11] = [
    (2, 0.41),
    (8, 1.04),
    (16, 0.56),
    (16, 1.23),
    (16, 0.65),
    (24, 0.52),
    (32, 3.13),
    (32, 2.99),
    (32, 2.69),
    (48, 4.05),
    (64, 4.66),
];

/// The same share in compile-like builds on guests booted with `slub_min_objects=36`, the
/// published 224-CPU machine's slab orders, the whole guest recorded
/// (`WHOLE=1 APPEND=slub_min_objects=36 KVM=0 sh crates/trace/workloads/many-cpu-vm.sh`;
/// docs/EXPERIMENTS.md, "The published machine's slab orders").
pub const KBUILD_RECORDED_AFTER_HIGH_PCT_PUBLISHED_SLABS: [(u32, f64); 3] =
    [(8, 2.30), (16, 3.68), (32, 3.80)];

/// A build as a trace of it shows it: its processes with their page faults, their
/// kernel pages and blocks, and how long it ran on how many CPUs.
#[derive(Clone, Debug, PartialEq)]
pub struct MeasuredBuild {
    /// Page faults (order-0 movable allocations) of each process, in the order the
    /// processes appeared.
    pub faults: Vec<u64>,
    /// Order-0 kernel pages (page tables, an order-0 PGD, slab) per process, mean.
    pub kernel_pages_per_process: f64,
    /// Allocations of orders 1, 2 and 3, all processes.
    pub blocks: [u64; 3],
    /// Share of frees (of blocks allocated while tracing) made on another CPU than the
    /// allocation.
    pub cross_cpu_free_share: f64,
    /// Share of the processes' faulted pages they freed themselves while they ran (before
    /// their last fault), not at their exit.
    pub midlife_free_share: f64,
    /// Seconds the build ran.
    pub seconds: f64,
    /// CPUs it ran on.
    pub cpus: u32,
}

impl MeasuredBuild {
    /// Processes.
    pub fn processes(&self) -> u64 {
        self.faults.len() as u64
    }

    /// Whether the PGD is order 1 (page-table isolation: one order-1 allocation per
    /// process at least), else order 0 and among the order-0 kernel pages.
    pub fn pgd_order(&self) -> u8 {
        u8::from(self.blocks[0] >= self.processes().max(1))
    }
}

impl KbuildParams {
    /// kbuild running `build`'s processes twice on `build.cpus` slots, the first pass a
    /// warm-up that the results leave out: the kernel's pagesets were warm when tracing
    /// began (the snapshot before shows them holding pages), the simulated ones start
    /// empty.
    ///
    /// - process sizes: each process's measured faults, in order
    ///   ([`KbuildParams::measured_faults`]), so that the simulated build faults what the
    ///   traced one did, process by process;
    /// - the pace: `faults_per_s` = faults / (CPUs × seconds), so that the simulated build
    ///   takes about the traced time and sees as many vmstat ticks;
    /// - page tables: the measured order-0 kernel pages per process (rounded), less the
    ///   PGD when it is order 0; kernel blocks of orders 1–3 per fault, less the PGDs when
    ///   order 1;
    /// - cross-CPU frees: the measured share;
    /// - mid-life frees: the measured share of a process's faulted pages it frees while it
    ///   runs (1.3–2.2 % in five kernel-build stretches, against the published model's 7 %:
    ///   each such free halves its pageset's `alloc_factor`, so the share sets how large
    ///   the refills grow; docs/FIDELITY.md).
    ///
    /// Not measured, the published model's: bursts, the mid-life frees' burst size, the gap
    /// between processes.
    pub fn measured(build: &MeasuredBuild) -> KbuildParams {
        let cpus = build.cpus.max(1);
        let faults = build.faults.iter().sum::<u64>().max(1) as f64;
        let seconds = build.seconds.max(1e-3);
        let pgd_order = build.pgd_order();
        let pgd_pages = if pgd_order == 0 { 1.0 } else { 0.0 };
        let tables = (build.kernel_pages_per_process - pgd_pages)
            .round()
            .max(0.0) as u64;
        let mut blocks = build.blocks;
        if pgd_order == 1 {
            blocks[0] -= build.processes();
        }
        let processes = build.processes().max(1);
        KbuildParams {
            jobs_per_cpu: (2 * processes).div_ceil(cpus as u64) as u32,
            faults_per_s: faults / (cpus as f64 * seconds),
            measured_faults: build.faults.clone(),
            page_tables: (tables, tables),
            pgd_order,
            kernel_blocks_per_fault: blocks.map(|b| b as f64 / faults),
            // The recording's own high-order blocks are all in the rate above, the
            // exits' slabs among them: the model's exit slabs would count them twice.
            exit_slab_blocks: [0.0; 4],
            cross_cpu_free_share: build.cross_cpu_free_share,
            midlife_free_share: build.midlife_free_share,
            warmup_ms: seconds * 1e3,
            // The second pass, whole: the measured build's processes, run once warm.
            steady_window: false,
            ..KbuildParams::default()
        }
    }
}

/// The warm-up of a stream run at a recording's pace, in ms, before the recording's
/// messages: 250, as `docs/FIDELITY.md`'s comparisons were made. The published lmbench
/// run warms up for 3 s (`StreamParams::unix`) because its 128-CPU base row takes that
/// long to fragment fresh memory; one pair at a recording's pace, compared per message
/// with a kernel whose pagesets were warm, keeps the comparisons' warm-up.
pub const MEASURED_WARMUP_MS: f64 = 250.0;

/// A stream of messages as a trace of it shows it: how many, and how long they took.
#[derive(Clone, Debug, PartialEq)]
pub struct MeasuredStream {
    /// Messages sent.
    pub messages: u64,
    /// Seconds the stream ran.
    pub seconds: f64,
}

impl MeasuredStream {
    /// lmbench's AF_UNIX stream (one pair, 64 KiB messages of one order-3, 2, 1 and 0
    /// block each: what 6.18's `unix_stream_sendmsg` allocates, which the trace shows)
    /// at the measured pace: each side's work per message is the measured time per
    /// message, so that the simulated stream sees as many vmstat ticks per message. It
    /// runs as many messages as were measured after [`MEASURED_WARMUP_MS`].
    pub fn unix_params(&self) -> StreamParams {
        self.at_measured_pace(StreamParams::unix(1.0))
    }

    /// One pair of `published`'s stream whose two sides each work the measured time per
    /// message, for as many messages as were measured after [`MEASURED_WARMUP_MS`].
    fn at_measured_pace(&self, published: StreamParams) -> StreamParams {
        let ns_per_message = (self.seconds.max(1e-6) * 1e9 / self.messages.max(1) as f64) as u64;
        let measured_ms = self.messages as f64 * ns_per_message as f64 / 1e6;
        StreamParams {
            pairs: 1,
            warmup_ms: MEASURED_WARMUP_MS,
            batched_warmup_ms: MEASURED_WARMUP_MS,
            duration_ms: MEASURED_WARMUP_MS + measured_ms,
            send_work_ns: ns_per_message,
            recv_work_ns: ns_per_message,
            ..published
        }
    }
}

impl MeasuredStream {
    /// netperf's SCTP stream as `crates/trace/workloads/sctp_stream.py` runs it: one pair
    /// whose roles stay put (the script pins the sender to CPU 0 and the receiver to CPU
    /// 1), the published model's blocks per message (the chunk and the measured packet
    /// buffers), at the measured pace: each side's work per message is the measured time
    /// per message. It runs as many messages as were measured after the published warm-up.
    pub fn netperf_params(&self) -> StreamParams {
        StreamParams {
            epoch_ms: 0.0,
            swap_share: 0.0,
            ..self.at_measured_pace(StreamParams::netperf(1.0))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build() -> MeasuredBuild {
        MeasuredBuild {
            faults: vec![1000, 30, 2000, 40, 250, 1500, 260],
            kernel_pages_per_process: 20.4,
            blocks: [3, 14, 7],
            cross_cpu_free_share: 0.3,
            midlife_free_share: 0.02,
            seconds: 2.0,
            cpus: 2,
        }
    }

    #[test]
    fn measured_kbuild_runs_the_measured_processes_twice_at_the_measured_pace() {
        let b = build();
        let p = KbuildParams::measured(&b);
        assert!((p.faults_per_s - 5080.0 / 4.0).abs() < 1e-9);
        assert_eq!(p.measured_faults, b.faults);
        assert_eq!(p.jobs_per_cpu, 7, "two passes of 7 processes on 2 CPUs");
        assert_eq!(p.warmup_ms, 2000.0);
        assert_eq!(p.cross_cpu_free_share, 0.3);
        assert_eq!(p.midlife_free_share, 0.02);
        assert_eq!(
            p.exit_slab_blocks, [0.0; 4],
            "the recording's blocks include them"
        );
    }

    #[test]
    fn an_order0_pgd_counts_among_the_kernel_pages_and_an_order1_among_the_blocks() {
        let mut b = build();
        let p = KbuildParams::measured(&b);
        assert_eq!((p.pgd_order, p.page_tables), (0, (19, 19)));
        assert!((p.kernel_blocks_per_fault[0] - 3.0 / 5080.0).abs() < 1e-15);
        b.blocks[0] = 7 + 2;
        let p = KbuildParams::measured(&b);
        assert_eq!((p.pgd_order, p.page_tables), (1, (20, 20)));
        assert!((p.kernel_blocks_per_fault[0] - 2.0 / 5080.0).abs() < 1e-15);
    }

    #[test]
    fn measured_netperf_keeps_the_models_blocks_and_its_roles() {
        let s = MeasuredStream {
            messages: 1000,
            seconds: 0.5,
        };
        let p = s.netperf_params();
        assert_eq!((p.pairs, p.send_work_ns, p.epoch_ms), (1, 500_000, 0.0));
        assert_eq!(p.duration_ms - p.warmup_ms, 500.0);
        let published = StreamParams::netperf(1.0);
        assert_eq!(p.message_blocks, published.message_blocks);
        assert_eq!(p.chunk_order, published.chunk_order);
    }

    #[test]
    fn measured_unix_runs_the_measured_messages_at_the_measured_pace() {
        let s = MeasuredStream {
            messages: 4096,
            seconds: 2.048,
        };
        let p = s.unix_params();
        assert_eq!(
            (p.pairs, p.send_work_ns, p.recv_work_ns),
            (1, 500_000, 500_000)
        );
        assert_eq!(p.duration_ms - p.warmup_ms, 2048.0);
        assert_eq!(p.warmup_ms, MEASURED_WARMUP_MS);
        let pages: u32 = p.message_blocks.iter().map(|b| 1 << b[0].0).sum();
        assert_eq!(pages, 15);
    }
}
