//! The pcp-script format: one per-CPU operation per line, in Linux's vocabulary.
//!
//! ```text
//! # a comment; blank lines are ignored
//! alloc 400 x 0 movable as pages   # 400 order-0 blocks, labelled "pages"
//! cpu1: free pages                 # cpu1 frees them: the remote-free case
//! cpu2 softirq: alloc 0            # a request from softirq context on cpu2
//! cpu1 worker: drain all           # drain_all_pages from a workqueue worker on cpu1
//! ```
//!
//! `docs/PCP-SCRIPT.md` documents every operation. Parsing checks everything that does not
//! depend on the machine (numbers, orders, names freed before they are defined); the
//! command then checks CPUs and zones against the machine before running anything.
//! Nothing here calls the allocator. The operation names are Linux's (`alloc_pages`,
//! `free_pages`, `drain_all_pages`, `zone_pcp_disable`, the `vm.*` sysctls); the format
//! itself is mmkit's.

use std::collections::HashSet;

use mmkit_core::page::MAX_ORDER;
use mmkit_core::page_alloc::MigrateType;
use mmkit_core::page_alloc::{Context, CpuId, ZoneFlags, ZoneId};
use mmkit_core::settings::MinFreeKbytes;
use mmkit_core::{Order, ZoneType};

/// A parsed script.
#[derive(Debug, PartialEq)]
pub struct Script {
    /// The operations, in file order.
    pub lines: Vec<Line>,
}

/// One operation and where it came from.
#[derive(Debug, PartialEq)]
pub struct Line {
    /// Line number in the file, from 1.
    pub number: usize,
    /// The operation as written, without the CPU prefix and the comment.
    pub text: String,
    /// The CPU that runs it (`cpuN:`, default 0).
    pub cpu: CpuId,
    /// Task or interrupt context (`softirq:`, `hardirq:`, default task).
    pub context: Context,
    /// The task is a workqueue worker (`worker:`, Linux's `PF_WQ_WORKER`); only
    /// `drain all` reads it.
    pub worker: bool,
    /// What to do.
    pub op: Op,
}

/// An operation.
#[derive(Debug, PartialEq)]
pub enum Op {
    /// `alloc [N x] ORDER [MIGRATETYPE] [as NAME] [later]`: `alloc_pages`, `count` times.
    Alloc {
        /// Blocks to allocate, one call each.
        count: u64,
        /// Their order.
        order: Order,
        /// Their migratetype (selects the GFP flags).
        migratetype: MigrateType,
        /// The label for later frees.
        name: Option<String>,
        /// Workqueue mode: when the slow path's drain queues work, the allocation waits
        /// for `run-work` lines instead of the work running at once.
        later: bool,
    },
    /// `free NAME...|N x [NAME]|all`: `free_pages`, block by block.
    Free(Target),
    /// `free-batch NAME...|N x [NAME]|all`: one `free_pages_batch` call (order 0 only).
    FreeBatch(Target),
    /// `bulk N [MIGRATETYPE] [as NAME]`: one `alloc_pages_bulk_list` call.
    Bulk {
        /// Pages asked for.
        count: usize,
        /// Their migratetype.
        migratetype: MigrateType,
        /// The label for later frees.
        name: Option<String>,
    },
    /// `tick [N|TIME]`: `vmstat_tick` on this CPU, `N` times or once per `stat_interval`
    /// of `TIME`.
    Tick(Repeat),
    /// `tick-all [N|TIME]`: `vmstat_tick` on every online CPU, in rounds.
    TickAll(Repeat),
    /// `drain local [ZONE]`: `drain_local_pages` on this CPU.
    DrainLocal(Option<ZoneId>),
    /// `drain all [ZONE] [later]`, `drain zone ZONE [later]`: `drain_all_pages`.
    DrainAll {
        /// The zone asked for, or every zone.
        zone: Option<ZoneId>,
        /// Workqueue mode: leave the queued work for `run-work` lines instead of running
        /// it at once; the caller waits until the last target CPU has run it.
        later: bool,
    },
    /// `run-work`: this CPU's workqueue worker runs its queued drain work
    /// (`drain_local_pages_wq`).
    RunWork,
    /// `offline`: `cpu_down` of this CPU.
    Offline,
    /// `online`: `cpu_up` of this CPU.
    Online,
    /// `pcp-disable ZONE`: `zone_pcp_disable`.
    PcpDisable(ZoneId),
    /// `pcp-enable ZONE`: `zone_pcp_enable`.
    PcpEnable(ZoneId),
    /// `set KEY=VALUE`: `set_settings` with one sysctl changed.
    Set(Setting),
    /// `flag ZONE +below_high -reclaim_active ...`: `set_flag` / `clear_flag`.
    Flag {
        /// The zone.
        zone: ZoneId,
        /// Each flag with true to set it, false to clear it.
        changes: Vec<(ZoneFlags, bool)>,
    },
}

