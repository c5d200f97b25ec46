//! Memory cgroups: a hierarchy of page counters with limits, per-CPU charge batching,
//! per-node LRU lists, and `memory.stat`.
//!
//! Linux counterpart (v6.7, `mm/memcontrol.c`, `mm/page_counter.c`): `struct mem_cgroup`
//! with `memory` page counter (`max`, `high`), `try_charge_memcg` with the per-CPU
//! `memcg_stock` (`MEMCG_CHARGE_BATCH` = 64), `uncharge`, `mem_cgroup_per_node` (the
//! lruvec and `lru_zone_size`), the per-CPU `lruvec_stats_percpu` whose sum over CPUs was
//! Wang 2019's regression, `memory.stat`, and a cgroup's life (`css_online`,
//! `css_offline`, `css_free`: [`MemcgState`]), where a removed cgroup that something still
//! pins is a zombie.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use super::lru::{LruList, Lruvec, NR_LRU_LISTS};
use crate::page::PAGE_SIZE;

/// `MEMCG_CHARGE_BATCH`: pages a CPU charges ahead and keeps in its stock (64 since 6.1).
pub const MEMCG_CHARGE_BATCH: u64 = 64;

/// The mapped-page statistics kept per cgroup, node and CPU (`NR_ANON_MAPPED`,
/// `NR_FILE_MAPPED`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum MappedStat {
    /// `NR_ANON_MAPPED`.
    Anon = 0,
    /// `NR_FILE_MAPPED`.
    File = 1,
}

/// Which cgroup hierarchy the memory controller is mounted on: what
/// `cgroup_subsys_on_dfl(memory_cgrp_subsys)` asks.
///
/// It decides `writeback_throttling_sane` (`mm/vmscan.c`): cgroup reclaim under cgroup v1
/// ("legacy memcg") does not mark its lruvecs congested, because Linux's v1 reclaim waits
/// on write-back page by page instead (`shrink_folio_list`'s "case 3", not modelled: the
/// folio is kept and the pass goes on).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum MemcgHierarchy {
    /// cgroup v2, the unified (default) hierarchy.
    #[default]
    V2,
    /// cgroup v1, the legacy hierarchy (`/sys/fs/cgroup/memory`).
    V1,
}

/// A memory cgroup, by its id (`mem_cgroup_id`; 1 is the root, 0 means "not charged").
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug, Hash)]
pub struct MemcgId(pub u16);

impl MemcgId {
    /// The root cgroup.
    pub const ROOT: MemcgId = MemcgId(1);
}

/// Event counters of `memory.stat`.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct MemcgEvents {
    /// `pgfault`.
    pub pgfault: u64,
    /// `pgscan`: pages isolated from the inactive lists.
    pub pgscan: u64,
    /// `pgsteal`: pages reclaimed.
    pub pgsteal: u64,
    /// `pgactivate`.
    pub pgactivate: u64,
    /// `pgdeactivate`.
    pub pgdeactivate: u64,
    /// Reclaim runs caused by charges over `memory.max` (`max` event).
    pub max: u64,
    /// Reclaim runs caused by usage over `memory.high` (`high` event).
    pub high: u64,
    /// Charges that failed after reclaim (`oom` event; we report, not kill).
    pub oom: u64,
}

