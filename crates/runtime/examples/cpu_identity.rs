//! How much does it cost to ask "which CPU am I on"? Measures `sched_getcpu()` (glibc ≥
//! 2.35 reads the rseq area), a direct read of the rseq area, and the `getcpu` system
//! call, each over 10 million calls, best of 5.
//!
//! Run: `cargo run --release -p mmkit-runtime --example cpu_identity`

use std::hint::black_box;
use std::time::Instant;

use mmkit_runtime::cpu;

fn time(name: &str, mut f: impl FnMut() -> u32) {
    const CALLS: u32 = 10_000_000;
    let best = (0..5)
        .map(|_| {
            let start = Instant::now();
            let mut sum = 0u32;
            for _ in 0..CALLS {
                sum = sum.wrapping_add(f());
            }
            black_box(sum);
            start.elapsed().as_secs_f64() * 1e9 / CALLS as f64
        })
        .fold(f64::INFINITY, f64::min);
    println!("{name:<28} {best:>6.2} ns/call");
}

fn main() {
    println!("rseq registered: {}", cpu::rseq_cpu().is_some());
    time("sched_getcpu()", cpu::sched_getcpu);
    if cpu::rseq_cpu().is_some() {
        time("rseq cpu_id read", || cpu::rseq_cpu().unwrap_or(0));
    }
    time("getcpu system call", cpu::getcpu_syscall);
}
