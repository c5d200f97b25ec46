//! Reclaim from the LRU lists: cgroup reclaim (limits and `memory.reclaim`), direct
//! reclaim in the allocation path, and kswapd.
//!
//! Linux counterpart (v6.7, `mm/vmscan.c`): `shrink_lruvec` with a reduced
//! `get_scan_count` (each evictable list scanned `size >> priority`, a removed cgroup's at
//! least a batch, anonymous lists only while swap has room), `shrink_active_list`
//! (deactivate), `shrink_inactive_list` with `folio_check_references`,
//! `try_to_free_mem_cgroup_pages`, `try_to_free_pages`, `balance_pgdat`, the congestion
//! rules of `shrink_node` (who may mark a lruvec: `current_is_kswapd()`, or
//! `cgroup_reclaim` with `writeback_throttling_sane`); and `lruvec_lru_size` as two
//! policies (`docs/reference/linux-mm.md` §5.2, Wang 2019): [`crate::policy::LruSizePolicy`].
//! Reclaim visits every cgroup of the subtree that is not freed, zombies included.

use crate::sync::RawMutex;
use alloc::vec::Vec;

use super::folio::Folio;
use super::kswapd::{self, ScanControl, ShrinkOutcome};
use super::lru::{LruList, LruvecFlags};
use super::memcg::{MemcgHierarchy, MemcgId, MemcgState};
use super::memory::{Mapping, Memory, MmError, PageIo};
use super::pageout::ReclaimResult;
use crate::page::{Order, PageFlags, Pfn};
use crate::page_alloc::{Caller, NodeId, ZoneType, MAX_NR_ZONES};
use crate::policy::{CongestionBits, LruSizePolicy};

/// `DEF_PRIORITY`: the first pass scans 1/4096 of each list.
pub const DEF_PRIORITY: u32 = 12;
/// `SWAP_CLUSTER_MAX`: the unit of reclaim.
pub const SWAP_CLUSTER_MAX: u64 = 32;
/// `MAX_RECLAIM_RETRIES`.
pub const MAX_RECLAIM_RETRIES: u32 = 16;
/// The highest zone index of a kswapd request that any zone may serve (kswapd's
/// `MAX_NR_ZONES - 1`).
const KSWAPD_HIGHEST_ZONEIDX: ZoneType = ZoneType::Device;

/// What one reclaim call did.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct ReclaimOutcome {
    /// Pages isolated from inactive lists.
    pub scanned: u64,
    /// Pages freed.
    pub reclaimed: u64,
    /// Pages moved to the active lists.
    pub activated: u64,
    /// Pages moved to the inactive lists.
    pub deactivated: u64,
    /// Pages seen dirty or under write-back (`nr.dirty`).
    pub dirty: u64,
    /// Pages seen under write-back that reclaim had already asked for (`nr.congested`).
    pub congested: u64,
    /// Times a reclaimer found its target congested and would have slept
    /// (`reclaim_throttle(VMSCAN_THROTTLE_CONGESTED)`).
    pub throttled: u64,
}

impl core::ops::AddAssign for ReclaimOutcome {
    fn add_assign(&mut self, other: ReclaimOutcome) {
        self.scanned += other.scanned;
        self.reclaimed += other.reclaimed;
        self.activated += other.activated;
        self.deactivated += other.deactivated;
        self.dirty += other.dirty;
        self.congested += other.congested;
        self.throttled += other.throttled;
    }
}

/// Who reclaims: what the congestion rules look at.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Reclaimer {
    /// Reclaim on behalf of a cgroup (limits, `memory.reclaim`, also at the root).
    Cgroup(MemcgId),
    /// Direct reclaim from the allocator's slow path.
    Direct,
    /// kswapd.
    Kswapd,
}

impl Reclaimer {
    /// The cgroup whose lruvecs carry the congestion flags (the root for global reclaim).
    fn target(self) -> MemcgId {
        match self {
            Reclaimer::Cgroup(memcg) => memcg,
            Reclaimer::Direct | Reclaimer::Kswapd => MemcgId::ROOT,
        }
    }
}

/// What a reclaim pass may do besides dropping clean pages (`sc.may_writepage`,
/// `sc.may_swap`). Only kswapd's reclaim for a watermark boost forbids anything.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct MayReclaim {
    /// Write dirty file pages back.
    writepage: bool,
    /// Swap anonymous pages out.
    swap: bool,
}

impl MayReclaim {
    const ALL: MayReclaim = MayReclaim {
        writepage: true,
        swap: true,
    };
}

