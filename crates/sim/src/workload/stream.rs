//! Producer/consumer streams between CPU pairs: netperf SCTP_STREAM_MANY (`docs/reference/workloads.md`
//! §2.2) and lmbench AF_UNIX bandwidth (§2.3).
//!
//! Each pair has a sender and a receiver CPU. Per message the sender computes (protocol
//! work, copy-in), allocates the message's blocks on its CPU and writes them, and queues
//! them to the receiver; the receiver, after a wake-up delay, computes, reads the blocks
//! (copy-out) and frees them on **its** CPU. A window of messages in flight (the socket
//! buffer) stops the sender. netperf adds an order-2 chunk buffer per message that the
//! sender frees itself after a round trip (the SACK), packet buffers of orders 2–4, and
//! roles that swap between the pair's two CPUs (200 % threads migrate), so a CPU
//! alternates between sending and receiving.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use mmkit_core::page::NR_PAGE_ORDERS;
use mmkit_core::page_alloc::Gfp;
use mmkit_core::{Order, Pfn};
use serde::{Deserialize, Serialize};

use crate::engine::{Sim, SimError, Step, Workload};
use crate::machine::MachineSpec;
use crate::rng::Rng;

/// An entry of [`StreamParams::message_blocks`] that draws this takes no block.
pub const NO_BLOCK: u8 = u8::MAX;

/// Parameters of a stream workload.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StreamParams {
    /// Sender/receiver pairs.
    pub pairs: u32,
    /// Virtual duration of the run, in ms.
    pub duration_ms: f64,
    /// The warm-up at its start, in ms, which the results leave out: long enough for the
    /// pagesets to fill and for the first vmstat ticks (every CPU's first tick is due
    /// within its first second), so that the window covers decay too.
    pub warmup_ms: f64,
    /// The warm-up of a run whose pagesets keep a batch at a `free_high` drain (patch 3's
    /// `PCPF_FREE_HIGH_BATCH` in effect), in ms: such a row settles sooner, since its
    /// drains never empty a pageset into a buddy that is still unfragmented
    /// ([`Self::batched`]). The measured window keeps its length.
    pub batched_warmup_ms: f64,
    /// Blocks per message, by order, with their weights: one order (or [`NO_BLOCK`]) is
    /// drawn per entry of `message_blocks` (lmbench: fixed 3, 2, 1, 0; netperf: the packet
    /// buffer).
    pub message_blocks: Vec<Vec<(u8, f64)>>,
    /// Bytes the sender writes into (and the receiver reads from) a block, by the block's
    /// order (index 0 to 4; higher orders as 4); `None`: the whole block.
    pub block_payload_bytes: Option<[u64; 5]>,
    /// Order of the sender-freed chunk buffer per message (netperf's order-2 SCTP chunk),
    /// or none.
    pub chunk_order: Option<u8>,
    /// Round trip before the sender frees its chunk (SACK), uniform in this range, µs.
    pub chunk_rtt_us: (f64, f64),
    /// Sender's fixed work per message (syscall, protocol), ns.
    pub send_work_ns: u64,
    /// Receiver's fixed work per message, ns.
    pub recv_work_ns: u64,
    /// Mean delay from queueing a message to the receiver seeing it, µs (exponential).
    pub wakeup_us: f64,
    /// Messages in flight before the sender blocks (socket buffer).
    pub window: u32,
    /// Role epoch, ms: at each epoch boundary a pair swaps its CPUs' roles with
    /// `swap_share` probability. 0: roles never move.
    pub epoch_ms: f64,
    /// Probability of a swap per epoch.
    pub swap_share: f64,
    /// GFP of the blocks (network and socket buffers: GFP_KERNEL, unmovable).
    #[serde(skip)]
    pub gfp: Gfp,
    /// Which sockets the pairs run on, hence how many CPUs share each zone lock.
    pub placement: Placement,
}