/// How many vmstat ticks a `tick` line runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Repeat {
    /// This many.
    Times(u64),
    /// One per whole `vm.stat_interval` in this many milliseconds.
    For {
        /// The span of time, in ms.
        ms: u64,
    },
}

/// Which blocks a free names.
#[derive(Debug, PartialEq)]
pub enum Target {
    /// Every block labelled with one of these names.
    Names(Vec<String>),
    /// The last `count` blocks allocated and still held (of `name` only, if given).
    Last {
        /// How many.
        count: usize,
        /// Only blocks with this label.
        name: Option<String>,
    },
    /// Every block still held.
    All,
}

/// A sysctl change.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Setting {
    /// `vm.min_free_kbytes`.
    MinFreeKbytes(MinFreeKbytes),
    /// `vm.watermark_scale_factor`.
    WatermarkScaleFactor(u32),
    /// `vm.watermark_boost_factor`.
    WatermarkBoostFactor(u32),
    /// `vm.percpu_pagelist_high_fraction`.
    PercpuPagelistHighFraction(u32),
}

/// What is wrong with one line.
#[derive(Debug, PartialEq)]
pub struct ParseError {
    /// Line number, from 1.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

/// The operation names, for "unknown operation" messages.
const OPERATIONS: &str =
    "alloc, free, free-batch, bulk, tick, tick-all, drain, run-work, offline, \
                          online, pcp-disable, pcp-enable, set, flag";

/// Parse a whole script. Every bad line is reported, in order.
pub fn parse(text: &str) -> Result<Script, Vec<ParseError>> {
    let mut lines = Vec::new();
    let mut errors = Vec::new();
    let mut names = HashSet::new();
    for (index, raw) in text.lines().enumerate() {
        let number = index + 1;
        match parse_line(raw, &mut names) {
            Ok(Some((prefix, text, op))) => lines.push(Line {
                number,
                text,
                cpu: prefix.cpu,
                context: prefix.context,
                worker: prefix.worker,
                op,
            }),
            Ok(None) => {}
            Err(message) => errors.push(ParseError {
                line: number,
                message,
            }),
        }
    }
    if errors.is_empty() {
        Ok(Script { lines })
    } else {
        Err(errors)
    }
}

type Parsed = (Prefix, String, Op);

/// What a line's prefix says about who runs it.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Prefix {
    cpu: CpuId,
    context: Context,
    worker: bool,
}

impl Prefix {
    const DEFAULT: Prefix = Prefix {
        cpu: 0,
        context: Context::Task,
        worker: false,
    };
}

/// One line: `None` for blanks and comments. `names` holds the labels defined so far.
fn parse_line(raw: &str, names: &mut HashSet<String>) -> Result<Option<Parsed>, String> {
    let code = raw.split('#').next().unwrap_or("").trim();
    if code.is_empty() {
        return Ok(None);
    }
    let (prefix, body) = split_prefix(code)?;
    let words: Vec<&str> = body.split_whitespace().collect();
    let Some((&name, args)) = words.split_first() else {
        return Err("a CPU prefix needs an operation after it".into());
    };
    let op = parse_op(name, args)?;
    check_names(&op, names)?;
    Ok(Some((prefix, words.join(" "), op)))
}