/// One cgroup.
#[derive(Clone, Debug)]
pub struct MemCgroup {
    /// Its id.
    pub id: MemcgId,
    /// Parent (none for the root).
    pub parent: Option<MemcgId>,
    /// Children.
    pub children: Vec<MemcgId>,
    /// `memory.current`: pages charged here and below, including charge stocks.
    pub usage: u64,
    /// `memory.max` in pages (`u64::MAX`: "max").
    pub max: u64,
    /// `memory.high` in pages.
    pub high: u64,
    /// Per node: the LRU lists of the pages charged here.
    pub lruvecs: Vec<Lruvec>,
    /// Per node, per CPU: the LRU page deltas this CPU made (`lruvec_stats_percpu`),
    /// which Wang 2019's regression summed over every CPU to size a list.
    pub lru_percpu: Vec<Vec<[i64; NR_LRU_LISTS]>>,
    /// Per node, per CPU: mapped anonymous and file page deltas this CPU made
    /// (`memcg_vmstats_percpu` / `lruvec_stats_percpu`).
    pub mapped_percpu: Vec<Vec<[i64; 2]>>,
    /// Anonymous pages charged here (own, not hierarchical).
    pub anon: u64,
    /// Pages of the anonymous THPs charged here that a PMD maps (`NR_ANON_THPS` of the
    /// cgroup, `anon_thp` in `memory.stat`).
    pub anon_thp: u64,
    /// Swap slots recorded as this cgroup's (`swap_cgroup`): each pins the cgroup, as a
    /// reference on its id does in Linux, so a zombie whose pages were swapped out
    /// stays until those slots are freed.
    pub swap_records: u64,
    /// File pages charged here.
    pub file: u64,
    /// Events.
    pub events: MemcgEvents,
    /// Online, removed but still charged (a zombie), or freed; an id is never reused.
    pub state: MemcgState,
    /// Its per-CPU statistics' areas in the percpu allocator, one per node (none for the
    /// root, whose statistics Linux allocates at boot).
    pub percpu_areas: Vec<crate::percpu::PercpuPtr>,
}

/// Where a cgroup is in its life (`css_online`, `css_offline`, `css_free`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum MemcgState {
    /// Created and not removed: it can take tasks and charges.
    Online,
    /// Removed (`rmdir`) while pages were still charged to it, swap slots recorded for
    /// it or zombie children under it: a zombie (a "dying" or "offline" memcg). It takes
    /// no new charges; its pages stay charged to it and on its LRU lists, reclaim keeps
    /// visiting it, and its per-CPU statistics stay allocated, until the last of those
    /// goes.
    Offline,
    /// Removed with nothing charged, or a zombie whose last page went: its per-CPU
    /// statistics are freed and nothing visits it.
    Freed,
}

/// A CPU's charge stock (`memcg_stock_pcp`): pages charged ahead to one cgroup.
#[derive(Clone, Copy, Debug, Default)]
pub struct ChargeStock {
    /// The cgroup the pages are charged to.
    pub memcg: Option<MemcgId>,
    /// Pages charged and not yet used.
    pub pages: u64,
}

/// The cgroup tree.
#[derive(Clone, Debug)]
pub struct MemcgTree {
    /// Index `id.0 - 1`.
    pub(super) groups: Vec<MemCgroup>,
    /// Per CPU.
    pub(super) stocks: Vec<ChargeStock>,
}

/// A charge that could not be made: the cgroup whose limit stopped it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct OverLimit(pub MemcgId);

impl MemcgTree {
    /// A tree with only the root, for `nodes` nodes and `cpus` CPUs.
    pub fn new(nodes: usize, cpus: u32) -> MemcgTree {
        let mut tree = MemcgTree {
            groups: Vec::new(),
            stocks: alloc::vec![ChargeStock::default(); cpus as usize],
        };
        tree.push(None, nodes, cpus);
        tree
    }

    fn push(&mut self, parent: Option<MemcgId>, nodes: usize, cpus: u32) -> MemcgId {
        let id = MemcgId(u16::try_from(self.groups.len() + 1).expect("at most 65535 cgroups"));
        self.groups.push(MemCgroup {
            id,
            parent,
            children: Vec::new(),
            usage: 0,
            max: u64::MAX,
            high: u64::MAX,
            lruvecs: alloc::vec![Lruvec::default(); nodes],
            lru_percpu: alloc::vec![alloc::vec![[0; NR_LRU_LISTS]; cpus as usize]; nodes],
            mapped_percpu: alloc::vec![alloc::vec![[0; 2]; cpus as usize]; nodes],
            anon: 0,
            anon_thp: 0,
            swap_records: 0,
            file: 0,
            events: MemcgEvents::default(),
            state: MemcgState::Online,
            percpu_areas: Vec::new(),
        });
        id
    }