/// Where a stream workload's pairs run. Both CPUs of a pair are always on one socket
/// (the two ends wake each other with sync wake-ups, and `wake_affine` keeps a wakee in
/// its waker's LLC); what differs is how the pairs share the sockets, which decides how
/// many CPUs allocate from and free to each node's zone, under its one lock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Placement {
    /// The pairs spread evenly over the sockets: what the load balancer converges to
    /// when it evens out idle CPUs between nodes.
    #[default]
    Spread,
    /// The pairs fill the first socket before the next: every pair's pages come from
    /// node 0's zone. Linux lets a node run more than its share while the other idles
    /// (`imb_numa_nr`, fork placement near the parent, `wake_affine`), up to all of it
    /// when the tasks fit in one node.
    OneNode,
}

impl Placement {
    /// Every placement, in the order the calibration tries them.
    pub const ALL: [Placement; 2] = [Placement::Spread, Placement::OneNode];

    /// The name the CLI and the JSON use.
    pub fn name(self) -> &'static str {
        match self {
            Placement::Spread => "spread",
            Placement::OneNode => "one-node",
        }
    }
}

impl std::str::FromStr for Placement {
    type Err = String;

    fn from_str(s: &str) -> Result<Placement, String> {
        Placement::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| format!("unknown placement {s:?}: use spread or one-node"))
    }
}

impl std::fmt::Display for Placement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl StreamParams {
    /// These parameters for a run whose pagesets keep a batch at a `free_high` drain:
    /// [`Self::batched_warmup_ms`] of warm-up before a measured window of the same length.
    pub fn batched(self) -> StreamParams {
        let measured_ms = self.duration_ms - self.warmup_ms;
        StreamParams {
            warmup_ms: self.batched_warmup_ms,
            duration_ms: self.batched_warmup_ms + measured_ms,
            ..self
        }
    }

    /// netperf SCTP_STREAM_MANY, 64 pairs, 10 KiB sends (§2.2). CPU per message: LKP's
    /// base run moved 564,052 Mbit/s in all on 128 busy CPUs, 6.89 M messages of 10 KiB
    /// per second, so 128 / 6.89 M = 18.6 µs of CPU per message, sender and receiver
    /// together; the protocol work below is that less the allocator's and the copies'
    /// ≈ 1.6 µs.
    ///
    /// Blocks per message, measured: three recordings of one SCTP association over
    /// loopback, 10 KiB messages (`crates/trace/workloads/sctp-vm.sh`; the recordings are
    /// `crates/trace/tests/data/sctp-1.mmkit.gz`, `sctp-2.mmkit.gz` and `sctp-3.mmkit.gz`,
    /// counted by `mmkit trace blocks`; docs/EXPERIMENTS.md, "netperf's blocks, measured"),
    /// 31,818 messages.
    /// Every message has its order-2 chunk buffer, freed by the sender after the SACK; the
    /// chunks go out bundled in packet buffers that the receiver frees: per message 0.011
    /// order-2 packets (one chunk), 0.134 order-3 (two or three chunks) and 0.138 order-4
    /// (the rest, 4.7 chunks each), 7.32 pages per message in all against the 7.4 of LKP's
    /// `pgalloc_normal` (1.533e10 pages in 300 s over 6.89 M messages per second). The
    /// payload of a packet is its chunks: 10 KiB in an order-2 block, 25 KiB (2.5 chunks)
    /// in an order-3 one and 48 KiB in an order-4 one, so that the packets carry the
    /// messages' 10 KiB each.
    pub fn netperf(scale: f64) -> StreamParams {
        StreamParams {
            pairs: 64,
            duration_ms: 1250.0 * scale,
            warmup_ms: 250.0 * scale,
            batched_warmup_ms: 250.0 * scale,
            message_blocks: vec![vec![(2, 0.011), (3, 0.134), (4, 0.138), (NO_BLOCK, 0.717)]],
            block_payload_bytes: Some([4 << 10, 8 << 10, 10 << 10, 25 << 10, 48 << 10]),
            chunk_order: Some(2),
            chunk_rtt_us: (10.0, 50.0),
            send_work_ns: 9_000,
            recv_work_ns: 8_000,
            wakeup_us: 5.0,
            window: 16,
            epoch_ms: 10.0,
            swap_share: 0.5,
            gfp: Gfp::KERNEL,
            placement: Placement::Spread,
        }
    }

