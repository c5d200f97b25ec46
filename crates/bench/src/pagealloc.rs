//! Gorman 2017's page-allocator micro-benchmark (mmtests `pagealloc`): one thread allocates
//! N blocks of one order, then frees them; N = 1, 2, 4, … ; per-page cost of the
//! allocations, of the frees, and of both.
//!
//! What one *round* does, for every allocator alike (the code below is generic over
//! [`Contestant`], so each allocator runs this same loop, compiled for it):
//!
//! 1. `t0 = rdtsc`; N times: allocate a block and write one `u64` (the block's index in
//!    the round) at the start of each of its 4 KiB pages ([`Touch::Page`], the default),
//!    then keep it in a preallocated vector; `t1 = rdtsc`. With the bulk API: one
//!    `alloc_bulk(N)` call, then the same writes.
//! 2. Last allocated first: read the words back (a mismatch aborts the benchmark: two
//!    blocks overlapped) and free the block; `t2 = rdtsc`. With the bulk API: the same
//!    reads, then one `free_bulk` call.
//!
//! The alloc phase costs `t1 - t0`, the free phase `t2 - t1`, each less the cost of an
//! empty `rdtsc` pair ([`TscClock::overhead_cycles`]). A *sample* of a cell (order, N) is
//! one untimed warm-up round (which also checks that every block is 4 KiB-aligned, of the
//! right size and overlaps no other) followed by enough rounds to move at least
//! `sample_pages` pages. The benchmark takes `repeat` samples of every cell, interleaving
//! allocators (cell by cell) so that a disturbance of the machine hits them all, and
//! reports each cell's median sample.

use mmkit_core::page::PAGE_SIZE;
use mmkit_core::Order;
use serde::Serialize;

use crate::contestant::{block_bytes, Block, Contestant, Touch};
use crate::runner::Runner;
use crate::stats;
use crate::tsc::{self, TscClock};
use crate::{BenchError, Machine, Progress, TargetCheck};

/// No cell moves more than this many pages in one round (512 MiB): order 9 stops at
/// N = 256.
pub const CELL_PAGES_MAX: usize = 16384 * 8;

/// What to measure.
#[derive(Clone, Debug, Serialize)]
pub struct PageallocConfig {
    /// Block orders.
    pub orders: Vec<u8>,
    /// The largest N (a power of two; others are rounded down to one).
    pub max_n: usize,
    /// Samples per cell; the report shows their median.
    pub repeat: usize,
    /// What is written into each block and read back.
    pub touch: Touch,
    /// Each sample runs rounds until it has moved at least this many pages.
    pub sample_pages: u64,
}

impl Default for PageallocConfig {
    fn default() -> PageallocConfig {
        PageallocConfig {
            orders: vec![0, 1, 2, 3, 9],
            max_n: 16384,
            repeat: 5,
            touch: Touch::Page,
            sample_pages: 65536,
        }
    }
}

impl PageallocConfig {
    /// N = 1, 2, 4, … up to `max_n`, and up to [`CELL_PAGES_MAX`] pages in a round.
    pub fn n_values(&self, order: Order) -> Vec<usize> {
        let limit = self.max_n.min(CELL_PAGES_MAX >> order.get());
        std::iter::successors(Some(1usize), |n| n.checked_mul(2))
            .take_while(|&n| n <= limit)
            .collect()
    }

    /// Every (order, N) cell, in run order.
    pub fn cells(&self) -> Result<Vec<(Order, usize)>, BenchError> {
        let mut cells = Vec::new();
        for &o in &self.orders {
            let order = Order::new(o).ok_or_else(|| {
                BenchError::new(format!("order {o} is above MAX_ORDER ({})", Order::MAX))
            })?;
            cells.extend(self.n_values(order).into_iter().map(|n| (order, n)));
        }
        Ok(cells)
    }