    /// A new child of `parent`; `None` if the parent does not exist or 65535 cgroups do.
    pub fn create(&mut self, parent: MemcgId) -> Option<MemcgId> {
        if self.groups.len() >= u16::MAX as usize - 1 || self.get(parent).is_none() {
            return None;
        }
        let nodes = self.groups[0].lruvecs.len();
        let cpus = self.stocks.len() as u32;
        let id = self.push(Some(parent), nodes, cpus);
        self.groups[parent.0 as usize - 1].children.push(id);
        Some(id)
    }

    /// The cgroup `id`, if it exists and is online.
    pub fn get(&self, id: MemcgId) -> Option<&MemCgroup> {
        let group = self.groups.get((id.0 as usize).checked_sub(1)?)?;
        (group.state == MemcgState::Online).then_some(group)
    }

    /// Where the cgroup `id` is in its life, if it was ever created.
    pub fn state(&self, id: MemcgId) -> Option<MemcgState> {
        let group = self.groups.get((id.0 as usize).checked_sub(1)?)?;
        Some(group.state)
    }

    /// Removed cgroups that still have pages charged (zombies).
    pub fn zombies(&self) -> usize {
        self.groups
            .iter()
            .filter(|g| g.state == MemcgState::Offline)
            .count()
    }

    /// Mutable access to an existing cgroup (online or not: pages may still be charged
    /// to an offline one).
    pub(super) fn group_mut(&mut self, id: MemcgId) -> &mut MemCgroup {
        &mut self.groups[id.0 as usize - 1]
    }

    pub(super) fn group(&self, id: MemcgId) -> &MemCgroup {
        &self.groups[id.0 as usize - 1]
    }

    /// Every cgroup ever created, offline ones included.
    pub fn all(&self) -> impl Iterator<Item = &MemCgroup> {
        self.groups.iter()
    }