    /// lmbench3 bw_unix, 16 pairs, 64 KiB writes of one order-3, 2, 1 and 0 block each
    /// (§2.3). Copy cost comes from page touching; 1.5 µs of syscall work per side.
    ///
    /// The first 3 virtual seconds are warm-up, then 0.5 s is measured. The run starts from
    /// an unfragmented buddy, and the base row drains its pagesets whole so often that its
    /// drains merge more buddy levels per block until the free memory has fragmented:
    /// 0.42 levels per block over the first second, 0.32 from the fourth on, and its spin
    /// falls with them (docs/EXPERIMENTS.md, "lmbench's base row settles in three
    /// seconds"). The published test ran for minutes; its figures are the settled ones.
    /// A row whose pagesets keep a batch at a `free_high` drain (patches 3–9 on the
    /// published machine) warms up for one vmstat interval, 1 s, so that every CPU's
    /// decay has run once before the window: measured after 0.25, 1 or 3 s, its messages
    /// a second differ by under 0.8 %, with no trend (docs/EXPERIMENTS.md, "Rows that keep
    /// a batch settle within a second").
    pub fn unix(scale: f64) -> StreamParams {
        StreamParams {
            pairs: 16,
            duration_ms: 3500.0 * scale,
            warmup_ms: 3000.0 * scale,
            batched_warmup_ms: 1000.0 * scale,
            message_blocks: vec![
                vec![(3, 1.0)],
                vec![(2, 1.0)],
                vec![(1, 1.0)],
                vec![(0, 1.0)],
            ],
            block_payload_bytes: None,
            chunk_order: None,
            chunk_rtt_us: (0.0, 0.0),
            send_work_ns: 1_500,
            recv_work_ns: 1_500,
            wakeup_us: 2.0,
            window: 3,
            epoch_ms: 0.0,
            swap_share: 0.0,
            gfp: Gfp::KERNEL,
            placement: Placement::Spread,
        }
    }
}

/// Where the sender is in building the next message.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum SendStage {
    /// Nothing done yet: the per-message work comes first.
    Idle,
    /// The work is done; the chunk buffer (if any) comes next.
    Worked,
    /// Allocating the message's blocks.
    Blocks,
}

struct Pair {
    cpus: [u32; 2],
    stage: SendStage,
    /// The entry of `message_blocks` the message being built draws next.
    entry: usize,
    swapped: bool,
    epoch: u64,
    rng: Rng,
    /// Blocks of the message being built.
    building: Vec<(Pfn, Order)>,
    /// Messages queued: ready time and blocks.
    queue: VecDeque<(u64, Vec<(Pfn, Order)>)>,
    /// Blocks of the message being consumed, left to free, and the CPU consuming it.
    consuming: Vec<(Pfn, Order)>,
    /// Emptied block lists, kept for the next messages: a message's list passes from
    /// `building` to `queue` to `consuming`, and a new one per message cost a `malloc` and
    /// a `free`.
    spare: Vec<Vec<(Pfn, Order)>>,
    consumer: u32,
    in_flight: u32,
    received: u64,
}

/// A stream workload.
pub struct Stream {
    params: StreamParams,
    pairs: Vec<Pair>,
    /// CPU → pair.
    pair_of: Vec<Option<usize>>,
    /// Per CPU: chunk buffers to free at a due time.
    chunks: Vec<BinaryHeap<Reverse<(u64, u64, u8)>>>,
    held: u64,
    end_ns: u64,
    /// `params.epoch_ms` in ns, converted once: every step reads it.
    epoch_ns: u64,
    /// Lines written (and read) per page of a block, by order: [`lines_per_page`] of
    /// `params.block_payload_bytes`, computed once instead of per block.
    lines: [u32; NR_PAGE_ORDERS],
    /// Per entry of `params.message_blocks`: the sum of its weights, which [`pick`] scales
    /// its draw by.
    block_weights: Vec<f64>,
}