/// What `folio_check_references` decided.
enum References {
    Activate,
    Keep,
    Reclaim,
}

impl<R: RawMutex> Memory<R> {
    /// `lruvec_lru_size(lruvec, lru, zone_idx)`: pages of `memcg` on `lru` on `node` in
    /// zones up to `zone_idx`, as the policy computes it. Counts the counters it read in
    /// [`super::MmStats::lru_size_reads`], as Linux reads them.
    ///
    /// Both policies take a node total and subtract, for each *managed* zone above
    /// `zone_idx`, that zone's `lru_zone_size` (never below zero): one read per such
    /// zone. The total is what differs. Wang 2019's fix (5.3 and stable 5.2)
    /// sums `lru_zone_size` over all `MAX_NR_ZONES` zones, managed or not; the 5.2
    /// regression sums the per-CPU counter over every CPU. So sizing a node's whole list
    /// (`zone_idx = MAX_NR_ZONES - 1`, as reclaim does here) reads 5 counters under the
    /// fix, and the DMA part of a three-zone node 5 + 2.
    pub fn lruvec_lru_size(
        &mut self,
        memcg: MemcgId,
        node: NodeId,
        lru: LruList,
        zone_idx: usize,
    ) -> u64 {
        debug_assert!(zone_idx < MAX_NR_ZONES);
        self.stats.lru_size_calls += 1;
        let group = self.memcgs.group(memcg);
        let lruvec = &group.lruvecs[node as usize];
        let (mut size, total_reads) = match self.policy.lru_size {
            LruSizePolicy::ZoneSizes => (
                (0..MAX_NR_ZONES)
                    .map(|z| lruvec.lru_zone_size[z][lru as usize])
                    .sum(),
                MAX_NR_ZONES as u64,
            ),
            LruSizePolicy::PercpuCounters => {
                // 5.2's lruvec_page_state_local: the node total summed over every CPU's
                // counter.
                let percpu = &group.lru_percpu[node as usize];
                let total: i64 = percpu.iter().map(|c| c[lru as usize]).sum();
                (total.max(0) as u64, percpu.len() as u64)
            }
        };
        let managed = self.managed_zones[node as usize];
        let mut above_reads = 0;
        for z in zone_idx + 1..MAX_NR_ZONES {
            if managed & 1 << z != 0 {
                above_reads += 1;
                size -= lruvec.lru_zone_size[z][lru as usize].min(size);
            }
        }
        self.stats.lru_size_reads += total_reads + above_reads;
        size
    }

    /// Take up to `nr` folios off the tail of `lru` (`isolate_lru_folios`); they keep
    /// their references and leave the list, `PG_lru` cleared.
    fn isolate_lru(
        &mut self,
        caller: Caller,
        memcg: MemcgId,
        node: NodeId,
        lru: LruList,
        nr: u64,
    ) -> Vec<Folio> {
        let mut isolated = Vec::new();
        let mut pages = 0;
        while pages < nr {
            let Some(pfn) = self.memcgs.group(memcg).lruvecs[node as usize].tail(lru) else {
                break;
            };
            let folio = self.folios[&pfn].folio;
            self.lru_del(caller, folio);
            pages += folio.nr_pages();
            isolated.push(folio);
        }
        isolated
    }

    /// `folio_check_references`.
    fn check_references(&mut self, folio: Folio) -> References {
        let referenced_ptes = self.folio_referenced(folio);
        let head = folio.head(self.mem_map(folio.pfn));
        let flags = head.flags();
        let referenced_folio = flags.contains(PageFlags::REFERENCED);
        head.set_flags(flags - PageFlags::REFERENCED);
        if referenced_ptes > 0 {
            if flags.contains(PageFlags::SWAPBACKED) || referenced_folio || referenced_ptes > 1 {
                return References::Activate;
            }
            head.set_flags(head.flags() | PageFlags::REFERENCED);
            return References::Keep;
        }
        References::Reclaim
    }

    /// `shrink_active_list`: move up to `nr` pages from the active list to the inactive
    /// one, clearing the accessed bits on the way.
    fn shrink_active_list(
        &mut self,
        caller: Caller,
        memcg: MemcgId,
        node: NodeId,
        lru: LruList,
        nr: u64,
    ) -> ReclaimOutcome {
        let mut outcome = ReclaimOutcome::default();
        for folio in self.isolate_lru(caller, memcg, node, lru, nr) {
            self.folio_referenced(folio);
            let head = folio.head(self.mem_map(folio.pfn));
            head.set_flags(head.flags() - PageFlags::ACTIVE);
            self.lru_add(caller, folio);
            outcome.deactivated += folio.nr_pages();
        }
        self.memcgs.group_mut(memcg).events.pgdeactivate += outcome.deactivated;
        outcome
    }

