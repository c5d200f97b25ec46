//! The engine's pending events: an indexed priority queue with one slot per CPU.
//!
//! Each CPU has at most one pending step (its `Sim::schedule`d time) and one pending vmstat
//! tick; the run has one pending sample. A CPU's leaf holds the lesser of its step's and its
//! tick's keys, and a winner (tournament) tree over the leaves holds each subtree's least
//! key, so the earliest event is the root or the sample. Keys are `engine::event_key`s,
//! whose low bits are the kind and the CPU: they are distinct and say which event won.
//!
//! Against the binary heap it replaces: a changed key is one walk from its leaf to the root
//! (`log2(CPUs)` loads, `min`s and stores, no data-dependent branches), where the heap paid
//! a sift-down per pop and a sift-up per push; and a step moved to an earlier time replaces
//! the CPU's key, where the heap kept the superseded entry until it was popped and skipped.
//! The events come out in the same order: the least key first.
//!
//! The CPU that runs (from [`EventQueue::run`] until its next step is set) is not walked
//! out of the tree when it starts: its leaf keeps the key it ran at, which is no later than
//! its next one. [`EventQueue::runs_first`] answers the engine's lookahead ("does this CPU's
//! next step come before every other event?") from the least other key, which the first
//! walk finds on the way and later keys set for other CPUs can only lower. A CPU that runs
//! one step and sleeps costs one walk; one that runs many steps in a row, two.
//!
//! Linux has no counterpart (a timer wheel is the nearest); the simulator's own machinery.

/// No event: greater than every key.
pub const NONE: u64 = u64::MAX;

/// One pending step and one pending tick per CPU, and one pending sample, earliest first.
///
/// # Invariants
///
/// Outside a run, and on every path but the running CPU's during one: `tree[size + c]` is
/// `min(steps[c], ticks[c])` (or [`NONE`] for a padding leaf `c >= steps.len()`) and every
/// inner node `tree[i]` (`1 <= i < size`) is `min(tree[2i], tree[2i + 1])`; `tree[0]` is
/// unused. During a run, the running CPU's leaf and its ancestors may hold its earlier key:
/// no later than its current one. `others`, when known, is the least key other than the
/// running CPU's step.
#[derive(Clone, Debug)]
pub struct EventQueue {
    /// The tree, `2 * size` keys, `size` (the leaves) being a power of two, at least the
    /// number of CPUs.
    tree: Vec<u64>,
    /// Per CPU: its step's key and its tick's key.
    keys: Vec<[u64; 2]>,
    sample: u64,
    /// The running CPU, or `usize::MAX`.
    running: usize,
    /// The least key other than the running CPU's step, if a walk found it.
    others: Option<u64>,
    /// [`walk_levels`] for this tree's depth, chosen once: its loop has a constant trip
    /// count and indices the compiler can bound, so it unrolls with no checks.
    walk_path: WalkPath,
}

/// A walk from a leaf to the root of a tree of a fixed length: `(tree, cpu, least,
/// others) -> others`, as [`walk_levels`].
type WalkPath = fn(&mut [u64], usize, u64, u64) -> u64;

/// The walk for a tree of `len` keys (`2 * size`): unrolled for the depths of the
/// simulated machines (up to 256 CPUs, 8 levels), a loop beyond.
fn walk_path(len: usize) -> WalkPath {
    match len {
        2 => walk_levels::<2>,
        4 => walk_levels::<4>,
        8 => walk_levels::<8>,
        16 => walk_levels::<16>,
        32 => walk_levels::<32>,
        64 => walk_levels::<64>,
        128 => walk_levels::<128>,
        256 => walk_levels::<256>,
        512 => walk_levels::<512>,
        _ => walk_any,
    }
}

/// Write `least` (`cpu`'s leaf key) at `cpu`'s leaf of a tree of `LEN` keys and the
/// least of each subtree on the path to the root; returns the least of `others` and every
/// sibling on the path. `LEN` is a constant, so the loop unrolls and every index, built
/// from bits below `LEN`, is in bounds without a check: ≈ 8 instructions a level, where
/// the loop over a tree of any length took ≈ 16 (masks, loop test, index moves).
#[inline(never)]
fn walk_levels<const LEN: usize>(tree: &mut [u64], cpu: usize, least: u64, others: u64) -> u64 {
    let tree: &mut [u64; LEN] = tree.try_into().expect("the walk of this tree's length");
    let leaves = LEN / 2;
    let mut i = leaves | (cpu & (leaves - 1));
    let (mut least, mut others) = (least, others);
    tree[i] = least;
    for _ in 0..LEN.trailing_zeros() - 1 {
        // Each level: the sibling's least and ours make the parent's. The whole path is
        // rewritten (no early stop): a branch per level would cost more than it saves.
        let sibling = tree[i ^ 1];
        least = least.min(sibling);
        others = others.min(sibling);
        i >>= 1;
        tree[i] = least;
    }
    others
}