    /// The arena of mmkit's pool, talc and the frame allocator: four times the largest
    /// round (talc spends 8 KiB of arena on each 4 KiB-aligned 4 KiB block, and mmkit's
    /// watermarks keep some pages back), at least 256 MiB, in 4 MiB steps. The mapping
    /// is `MAP_NORESERVE`: only pages touched cost memory.
    pub fn arena_bytes(&self) -> usize {
        let largest_pages = self
            .cells()
            .unwrap_or_default()
            .iter()
            .map(|&(order, n)| n << order.get())
            .max()
            .unwrap_or(1);
        let bytes = (4 * largest_pages * PAGE_SIZE).max(256 << 20);
        bytes.div_ceil(4 << 20) * (4 << 20)
    }

    /// Rounds in one sample of a cell.
    pub fn rounds(&self, order: Order, n: usize) -> u64 {
        let round_pages = (n as u64) << order.get();
        self.sample_pages.div_ceil(round_pages).max(1)
    }
}

/// One cell as a sample asks for it.
#[derive(Clone, Copy, Debug)]
pub struct CellSpec {
    /// Block order.
    pub order: Order,
    /// Blocks per round.
    pub n: usize,
    /// Timed rounds.
    pub rounds: u64,
    /// What is written and read.
    pub touch: Touch,
    /// Cycles of an empty timed region, subtracted from each phase.
    pub overhead_cycles: u64,
}

/// What one sample measured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CellSample {
    /// TSC cycles of every alloc phase, overhead removed.
    pub alloc_cycles: u64,
    /// TSC cycles of every free phase, overhead removed.
    pub free_cycles: u64,
    /// Blocks allocated (and freed) in the timed rounds.
    pub blocks: u64,
}

/// One warm-up round (which checks the blocks), then `spec.rounds` timed rounds.
pub fn measure_cell<'a, C: Contestant>(
    contestant: &'a C,
    bulk: bool,
    spec: &CellSpec,
) -> Result<CellSample, BenchError> {
    let mut blocks: Vec<C::Block<'a>> = Vec::with_capacity(spec.n);
    round::<C, true>(contestant, bulk, spec, &mut blocks)?;
    let mut sample = CellSample::default();
    for _ in 0..spec.rounds {
        let (alloc, free) = round::<C, false>(contestant, bulk, spec, &mut blocks)?;
        sample.alloc_cycles += alloc.saturating_sub(spec.overhead_cycles);
        sample.free_cycles += free.saturating_sub(spec.overhead_cycles);
        sample.blocks += spec.n as u64;
    }
    Ok(sample)
}

/// One round: allocate `n` blocks, then free them, last first. Returns the TSC cycles of
/// the two phases. With `CHECK`, the blocks are checked between the phases (untimed use).
#[inline(always)]
fn round<'a, C: Contestant, const CHECK: bool>(
    contestant: &'a C,
    bulk: bool,
    spec: &CellSpec,
    blocks: &mut Vec<C::Block<'a>>,
) -> Result<(u64, u64), BenchError> {
    debug_assert!(blocks.is_empty());
    let (n, order, touch) = (spec.n, spec.order, spec.touch);
    let t0 = tsc::now();
    if bulk {
        contestant.alloc_bulk(n, blocks);
        for (i, block) in blocks.iter_mut().enumerate() {
            touch.write(block, i as u64);
        }
    } else {
        for i in 0..n {
            let Some(mut block) = contestant.alloc(order) else {
                break;
            };
            touch.write(&mut block, i as u64);
            blocks.push(block);
        }
    }
    let t1 = tsc::now();
    let allocated = blocks.len();
    let checked = if CHECK {
        check_blocks(blocks, order)
    } else {
        Ok(())
    };
    let mut intact = true;
    if bulk {
        for (i, block) in blocks.iter().enumerate().rev() {
            intact &= touch.check(block, i as u64);
        }
        contestant.free_bulk(blocks);
    } else {
        while let Some(block) = blocks.pop() {
            intact &= touch.check(&block, blocks.len() as u64);
            contestant.free(block);
        }
    }
    let t2 = tsc::now();
    checked?;
    if allocated < n {
        return Err(BenchError::new(format!(
            "out of memory: {allocated} of {n} blocks of order {order}"
        )));
    }
    if !intact {
        return Err(BenchError::new(format!(
            "a block's contents changed between allocation and free (order {order}, N {n}): blocks overlap"
        )));
    }
    Ok((t1 - t0, t2 - t1))
}