/// `cpuN:`, `softirq:`, `cpuN hardirq:`, `cpuN worker:` and so on: the words before the
/// first colon, if they are all CPU or context words. `worker` is task context.
fn split_prefix(code: &str) -> Result<(Prefix, &str), String> {
    let bad_prefix = |word: &str| {
        format!(
            "bad prefix {word:?}: write cpuN, optionally with task, worker, softirq or \
             hardirq, then ':'"
        )
    };
    let Some((head, body)) = code.split_once(':') else {
        if code.starts_with("cpu") {
            return Err(bad_prefix(code.split_whitespace().next().unwrap_or(code)));
        }
        return Ok((Prefix::DEFAULT, code));
    };
    let words: Vec<&str> = head.split_whitespace().collect();
    let is_prefix = !words.is_empty()
        && words
            .iter()
            .all(|w| w.starts_with("cpu") || context(w).is_some());
    if !is_prefix {
        return Ok((Prefix::DEFAULT, code));
    }
    let (mut cpu, mut ctx) = (None, None);
    for word in words {
        if let Some(c) = context(word) {
            if ctx.replace(c).is_some() {
                return Err(bad_prefix(head));
            }
        } else {
            let number = word["cpu".len()..].parse().map_err(|_| bad_prefix(word))?;
            if cpu.replace(number).is_some() {
                return Err(bad_prefix(head));
            }
        }
    }
    let (context, worker) = ctx.unwrap_or((Context::Task, false));
    let prefix = Prefix {
        cpu: cpu.unwrap_or(0),
        context,
        worker,
    };
    Ok((prefix, body.trim()))
}

/// A context word: the context, and whether the task is a workqueue worker.
fn context(word: &str) -> Option<(Context, bool)> {
    match word {
        "task" => Some((Context::Task, false)),
        "worker" => Some((Context::Task, true)),
        "softirq" => Some((Context::SoftIrq, false)),
        "hardirq" => Some((Context::HardIrq, false)),
        _ => None,
    }
}

fn parse_op(name: &str, args: &[&str]) -> Result<Op, String> {
    match name {
        "alloc" => parse_alloc(args),
        "free" => parse_target(args).map(Op::Free),
        "free-batch" => parse_target(args).map(Op::FreeBatch),
        "bulk" => parse_bulk(args),
        "tick" => optional_repeat(args).map(Op::Tick),
        "tick-all" => optional_repeat(args).map(Op::TickAll),
        "drain" => parse_drain(args),
        "run-work" => no_args(args, Op::RunWork),
        "offline" => no_args(args, Op::Offline),
        "online" => no_args(args, Op::Online),
        "pcp-disable" => one_zone(args).map(Op::PcpDisable),
        "pcp-enable" => one_zone(args).map(Op::PcpEnable),
        "set" => parse_set(args).map(Op::Set),
        "flag" => parse_flag(args),
        other => Err(format!(
            "unknown operation {other:?}: use one of {OPERATIONS}"
        )),
    }
}

/// `[N x] ORDER [MIGRATETYPE] [as NAME] [later]`.
fn parse_alloc(args: &[&str]) -> Result<Op, String> {
    let (args, later) = match args.split_last() {
        Some((&"later", rest)) => (rest, true),
        _ => (args, false),
    };
    let (count, rest) = match args {
        [n, "x", rest @ ..] => (count(n)?, rest),
        rest => (1, rest),
    };
    let Some((order_word, rest)) = rest.split_first() else {
        return Err(
            "alloc needs an order: alloc [N x] ORDER [MIGRATETYPE] [as NAME] [later]".into(),
        );
    };
    let order = order(order_word)?;
    let (migratetype, name) = migratetype_and_name(rest)?;
    Ok(Op::Alloc {
        count,
        order,
        migratetype,
        name,
        later,
    })
}