    /// `shrink_inactive_list` + `shrink_folio_list`: isolate up to `nr` pages, activate
    /// the referenced ones, keep those seen once, reclaim the rest. A pass that may not
    /// write keeps dirty file pages where they are (`keep_locked`), counted dirty.
    #[expect(
        clippy::too_many_arguments,
        reason = "shrink_inactive_list's own inputs; a struct would only rename them"
    )]
    fn shrink_inactive_list(
        &mut self,
        caller: Caller,
        memcg: MemcgId,
        node: NodeId,
        lru: LruList,
        nr: u64,
        may: MayReclaim,
        io: &mut dyn PageIo,
    ) -> Result<ReclaimOutcome, MmError> {
        let mut outcome = ReclaimOutcome::default();
        for folio in self.isolate_lru(caller, memcg, node, lru, nr) {
            outcome.scanned += folio.nr_pages();
            // Already under write-back: count it, and if reclaim asked before, it is
            // congested (`folio_check_dirty_writeback`, `PG_reclaim`).
            if let Some(reclaim) = self.writeback.get_mut(&folio.pfn) {
                outcome.dirty += folio.nr_pages();
                if *reclaim {
                    outcome.congested += folio.nr_pages();
                }
                *reclaim = true;
                self.lru_add(caller, folio);
                continue;
            }
            match self.check_references(folio) {
                References::Activate => {
                    let head = folio.head(self.mem_map(folio.pfn));
                    head.set_flags(head.flags() | PageFlags::ACTIVE);
                    self.lru_add(caller, folio);
                    outcome.activated += folio.nr_pages();
                }
                References::Keep => self.lru_add(caller, folio),
                References::Reclaim if !may.writepage && self.is_dirty_file(folio) => {
                    outcome.dirty += folio.nr_pages();
                    self.lru_add(caller, folio);
                }
                References::Reclaim => match self.reclaim_folio(caller, folio, io)? {
                    ReclaimResult::Freed => outcome.reclaimed += folio.nr_pages(),
                    ReclaimResult::NoSwap => self.lru_add(caller, folio),
                    ReclaimResult::Writeback => {
                        outcome.dirty += folio.nr_pages();
                        self.lru_add(caller, folio);
                    }
                },
            }
        }
        let events = &mut self.memcgs.group_mut(memcg).events;
        events.pgscan += outcome.scanned;
        events.pgsteal += outcome.reclaimed;
        events.pgactivate += outcome.activated;
        Ok(outcome)
    }

    /// Whether reclaiming `folio` would write it to its file: a dirty page-cache folio.
    fn is_dirty_file(&self, folio: Folio) -> bool {
        matches!(self.folios[&folio.pfn].mapping, Mapping::File(_))
            && folio
                .head(self.mem_map(folio.pfn))
                .flags()
                .contains(PageFlags::DIRTY)
    }

    /// `shrink_lruvec` at one priority: each evictable list of `memcg` on `node` scanned
    /// by `size >> priority` (at least one batch at priority 0); the anonymous lists only
    /// if the pass may swap and swap has room (`get_scan_count`'s `SCAN_FILE`).
    fn shrink_lruvec(
        &mut self,
        caller: Caller,
        memcg: MemcgId,
        node: NodeId,
        priority: u32,
        may: MayReclaim,
        io: &mut dyn PageIo,
    ) -> Result<ReclaimOutcome, MmError> {
        let mut outcome = ReclaimOutcome::default();
        let can_swap = may.swap && self.swap.used() < self.swap.slots();
        let top = MAX_NR_ZONES - 1;
        let offline = self.memcgs.group(memcg).state == MemcgState::Offline;
        for lru in [
            LruList::InactiveAnon,
            LruList::ActiveAnon,
            LruList::InactiveFile,
            LruList::ActiveFile,
        ] {
            if !lru.is_file() && !can_swap {
                continue;
            }
            let size = self.lruvec_lru_size(memcg, node, lru, top);
            let mut scan = size >> priority;
            // At priority 0, and for a removed cgroup at every priority ("make sure to
            // scrape out the remaining cache" of a zombie, `get_scan_count`), at least a
            // batch.
            if scan == 0 && (priority == 0 || offline) {
                scan = size.min(SWAP_CLUSTER_MAX);
            }
            if scan == 0 {
                continue;
            }
            if lru.is_active() {
                // Age the active list only while the inactive one is smaller
                // (`inactive_is_low`, ratio 1 for small lists).
                let inactive = if lru.is_file() {
                    LruList::InactiveFile
                } else {
                    LruList::InactiveAnon
                };
                if self.lruvec_lru_size(memcg, node, inactive, top) < size {
                    outcome += self.shrink_active_list(caller, memcg, node, lru, scan);
                }
            } else {
                outcome += self.shrink_inactive_list(caller, memcg, node, lru, scan, may, io)?;
            }
        }
        Ok(outcome)
    }

    /// Reclaim about `nr` pages from the cgroups `targets` on `nodes`, priority 12 to 0.
    /// After each node's pass, the congestion rules of `shrink_node`: if every dirty page
    /// seen was already under write-back for reclaim, flag the target lruvec (which bit:
    /// the policy and the reclaimer); a reclaimer other than kswapd that finds its target
    /// flagged is throttled (counted: the simulation does not sleep).
    fn shrink(
        &mut self,
        caller: Caller,
        reclaimer: Reclaimer,
        targets: &[MemcgId],
        nodes: &[NodeId],
        nr: u64,
        io: &mut dyn PageIo,
    ) -> Result<ReclaimOutcome, MmError> {
        let mut outcome = ReclaimOutcome::default();
        for priority in (0..=DEF_PRIORITY).rev() {
            for &node in nodes {
                let may = MayReclaim::ALL;
                outcome += self.shrink_node(caller, reclaimer, targets, node, priority, may, io)?;
                if outcome.reclaimed >= nr {
                    return Ok(outcome);
                }
            }
        }
        Ok(outcome)
    }

    /// `shrink_node` at one priority: shrink the lruvec of every cgroup of `targets` on
    /// `node`, then apply the congestion rules to what the pass saw.
    #[expect(
        clippy::too_many_arguments,
        reason = "scan_control's fields that shrink_node reads, each an argument"
    )]
    fn shrink_node(
        &mut self,
        caller: Caller,
        reclaimer: Reclaimer,
        targets: &[MemcgId],
        node: NodeId,
        priority: u32,
        may: MayReclaim,
        io: &mut dyn PageIo,
    ) -> Result<ReclaimOutcome, MmError> {
        let mut pass = ReclaimOutcome::default();
        for &memcg in targets {
            pass += self.shrink_lruvec(caller, memcg, node, priority, may, io)?;
            // `shrink_slab`: the deferred split shrinker, after each lruvec.
            self.shrink_deferred_split(caller, memcg, node, priority)?;
        }
        pass.throttled += self.congestion_control(reclaimer, node, &pass);
        Ok(pass)
    }

    /// `writeback_throttling_sane`: whether this reclaimer may mark its target congested
    /// and be throttled for it. Only cgroup reclaim under cgroup v1 may not: legacy memcg
    /// reclaim waits on write-back itself ("Legacy memcg will stall in page writeback").
    fn writeback_throttling_sane(&self, reclaimer: Reclaimer) -> bool {
        match reclaimer {
            Reclaimer::Cgroup(_) => self.memcg_hierarchy == MemcgHierarchy::V2,
            Reclaimer::Direct | Reclaimer::Kswapd => true,
        }
    }

    /// The congestion part of `shrink_node`; returns 1 if the reclaimer is throttled.
    ///
    /// Who marks the target when every dirty page the pass saw was already queued for
    /// reclaim: kswapd (`current_is_kswapd()`), and cgroup reclaim whose write-back
    /// throttling is sane (`cgroup_reclaim(sc) && writeback_throttling_sane(sc)`). Global
    /// direct reclaim marks nothing, with one bit (Linux ≤ 6.4) as with two (≥ 6.5); it
    /// is only throttled by what the others marked.
    fn congestion_control(
        &mut self,
        reclaimer: Reclaimer,
        node: NodeId,
        pass: &ReclaimOutcome,
    ) -> u64 {
        let kswapd = reclaimer == Reclaimer::Kswapd;
        let cgroup =
            matches!(reclaimer, Reclaimer::Cgroup(_)) && self.writeback_throttling_sane(reclaimer);
        let congestion = self.policy.congestion;
        let flags = &mut self.memcgs.group_mut(reclaimer.target()).lruvecs[node as usize].flags;
        if pass.dirty != 0 && pass.dirty == pass.congested {
            // `set_bit` only: a bit another reclaimer set stays.
            let (by_cgroup, by_kswapd) = match congestion {
                CongestionBits::Shared => (LruvecFlags::CONGESTED, LruvecFlags::CONGESTED),
                CongestionBits::Separate => {
                    (LruvecFlags::CGROUP_CONGESTED, LruvecFlags::NODE_CONGESTED)
                }
            };
            if cgroup {
                *flags |= by_cgroup;
            }
            if kswapd {
                *flags |= by_kswapd;
            }
        }
        u64::from(!kswapd && !flags.is_empty())
    }

    /// The congestion flags of `memcg`'s lruvec on `node`.
    pub fn lruvec_flags(&self, memcg: MemcgId, node: NodeId) -> Option<LruvecFlags> {
        Some(self.memcgs.get(memcg)?.lruvecs.get(node as usize)?.flags)
    }

    /// Whether a reclaimer (not kswapd) targeting `memcg` on `node` would be throttled now.
    pub fn reclaim_throttled(&self, memcg: MemcgId, node: NodeId) -> bool {
        self.lruvec_flags(memcg, node)
            .is_some_and(|flags| !flags.is_empty())
    }

    fn all_nodes(&self) -> Vec<NodeId> {
        (0..self.allocator.page_allocator().topology().nr_nodes() as NodeId).collect()
    }

    /// `try_to_free_mem_cgroup_pages`: reclaim about `nr` pages from `memcg` and the
    /// cgroups below it, never from anyone else.
    pub fn try_to_free_mem_cgroup_pages(
        &mut self,
        caller: Caller,
        memcg: MemcgId,
        nr: u64,
        io: &mut dyn PageIo,
    ) -> Result<ReclaimOutcome, MmError> {
        let targets = self.memcgs.subtree(memcg);
        let nodes = self.all_nodes();
        let reclaimer = Reclaimer::Cgroup(memcg);
        let outcome = self.shrink(
            caller,
            reclaimer,
            &targets,
            &nodes,
            nr.max(SWAP_CLUSTER_MAX),
            io,
        );
        // Leaving `do_try_to_free_pages`, cgroup reclaim clears the congestion it may have
        // set on its targets: with one shared bit, kswapd's too.
        let clear = match self.policy.congestion {
            CongestionBits::Shared => LruvecFlags::CONGESTED,
            CongestionBits::Separate => LruvecFlags::CGROUP_CONGESTED,
        };
        for node in nodes {
            self.memcgs.group_mut(memcg).lruvecs[node as usize].flags -= clear;
        }
        outcome
    }

    /// `memory.reclaim`: reclaim `pages` from `memcg`'s subtree (the root included),
    /// giving up with [`MmError::ReclaimStalled`] after 16 rounds without progress.
    pub fn memory_reclaim(
        &mut self,
        caller: Caller,
        memcg: MemcgId,
        pages: u64,
        io: &mut dyn PageIo,
    ) -> Result<ReclaimOutcome, MmError> {
        self.memcgs.get(memcg).ok_or(MmError::NoSuchMemcg(memcg))?;
        let mut total = ReclaimOutcome::default();
        let mut stalls = 0;
        while total.reclaimed < pages {
            let round =
                self.try_to_free_mem_cgroup_pages(caller, memcg, pages - total.reclaimed, io)?;
            if round.reclaimed == 0 {
                stalls += 1;
                if stalls >= MAX_RECLAIM_RETRIES {
                    return Err(MmError::ReclaimStalled);
                }
            }
            total += round;
        }
        Ok(total)
    }

    /// `memory.max`: set the limit and reclaim down to it; [`MmError::OutOfMemory`] if
    /// the usage cannot get there (the limit stays set, as Linux's does).
    pub fn set_memory_max(
        &mut self,
        caller: Caller,
        memcg: MemcgId,
        pages: u64,
        io: &mut dyn PageIo,
    ) -> Result<(), MmError> {
        self.memcgs.get(memcg).ok_or(MmError::NoSuchMemcg(memcg))?;
        self.memcgs.group_mut(memcg).max = pages;
        self.reclaim_to(caller, memcg, pages, io)
    }

    /// `memory.high`: set the throttling threshold; charges above it reclaim.
    pub fn set_memory_high(&mut self, memcg: MemcgId, pages: u64) -> Result<(), MmError> {
        self.memcgs.get(memcg).ok_or(MmError::NoSuchMemcg(memcg))?;
        self.memcgs.group_mut(memcg).high = pages;
        Ok(())
    }

    /// Reclaim from `memcg` until its usage is at most `target` pages.
    fn reclaim_to(
        &mut self,
        caller: Caller,
        memcg: MemcgId,
        target: u64,
        io: &mut dyn PageIo,
    ) -> Result<(), MmError> {
        for _ in 0..MAX_RECLAIM_RETRIES {
            let usage = self.memcgs.group(memcg).usage;
            if usage <= target {
                return Ok(());
            }
            // Stocked charges are the cheapest pages to give back.
            for cpu in 0..self.allocator.page_allocator().topology().nr_cpus() {
                self.memcgs.drain_stock(cpu);
            }
            let usage = self.memcgs.group(memcg).usage;
            if usage <= target {
                return Ok(());
            }
            self.try_to_free_mem_cgroup_pages(caller, memcg, usage - target, io)?;
        }
        if self.memcgs.group(memcg).usage <= target {
            Ok(())
        } else {
            Err(MmError::OutOfMemory)
        }
    }

    /// `try_charge_memcg`: charge `pages` to `memcg` (and its ancestors), from this CPU's
    /// stock if it can, else a batch of 64 ahead; over a limit, reclaim that cgroup and
    /// retry, and fail with [`MmError::OutOfMemory`] after 16 fruitless rounds. Usage over
    /// `memory.high` is reclaimed before returning.
    pub(super) fn try_charge(
        &mut self,
        caller: Caller,
        memcg: MemcgId,
        pages: u64,
        io: &mut dyn PageIo,
    ) -> Result<(), MmError> {
        let cpu = caller.cpu;
        if !self.memcgs.consume_stock(cpu, memcg, pages) {
            let mut batch = pages.max(super::memcg::MEMCG_CHARGE_BATCH);
            let mut retries = MAX_RECLAIM_RETRIES;
            loop {
                match self.memcgs.counter_try_charge(memcg, batch) {
                    Ok(()) => {
                        self.memcgs.refill_stock(cpu, memcg, batch - pages);
                        break;
                    }
                    Err(_) if batch > pages => batch = pages,
                    Err(super::memcg::OverLimit(over)) => {
                        self.memcgs.group_mut(over).events.max += 1;
                        if retries == 0 {
                            self.memcgs.group_mut(over).events.oom += 1;
                            return Err(MmError::OutOfMemory);
                        }
                        retries -= 1;
                        for c in 0..self.allocator.page_allocator().topology().nr_cpus() {
                            self.memcgs.drain_stock(c);
                        }
                        self.try_to_free_mem_cgroup_pages(caller, over, pages, io)?;
                    }
                }
            }
        }
        // memory.high: reclaim the excess of every ancestor over its threshold.
        let over: Vec<(MemcgId, u64)> = self
            .memcgs
            .ancestors(memcg)
            .filter_map(|g| {
                let group = self.memcgs.group(g);
                (group.usage > group.high).then(|| (g, group.usage - group.high))
            })
            .collect();
        for (g, excess) in over {
            self.memcgs.group_mut(g).events.high += 1;
            self.try_to_free_mem_cgroup_pages(caller, g, excess, io)?;
        }
        Ok(())
    }

    /// Direct reclaim for an allocation that failed on `node`: reclaim a cluster from
    /// every cgroup (`try_to_free_pages`).
    pub(super) fn direct_reclaim(
        &mut self,
        caller: Caller,
        node: NodeId,
        io: &mut dyn PageIo,
    ) -> Result<ReclaimOutcome, MmError> {
        let targets = self.memcgs.subtree(MemcgId::ROOT);
        self.shrink(
            caller,
            Reclaimer::Direct,
            &targets,
            &[node],
            SWAP_CLUSTER_MAX,
            io,
        )
    }

    /// One kswapd run for `node` (`balance_pgdat`), for an order-0 request that any zone
    /// may serve: [`kswapd::balance_pgdat`] with this layer's LRU lists as the shrinker
    /// ([`Memory::kswapd_shrink_node`]). A node that is balanced and not boosted is left
    /// alone; otherwise the node's zones are `RECLAIM_ACTIVE` (pagesets shrink) while
    /// kswapd reclaims from every cgroup at priorities 12 down to at most 1, and each
    /// zone's watermark boost is dropped at the end. One run may leave the node
    /// unbalanced (pages seen referenced are activated first); [`Memory::kswapd`] reruns
    /// it as the kswapd thread does. Returns what the passes did.
    pub fn kswapd_balance(
        &mut self,
        caller: Caller,
        node: NodeId,
        io: &mut dyn PageIo,
    ) -> Result<ReclaimOutcome, MmError> {
        let allocator = self.allocator.clone();
        let mut outcome = ReclaimOutcome::default();
        kswapd::balance_pgdat(
            allocator.page_allocator(),
            node,
            Order::ZERO,
            KSWAPD_HIGHEST_ZONEIDX,
            |sc| self.kswapd_pass(caller, sc, &mut outcome, io),
        )?;
        Ok(outcome)
    }

    /// One wake-up of `node`'s kswapd for an order-0 request that any zone may serve
    /// ([`kswapd::run`]): [`Memory::kswapd_balance`] runs until the node is balanced or
    /// 16 runs in a row free nothing. Returns what the passes did.
    pub fn kswapd(
        &mut self,
        caller: Caller,
        node: NodeId,
        io: &mut dyn PageIo,
    ) -> Result<ReclaimOutcome, MmError> {
        let allocator = self.allocator.clone();
        let mut outcome = ReclaimOutcome::default();
        kswapd::run(
            allocator.page_allocator(),
            node,
            Order::ZERO,
            KSWAPD_HIGHEST_ZONEIDX,
            |sc| self.kswapd_pass(caller, sc, &mut outcome, io),
        )?;
        Ok(outcome)
    }

    /// The shrinker [`Memory::kswapd_balance`] and [`Memory::kswapd`] pass to the loop.
    fn kswapd_pass(
        &mut self,
        caller: Caller,
        sc: &ScanControl,
        outcome: &mut ReclaimOutcome,
        io: &mut dyn PageIo,
    ) -> Result<ShrinkOutcome, MmError> {
        let pass = self.kswapd_shrink_node(caller, sc, io)?;
        *outcome += pass;
        Ok(ShrinkOutcome {
            scanned: pass.scanned,
            reclaimed: pass.reclaimed,
        })
    }

    /// One pass of a kswapd run (`shrink_node` as kswapd calls it, at `sc.priority`):
    /// every cgroup's lists on `sc.node` under kswapd's congestion rules, without
    /// write-back or swap when `sc` forbids them. Once the node is balanced for `sc`'s
    /// order, every congestion bit of the node is cleared (`clear_pgdat_congested`). A
    /// runtime's kswapd thread calls this from its [`kswapd::balance_pgdat`] run.
    pub fn kswapd_shrink_node(
        &mut self,
        caller: Caller,
        sc: &ScanControl,
        io: &mut dyn PageIo,
    ) -> Result<ReclaimOutcome, MmError> {
        let targets = self.memcgs.subtree(MemcgId::ROOT);
        let may = MayReclaim {
            writepage: sc.may_writepage,
            swap: sc.may_swap,
        };
        let pass = self.shrink_node(
            caller,
            Reclaimer::Kswapd,
            &targets,
            sc.node,
            sc.priority,
            may,
            io,
        )?;
        let allocator = self.allocator.page_allocator();
        if allocator.pgdat_balanced(sc.node, sc.order, sc.reclaim_idx) {
            self.memcgs.group_mut(MemcgId::ROOT).lruvecs[sc.node as usize].flags =
                LruvecFlags::empty();
        }
        Ok(pass)
    }

    /// The node of a pfn.
    pub(super) fn node_of(&self, pfn: Pfn) -> NodeId {
        self.allocator
            .page_allocator()
            .find_zone(pfn)
            .expect("in a zone")
            .node()
    }

    /// Put a folio at the head of its memcg's LRU list on its node, counting the change in
    /// the caller's per-CPU counters.
    pub(super) fn lru_add(&mut self, caller: Caller, folio: Folio) {
        self.lru_insert(caller, folio, false);
    }

    /// Put a folio at the tail of its list (`lruvec_add_folio_tail`), where reclaim looks
    /// first.
    pub(super) fn lru_add_tail(&mut self, caller: Caller, folio: Folio) {
        self.lru_insert(caller, folio, true);
    }

    fn lru_insert(&mut self, caller: Caller, folio: Folio, at_tail: bool) {
        let node = self.node_of(folio.pfn) as usize;
        let memcg = MemcgId(folio.head(self.mem_map(folio.pfn)).memcg_id());
        let allocator = &self.allocator;
        let allocator = allocator.page_allocator();
        let lruvec = &mut self.memcgs.group_mut(memcg).lruvecs[node];
        if at_tail {
            lruvec.add_tail(allocator, folio);
        } else {
            lruvec.add(allocator, folio);
        }
        let lru = LruList::of_flags(folio.head(self.mem_map(folio.pfn)).flags());
        self.memcgs
            .count_lru(memcg, node, caller.cpu, lru, folio.nr_pages() as i64);
    }

    /// Take a folio off its LRU list.
    pub(super) fn lru_del(&mut self, caller: Caller, folio: Folio) {
        let node = self.node_of(folio.pfn) as usize;
        let memcg = MemcgId(folio.head(self.mem_map(folio.pfn)).memcg_id());
        let allocator = &self.allocator;
        let allocator = allocator.page_allocator();
        let lru = self.memcgs.group_mut(memcg).lruvecs[node].del(allocator, folio);
        self.memcgs
            .count_lru(memcg, node, caller.cpu, lru, -(folio.nr_pages() as i64));
    }
}