/// Every block 4 KiB-aligned, of the order's size, and disjoint from the others.
fn check_blocks<B: Block>(blocks: &[B], order: Order) -> Result<(), BenchError> {
    let size = block_bytes(order);
    let mut ranges: Vec<usize> = Vec::with_capacity(blocks.len());
    for block in blocks {
        let addr = block.addr();
        if addr % PAGE_SIZE != 0
            || block.bytes().len() != size
            || block.bytes().as_ptr() as usize != addr
        {
            return Err(BenchError::new(format!(
                "a block of order {order} at {addr:#x} is {} bytes; want {size}, 4 KiB-aligned",
                block.bytes().len()
            )));
        }
        ranges.push(addr);
    }
    ranges.sort_unstable();
    if let Some(pair) = ranges.windows(2).find(|pair| pair[1] - pair[0] < size) {
        return Err(BenchError::new(format!(
            "blocks at {:#x} and {:#x} overlap",
            pair[0], pair[1]
        )));
    }
    Ok(())
}

/// The cost of one phase, per page and per block, from the median sample.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Cost {
    /// Nanoseconds per 4 KiB page (median of the samples).
    pub ns_per_page: f64,
    /// TSC cycles per page (median).
    pub cycles_per_page: f64,
    /// Nanoseconds per block (median; equal to per page at order 0).
    pub ns_per_block: f64,
    /// The fastest sample's nanoseconds per page.
    pub ns_per_page_min: f64,
}

impl Cost {
    fn from_cycles_per_block(per_block: &mut [f64], pages: f64, clock: &TscClock) -> Cost {
        let median = stats::median(per_block).unwrap_or(f64::NAN);
        let min = stats::quantile(per_block, 0.0).unwrap_or(f64::NAN);
        Cost {
            ns_per_page: clock.ns(median) / pages,
            cycles_per_page: median / pages,
            ns_per_block: clock.ns(median),
            ns_per_page_min: clock.ns(min) / pages,
        }
    }
}

/// One allocator in one cell.
#[derive(Clone, Debug, Serialize)]
pub struct CellResult {
    /// Allocator name.
    pub allocator: &'static str,
    /// Block order.
    pub order: u8,
    /// Blocks per round.
    pub n: usize,
    /// Timed rounds per sample.
    pub rounds: u64,
    /// Samples taken.
    pub samples: usize,
    /// The alloc phase (allocation and the writes).
    pub alloc: Cost,
    /// The free phase (the reads and the free).
    pub free: Cost,
    /// Both phases.
    pub total: Cost,
    /// This allocator's total time per page ÷ mmkit's in the same cell (> 1: mmkit is
    /// faster). `None` without an mmkit result.
    pub ratio_to_mmkit: Option<f64>,
}

/// An allocator of the run.
#[derive(Clone, Debug, Serialize)]
pub struct AllocatorInfo {
    /// Name.
    pub name: &'static str,
    /// How it is set up.
    pub setup: String,
}

/// How the numbers were taken.
#[derive(Clone, Debug, Serialize)]
pub struct PageallocMethod {
    /// The configuration.
    #[serde(flatten)]
    pub config: PageallocConfig,
    /// Arena size of mmkit's pools, talc and the frame allocator.
    pub arena_bytes: usize,
    /// The largest round, in pages.
    pub cell_pages_max: usize,
    /// What is timed, in words.
    pub timed: &'static str,
    /// The warm-up.
    pub warm_up: &'static str,
}

