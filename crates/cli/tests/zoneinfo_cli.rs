//! `mmkit zoneinfo` end to end: the values a live Linux 6.18 kernel printed, the JSON form,
//! the error exits, and the comparison with a recorded and (where present) live kernel.

use crate::common;

use common::{mmkit, stdout_of};
use mmkit_core::views::zoneinfo::{self, ZoneInfo};
use mmkit_core::ZoneType;
use predicates::prelude::*;

/// The machine of the issue, under the preset of the kernel it was compared with.
const ISSUE_EXAMPLE: [&str; 12] = [
    "zoneinfo",
    "--policy",
    "linux-6.18",
    "--zone",
    "DMA=3840",
    "--zone",
    "DMA32=772915",
    "--zone",
    "Normal=196608",
    "--cpus",
    "2",
    "--min-free-kbytes=67584",
];

fn zones_of(args: &[&str]) -> Vec<ZoneInfo> {
    zoneinfo::parse(&String::from_utf8(stdout_of(mmkit().args(args))).unwrap()).unwrap()
}

#[test]
fn prints_what_linux_6_18_printed_for_the_same_machine() {
    let zones = zones_of(&ISSUE_EXAMPLE);
    let expect = [
        (ZoneType::Dma, (66, 82, 98, 114), 1, 41, 240),
        (
            ZoneType::Dma32,
            (13416, 16770, 20124, 23478),
            63,
            8385,
            48307,
        ),
        (ZoneType::Normal, (3412, 4265, 5118, 5971), 63, 2132, 12288),
    ];
    for (zone_type, marks, batch, high_min, high_max) in expect {
        let zone = zones.iter().find(|z| z.zone == zone_type).unwrap();
        assert_eq!(
            (zone.min, zone.low, zone.high, zone.promo),
            marks,
            "{zone_type}"
        );
        assert_eq!(zone.pagesets.len(), 2);
        for pcp in &zone.pagesets {
            assert_eq!(
                (pcp.batch, pcp.high_min, pcp.high_max),
                (batch, high_min, high_max)
            );
            assert_eq!(
                (pcp.count, pcp.high),
                (0, 0),
                "a fresh pageset is empty and unused"
            );
        }
    }
    let dma = &zones[0];
    assert_eq!(dma.protection, [0, 3019, 3787, 3787]);
    let movable = zones.iter().find(|z| z.zone == ZoneType::Movable).unwrap();
    assert_eq!((movable.min, movable.present), (32, 0));
}

#[test]
fn text_layout_matches_linux_line_for_line() {
    let output = mmkit().args(ISSUE_EXAMPLE).output().unwrap();
    let text = String::from_utf8(output.stdout).unwrap();
    let expected_head = "\
Node 0, zone      DMA
  pages free     3840
        boost    0
        min      66
        low      82
        high     98
        promo    114
        spanned  3840
        present  3840
        managed  3840
        cma      0
        protection: (0, 3019, 3787, 3787)
      nr_free_pages 3840
  pagesets
    cpu: 0
              count:    0
              high:     0
              batch:    1
              high_min: 41
              high_max: 240
  vm stats threshold: 4
";
    assert!(text.starts_with(expected_head), "{text}");
    assert!(text.contains("Node 0, zone  Movable\n  pages free     0\n"));
    assert!(text.contains("  node_unreclaimable:  0\n  start_pfn:           4096\n"));
}

#[test]
fn json_carries_the_same_numbers() {
    let output = mmkit().args(ISSUE_EXAMPLE).arg("--json").output().unwrap();
    assert!(output.status.success());
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["min_free_kbytes"], 67584);
    let dma32 = &report["zones"][1];
    assert_eq!(dma32["zone"], "Dma32");
    assert_eq!(dma32["low"], 16770);
    assert_eq!(dma32["pagesets"][1]["high_max"], 48307);
    assert_eq!(dma32["pagesets"][1]["free_high_batch"], true);
}

#[test]
fn default_min_free_kbytes_follows_the_thp_rule() {
    let mut args = ISSUE_EXAMPLE.to_vec();
    args.pop();
    let output = mmkit().args(&args).arg("--json").output().unwrap();
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    // 512 × 3 zones × (2 + 9) pages = 16896 pages = 67584 KiB.
    assert_eq!(report["min_free_kbytes"], 67584);
    let output = mmkit()
        .args(&args)
        .args(["--no-thp", "--json"])
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    // isqrt(973363 pages × 4 KiB × 16) = 7892.
    assert_eq!(report["min_free_kbytes"], 7892);
}

#[test]
fn fraction_fixes_high_per_cpu() {
    // linux-6.18: the text has the high_min and high_max lines.
    let zones = zones_of(&[
        "zoneinfo",
        "--policy",
        "linux-6.18",
        "--zone",
        "Normal=196608",
        "--cpus",
        "2",
        "--percpu-pagelist-high-fraction",
        "8",
    ]);
    let normal = zones.iter().find(|z| z.zone == ZoneType::Normal).unwrap();
    let pcp = &normal.pagesets[0];
    assert_eq!((pcp.high_min, pcp.high_max), (12288, 12288));
}

fn assert_rejected(args: &[&str], message: &str) {
    mmkit().args(args).assert().code(2).stdout("").stderr(
        predicate::str::contains(message)
            .and(predicate::function(|s: &str| s.lines().count() == 1)),
    );
}