#[cfg(test)]
mod tests {
    use alloc::sync::Arc;

    use super::*;
    use crate::page_alloc::{PageAllocator, ZoneType};
    use crate::policy::MmPolicy;
    use crate::topology::{CacheInfo, Topology, ZoneSize};
    use crate::{Policy, Settings};

    /// One node with DMA, DMA32 and Normal zones, all managed, on `cpus` CPUs.
    fn three_zone_memory(policy: MmPolicy, cpus: u32) -> Memory {
        let sizes = [
            ZoneSize::managed(0, ZoneType::Dma, 3840),
            ZoneSize::managed(0, ZoneType::Dma32, 1 << 14),
            ZoneSize::managed(0, ZoneType::Normal, 1 << 14),
        ];
        let llc = CacheInfo {
            llc_bytes: 8 << 20,
            llc_shared_cpus: cpus,
        };
        let topology = Topology::x86_64(&sizes, alloc::vec![cpus], llc, false).expect("a topology");
        let allocator =
            PageAllocator::new(topology, Settings::default(), Policy::V6_7).expect("settings");
        Memory::new(Arc::new(allocator), policy, 0)
    }

    /// `docs/reference/linux-mm.md` §8's example: inactive_file has {DMA 0, DMA32 100,
    /// Normal 50} pages, so the list is 150 pages up to Normal, 100 up to DMA32 and 0 up
    /// to DMA, under both policies. Wang 2019's fix reads all five zone counters, then one
    /// per managed zone above the one asked (5, 6, 7 reads); the 5.2 regression reads one
    /// counter per CPU instead of the five.
    #[test]
    fn lru_size_of_a_three_zone_node_subtracts_the_managed_zones_above() {
        let cpus = 4;
        for (lru_size, total_reads) in [
            (LruSizePolicy::ZoneSizes, MAX_NR_ZONES as u64),
            (LruSizePolicy::PercpuCounters, u64::from(cpus)),
        ] {
            let policy = MmPolicy {
                lru_size,
                ..MmPolicy::V6_7
            };
            let mut m = three_zone_memory(policy, cpus);
            let lru = LruList::InactiveFile;
            let group = m.memcgs.group_mut(MemcgId::ROOT);
            group.lruvecs[0].lru_zone_size[ZoneType::Dma32.index()][lru as usize] = 100;
            group.lruvecs[0].lru_zone_size[ZoneType::Normal.index()][lru as usize] = 50;
            // The per-CPU deltas of the same 150 pages, made on two CPUs.
            group.lru_percpu[0][0][lru as usize] = 120;
            group.lru_percpu[0][3][lru as usize] = 30;
            for (zone, size, above) in [
                (ZoneType::Normal, 150, 0),
                (ZoneType::Dma32, 100, 1),
                (ZoneType::Dma, 0, 2),
            ] {
                let before = m.stats.lru_size_reads;
                assert_eq!(
                    m.lruvec_lru_size(MemcgId::ROOT, 0, lru, zone.index()),
                    size,
                    "{lru_size:?} up to {zone:?}"
                );
                assert_eq!(
                    m.stats.lru_size_reads - before,
                    total_reads + above,
                    "{lru_size:?} up to {zone:?}"
                );
            }
            // Up to Movable or Device: no managed zone above, nothing subtracted.
            let before = m.stats.lru_size_reads;
            assert_eq!(
                m.lruvec_lru_size(MemcgId::ROOT, 0, lru, MAX_NR_ZONES - 1),
                150
            );
            assert_eq!(m.stats.lru_size_reads - before, total_reads);
        }
    }
}
