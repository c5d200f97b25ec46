//! Hyperthreads: the work a CPU gains while its sibling on the same core spins for a
//! zone lock ([`CostModel::smt_gain`](crate::cost::CostModel::smt_gain)).

use crate::machine::MachineSpec;

/// Hyperthread siblings sharing a core: what a spinning CPU gives its sibling.
pub(super) struct Smt {
    /// Work ns gained per ns of the sibling's spin, and the most per ns of work.
    gain_per_spin: f64,
    gain_cap: f64,
    /// Per CPU: its sibling.
    sibling: Vec<u32>,
    /// Per CPU: work ns it has gained from its sibling's spin and not yet used. The spin
    /// and the work it speeds up are paired by order, not by time: in the workloads whose
    /// siblings both work (kbuild, netperf) both are busy nearly all the time.
    credit: Vec<f64>,
}

impl Smt {
    /// `cpu` spun `spin` ns: its sibling ran alone meanwhile.
    pub(super) fn give(&mut self, cpu: u32, spin: u64) {
        let sibling = self.sibling[cpu as usize] as usize;
        self.credit[sibling] += spin as f64 * self.gain_per_spin;
    }

    /// Of `ns` of work `cpu` is about to do, what its credit saves.
    pub(super) fn take_gain(&mut self, cpu: u32, ns: u64) -> u64 {
        let credit = &mut self.credit[cpu as usize];
        if *credit < 1.0 {
            return 0;
        }
        let gained = credit.min(ns as f64 * self.gain_cap).floor();
        *credit -= gained;
        gained as u64
    }

    /// Siblings on `machine` ([`MachineSpec::sibling_of`]); `None` when a socket's CPUs
    /// do not pair up.
    pub(super) fn new(machine: &MachineSpec, (gain_per_spin, gain_cap): (f64, f64)) -> Option<Smt> {
        let sibling = (0..machine.nr_cpus())
            .map(|c| machine.sibling_of(c))
            .collect::<Option<Vec<u32>>>()?;
        Some(Smt {
            gain_per_spin,
            gain_cap,
            sibling,
            credit: vec![0.0; machine.nr_cpus() as usize],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::CostModel;
    use crate::engine::{Sim, SimOptions};
    use mmkit_core::Policy;

    #[test]
    pub(super) fn siblings_are_a_half_socket_apart_within_a_socket() {
        let machine = MachineSpec::spr_224();
        let smt = Smt::new(&machine, (0.6, 0.375)).expect("112 CPUs a socket pair up");
        assert_eq!(smt.sibling[0], 56);
        assert_eq!(smt.sibling[56], 0);
        assert_eq!(smt.sibling[111], 55);
        assert_eq!(smt.sibling[112], 168);
        assert_eq!(smt.sibling[223], 167);
        for (cpu, &sibling) in smt.sibling.iter().enumerate() {
            assert_ne!(cpu as u32, sibling);
            assert_eq!(smt.sibling[sibling as usize], cpu as u32);
            assert_eq!(machine.socket_of(cpu as u32), machine.socket_of(sibling));
        }
        let single = MachineSpec {
            threads_per_core: 1,
            ..machine.clone()
        };
        assert!(Smt::new(&single, (0.6, 0.375)).is_none());
        let odd = MachineSpec {
            cpus_per_socket: 3,
            ..machine
        };
        assert!(Smt::new(&odd, (0.6, 0.375)).is_none());
    }

    /// The model's hyperthreads are in force from `Sim::new`, and follow the cost model a
    /// simulator is built under (`Sim::with_cost`).
    #[test]
    pub(super) fn a_new_simulator_has_the_models_hyperthreads() {
        let machine = MachineSpec::spr_224().with_cpus(8).with_node_bytes(1 << 30);
        let options = SimOptions {
            sample_ns: 1_000_000,
            verify_every: None,
            high_cpus: Vec::new(),
            measure_from_ns: 0,
        };
        let base = Policy::preset("base").unwrap();
        let sim = Sim::new(&machine, base, options.clone()).unwrap();
        assert!(sim.cost.smt_yield.is_some());
        assert_eq!(sim.smt.as_ref().map(|smt| smt.sibling[1]), Some(3));
        let without = CostModel {
            smt_yield: None,
            ..CostModel::calibrated()
        };
        let sim = Sim::with_cost(&machine, base, without, options).unwrap();
        assert!(sim.smt.is_none());
    }

    #[test]
    pub(super) fn a_cpu_uses_its_credit_up_to_a_lone_threads_speed_up() {
        let machine = MachineSpec::spr_224();
        let mut smt = Smt::new(&machine, (0.6, 0.375)).unwrap();
        smt.give(0, 1000);
        assert_eq!(smt.credit[56], 600.0);
        assert_eq!(smt.take_gain(0, 1000), 0, "the credit is the sibling's");
        assert_eq!(smt.take_gain(56, 800), 300, "at most 0.375 of the work");
        assert_eq!(smt.take_gain(56, 10_000), 300, "what is left");
        assert_eq!(smt.take_gain(56, 10_000), 0);
    }
}