impl Stream {
    /// The workload on `machine`'s CPUs. Pairs take distinct
    /// CPUs in a seeded random order, both CPUs of a pair on one socket (the two ends wake
    /// each other at every message, and the scheduler's `wake_affine` pulls a wakee to its
    /// waker's LLC), the pairs over the sockets as `params.placement` says.
    pub fn new(params: StreamParams, machine: &MachineSpec, seed: u64) -> Stream {
        let (cpus, cpus_per_socket) = (machine.nr_cpus(), machine.cpus_per_socket);
        let mut placement = Rng::new(seed, 0x7374_0000);
        let order = placement.permutation(cpus);
        let pairs_n = params.pairs.min(cpus / 2);
        let sockets = cpus.div_ceil(cpus_per_socket.max(1)) as usize;
        // Each socket's CPUs in the random order, the cores' first threads before their
        // second ones: Linux's wake-up path looks for an idle core before an idle thread
        // (`select_idle_core`), so a pair shares a core with another task only once every
        // core of the socket is busy. Popped from the end.
        let per_socket = cpus_per_socket.max(1);
        let second_thread = |c: u32| machine.sibling_of(c).is_some_and(|sibling| sibling < c);
        let mut free: Vec<Vec<u32>> = (0..sockets)
            .map(|s| {
                let on_socket = order
                    .iter()
                    .copied()
                    .filter(|&c| (c / per_socket) as usize == s);
                let (seconds, firsts): (Vec<u32>, Vec<u32>) =
                    on_socket.partition(|&c| second_thread(c));
                seconds
                    .into_iter()
                    .rev()
                    .chain(firsts.into_iter().rev())
                    .collect()
            })
            .collect();
        let mut placed = Vec::with_capacity(pairs_n as usize);
        for i in 0..pairs_n as usize {
            // Spread: the pair's socket in turn; one-node: the first socket. Either way
            // the next socket with two CPUs left if that one has not.
            let first = match params.placement {
                Placement::Spread => i,
                Placement::OneNode => 0,
            };
            let socket = (0..sockets)
                .map(|k| (first + k) % sockets)
                .find(|&s| free[s].len() >= 2);
            let pair = match socket {
                Some(s) => [free[s].pop(), free[s].pop()],
                None => {
                    let mut rest = free.iter_mut().flat_map(|f| f.pop());
                    [rest.next(), rest.next()]
                }
            };
            placed.push([
                pair[0].expect("two CPUs a pair"),
                pair[1].expect("two CPUs a pair"),
            ]);
        }
        let mut pair_of = vec![None; cpus as usize];
        let pairs = placed
            .into_iter()
            .enumerate()
            .map(|(i, cpus)| {
                pair_of[cpus[0] as usize] = Some(i);
                pair_of[cpus[1] as usize] = Some(i);
                Pair {
                    cpus,
                    stage: SendStage::Idle,
                    entry: 0,
                    swapped: false,
                    epoch: 0,
                    rng: Rng::new(seed, 0x7374_1000 + i as u64),
                    building: Vec::new(),
                    queue: VecDeque::new(),
                    consuming: Vec::new(),
                    spare: Vec::new(),
                    consumer: 0,
                    in_flight: 0,
                    received: 0,
                }
            })
            .collect();
        Stream {
            end_ns: (params.duration_ms * 1e6) as u64,
            epoch_ns: (params.epoch_ms * 1e6) as u64,
            lines: core::array::from_fn(|order| {
                let order = Order::new(order as u8).expect("order up to MAX_ORDER");
                lines_per_page(params.block_payload_bytes, order)
            }),
            block_weights: params
                .message_blocks
                .iter()
                .map(|choices| choices.iter().map(|c| c.1).sum())
                .collect(),
            params,
            pairs,
            pair_of,
            chunks: (0..cpus).map(|_| BinaryHeap::new()).collect(),
            held: 0,
        }
    }

    /// When the measurement window opens.
    pub fn warmup_ns(&self) -> u64 {
        (self.params.warmup_ms * 1e6) as u64
    }

    /// Messages the receivers consumed.
    pub fn received(&self) -> u64 {
        self.pairs.iter().map(|p| p.received).sum()
    }

    /// Bring the pair's roles up to `now`: one swap draw per epoch boundary passed.
    fn update_roles(&mut self, index: usize, now: u64) {
        let epoch_ns = self.epoch_ns;
        if epoch_ns == 0 {
            return;
        }
        let share = self.params.swap_share;
        let pair = &mut self.pairs[index];
        // `epoch < now / epoch_ns`, without a division per step.
        while (pair.epoch + 1) * epoch_ns <= now {
            pair.epoch += 1;
            if pair.rng.chance(share) {
                pair.swapped = !pair.swapped;
            }
        }
    }