/// [`walk_levels`] for a tree of any length: a loop, indices masked to the length (a
/// power of two) so that they need no bounds check.
#[inline(never)]
fn walk_any(tree: &mut [u64], cpu: usize, least: u64, others: u64) -> u64 {
    let mask = tree.len() - 1;
    let mut i = tree.len() / 2 + cpu;
    let (mut least, mut others) = (least, others);
    tree[i & mask] = least;
    while i > 1 {
        let sibling = tree[(i ^ 1) & mask];
        least = least.min(sibling);
        others = others.min(sibling);
        i >>= 1;
        tree[i & mask] = least;
    }
    others
}

const STEP: usize = 0;
const TICK: usize = 1;

impl EventQueue {
    /// A queue for `nr_cpus` CPUs with nothing pending.
    pub fn new(nr_cpus: usize) -> EventQueue {
        assert!(nr_cpus > 0, "a machine has a CPU");
        let size = nr_cpus.next_power_of_two();
        EventQueue {
            tree: vec![NONE; 2 * size],
            keys: vec![[NONE; 2]; nr_cpus],
            sample: NONE,
            running: usize::MAX,
            others: None,
            walk_path: walk_path(2 * size),
        }
    }

    /// The least pending key, or [`NONE`].
    #[inline]
    pub fn first(&self) -> u64 {
        debug_assert_eq!(
            self.running,
            usize::MAX,
            "a CPU runs: the tree may be stale"
        );
        self.tree[1].min(self.sample)
    }

    /// Set `cpu`'s pending step to `key` ([`NONE`]: no step); ends `cpu`'s run if it runs.
    #[inline]
    pub fn set_step(&mut self, cpu: usize, key: u64) {
        if cpu == self.running {
            self.running = usize::MAX;
            self.others = None;
        } else if let Some(others) = self.others {
            // Another CPU's step moves while `running` runs. Wakes only bring steps
            // earlier; if one moved later from the least key, the least is unknown again.
            let old = self.keys[cpu][STEP];
            if key < others {
                self.others = Some(key);
            } else if key > old && old == others {
                self.others = None;
            }
        }
        self.keys[cpu][STEP] = key;
        self.walk(cpu);
    }

    /// Set `cpu`'s pending tick to `key`.
    pub fn set_tick(&mut self, cpu: usize, key: u64) {
        debug_assert_eq!(self.running, usize::MAX, "ticks are set between runs");
        self.keys[cpu][TICK] = key;
        self.walk(cpu);
    }

    /// Set the pending sample to `key`.
    pub fn set_sample(&mut self, key: u64) {
        debug_assert_eq!(self.running, usize::MAX, "samples are set between runs");
        self.sample = key;
    }

    /// `cpu`'s step, the least key, starts to run: its key stays in the tree until
    /// [`Self::set_step`] or [`Self::runs_first`] replaces it.
    #[inline]
    pub fn run(&mut self, cpu: usize) {
        debug_assert_eq!(self.first(), self.keys[cpu][STEP], "the first event runs");
        self.running = cpu;
        self.others = None;
    }

    /// Whether the running `cpu`'s next step at `key` comes before every other pending
    /// event. If it does, `cpu` keeps running; if not, its step is set to `key` and its run
    /// ends (as [`Self::set_step`]). Inlined always: it runs after every step, and as a
    /// call (the compiler's choice once the walk moved out of line) its register saves
    /// cost ≈ 10 instructions a step.
    #[inline(always)]
    pub fn runs_first(&mut self, cpu: usize, key: u64) -> bool {
        debug_assert_eq!(cpu, self.running, "only the running CPU looks ahead");
        let others = match self.others {
            Some(others) => others,
            None => {
                // The first look: set the step and walk, which finds the others' least. If
                // the CPU keeps running, its leaf holds this key, no later than its next.
                let others = self.set_own_step(cpu, key);
                self.others = Some(others);
                if key < others {
                    return true;
                }
                self.running = usize::MAX;
                self.others = None;
                return false;
            }
        };
        if key < others {
            return true;
        }
        // `set_step` of the running CPU: its run ends.
        self.running = usize::MAX;
        self.others = None;
        self.set_own_step(cpu, key);
        false
    }

    /// Set `cpu`'s step to `key` and walk: [`Self::walk`] with the CPU's keys read and
    /// written once (`walk` would read back the step just written). Returns what `walk`
    /// does.
    #[inline(always)]
    fn set_own_step(&mut self, cpu: usize, key: u64) -> u64 {
        let keys = &mut self.keys[cpu];
        keys[STEP] = key;
        let tick = keys[TICK];
        (self.walk_path)(&mut self.tree, cpu, key.min(tick), tick.min(self.sample))
    }

    /// The least pending key other than the running `cpu`'s step: the earliest time at
    /// which anything else can happen. The engine checks every zone-lock request against
    /// it: a request made later than this would be booked ahead of a CPU that could
    /// have asked first.
    #[inline]
    pub fn others_first(&mut self, cpu: usize) -> u64 {
        debug_assert_eq!(cpu, self.running, "only the running CPU asks");
        match self.others {
            Some(others) => others,
            None => {
                // The walk leaves the running CPU's leaf at its earlier key, which the
                // invariant allows; `others` known means `runs_first` takes its short path.
                let others = self.walk(cpu);
                self.others = Some(others);
                others
            }
        }
    }