/// `N [MIGRATETYPE] [as NAME]`.
fn parse_bulk(args: &[&str]) -> Result<Op, String> {
    let Some((n, rest)) = args.split_first() else {
        return Err("bulk needs a page count: bulk N [MIGRATETYPE] [as NAME]".into());
    };
    let count = usize::try_from(count(n)?).map_err(|_| format!("{n:?} is too large"))?;
    let (migratetype, name) = migratetype_and_name(rest)?;
    Ok(Op::Bulk {
        count,
        migratetype,
        name,
    })
}

/// `[MIGRATETYPE] [as NAME]`; the migratetype defaults to movable.
fn migratetype_and_name(args: &[&str]) -> Result<(MigrateType, Option<String>), String> {
    let (migratetype, rest) = match args.split_first() {
        Some((word, rest)) if *word != "as" => (migratetype(word)?, rest),
        _ => (MigrateType::Movable, args),
    };
    let name = match rest {
        [] => None,
        ["as", name] => Some(label(name)?),
        ["as"] => return Err("`as` needs a name".into()),
        [extra, ..] => {
            return Err(format!(
                "unexpected {extra:?}: expected `as NAME` or the end"
            ))
        }
    };
    Ok((migratetype, name))
}

fn migratetype(word: &str) -> Result<MigrateType, String> {
    match word {
        "unmovable" => Ok(MigrateType::Unmovable),
        "movable" => Ok(MigrateType::Movable),
        "reclaimable" => Ok(MigrateType::Reclaimable),
        other => Err(format!(
            "unknown migratetype {other:?}: use unmovable, movable or reclaimable"
        )),
    }
}

/// `NAME...`, `N x [NAME]` or `all`.
fn parse_target(args: &[&str]) -> Result<Target, String> {
    match args {
        [] => Err("free needs NAME..., N x [NAME] or all".into()),
        ["all"] => Ok(Target::All),
        [n, "x"] => Ok(Target::Last {
            count: usize::try_from(count(n)?).map_err(|_| format!("{n:?} is too large"))?,
            name: None,
        }),
        [n, "x", name] => Ok(Target::Last {
            count: usize::try_from(count(n)?).map_err(|_| format!("{n:?} is too large"))?,
            name: Some(label(name)?),
        }),
        names => names
            .iter()
            .map(|name| label(name))
            .collect::<Result<_, _>>()
            .map(Target::Names),
    }
}

/// Nothing (once), a count, or a time (`3s`, `2500ms`).
fn optional_repeat(args: &[&str]) -> Result<Repeat, String> {
    match args {
        [] => Ok(Repeat::Times(1)),
        [word] => match time_ms(word) {
            Some(ms) => ms.map(|ms| Repeat::For { ms }),
            None => count(word).map(Repeat::Times),
        },
        [_, extra, ..] => Err(format!(
            "unexpected {extra:?}: expected at most a count or a time (3s, 2500ms)"
        )),
    }
}

/// `Ns` or `Nms` in milliseconds; `None` if the word has neither unit.
fn time_ms(word: &str) -> Option<Result<u64, String>> {
    let (number, ms_per_unit) = match word.strip_suffix("ms") {
        Some(number) => (number, 1),
        None => (word.strip_suffix('s')?, 1000),
    };
    let ms = number
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(ms_per_unit));
    Some(match ms {
        Some(0) => Err(format!("{word:?}: a time must be at least 1ms")),
        Some(ms) => Ok(ms),
        None => Err(format!("bad time {word:?}: write e.g. 3s or 2500ms")),
    })
}

/// `local [ZONE]`, `all [ZONE] [later]`, `zone ZONE [later]`.
fn parse_drain(args: &[&str]) -> Result<Op, String> {
    let (args, later) = match args.split_last() {
        Some((&"later", rest)) => (rest, true),
        _ => (args, false),
    };
    let drain_all = |zone| Ok(Op::DrainAll { zone, later });
    match args {
        ["local"] if !later => Ok(Op::DrainLocal(None)),
        ["local", zone] if !later => Ok(Op::DrainLocal(Some(zone_id(zone)?))),
        ["local", ..] => {
            Err("`later` is for drain all and drain zone: a local drain queues no work".into())
        }
        ["all"] => drain_all(None),
        ["all", zone] | ["zone", zone] => drain_all(Some(zone_id(zone)?)),
        _ => Err("drain takes local [ZONE], all [ZONE] [later] or zone ZONE [later]".into()),
    }
}