    fn idle(&self, cpu: u32, now: u64) -> Step {
        let mut until = self.chunks[cpu as usize]
            .peek()
            .map(|Reverse((t, _, _))| *t);
        let epoch_ns = self.epoch_ns;
        if let Some(epochs) = now.checked_div(epoch_ns) {
            let next_epoch = (epochs + 1) * epoch_ns;
            until = Some(until.map_or(next_epoch, |t| t.min(next_epoch)));
        }
        match until {
            Some(t) => Step::SleepUntil(t.max(now + 1)),
            None => Step::Wait,
        }
    }

    fn send_step(&mut self, sim: &mut Sim, cpu: u32, index: usize) -> Result<Step, SimError> {
        let now = sim.now(cpu);
        let p = &self.params;
        let pair = &mut self.pairs[index];
        // One thing that takes time per step (the work, then each allocation), so that
        // each allocation's zone-lock request is made at its own virtual time.
        match pair.stage {
            SendStage::Idle if pair.in_flight >= p.window => return Ok(self.idle(cpu, now)),
            SendStage::Idle => {
                sim.work(cpu, p.send_work_ns);
                pair.stage = SendStage::Worked;
                return Ok(Step::Continue);
            }
            SendStage::Worked => {
                pair.stage = SendStage::Blocks;
                if let Some(order) = p.chunk_order {
                    let order = Order::new(order).expect("chunk order");
                    let lines = self.lines[order.get() as usize];
                    let pfn = sim.alloc_touch(cpu, p.gfp, order, lines)?;
                    self.held += order.pages();
                    let (lo, hi) = p.chunk_rtt_us;
                    let rtt = lo + pair.rng.unit() * (hi - lo);
                    let due = sim.now(cpu) + (rtt * 1000.0) as u64;
                    self.chunks[cpu as usize].push(Reverse((due, pfn.0, order.get())));
                    return Ok(Step::Continue);
                }
            }
            SendStage::Blocks => {}
        }
        let which = pair.entry;
        let choices = &p.message_blocks[which];
        let weights = self.block_weights[which];
        pair.entry += 1;
        let drawn = pick(&mut pair.rng, choices, weights);
        if drawn != NO_BLOCK {
            let order = Order::new(drawn).expect("block order");
            let lines = self.lines[order.get() as usize];
            let pfn = sim.alloc_touch(cpu, p.gfp, order, lines)?;
            self.held += order.pages();
            self.pairs[index].building.push((pfn, order));
        }
        let pair = &mut self.pairs[index];
        if pair.entry == p.message_blocks.len() {
            pair.entry = 0;
            pair.stage = SendStage::Idle;
            let delay = (pair.rng.exp(p.wakeup_us) * 1000.0) as u64;
            let ready = sim.now(cpu) + delay;
            let next = pair.spare.pop().unwrap_or_default();
            let blocks = std::mem::replace(&mut pair.building, next);
            pair.queue.push_back((ready, blocks));
            pair.in_flight += 1;
            let receiver = pair.cpus[1 - pair.swapped as usize];
            sim.wake(receiver, ready);
        }
        Ok(Step::Continue)
    }