/// Everything `mmkit bench pagealloc` reports.
#[derive(Clone, Debug, Serialize)]
pub struct PageallocReport {
    /// `"pagealloc"`.
    pub benchmark: &'static str,
    /// Where it ran.
    pub machine: Machine,
    /// How.
    pub method: PageallocMethod,
    /// Who.
    pub allocators: Vec<AllocatorInfo>,
    /// Every allocator in every cell it supports.
    pub results: Vec<CellResult>,
    /// The product targets, checked.
    pub targets: Vec<TargetCheck>,
}

const TIMED: &str = "alloc phase: N allocations, each followed by writing one u64 at the start of every 4 KiB page of the block (touch=page; touch=block: only the first page; touch=none: no writes); free phase: last block first, read the words back and check them, then free; each phase between two lfence;rdtsc;lfence readings, less an empty pair's cost";
const WARM_UP: &str = "one untimed round of the same order and N before every sample, which also checks alignment, size and overlap of every block";

/// Run the benchmark: `config.repeat` samples of every cell for every runner, cell by
/// cell. `progress` hears of each sample before it starts.
pub fn run(
    config: &PageallocConfig,
    runners: &[Box<dyn Runner>],
    clock: &TscClock,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<PageallocReport, BenchError> {
    let cells = config.cells()?;
    let per_repeat: usize = cells
        .iter()
        .map(|&(order, _)| runners.iter().filter(|r| r.supports(order)).count())
        .sum();
    let total = per_repeat * config.repeat;
    let mut samples = vec![vec![Vec::new(); runners.len()]; cells.len()];
    let mut done = 0;
    for _ in 0..config.repeat {
        for (cell, &(order, n)) in cells.iter().enumerate() {
            let spec = CellSpec {
                order,
                n,
                rounds: config.rounds(order, n),
                touch: config.touch,
                overhead_cycles: clock.overhead_cycles,
            };
            for (index, runner) in runners.iter().enumerate() {
                if !runner.supports(order) {
                    continue;
                }
                let label = format!("order {order} N {n} {}", runner.name());
                progress(Progress {
                    done,
                    total,
                    label: &label,
                });
                samples[cell][index].push(runner.pagealloc_sample(&spec)?);
                done += 1;
            }
        }
    }
    for runner in runners {
        runner
            .audit()
            .map_err(|e| BenchError::new(format!("{} after the benchmark: {e}", runner.name())))?;
    }
    let results = summarize(config, &cells, runners, &samples, clock);
    Ok(PageallocReport {
        benchmark: "pagealloc",
        machine: Machine::probe(clock),
        method: PageallocMethod {
            config: config.clone(),
            arena_bytes: config.arena_bytes(),
            cell_pages_max: CELL_PAGES_MAX,
            timed: TIMED,
            warm_up: WARM_UP,
        },
        allocators: runners
            .iter()
            .map(|r| AllocatorInfo {
                name: r.name(),
                setup: r.describe(),
            })
            .collect(),
        targets: check_targets(&results, runners),
        results,
    })
}

fn summarize(
    config: &PageallocConfig,
    cells: &[(Order, usize)],
    runners: &[Box<dyn Runner>],
    samples: &[Vec<Vec<CellSample>>],
    clock: &TscClock,
) -> Vec<CellResult> {
    let mut results = Vec::new();
    for (cell, &(order, n)) in cells.iter().enumerate() {
        let first = results.len();
        for (index, runner) in runners.iter().enumerate() {
            let taken = &samples[cell][index];
            if taken.is_empty() {
                continue;
            }
            let pages = order.pages() as f64;
            let per_block = |f: &dyn Fn(&CellSample) -> u64| -> Vec<f64> {
                taken
                    .iter()
                    .map(|s| f(s) as f64 / s.blocks as f64)
                    .collect()
            };
            results.push(CellResult {
                allocator: runner.name(),
                order: order.get(),
                n,
                rounds: config.rounds(order, n),
                samples: taken.len(),
                alloc: Cost::from_cycles_per_block(
                    &mut per_block(&|s| s.alloc_cycles),
                    pages,
                    clock,
                ),
                free: Cost::from_cycles_per_block(&mut per_block(&|s| s.free_cycles), pages, clock),
                total: Cost::from_cycles_per_block(
                    &mut per_block(&|s| s.alloc_cycles + s.free_cycles),
                    pages,
                    clock,
                ),
                ratio_to_mmkit: None,
            });
        }
        let reference = results[first..]
            .iter()
            .find(|r| r.allocator == crate::peers::REFERENCE)
            .map(|r| r.total.cycles_per_page);
        for result in &mut results[first..] {
            result.ratio_to_mmkit = reference.map(|m| result.total.cycles_per_page / m);
        }
    }
    results
}

/// The absolute targets this benchmark checks: the earlier form of the targets, which
/// `docs/reference/targets.md` now states relative to floors measured in the same run.
fn check_targets(results: &[CellResult], runners: &[Box<dyn Runner>]) -> Vec<TargetCheck> {
    let high_max = runners
        .iter()
        .find_map(|r| r.pageset_high_max())
        .unwrap_or(u64::MAX);
    let through_pcp = |r: &&CellResult| r.order == 0 && r.n >= 64 && r.n as u64 <= high_max;
    let mut targets = vec![
        per_page_target(
            results,
            "mmkit",
            through_pcp,
            10.0,
            format!("order-0 alloc+free through the PCP ≤ 10 ns per page for N ≥ 64 (N ≤ pageset high_max {high_max})"),
        ),
        per_page_target(
            results,
            "mmkit-bulk",
            through_pcp,
            3.0,
            format!("bulk alloc+free ≤ 3 ns per page for N ≥ 64 (N ≤ pageset high_max {high_max})"),
        ),
    ];
    targets.push(faster_than_peers(results));
    targets
}

fn per_page_target(
    results: &[CellResult],
    allocator: &str,
    cells: impl Fn(&&CellResult) -> bool,
    limit_ns: f64,
    target: String,
) -> TargetCheck {
    let chosen: Vec<&CellResult> = results
        .iter()
        .filter(|r| r.allocator == allocator)
        .filter(cells)
        .collect();
    let worst = chosen
        .iter()
        .max_by(|a, b| a.total.ns_per_page.total_cmp(&b.total.ns_per_page));
    let best = chosen
        .iter()
        .min_by(|a, b| a.total.ns_per_page.total_cmp(&b.total.ns_per_page));
    match (worst, best) {
        (Some(worst), Some(best)) => TargetCheck {
            target,
            measured: format!(
                "{allocator}: worst {:.1} ns/page (N = {}), best {:.1} ns/page (N = {}); {}",
                worst.total.ns_per_page,
                worst.n,
                best.total.ns_per_page,
                best.n,
                if worst.total.ns_per_page <= limit_ns {
                    "met".to_owned()
                } else {
                    format!(
                        "missed by {:.1} ns ({:.1}×) at worst",
                        worst.total.ns_per_page - limit_ns,
                        worst.total.ns_per_page / limit_ns
                    )
                }
            ),
            met: Some(worst.total.ns_per_page <= limit_ns),
        },
        _ => TargetCheck {
            target,
            measured: format!("not measured ({allocator}, order 0, N ≥ 64 not in this run)"),
            met: None,
        },
    }
}

fn faster_than_peers(results: &[CellResult]) -> TargetCheck {
    let target = "mmkit (order 0) faster than every peer in the same run, every N".to_owned();
    let peer = |r: &&CellResult| {
        !r.allocator.starts_with("mmkit") && !crate::peers::is_floor(r.allocator) && r.order == 0
    };
    let peers: Vec<&CellResult> = results.iter().filter(peer).collect();
    if peers.is_empty()
        || !results
            .iter()
            .any(|r| r.allocator == "mmkit" && r.order == 0)
    {
        return TargetCheck {
            target,
            measured: "not measured (needs mmkit and a peer at order 0)".into(),
            met: None,
        };
    }
    let mut losses: Vec<String> = peers
        .iter()
        .filter(|r| r.ratio_to_mmkit.is_some_and(|ratio| ratio < 1.0))
        .map(|r| {
            format!(
                "{} at N = {} ({:.2}× mmkit's time)",
                r.allocator,
                r.n,
                r.ratio_to_mmkit.unwrap_or(f64::NAN)
            )
        })
        .collect();
    let won = peers.len() - losses.len();
    let measured = if losses.is_empty() {
        format!("faster in all {won} peer cells")
    } else {
        let shown = losses.len().min(12);
        let more = losses.len() - shown;
        losses.truncate(shown);
        format!(
            "faster in {won} of {} peer cells; slower than {}{}",
            peers.len(),
            losses.join(", "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            }
        )
    };
    TargetCheck {
        target,
        met: Some(won == peers.len()),
        measured: measured + &other_entries(results, &peers),
    }
}

/// How mmkit's other entries (`mmkit-bulk`, `mmkit-handle`, `mmkit-cache`) fare against
/// the peers at order 0, for the record: the verdict is the `mmkit` contestant's. An
/// entry wins at N when it is faster than every peer measured at that N.
fn other_entries(results: &[CellResult], peers: &[&CellResult]) -> String {
    let best_peer_at = |n: usize| {
        peers
            .iter()
            .filter(|p| p.n == n)
            .map(|p| p.total.ns_per_page)
            .fold(f64::INFINITY, f64::min)
    };
    let mut names: Vec<&str> = Vec::new();
    for r in results {
        let other = r.order == 0 && r.allocator.starts_with("mmkit") && r.allocator != "mmkit";
        if other && !names.contains(&r.allocator) {
            names.push(r.allocator);
        }
    }
    let others: Vec<String> = names
        .iter()
        .map(|&name| {
            let cells: Vec<&CellResult> = results
                .iter()
                .filter(|r| r.order == 0 && r.allocator == name)
                .collect();
            let won = cells
                .iter()
                .filter(|r| r.total.ns_per_page < best_peer_at(r.n))
                .count();
            format!("{name} at {won} of {} N", cells.len())
        })
        .collect();
    if others.is_empty() {
        String::new()
    } else {
        format!(
            ". Other mmkit entries, faster than every peer: {}",
            others.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(allocator: &'static str, n: usize, ns: f64) -> CellResult {
        let cost = Cost {
            ns_per_page: ns,
            ..Cost::default()
        };
        CellResult {
            allocator,
            order: 0,
            n,
            rounds: 1,
            samples: 1,
            alloc: cost,
            free: cost,
            total: cost,
            ratio_to_mmkit: None,
        }
    }

    #[test]
    fn other_mmkit_entries_win_a_cell_only_below_every_peer() {
        let results = [
            cell("mmkit", 1, 50.0),
            cell("mmkit-cache", 1, 9.0),
            cell("mmkit-bulk", 1, 20.0),
            cell("snmalloc", 1, 10.0),
            cell("talc", 1, 30.0),
            cell("floor: lifo", 1, 1.0),
            cell("mmkit", 2, 50.0),
            cell("mmkit-cache", 2, 10.0),
            cell("mmkit-bulk", 2, 5.0),
            cell("snmalloc", 2, 10.0),
            cell("talc", 2, 30.0),
        ];
        let peers: Vec<&CellResult> = results
            .iter()
            .filter(|r| !r.allocator.starts_with("mmkit") && !crate::peers::is_floor(r.allocator))
            .collect();
        // The floor does not count; a tie is not a win; each entry is named once.
        assert_eq!(
            other_entries(&results, &peers),
            ". Other mmkit entries, faster than every peer: mmkit-cache at 1 of 2 N, \
             mmkit-bulk at 1 of 2 N"
        );
    }
}
