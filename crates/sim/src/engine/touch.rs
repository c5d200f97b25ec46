//! A workload's pages in the cache model (the touches and reads it charges), and the
//! hints that ask for the lines later calls will need: descriptors and stamps read
//! ahead, and the walk down the buddy list the last refill took from.

use mmkit_core::{Order, Pfn};

use super::{Sim, SimError};
use crate::cache::CacheModel;
use crate::cost::CostModel;
use crate::machine::MachineSpec;
use crate::prefetch::prefetch;

/// The cache model of `machine` under `cost`, with stamps reserved for each simulated
/// zone of `zones` (allocator index, first pfn, end pfn); [`SimError::HostMemory`] if the
/// host refuses them.
pub(super) fn cache_model(
    machine: &MachineSpec,
    zones: &[(usize, u64, u64)],
    cost: &CostModel,
) -> Result<CacheModel, SimError> {
    let cpu_socket = (0..machine.nr_cpus())
        .map(|c| machine.socket_of(c))
        .collect();
    let zone_pages: Vec<u64> = zones.iter().map(|&(_, start, end)| end - start).collect();
    CacheModel::new(
        cpu_socket,
        &zone_pages,
        machine.l2_bytes,
        machine.socket_cache_bytes(),
        cost,
    )
}

impl Sim {
    /// `cpu` touches `lines` of the 64 lines of each page of the block at `pfn` (writing
    /// it after allocation). Charges the cache model's time.
    pub fn touch(&mut self, cpu: u32, pfn: Pfn, order: Order, lines: u32) {
        let slot = self.zone_slot(pfn);
        self.touch_in(cpu, slot, pfn, order, lines);
    }

    /// `cpu` reads `lines` of each page of the block at `pfn`, which a CPU of its socket
    /// wrote moments before (copying a message out): [`crate::cache::CacheModel::read`].
    /// Charges the cache model's time.
    pub fn read(&mut self, cpu: u32, pfn: Pfn, order: Order, lines: u32) {
        let slot = self.zone_slot(pfn);
        let offset = pfn.0 - self.zones[slot].1;
        let ns = self
            .cache
            .read(cpu, slot, offset, order.pages(), lines, &self.cost);
        self.charge(cpu, ns);
    }

    /// [`Self::touch`] of a block in zone `slot`, found already. Inlined (always: left to
    /// itself the compiler kept it a call, whose register saves cost ≈ 15 instructions per
    /// allocation): it follows nearly every allocation.
    #[inline(always)]
    pub(super) fn touch_in(&mut self, cpu: u32, slot: usize, pfn: Pfn, order: Order, lines: u32) {
        let ns = self.touch_ns(cpu, slot, pfn, order, lines);
        self.charge(cpu, ns);
    }

    /// [`Self::touch_in`] without the charge: the time it takes, for a caller that
    /// charges it with another cost.
    #[inline(always)]
    pub(super) fn touch_ns(
        &mut self,
        cpu: u32,
        slot: usize,
        pfn: Pfn,
        order: Order,
        lines: u32,
    ) -> u64 {
        let offset = pfn.0 - self.zones[slot].1;
        self.cache
            .touch(cpu, slot, offset, order.pages(), lines, &self.cost)
    }

    /// Prefetch the page descriptors and the cache stamps of the blocks at `pfns`, which
    /// later [`Self::free`]s will need, so that their cache misses (a descriptor is cold
    /// when its block was allocated long ago) overlap with each other and with the work
    /// before those frees. Changes nothing in the run.
    ///
    /// The loop is kept short (no call, no panic path per block). Prefetch hints, not
    /// loads: a load that misses would hold up the loop until its line arrived (the
    /// crate's `prefetch` module).
    ///
    /// The blocks of one call are nearly always in one zone (a process's pages come from
    /// its node): the first block's zone is found once and, if every block is in it, its
    /// descriptors and stamps are read in two loops with nothing to look up per block
    /// (callgrind: 289 → 254 instructions for a call of 8 blocks); otherwise each block's
    /// zone is searched for.
    pub fn prefetch(&self, pfns: &[Pfn]) {
        let Some(slot) = pfns.first().and_then(|&first| self.slot_of(first)) else {
            return self.prefetch_each(pfns);
        };
        let (zone, start, end) = self.zones[slot];
        if !pfns.iter().all(|pfn| (start..end).contains(&pfn.0)) {
            return self.prefetch_each(pfns);
        }
        let mem_map = self.allocator.zones()[zone].mem_map();
        for &pfn in pfns {
            if let Some(page) = mem_map.get(pfn) {
                prefetch(page);
            }
        }
        self.cache
            .prefetch_all(slot, pfns.iter().map(|pfn| pfn.0 - start));
    }

    /// [`Self::prefetch`] of blocks in more than one zone: each block's zone searched for.
    #[cold]
    pub(super) fn prefetch_each(&self, pfns: &[Pfn]) {
        for &pfn in pfns {
            if let Some(slot) = self.slot_of(pfn) {
                self.prefetch_in(slot, pfn);
            }
        }
    }

    /// [`Self::prefetch`] of one block whose zone is (probably) `slot`: a pfn outside the
    /// zone is skipped (both reads are checked), so a wrong guess costs only the hint.
    #[inline]
    pub(super) fn prefetch_in(&self, slot: usize, pfn: Pfn) {
        let (zone, start, _) = self.zones[slot];
        if let Some(page) = self.allocator.zones()[zone].mem_map().get(pfn) {
            prefetch(page);
        }
        self.cache.prefetch(slot, pfn.0.wrapping_sub(start));
    }

    /// A step of the walk down the buddy list the last refill took from, if it is not
    /// done: taken after every allocation and free ([`crate::list_walk`]).
    #[inline(always)]
    pub(super) fn walk_ahead(&mut self) {
        let walk = &mut self.report.walk;
        if walk.is_walking() {
            walk.step(self.allocator.zones()[walk.zone].mem_map());
        }
    }
}