    /// Recompute `cpu`'s leaf and the path from it to the root. Returns the least key
    /// other than `cpu`'s step: its tick, the sample and the siblings on the path (every
    /// other leaf is under exactly one of them).
    #[inline]
    fn walk(&mut self, cpu: usize) -> u64 {
        let [step, tick] = self.keys[cpu];
        (self.walk_path)(&mut self.tree, cpu, step.min(tick), tick.min(self.sample))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    /// The naive model: the least of every pending key.
    fn naive_first(q: &EventQueue) -> u64 {
        q.keys
            .iter()
            .flatten()
            .copied()
            .min()
            .unwrap_or(NONE)
            .min(q.sample)
    }

    /// The least key other than `cpu`'s step, naively.
    fn naive_others(q: &EventQueue, cpu: usize) -> u64 {
        let mut rest = q.keys.clone();
        rest[cpu][STEP] = NONE;
        rest.iter()
            .flatten()
            .copied()
            .min()
            .unwrap_or(NONE)
            .min(q.sample)
    }

    fn random_key(rng: &mut Rng, cpu: usize) -> u64 {
        if rng.chance(0.2) {
            NONE
        } else {
            rng.below(1 << 40) << 18 | cpu as u64
        }
    }

    #[test]
    fn first_is_the_least_pending_key_after_any_updates() {
        for nr_cpus in [1, 2, 3, 5, 16, 28, 224, 300] {
            let mut q = EventQueue::new(nr_cpus);
            let mut rng = Rng::new(7, nr_cpus as u64);
            assert_eq!(q.first(), NONE);
            for _ in 0..2_000 {
                let cpu = rng.below(nr_cpus as u64) as usize;
                let key = random_key(&mut rng, cpu);
                match rng.below(3) {
                    0 => q.set_step(cpu, key),
                    1 => q.set_tick(cpu, key),
                    _ => q.set_sample(key),
                }
                assert_eq!(q.first(), naive_first(&q));
            }
        }
    }

    /// A run as the engine makes one: the first CPU runs, looks ahead with later and later
    /// keys while other CPUs' steps move, and ends with its step set or removed. The
    /// lookahead must agree with the naive least of the others, and the tree must be exact
    /// after the run.
    #[test]
    fn runs_first_agrees_with_the_naive_lookahead() {
        for nr_cpus in [1, 2, 5, 16, 28, 224, 300] {
            let mut q = EventQueue::new(nr_cpus);
            let mut rng = Rng::new(11, nr_cpus as u64);
            for cpu in 0..nr_cpus {
                q.set_tick(cpu, rng.below(1 << 30) << 18 | cpu as u64);
                q.set_step(cpu, rng.below(1 << 30) << 18 | 2 << 16 | cpu as u64);
            }
            q.set_sample(rng.below(1 << 30) << 18 | 1 << 16);
            for _ in 0..2_000 {
                let first = q.first();
                if first == q.sample || q.keys[(first & 0xffff) as usize][STEP] != first {
                    // A tick or the sample: move it on, as the engine does.
                    if first == q.sample {
                        q.set_sample(first + (1 << 26));
                    } else {
                        q.set_tick((first & 0xffff) as usize, first + (1 << 26));
                    }
                    continue;
                }
                let cpu = (first & 0xffff) as usize;
                q.run(cpu);
                let mut key = first;
                loop {
                    if rng.chance(0.3) {
                        let other = rng.below(nr_cpus as u64) as usize;
                        if other != cpu {
                            let old = q.keys[other][STEP];
                            let wake = (rng.below(1 << 30) << 18 | 2 << 16 | other as u64).min(old);
                            q.set_step(other, wake);
                        }
                    }
                    key += rng.below(1 << 24) << 18;
                    match rng.below(4) {
                        0 => {
                            q.set_step(cpu, NONE);
                            break;
                        }
                        1 => {
                            q.set_step(cpu, key);
                            break;
                        }
                        _ => {
                            let expected = key < naive_others(&q, cpu);
                            if q.runs_first(cpu, key) {
                                assert!(expected, "continued past another event");
                            } else {
                                assert!(!expected, "stopped before every other event");
                                assert_eq!(q.keys[cpu][STEP], key);
                                break;
                            }
                        }
                    }
                }
                assert_eq!(q.first(), naive_first(&q));
                if q.first() == NONE {
                    q.set_step(0, 1 << 40);
                }
            }
        }
    }

    #[test]
    fn a_removed_step_leaves_the_next_event_first() {
        let mut q = EventQueue::new(3);
        q.set_tick(0, 100);
        q.set_step(2, 50);
        q.set_sample(70);
        assert_eq!(q.first(), 50);
        q.set_step(2, NONE);
        assert_eq!(q.first(), 70);
        q.set_sample(NONE);
        assert_eq!(q.first(), 100);
    }
}
