//! How long one load takes on this machine when it depends on the load before it, by the
//! size of the memory the loads wander over: the floor under the simulator's speed.
//!
//! The simulator keeps a 16-byte descriptor per simulated page (and a 16-byte cache
//! stamp) and follows Linux's lists through them, so a page event that reaches a page
//! allocated long ago, or walks a buddy free list, waits for a load whose address the
//! load before it gave. Whether the 224-CPU kbuild can run as fast as real time is a
//! question of how many such loads a page event makes and how long each takes once the
//! descriptors of the build's held pages (≈ 4 million, 63 MiB) no longer fit the caches
//! (`docs/EXPERIMENTS.md`, "Speed").
//!
//! The chase: one 8-byte word per 64-byte line, the lines linked in one random cycle
//! (so the hardware prefetchers cannot guess the next address), followed a fixed number
//! of times; the mean time per step is printed for each size. Huge pages are not asked
//! for: the simulator's arrays are ordinary heap memory.
//!
//! A second table follows several chases at once through 256 MiB, one step of each in
//! turn: their loads are independent of each other, so the processor overlaps them, and
//! the time per load falls until the core runs out of room for misses in flight. Its
//! floor is the least a cold line costs however well a program overlaps its misses; the
//! gap between the two tables is what a page event loses when its misses wait on each
//! other (`docs/EXPERIMENTS.md`, "Speed").
//!
//! ```sh
//! cargo run --release -p mmkit-bench --example load_latency
//! ```

use std::hint::black_box;
use std::time::Instant;

/// Bytes between two words of the chase: one cache line.
const LINE: usize = 64;
/// Steps timed per size.
const STEPS: usize = 20_000_000;

/// A small generator for the shuffle (xorshift64*): the chase needs an order the
/// prefetchers cannot follow, not statistical quality.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Words of a chase over `bytes`: word `i * WORDS_PER_LINE` holds the index of the next
/// line's word, the lines in one random cycle (Sattolo's shuffle).
fn chase(bytes: usize, rng: &mut XorShift) -> Vec<usize> {
    let words_per_line = LINE / size_of::<usize>();
    let lines = bytes / LINE;
    let mut order: Vec<usize> = (0..lines).collect();
    for i in (1..lines).rev() {
        order.swap(i, rng.below(i));
    }
    let mut words = vec![0usize; lines * words_per_line];
    for (i, &line) in order.iter().enumerate() {
        words[line * words_per_line] = order[(i + 1) % lines] * words_per_line;
    }
    words
}

fn main() {
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    println!("memory chased   ns per dependent load");
    for mib in [1usize, 4, 16, 64, 256, 1024] {
        let words = chase(mib << 20, &mut rng);
        let mut at = 0usize;
        // One pass to fault the pages in and warm what fits.
        for _ in 0..words.len() / (LINE / size_of::<usize>()) {
            at = words[at];
        }
        let start = Instant::now();
        for _ in 0..STEPS {
            at = words[at];
        }
        let ns = start.elapsed().as_nanos() as f64 / STEPS as f64;
        black_box(at);
        println!("{mib:>8} MiB   {ns:>8.1}");
    }

    println!();
    println!("chases at once (256 MiB)   ns per load");
    let mib = 256;
    let words = chase(mib << 20, &mut rng);
    let lines = words.len() / (LINE / size_of::<usize>());
    for chains in [1usize, 2, 4, 8, 12, 16, 24, 32] {
        // Each chase starts a stride apart on the one cycle, so that no two meet.
        let mut at: Vec<usize> = Vec::with_capacity(chains);
        let mut cursor = 0usize;
        for i in 0..lines {
            if i % (lines / chains) == 0 && at.len() < chains {
                at.push(cursor);
            }
            cursor = words[cursor];
        }
        let rounds = STEPS / chains;
        let start = Instant::now();
        for _ in 0..rounds {
            for a in at.iter_mut() {
                *a = words[*a];
            }
        }
        let ns = start.elapsed().as_nanos() as f64 / (rounds * chains) as f64;
        black_box(&at);
        println!("{chains:>8}                   {ns:>8.1}");
    }
}