fn no_args(args: &[&str], op: Op) -> Result<Op, String> {
    match args.first() {
        None => Ok(op),
        Some(extra) => Err(format!(
            "unexpected {extra:?}: this operation takes no arguments"
        )),
    }
}

fn one_zone(args: &[&str]) -> Result<ZoneId, String> {
    match args {
        [zone] => zone_id(zone),
        _ => Err("expected one zone, e.g. Normal or 1:DMA32".into()),
    }
}

/// `KEY=VALUE` (spaces around `=` allowed).
fn parse_set(args: &[&str]) -> Result<Setting, String> {
    let joined = args.concat();
    let (key, value) = joined
        .split_once('=')
        .ok_or("set takes KEY=VALUE, e.g. set percpu_pagelist_high_fraction=8")?;
    let number = || -> Result<u32, String> {
        value
            .parse()
            .map_err(|_| format!("bad number {value:?} for {key}"))
    };
    match key {
        "min_free_kbytes" if value == "default" => {
            Ok(Setting::MinFreeKbytes(MinFreeKbytes::Default))
        }
        "min_free_kbytes" => value
            .parse()
            .map(|kbytes| Setting::MinFreeKbytes(MinFreeKbytes::Explicit(kbytes)))
            .map_err(|_| format!("bad number {value:?} for {key}")),
        "watermark_scale_factor" => number().map(Setting::WatermarkScaleFactor),
        "watermark_boost_factor" => number().map(Setting::WatermarkBoostFactor),
        "percpu_pagelist_high_fraction" => number().map(Setting::PercpuPagelistHighFraction),
        other => Err(format!(
            "unknown setting {other:?}: use min_free_kbytes, watermark_scale_factor, \
             watermark_boost_factor or percpu_pagelist_high_fraction"
        )),
    }
}

/// `ZONE (+|-)FLAG...`.
fn parse_flag(args: &[&str]) -> Result<Op, String> {
    let Some((zone, changes)) = args.split_first() else {
        return Err(
            "flag takes ZONE +below_high|-below_high|+reclaim_active|-reclaim_active".into(),
        );
    };
    if changes.is_empty() {
        return Err("flag needs at least one +FLAG or -FLAG".into());
    }
    let changes = changes
        .iter()
        .map(|word| {
            let (set, name) = match word.split_at_checked(1) {
                Some(("+", name)) => (true, name),
                Some(("-", name)) => (false, name),
                _ => return Err(format!("{word:?}: write +FLAG to set or -FLAG to clear")),
            };
            let flag = match name {
                "below_high" => ZoneFlags::BELOW_HIGH,
                "reclaim_active" => ZoneFlags::RECLAIM_ACTIVE,
                other => {
                    return Err(format!(
                        "unknown zone flag {other:?}: use below_high or reclaim_active"
                    ))
                }
            };
            Ok((flag, set))
        })
        .collect::<Result<_, _>>()?;
    Ok(Op::Flag {
        zone: zone_id(zone)?,
        changes,
    })
}

