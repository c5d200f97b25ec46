//! How fast a run simulates: virtual seconds per second of the host, the figure of the
//! simulator's speed target (the 224-CPU kbuild at least as fast as real time on one core,
//! `docs/EXPERIMENTS.md`, "Speed").
//!
//! A run's own thread CPU time is the figure that holds on a machine shared with other
//! jobs, or when more runs than cores go at once; its wall time is what a user waits.
//! Neither is part of a run's result, which is the same whatever the host does: they are
//! measured around it ([`RunSpeed::measure`]) and reported beside it (`mmkit sim
//! --timing`, `cargo bench -p mmkit-sim --bench sim_speed`).
//!
//! Linux has no counterpart; the simulator's own measurement.

use std::time::Instant;

/// The CPU time this thread has run, in seconds: the first field of Linux's
/// `/proc/thread-self/schedstat` (nanoseconds on a CPU). `None` where it cannot be read
/// (another operating system, or a kernel without schedstats).
pub fn thread_cpu_secs() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: u64 = stat.split_whitespace().next()?.parse().ok()?;
    Some(ns as f64 / 1e9)
}

/// The host time one run took, against the virtual time it simulated.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RunSpeed {
    /// Seconds of virtual time the run simulated (its `wall_ns`).
    pub virtual_secs: f64,
    /// Seconds of CPU time of the thread that ran it, machine set-up included; `None`
    /// where [`thread_cpu_secs`] cannot be read.
    pub cpu_secs: Option<f64>,
    /// Seconds of wall time from the run's start to its end, set-up included.
    pub wall_secs: f64,
}

impl RunSpeed {
    /// Run `run` on this thread, timing it; `virtual_ns` reads the virtual time from what
    /// it returned (`None`: a failed run, which has no speed).
    pub fn measure<T>(
        run: impl FnOnce() -> T,
        virtual_ns: impl Fn(&T) -> Option<u64>,
    ) -> (T, Option<RunSpeed>) {
        let cpu_start = thread_cpu_secs();
        let start = Instant::now();
        let result = run();
        let wall_secs = start.elapsed().as_secs_f64();
        let cpu_secs = cpu_start.and_then(|c| Some(thread_cpu_secs()? - c));
        let speed = virtual_ns(&result).map(|ns| RunSpeed {
            virtual_secs: ns as f64 / 1e9,
            cpu_secs,
            wall_secs,
        });
        (result, speed)
    }

    /// Virtual seconds per second of the run's CPU time (wall time where that is
    /// unknown): ≥ 1 meets the target.
    pub fn times_real_time_cpu(&self) -> f64 {
        self.virtual_secs / self.cpu_secs.unwrap_or(self.wall_secs)
    }

    /// Virtual seconds per second of wall time.
    pub fn times_real_time_wall(&self) -> f64 {
        self.virtual_secs / self.wall_secs
    }
}

impl core::fmt::Display for RunSpeed {
    /// `8.344 virtual s in 8.21 s of CPU (1.016× real time), 8.30 s of wall time (1.005×)`.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{:.3} virtual s in ", self.virtual_secs)?;
        if let Some(cpu) = self.cpu_secs {
            write!(
                f,
                "{cpu:.2} s of CPU ({:.3}× real time), ",
                self.times_real_time_cpu()
            )?;
        }
        write!(
            f,
            "{:.2} s of wall time ({:.3}×)",
            self.wall_secs,
            self.times_real_time_wall()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_is_timed_around_and_its_virtual_time_read_from_its_result() {
        let (value, speed) = RunSpeed::measure(|| 7u64, |&v| Some(v * 1_000_000_000));
        assert_eq!(value, 7);
        let speed = speed.expect("a run that returned a virtual time has a speed");
        assert_eq!(speed.virtual_secs, 7.0);
        assert!(speed.wall_secs >= 0.0);
        // Linux with schedstats (every machine CI runs on) gives the thread's CPU time.
        if cfg!(target_os = "linux") && std::path::Path::new("/proc/thread-self/schedstat").exists()
        {
            assert!(speed.cpu_secs.is_some_and(|cpu| cpu >= 0.0));
        }
        let (_, failed) = RunSpeed::measure(|| (), |_| None);
        assert_eq!(failed, None, "a failed run has no speed");
    }

    #[test]
    fn the_ratios_divide_virtual_by_host_seconds_and_fall_back_to_wall_time() {
        let speed = RunSpeed {
            virtual_secs: 8.0,
            cpu_secs: Some(4.0),
            wall_secs: 10.0,
        };
        assert_eq!(speed.times_real_time_cpu(), 2.0);
        assert_eq!(speed.times_real_time_wall(), 0.8);
        assert_eq!(
            speed.to_string(),
            "8.000 virtual s in 4.00 s of CPU (2.000× real time), 10.00 s of wall time (0.800×)"
        );
        let no_cpu = RunSpeed {
            cpu_secs: None,
            ..speed
        };
        assert_eq!(no_cpu.times_real_time_cpu(), 0.8);
        assert_eq!(
            no_cpu.to_string(),
            "8.000 virtual s in 10.00 s of wall time (0.800×)"
        );
    }
}