#[test]
fn invalid_settings_get_one_line_and_status_2() {
    for fraction in ["1", "7"] {
        assert_rejected(
            &[
                "zoneinfo",
                "--zone",
                "Normal=1000",
                "--percpu-pagelist-high-fraction",
                fraction,
            ],
            "percpu_pagelist_high_fraction",
        );
    }
    assert_rejected(&["zoneinfo", "--zone", "Normal=-5"], "negative");
    assert_rejected(
        &[
            "zoneinfo",
            "--zone",
            "Normal=1000",
            "--min-free-kbytes",
            "-1",
        ],
        "negative",
    );
    assert_rejected(&["zoneinfo"], "no zones");
    assert_rejected(
        &[
            "zoneinfo",
            "--zone",
            "Normal=1000",
            "--watermark-scale-factor",
            "0",
        ],
        "watermark_scale_factor",
    );
    assert_rejected(
        &["zoneinfo", "--zone", "Normal=10", "--zone", "DMA=10"],
        "out of order",
    );
    assert_rejected(&["zoneinfo", "--zone", "DMA=5000"], "does not fit");
    assert_rejected(
        &["zoneinfo", "--zone", "Normal=10", "--cpus", "0"],
        "no CPUs",
    );
}

#[test]
fn recorded_linux_6_18_snapshot_matches_every_value() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/linux-6.18-2cpu");
    mmkit()
        .args(["zoneinfo", "--live", "--root", root])
        .assert()
        .success()
        .stdout(predicate::str::contains("compared 67 values: 0 differ"));
}

#[test]
fn this_machine_matches_when_it_runs_linux_6_7_or_later() {
    let Ok(text) = std::fs::read_to_string("/proc/zoneinfo") else {
        eprintln!("skipped: no /proc/zoneinfo on this machine");
        return;
    };
    if !text.contains("high_min:") {
        eprintln!("skipped: this kernel predates v6.7 (no high_min in /proc/zoneinfo)");
        return;
    }
    mmkit()
        .args(["zoneinfo", "--live"])
        .assert()
        .success()
        .stdout(predicate::str::contains(" 0 differ"));
}

#[test]
fn pcp_knobs_are_settings_and_out_of_range_values_are_refused() {
    let output = mmkit()
        .args(ISSUE_EXAMPLE)
        .args([
            "--json",
            "--pcp-batch-scale-max",
            "0",
            "--stat-interval",
            "2s",
        ])
        .output()
        .unwrap();
    assert!(output.status.success());
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["settings"]["pcp_batch_scale_max"], 0);
    assert_eq!(json["settings"]["stat_interval_ms"], 2000);
    mmkit()
        .args(ISSUE_EXAMPLE)
        .args(["--pcp-batch-scale-max", "6"])
        .assert()
        .success();
    mmkit()
        .args(ISSUE_EXAMPLE)
        .args(["--pcp-batch-scale-max", "7"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "--pcp-batch-scale-max 7 is outside 0..=6",
        ));
}

#[test]
fn each_preset_prints_its_kernels_pageset_lines() {
    let text = |policy: &str| {
        let mut args = ISSUE_EXAMPLE;
        args[2] = policy;
        let output = mmkit().args(args).output().unwrap();
        assert!(output.status.success());
        String::from_utf8(output.stdout).unwrap()
    };
    // v6.6 (and v6.7: the lines came with 6.13) printed count, high and batch only.
    let v6_6_cpu0 = "    cpu: 0\n              count: 0\n              high:  41\n              \
                     batch: 1\n  vm stats threshold: 4\n";
    for policy in ["base", "patch6", "v6.7"] {
        let text = text(policy);
        assert!(!text.contains("high_min"), "{policy}: {text}");
        assert!(!text.contains("high_max"), "{policy}: {text}");
    }
    assert!(text("base").contains(v6_6_cpu0), "{}", text("base"));
    let later = text("linux-6.18");
    assert!(later.contains("              high_min: 41\n              high_max: 240\n"));
}

/// This VM's firmware memory map (`/proc/iomem`'s System RAM lines) with the first MiB
/// reserved gives the spans and present pages its Linux 6.18 kernel prints (DMA 4095 /
/// 3998, DMA32 1,044,480 / 782,336 with the PCI hole absent, Normal 5,505,024), and DMA's
/// managed 3840; the ranges may come in any order.
#[test]
fn a_firmware_memory_map_gives_the_kernels_spanned_and_present_pages() {
    let zones = zones_of(&[
        "zoneinfo",
        "--usable",
        "0x100000000-0x63fffffff",
        "--usable",
        "0x1000-0x9fbff",
        "--usable",
        "0x100000-0xbfffffff",
        "--reserve",
        "0-0xfffff",
        "--cpus",
        "2",
    ]);
    let sizes: Vec<_> = zones
        .iter()
        .filter(|z| z.spanned > 0)
        .map(|z| (z.zone, z.start_pfn, z.spanned, z.present, z.managed))
        .collect();
    assert_eq!(
        sizes,
        [
            (ZoneType::Dma, 1, 4095, 3998, 3840),
            (ZoneType::Dma32, 4096, 1_044_480, 782_336, 782_336),
            (ZoneType::Normal, 1 << 20, 5_505_024, 5_505_024, 5_505_024),
        ]
    );
}

/// `--cpu-nodes` numbers CPUs as firmware does: 0,1,0,1 puts two pagesets in each node's
/// zones, and a node whose memory lies lower than node 0's is fine.
#[test]
fn cpu_nodes_in_firmware_order_give_each_node_its_cpus() {
    let zones = zones_of(&[
        "zoneinfo",
        "--usable",
        "0x100000-0x3ffffff@1",
        "--usable",
        "0x100000000-0x103ffffff@0",
        "--cpu-nodes",
        "0,1,0,1",
    ]);
    let populated: Vec<_> = zones
        .iter()
        .filter(|z| z.present > 0)
        .map(|z| (z.node, z.zone, z.pagesets.len()))
        .collect();
    assert_eq!(
        populated,
        [
            (0, ZoneType::Normal, 4),
            (1, ZoneType::Dma, 4),
            (1, ZoneType::Dma32, 4)
        ]
    );
}
