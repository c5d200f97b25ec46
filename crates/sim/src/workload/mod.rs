//! The published experiments (Huang 2023's, Gorman 2017's, Yin 2023's) as page-event
//! generators (`docs/reference/workloads.md` §2): each is a
//! [`Workload`](crate::engine::Workload) with documented parameters whose defaults are the
//! published runs' scale, and a `scale` knob for small runs.

pub mod kbuild;
pub mod micro;
pub mod pageout;
pub mod slab_order;
pub mod stream;

use serde::{Deserialize, Serialize};

use crate::machine::MachineSpec;

/// The workloads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WorkloadKind {
    /// 8 × `make -j28` on 224 CPUs (§2.1), simulated on one of its two sockets.
    Kbuild,
    /// netperf SCTP_STREAM_MANY, 64 pairs on 128 CPUs (§2.2).
    Netperf,
    /// lmbench3 AF_UNIX bandwidth, 16 pairs on 128 CPUs (§2.3).
    Unix,
    /// Gorman 2017's single-CPU alloc N / free N (§2.7).
    Pagealloc,
    /// N processes each faulting 512 pages then freeing them in one burst (§2.6).
    Pageout,
}

impl WorkloadKind {
    /// Every workload.
    pub const ALL: [WorkloadKind; 5] = [
        WorkloadKind::Kbuild,
        WorkloadKind::Netperf,
        WorkloadKind::Unix,
        WorkloadKind::Pagealloc,
        WorkloadKind::Pageout,
    ];

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            WorkloadKind::Kbuild => "kbuild",
            WorkloadKind::Netperf => "netperf",
            WorkloadKind::Unix => "unix",
            WorkloadKind::Pagealloc => "pagealloc",
            WorkloadKind::Pageout => "pageout",
        }
    }

    /// What one unit of its work (`RunResult::work_done`) is.
    pub fn unit(self) -> &'static str {
        match self {
            WorkloadKind::Kbuild => "process",
            WorkloadKind::Netperf | WorkloadKind::Unix => "message",
            WorkloadKind::Pagealloc => "page",
            WorkloadKind::Pageout => "loop",
        }
    }

    /// The workload called `name`.
    pub fn from_name(name: &str) -> Option<WorkloadKind> {
        WorkloadKind::ALL.into_iter().find(|w| w.name() == name)
    }

    /// The machine a run of the workload simulates unless told otherwise: the published
    /// run's, or the part of it the experiment needs. kbuild runs on one of the published
    /// machine's two sockets: in the model they share nothing (each CPU allocates from its
    /// own node, frees go to CPUs of the same socket, each socket has its LLC), so one
    /// socket with its 112 CPUs and half the build is the same experiment at 40 % of the
    /// simulator's time (`docs/EXPERIMENTS.md`, "One socket of the kbuild machine").
    pub fn machine(self) -> MachineSpec {
        match self {
            WorkloadKind::Kbuild => self.published_machine().with_sockets(1),
            _ => self.published_machine(),
        }
    }

    /// The published run's machine, whole.
    pub fn published_machine(self) -> MachineSpec {
        match self {
            WorkloadKind::Kbuild => MachineSpec::spr_224(),
            WorkloadKind::Netperf | WorkloadKind::Unix => MachineSpec::icl_128(),
            WorkloadKind::Pagealloc => MachineSpec::icl_128().with_cpus(1),
            WorkloadKind::Pageout => MachineSpec::icl_128().with_cpus(96),
        }
    }

    /// The fewest CPUs the workload can run on: a stream needs a sender and a receiver
    /// on different CPUs.
    pub fn min_cpus(self) -> u32 {
        match self {
            WorkloadKind::Netperf | WorkloadKind::Unix => 2,
            WorkloadKind::Kbuild | WorkloadKind::Pagealloc | WorkloadKind::Pageout => 1,
        }
    }

    /// Whether the benchmark does a fixed amount of work (lmbench's bw_unix moves a fixed
    /// number of bytes, kbuild builds a fixed tree), so that its event counts compare per
    /// unit of work (a message, a process: a kbuild window that leaves out the build's
    /// start and tail holds a different number of processes under each policy); the
    /// others run for a fixed time (netperf).
    pub fn fixed_work(self) -> bool {
        matches!(self, WorkloadKind::Unix | WorkloadKind::Kbuild)
    }

    /// What the score measures and whether higher is better.
    pub fn score_name(self) -> (&'static str, bool) {
        match self {
            WorkloadKind::Kbuild => ("build time", false),
            WorkloadKind::Netperf | WorkloadKind::Unix => ("score", true),
            WorkloadKind::Pagealloc => ("ns/page", false),
            WorkloadKind::Pageout => ("loops/s", true),
        }
    }
}

impl std::fmt::Display for WorkloadKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