/// A repeat count: a positive number.
fn count(word: &str) -> Result<u64, String> {
    match word.parse::<u64>() {
        Ok(0) => Err("a count must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("bad number {word:?}")),
    }
}

fn order(word: &str) -> Result<Order, String> {
    let n: u8 = word
        .parse()
        .map_err(|_| format!("bad order {word:?}: a number 0..={MAX_ORDER}"))?;
    Order::new(n).ok_or_else(|| format!("order {n} is above MAX_ORDER ({MAX_ORDER})"))
}

/// `[NODE:]NAME`, e.g. `Normal`, `1:DMA32`.
fn zone_id(word: &str) -> Result<ZoneId, String> {
    let (node, name) = match word.split_once(':') {
        Some((node, name)) => (
            node.parse()
                .map_err(|_| format!("bad node {node:?} in zone {word:?}"))?,
            name,
        ),
        None => (0, word),
    };
    let zone_type = ZoneType::from_name(name).ok_or_else(|| {
        format!("unknown zone {name:?}: use DMA, DMA32, Normal or Movable, optionally NODE:")
    })?;
    Ok(ZoneId { node, zone_type })
}

/// A label: a letter or `_`, then letters, digits, `_` or `-`; not a reserved word.
fn label(word: &str) -> Result<String, String> {
    let mut chars = word.chars();
    let starts_well = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !starts_well || !rest_ok {
        return Err(format!(
            "bad name {word:?}: start with a letter, then letters, digits, _ or -"
        ));
    }
    if matches!(word, "all" | "x" | "as") {
        return Err(format!("{word:?} is a keyword, not a name"));
    }
    Ok(word.to_owned())
}

/// Names must be defined (`as NAME`) on an earlier line than any free that uses them.
fn check_names(op: &Op, names: &mut HashSet<String>) -> Result<(), String> {
    let used: Vec<&String> = match op {
        Op::Free(Target::Names(list)) | Op::FreeBatch(Target::Names(list)) => list.iter().collect(),
        Op::Free(Target::Last {
            name: Some(name), ..
        })
        | Op::FreeBatch(Target::Last {
            name: Some(name), ..
        }) => vec![name],
        _ => vec![],
    };
    if let Some(unknown) = used.into_iter().find(|name| !names.contains(*name)) {
        return Err(format!(
            "unknown name {unknown:?}: no earlier line allocates `as {unknown}`"
        ));
    }
    if let Op::Alloc {
        name: Some(name), ..
    }
    | Op::Bulk {
        name: Some(name), ..
    } = op
    {
        names.insert(name.clone());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(text: &str) -> Line {
        let mut script = parse(text).unwrap_or_else(|e| panic!("{text:?}: {e:?}"));
        assert_eq!(script.lines.len(), 1);
        script.lines.remove(0)
    }

    fn error(text: &str) -> ParseError {
        let errors = parse(text).unwrap_err();
        assert_eq!(errors.len(), 1, "{errors:?}");
        errors.into_iter().next().unwrap()
    }

    #[test]
    fn alloc_takes_repeat_migratetype_and_name() {
        let line = one("cpu3: alloc 400 x 1 unmovable as pgd  # comment");
        assert_eq!((line.number, line.cpu, line.context), (1, 3, Context::Task));
        assert_eq!(line.text, "alloc 400 x 1 unmovable as pgd");
        assert_eq!(
            line.op,
            Op::Alloc {
                count: 400,
                order: Order::new(1).unwrap(),
                migratetype: MigrateType::Unmovable,
                name: Some("pgd".into()),
                later: false,
            }
        );
        let plain = one("alloc 0");
        assert_eq!(
            plain.op,
            Op::Alloc {
                count: 1,
                order: Order::ZERO,
                migratetype: MigrateType::Movable,
                name: None,
                later: false,
            }
        );
        let waits = one("alloc 2 x 0 as a later");
        assert!(
            matches!(waits.op, Op::Alloc { count: 2, later: true, ref name, .. } if name.as_deref() == Some("a")),
            "{:?}",
            waits.op
        );
    }

    #[test]
    fn prefix_names_cpu_and_context() {
        let line = one("cpu2 softirq: alloc 0");
        assert_eq!((line.cpu, line.context), (2, Context::SoftIrq));
        let irq = one("hardirq: tick");
        assert_eq!((irq.cpu, irq.context), (0, Context::HardIrq));
        let worker = one("cpu1 worker: drain all");
        assert_eq!(
            (worker.cpu, worker.context, worker.worker),
            (1, Context::Task, true)
        );
        assert!(!one("cpu1 task: drain all").worker);
        assert!(error("worker softirq: tick").message.contains("bad prefix"));
        assert!(error("cpuX: tick").message.contains("bad prefix"));
        assert!(error("cpu1 tick").message.contains("bad prefix"));
    }

    #[test]
    fn free_targets_names_counts_and_all() {
        let script =
            parse("alloc 0 as a\nalloc 0 as b\nfree a b\nfree 3 x\nfree 2 x a\nfree all").unwrap();
        let ops: Vec<&Op> = script.lines.iter().map(|l| &l.op).collect();
        assert_eq!(
            ops[2],
            &Op::Free(Target::Names(vec!["a".into(), "b".into()]))
        );
        assert_eq!(
            ops[3],
            &Op::Free(Target::Last {
                count: 3,
                name: None
            })
        );
        assert_eq!(
            ops[4],
            &Op::Free(Target::Last {
                count: 2,
                name: Some("a".into())
            })
        );
        assert_eq!(ops[5], &Op::Free(Target::All));
    }

    #[test]
    fn unknown_name_is_an_error_on_its_line() {
        let err = error("alloc 0 as a\n\n# gap\nfree b");
        assert_eq!(err.line, 4);
        assert!(err.message.contains("unknown name \"b\""));
        let later = error("free a\nalloc 0 as a");
        assert_eq!(later.line, 1);
    }

    #[test]
    fn every_bad_line_is_reported() {
        let errors =
            parse("alocc 0\nalloc 11\nalloc x x 0\ntick 0\nset foo=1\nflag Normal below_high")
                .unwrap_err();
        let lines: Vec<usize> = errors.iter().map(|e| e.line).collect();
        assert_eq!(lines, [1, 2, 3, 4, 5, 6]);
        assert!(errors[0].message.contains("unknown operation"));
        assert!(errors[1].message.contains("MAX_ORDER"));
        assert!(errors[2].message.contains("bad number"));
    }

    #[test]
    fn drains_settings_flags_and_zones() {
        assert_eq!(one("drain local").op, Op::DrainLocal(None));
        let dma32 = ZoneId {
            node: 1,
            zone_type: ZoneType::Dma32,
        };
        assert_eq!(
            one("drain zone 1:DMA32").op,
            Op::DrainAll {
                zone: Some(dma32),
                later: false
            }
        );
        assert_eq!(
            one("drain all later").op,
            Op::DrainAll {
                zone: None,
                later: true
            }
        );
        assert_eq!(
            one("drain all 1:DMA32 later").op,
            Op::DrainAll {
                zone: Some(dma32),
                later: true
            }
        );
        assert!(error("drain local later")
            .message
            .contains("queues no work"));
        assert_eq!(one("cpu1: run-work").op, Op::RunWork);
        assert_eq!(
            one("set percpu_pagelist_high_fraction = 8").op,
            Op::Set(Setting::PercpuPagelistHighFraction(8))
        );
        assert_eq!(
            one("set min_free_kbytes=default").op,
            Op::Set(Setting::MinFreeKbytes(MinFreeKbytes::Default))
        );
        let normal = ZoneId {
            node: 0,
            zone_type: ZoneType::Normal,
        };
        assert_eq!(
            one("flag Normal +below_high -reclaim_active").op,
            Op::Flag {
                zone: normal,
                changes: vec![
                    (ZoneFlags::BELOW_HIGH, true),
                    (ZoneFlags::RECLAIM_ACTIVE, false)
                ]
            }
        );
        assert_eq!(one("tick-all 3").op, Op::TickAll(Repeat::Times(3)));
        assert_eq!(one("tick 3s").op, Op::Tick(Repeat::For { ms: 3000 }));
        assert_eq!(one("tick 250ms").op, Op::Tick(Repeat::For { ms: 250 }));
        assert!(error("tick 0ms").message.contains("at least 1ms"));
        assert!(error("tick 1.5s").message.contains("bad time"));
        assert_eq!(one("pcp-disable normal").op, Op::PcpDisable(normal));
    }
}