    fn receive_step(&mut self, sim: &mut Sim, cpu: u32, index: usize) -> Result<Step, SimError> {
        let now = sim.now(cpu);
        let p = &self.params;
        let pair = &mut self.pairs[index];
        if let Some((pfn, order)) = pair.consuming.pop() {
            sim.free(cpu, pfn, order)?;
            self.held -= order.pages();
            let pair = &mut self.pairs[index];
            if pair.consuming.is_empty() {
                pair.received += 1;
                pair.in_flight -= 1;
                let sender = pair.cpus[pair.swapped as usize];
                sim.wake(sender, sim.now(cpu));
            }
            return Ok(Step::Continue);
        }
        match pair.queue.front() {
            Some(&(ready, _)) if ready <= now => {
                let (_, blocks) = pair.queue.pop_front().expect("front exists");
                // The blocks are freed after the copy-out: read their descriptors now so the
                // misses overlap with it.
                for &(pfn, _) in &blocks {
                    sim.prefetch(&[pfn]);
                }
                sim.work(cpu, p.recv_work_ns);
                for &(pfn, order) in &blocks {
                    sim.read(cpu, pfn, order, self.lines[order.get() as usize]);
                }
                let pair = &mut self.pairs[index];
                if blocks.is_empty() {
                    // A message with no block of its own (its data went out in another
                    // message's packet buffer) is consumed at once.
                    pair.spare.push(blocks);
                    pair.received += 1;
                    pair.in_flight -= 1;
                    let sender = pair.cpus[pair.swapped as usize];
                    sim.wake(sender, sim.now(cpu));
                    return Ok(Step::Continue);
                }
                let consumed = std::mem::replace(&mut pair.consuming, blocks);
                pair.spare.push(consumed);
                pair.consuming.reverse();
                pair.consumer = cpu;
                Ok(Step::Continue)
            }
            Some(&(ready, _)) => match self.idle(cpu, now) {
                Step::SleepUntil(t) => Ok(Step::SleepUntil(t.min(ready))),
                _ => Ok(Step::SleepUntil(ready)),
            },
            None => Ok(self.idle(cpu, now)),
        }
    }
}

/// Lines of each page of a block of `order` that `bytes` of payload cover (at least 1;
/// all 64 when the payload fills the block).
fn lines_per_page(bytes: Option<[u64; 5]>, order: Order) -> u32 {
    let Some(by_order) = bytes else {
        return 64;
    };
    let bytes = by_order[(order.get() as usize).min(4)];
    let lines = bytes.div_ceil(64) / order.pages();
    lines.clamp(1, 64) as u32
}

/// An order of `choices` drawn by weight; `total` is the sum of the weights.
fn pick(rng: &mut Rng, choices: &[(u8, f64)], total: f64) -> u8 {
    let mut x = rng.unit() * total;
    for &(order, weight) in choices {
        if x < weight {
            return order;
        }
        x -= weight;
    }
    choices[choices.len() - 1].0
}

impl Workload for Stream {
    fn start(&mut self, sim: &mut Sim) {
        for pair in &self.pairs {
            sim.wake(pair.cpus[0], 0);
            sim.wake(pair.cpus[1], 0);
        }
    }

    fn step(&mut self, sim: &mut Sim, cpu: u32) -> Result<Step, SimError> {
        let now = sim.now(cpu);
        let chunks = &mut self.chunks[cpu as usize];
        if let Some(&Reverse((due, pfn, order))) = chunks.peek() {
            if due <= now {
                chunks.pop();
                let order = Order::new(order).expect("chunk order");
                sim.free(cpu, Pfn(pfn), order)?;
                self.held -= order.pages();
                return Ok(Step::Continue);
            }
        }
        let Some(index) = self.pair_of[cpu as usize] else {
            return Ok(Step::Done);
        };
        self.update_roles(index, now);
        let pair = &self.pairs[index];
        let sender = pair.cpus[pair.swapped as usize];
        // A CPU that just turned sender finishes consuming the message it had started; the
        // new receiver polls until then (this happens only at a role swap).
        let consuming = !pair.consuming.is_empty();
        if consuming && pair.consumer == cpu {
            self.receive_step(sim, cpu, index)
        } else if cpu == sender {
            self.send_step(sim, cpu, index)
        } else if consuming {
            Ok(Step::SleepUntil(now + 1_000))
        } else {
            self.receive_step(sim, cpu, index)
        }
    }

    fn held_pages(&self) -> u64 {
        self.held
    }

    fn progress(&self, sim: &Sim) -> f64 {
        (sim.max_clock() as f64 / self.end_ns.max(1) as f64).min(1.0)
    }

    fn work_done(&self) -> u64 {
        self.received()
    }