    /// `id` and its ancestors, nearest first.
    pub fn ancestors(&self, id: MemcgId) -> impl Iterator<Item = MemcgId> + '_ {
        let mut at = Some(id);
        core::iter::from_fn(move || {
            let this = at?;
            at = self.group(this).parent;
            Some(this)
        })
    }

    /// `id` and every cgroup below it that is not freed, parents before children: what
    /// `mem_cgroup_iter` visits (it takes a reference with `css_tryget`, which an offline
    /// cgroup still gives, so zombies are visited).
    pub fn subtree(&self, id: MemcgId) -> Vec<MemcgId> {
        let mut out = alloc::vec![id];
        let mut i = 0;
        while i < out.len() {
            let children = self.group(out[i]).children.iter().copied();
            out.extend(children.filter(|&c| self.group(c).state != MemcgState::Freed));
            i += 1;
        }
        out
    }

    /// `page_counter_try_charge` up the hierarchy: all or nothing.
    pub(super) fn counter_try_charge(&mut self, id: MemcgId, pages: u64) -> Result<(), OverLimit> {
        let path: Vec<MemcgId> = self.ancestors(id).collect();
        for (i, &g) in path.iter().enumerate() {
            let group = self.group_mut(g);
            if group.usage + pages > group.max {
                for &undo in &path[..i] {
                    self.group_mut(undo).usage -= pages;
                }
                return Err(OverLimit(g));
            }
            group.usage += pages;
        }
        Ok(())
    }

    /// `page_counter_uncharge` up the hierarchy.
    pub(super) fn counter_uncharge(&mut self, id: MemcgId, pages: u64) {
        let path: Vec<MemcgId> = self.ancestors(id).collect();
        for g in path {
            let group = self.group_mut(g);
            group.usage = group
                .usage
                .checked_sub(pages)
                .expect("uncharging more than is charged");
        }
    }

    /// `consume_stock`: take `pages` from this CPU's stock if it holds enough for `id`.
    pub(super) fn consume_stock(&mut self, cpu: u32, id: MemcgId, pages: u64) -> bool {
        let stock = &mut self.stocks[cpu as usize];
        if stock.memcg == Some(id) && stock.pages >= pages {
            stock.pages -= pages;
            return true;
        }
        false
    }

    /// `refill_stock`: keep `pages` charged to `id` on this CPU, giving back a stock of
    /// another cgroup first (`drain_stock`).
    pub(super) fn refill_stock(&mut self, cpu: u32, id: MemcgId, pages: u64) {
        if pages == 0 {
            return;
        }
        let stock = self.stocks[cpu as usize];
        if stock.memcg != Some(id) {
            self.drain_stock(cpu);
            self.stocks[cpu as usize].memcg = Some(id);
        }
        self.stocks[cpu as usize].pages += pages;
        if self.stocks[cpu as usize].pages > MEMCG_CHARGE_BATCH {
            self.drain_stock(cpu);
        }
    }

    /// `drain_stock`: uncharge what this CPU's stock holds.
    pub fn drain_stock(&mut self, cpu: u32) {
        let stock = core::mem::take(&mut self.stocks[cpu as usize]);
        if let (Some(id), pages) = (stock.memcg, stock.pages) {
            if pages != 0 {
                self.counter_uncharge(id, pages);
            }
        }
    }

    /// Stock pages charged to `id` itself, over all CPUs.
    pub fn stock_pages(&self, id: MemcgId) -> u64 {
        self.stocks
            .iter()
            .filter(|s| s.memcg == Some(id))
            .map(|s| s.pages)
            .sum()
    }

    /// Record an LRU change of `pages` on `lru` by `cpu` in the per-CPU counters.
    pub(super) fn count_lru(
        &mut self,
        id: MemcgId,
        node: usize,
        cpu: u32,
        lru: LruList,
        pages: i64,
    ) {
        self.group_mut(id).lru_percpu[node][cpu as usize][lru as usize] += pages;
    }

    /// Record a change of mapped pages by `cpu` (`__mod_memcg_lruvec_state`).
    pub(super) fn mod_mapped(
        &mut self,
        id: MemcgId,
        node: usize,
        cpu: u32,
        item: MappedStat,
        pages: i64,
    ) {
        self.group_mut(id).mapped_percpu[node][cpu as usize][item as usize] += pages;
    }

    /// Mapped pages of `item` charged to `id` itself: the sum over nodes and CPUs.
    pub fn mapped(&self, id: MemcgId, item: MappedStat) -> i64 {
        self.group(id)
            .mapped_percpu
            .iter()
            .flatten()
            .map(|c| c[item as usize])
            .sum()
    }

    /// `memory.stat` of `id` in Linux's format (sizes in bytes, events as counts),
    /// hierarchical like cgroup v2's.
    pub fn memory_stat(&self, id: MemcgId) -> Option<String> {
        self.get(id)?;
        let groups = self.subtree(id);
        let sum = |f: &dyn Fn(&MemCgroup) -> u64| -> u64 {
            groups.iter().map(|&g| f(self.group(g))).sum()
        };
        let bytes = |pages: u64| pages * PAGE_SIZE as u64;
        let mut out = String::new();
        out += &format!("anon {}\n", bytes(sum(&|g| g.anon)));
        out += &format!("file {}\n", bytes(sum(&|g| g.file)));
        let mapped = |item| -> u64 {
            groups
                .iter()
                .map(|&g| self.mapped(g, item))
                .sum::<i64>()
                .max(0) as u64
        };
        out += &format!("file_mapped {}\n", bytes(mapped(MappedStat::File)));
        out += &format!("anon_thp {}\n", bytes(sum(&|g| g.anon_thp)));
        for lru in LruList::ALL {
            let pages = sum(&|g| g.lruvecs.iter().map(|v| v.pages(lru)).sum());
            out += &format!("{} {}\n", lru.stat_name(), bytes(pages));
        }
        out += &format!("pgfault {}\n", sum(&|g| g.events.pgfault));
        out += &format!("pgscan {}\n", sum(&|g| g.events.pgscan));
        out += &format!("pgsteal {}\n", sum(&|g| g.events.pgsteal));
        out += &format!("pgactivate {}\n", sum(&|g| g.events.pgactivate));
        out += &format!("pgdeactivate {}\n", sum(&|g| g.events.pgdeactivate));
        Some(out)
    }
}
