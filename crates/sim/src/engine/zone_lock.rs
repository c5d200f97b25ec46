//! The zone locks as FIFO servers, and the charging of the zone-lock holds the core
//! reports for each call ([`CallReport`]): each hold one acquisition at the time its
//! CPU asks, the spin before the grant, and the holds that must wait until their CPU
//! comes first again.

use mmkit_core::page::Page;
use mmkit_core::page_alloc::{DrainReason, HoldKind, LockEvents, ZoneLockHold};
use mmkit_core::{Order, Pfn};

use super::{event_parts, Sim};
use crate::list_walk::ListWalk;
use crate::prefetch::prefetch;

/// A zone lock as a FIFO server: when it is next free, and the CPU that held it last (a
/// grant to another CPU pays the hand-off of the lock's lines).
#[derive(Clone, Copy, Default)]
pub(super) struct ZoneLock {
    pub(super) free_at: u64,
    pub(super) last_cpu: Option<u32>,
}

/// The zone-lock holds of one allocator call, as the core reports them
/// ([`LockEvents`]): what the engine charges. Reused from call to call.
#[derive(Default)]
pub(super) struct CallReport {
    /// The call's holds, in the order it made them.
    pub(super) holds: Vec<ZoneLockHold>,
    /// `drain_all_pages` calls since the run began: [drained or queued, skipped].
    pub(super) drain_alls: [u64; 2],
    /// The walk down the buddy list the last refill took from, a step per call.
    pub(super) walk: ListWalk,
}

impl LockEvents for CallReport {
    fn hold(&mut self, hold: &ZoneLockHold) {
        self.holds.push(*hold);
    }

    fn drain_all(&mut self, skipped: bool) {
        self.drain_alls[usize::from(skipped)] += 1;
    }

    const READS_AHEAD: bool = true;

    fn read_ahead(&mut self, page: &Page) {
        prefetch(page);
    }

    fn refill_left(&mut self, zone: usize, order: Order, first: Pfn, blocks: u64) {
        self.walk = ListWalk::from(zone, order, first, blocks);
    }
}

impl Sim {
    /// Take zone `slot`'s lock for `hold_ns` on `cpu` at its clock, moving `blocks`
    /// blocks; returns the time spun waiting for it. Inlined (always) into its one hot
    /// caller, [`Self::charge_holds`]: as a call it cost ≈ 1.5 % of the stream runs'
    /// instructions.
    #[inline(always)]
    pub(super) fn acquire(&mut self, slot: usize, cpu: u32, hold_ns: u64, blocks: u64) -> u64 {
        let t = self.cpus[cpu as usize].clock;
        self.check_request(cpu, t);
        let lock = &mut self.locks[slot];
        let contended = t < lock.free_at;
        let handoff = match lock.last_cpu {
            Some(last) if last != cpu => self.cost.handoff_ns(
                if self.machine.socket_of(last) == self.machine.socket_of(cpu) {
                    self.cost.handoff_socket_ns
                } else {
                    self.cost.handoff_cross_socket_ns
                },
            ),
            _ => 0,
        };
        let grant = t.max(lock.free_at) + handoff;
        lock.free_at = grant + hold_ns;
        lock.last_cpu = Some(cpu);
        // An uncontended hand-off is a cache miss on the lock word, not slow-path spinning.
        if contended {
            self.stats.spin_ns += grant - t;
            self.spin_bins.add(t, grant);
            self.stats.lock_contended += 1;
            if let Some(smt) = &mut self.smt {
                smt.give(cpu, grant - t);
            }
        }
        self.stats.lock_acquisitions += 1;
        self.stats.lock_hold_ns += hold_ns;
        self.stats.lock_blocks += blocks;
        let end = grant + hold_ns;
        self.stats.busy_ns += end - t;
        self.cpus[cpu as usize].clock = end;
        if contended {
            grant - t
        } else {
            0
        }
    }

    /// Count a zone-lock request at `t` that comes after another pending event: the CPU
    /// that owns that event could have asked first, and the FIFO server would have served
    /// it first. Only a running CPU's steps are checked (a tick runs at the CPU's own
    /// time, see [`Self::run`]).
    #[inline]
    pub(super) fn check_request(&mut self, cpu: u32, t: u64) {
        if !self.in_step {
            return;
        }
        let (others_t, _, _) = event_parts(self.queue.others_first(cpu as usize));
        if t > others_t {
            self.stats.requests_ahead += 1;
        }
    }

    /// Charge the zone-lock holds the last call reported, in the order it made them, to
    /// `cpu`: each one acquisition of the zone's lock, held for
    /// `c_lock + blocks · h_page + (merges · L_merge + splits · L_split) · t_xfer`.
    ///
    /// Inlined: nearly every call is a pageset hit that reported no hold, and that test
    /// is all it costs then; the charging is out of line.
    #[inline(always)]
    pub(super) fn charge_report(&mut self, cpu: u32) {
        if !self.report.holds.is_empty() {
            self.charge_holds(cpu);
        }
    }

    /// [`Self::charge_report`] of a call that reported holds. In a step, a hold whose
    /// request would come after another CPU's pending event (the call's earlier holds
    /// took the CPU past it) is not requested now: it and every hold after it wait in
    /// [`Self::deferred`] until the CPU comes first again, so that each request is made
    /// at its time and the lock serves the CPUs that asked earlier first. The
    /// allocator's state changed with the call; what waits is only the time the holds
    /// take, and so the order in which the lock serves them.
    #[inline(never)]
    pub(super) fn charge_holds(&mut self, cpu: u32) {
        let c = cpu as usize;
        for i in 0..self.report.holds.len() {
            if self.in_step && (self.has_deferred(c) || self.comes_after_others(cpu)) {
                let rest = &self.report.holds[i..];
                self.nr_deferred += rest.len();
                self.deferred[c].extend(rest.iter().copied());
                break;
            }
            let hold = self.report.holds[i];
            self.charge_hold(cpu, hold);
        }
        self.report.holds.clear();
    }

    /// One hold: an acquisition of its zone's lock at `cpu`'s clock, held
    /// `c_lock + blocks · h_page + (merges · L_merge + splits · L_split) · t_xfer`.
    #[inline(always)]
    pub(super) fn charge_hold(&mut self, cpu: u32, hold: ZoneLockHold) {
        let slot = self.slot_of_zone[hold.zone];
        let levels = hold.merges + hold.splits;
        self.stats.lock_levels += levels;
        let ns = self.cost.hold_ns(hold.blocks, hold.merges, hold.splits);
        let spin = self.acquire(slot, cpu, ns, hold.blocks);
        match hold.kind {
            HoldKind::Drain(reason) => {
                self.stats.drain_ns += ns + spin;
                if reason == DrainReason::FreeHigh {
                    self.free_high += 1;
                }
            }
            HoldKind::BuddyFree => self.stats.buddy_free_ns += ns + spin,
            _ => {}
        }
    }

    /// Whether CPU `c` has holds waiting ([`Self::charge_holds`]): the total's test first,
    /// which is all it costs in a run that defers none.
    #[inline(always)]
    pub(super) fn has_deferred(&self, c: usize) -> bool {
        self.nr_deferred != 0 && !self.deferred[c].is_empty()
    }

    /// Whether the running `cpu`'s clock is past another CPU's pending event: a request
    /// made now would be booked ahead of it.
    #[inline(always)]
    pub(super) fn comes_after_others(&mut self, cpu: u32) -> bool {
        let (others_t, _, _) = event_parts(self.queue.others_first(cpu as usize));
        self.cpus[cpu as usize].clock > others_t
    }
}