    fn end_ns(&self) -> Option<u64> {
        Some(self.end_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2 sockets of 8 CPUs, 4 cores of 2 threads each.
    fn two_sockets_of_8() -> MachineSpec {
        MachineSpec {
            sockets: 2,
            cpus_per_socket: 8,
            threads_per_core: 2,
            ..MachineSpec::icl_128()
        }
    }

    /// The sockets of each pair's two CPUs, for `pairs` unix pairs on 2 × 8 CPUs.
    fn sockets(placement: Placement, pairs: u32) -> Vec<[u32; 2]> {
        let params = StreamParams {
            pairs,
            placement,
            ..StreamParams::unix(0.01)
        };
        Stream::new(params, &two_sockets_of_8(), 7)
            .pairs
            .iter()
            .map(|p| [p.cpus[0] / 8, p.cpus[1] / 8])
            .collect()
    }

    /// netperf's blocks are the measured ones (`mmkit trace blocks` of three SCTP
    /// recordings): 7.32 pages per message, within 2 % of the 7.4 LKP's `pgalloc_normal`
    /// gives for the published machine, and packets whose payloads carry each message's
    /// 10 KiB once.
    #[test]
    fn netperf_blocks_per_message_add_up_to_the_measured_pages_and_payload() {
        let p = StreamParams::netperf(1.0);
        let chunk = p.chunk_order.map_or(0.0, |o| (1u64 << o) as f64);
        let [packets] = p.message_blocks.as_slice() else {
            panic!("one packet buffer entry per message");
        };
        let total: f64 = packets.iter().map(|c| c.1).sum();
        assert!((total - 1.0).abs() < 1e-9, "weights are shares of messages");
        let blocks = packets.iter().filter(|c| c.0 != NO_BLOCK);
        let pages: f64 = chunk
            + blocks
                .clone()
                .map(|c| (1u64 << c.0) as f64 * c.1)
                .sum::<f64>();
        assert!((pages - 7.32).abs() < 0.01, "{pages} pages per message");
        assert!(
            (pages / 7.4 - 1.0).abs() < 0.02,
            "{pages} against LKP's 7.4"
        );
        let payload = p.block_payload_bytes.expect("netperf's payloads are given");
        let carried: f64 = blocks.map(|c| payload[c.0 as usize] as f64 * c.1).sum();
        assert!(
            (carried / 10240.0 - 1.0).abs() < 0.05,
            "packets carry {carried} bytes per 10 KiB message"
        );
        // A block never carries more than it holds, so no page is touched past its end.
        for order in 0..5u8 {
            assert!(payload[order as usize] <= 4096 << order);
        }
    }

    #[test]
    fn one_node_fills_the_first_socket_before_the_next_and_spread_alternates() {
        assert_eq!(sockets(Placement::OneNode, 4), vec![[0, 0]; 4]);
        assert_eq!(
            sockets(Placement::OneNode, 6),
            [[0, 0]; 4]
                .into_iter()
                .chain([[1, 1]; 2])
                .collect::<Vec<_>>()
        );
        assert_eq!(
            sockets(Placement::Spread, 4),
            vec![[0, 0], [1, 1], [0, 0], [1, 1]]
        );
    }

    /// Pairs take idle cores before idle threads: on 2 × 8 CPUs (4 cores of 2 threads a
    /// socket, siblings `i` and `i + 4`), two pairs on socket 0 use its 4 first threads;
    /// four pairs use all 8, so every core then runs two of the pairs' CPUs.
    #[test]
    fn pairs_take_idle_cores_before_idle_threads() {
        let cpus = |placement: Placement, pairs: u32| -> Vec<u32> {
            let params = StreamParams {
                pairs,
                placement,
                ..StreamParams::unix(0.01)
            };
            let mut cpus: Vec<u32> = Stream::new(params, &two_sockets_of_8(), 7)
                .pairs
                .iter()
                .flat_map(|p| p.cpus)
                .collect();
            cpus.sort_unstable();
            cpus
        };
        assert_eq!(cpus(Placement::OneNode, 2), [0, 1, 2, 3]);
        assert_eq!(cpus(Placement::OneNode, 4), (0..8).collect::<Vec<_>>());
        assert_eq!(cpus(Placement::Spread, 4), [0, 1, 2, 3, 8, 9, 10, 11]);
    }

    #[test]
    fn placements_read_back_from_their_names() {
        for p in Placement::ALL {
            assert_eq!(p.name().parse::<Placement>(), Ok(p));
        }
        assert!("packed"
            .parse::<Placement>()
            .unwrap_err()
            .contains("spread or one-node"));
    }
}
