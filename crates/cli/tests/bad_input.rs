//! Bad input to every subcommand: empty, binary, truncated and field-flipped input files,
//! zero, huge, negative and non-numeric values. Each case must be refused before any work
//! with one line on stderr naming the argument (the flag, the path, or FILE:LINE), exit
//! status 2, nothing on stdout and no file left behind: never a panic (status 101), an
//! abort (134) or a signal. No case starts a long run: wherever a case leaves a value
//! alone it is the smallest valid one, so a refusal that regressed would still end soon.
//!
//! `sim_cli.rs` covers the simulator's impossible machines, `--node-gib`, unknown
//! workloads and presets; the cases here are the others.

use crate::common;

use common::{mmkit, Scratch};

/// Run `mmkit args` (with `stdin`, if any) and check that it is refused as bad input whose
/// message names `culprit`.
fn refused_with_stdin(args: &[&str], stdin: Option<&[u8]>, culprit: &str) {
    let mut command = mmkit();
    command.args(args);
    if let Some(bytes) = stdin {
        command.write_stdin(bytes.to_vec());
    }
    let output = command.output().expect("mmkit runs");
    check_refused(args, &output, culprit);
}

/// Check that `output`, of `mmkit args`, is a refusal as bad input whose message names
/// `culprit`.
fn check_refused(args: &[&str], output: &std::process::Output, culprit: &str) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "{args:?} panicked: {stderr}");
    let code = output.status.code();
    assert_ne!(code, Some(101), "{args:?} panicked: {stderr}");
    assert_ne!(code, Some(134), "{args:?} aborted: {stderr}");
    assert!(code.is_some(), "{args:?} was killed by a signal: {stderr}");
    assert_eq!(code, Some(2), "{args:?}: {stderr}");
    assert_eq!(
        stderr.lines().count(),
        1,
        "{args:?}: one line expected: {stderr}"
    );
    assert!(stderr.starts_with("mmkit: error: "), "{args:?}: {stderr}");
    assert!(
        stderr.contains(culprit),
        "{args:?}: the message should name {culprit:?}: {stderr}"
    );
    assert!(
        output.stdout.is_empty(),
        "{args:?} printed before refusing: {}",
        String::from_utf8_lossy(&output.stdout)
    );
}

/// [`refused_with_stdin`] without standard input.
fn refused(args: &[&str], culprit: &str) {
    refused_with_stdin(args, None, culprit);
}

/// [`refused`] with the process's address space limited to `limit_kib` KiB (`ulimit -v`).
fn refused_under_address_limit(limit_kib: &str, args: &[&str], culprit: &str) {
    let output = common::mmkit_under_address_limit(limit_kib, args);
    check_refused(args, &output, culprit);
}

/// `base` (a subcommand and `--flag value` pairs) with the flags of `overrides` given
/// their values there instead (clap refuses a flag given twice), then the rest of
/// `overrides`.
fn overriding<'a>(base: &[&'a str], overrides: &[&'a str]) -> Vec<&'a str> {
    let mut args = Vec::new();
    let mut words = base.iter();
    while let Some(&word) = words.next() {
        if word.starts_with("--") && overrides.contains(&word) {
            words.next();
        } else {
            args.push(word);
        }
    }
    args.extend_from_slice(overrides);
    args
}

#[test]
fn command_lines_clap_refuses_name_the_argument_on_one_line() {
    refused(&["frobnicate"], "frobnicate");
    refused(&["sim"], "--workload");
    refused(&["percpu", "test", "--outer", "-1"], "--outer");
    refused(&["percpu", "test", "--outer", "many"], "--outer");
    refused(&["demo", "--seed", "-1"], "--seed");
    refused(&["stress", "--pattern", "sideways"], "--pattern");
    refused(&["reclaim", "congestion", "extra"], "extra");
    refused(
        &[
            "sim",
            "--workload",
            "unix",
            "--seed",
            "99999999999999999999999",
        ],
        "--seed",
    );
}

#[test]
fn zoneinfo_refuses_impossible_machines_naming_the_flag() {
    let machine = |extra: &[&str], culprit: &str| {
        let base = ["zoneinfo", "--zone", "Normal=262144"];
        refused(&overriding(&base, extra), culprit);
    };
    refused(&["zoneinfo"], "--zone");
    refused(&["zoneinfo", "--zone", "Normal=lots"], "--zone");
    refused(&["zoneinfo", "--zone", "Normal="], "--zone");
    refused(&["zoneinfo", "--zone", "=5"], "--zone");
    refused(&["zoneinfo", "--zone", "Normal=4294967295"], "--zone");
    refused(
        &["zoneinfo", "--zone", "Normal=9223372036854775807"],
        "--zone",
    );
    // Node 65535 wrapped the u16 node count to 0 and boot panicked.
    refused(&["zoneinfo", "--zone", "65535:Normal=1000"], "--zone");
    // A 2-TiB zone (8 GiB of descriptors) fits this machine's memory but not an address
    // space limited to about 3 GiB: the heap refused the mem_map and the process aborted.
    refused_under_address_limit(
        "3000000",
        &["zoneinfo", "--zone", "Normal=536870912", "--cpus", "8"],
        "the process's address-space limit (`ulimit -v`) is 2.9 GiB",
    );
    refused(
        &[
            "zoneinfo",
            "--usable",
            "0x1000-0x9fbff",
            "--usable",
            "0x5000-0x6fff",
        ],
        "--usable",
    );
    refused(&["zoneinfo", "--usable", "0x9fbff-0x1000"], "--usable");
    refused(&["zoneinfo", "--usable", "0x1000"], "--usable");
    refused(
        &[
            "zoneinfo",
            "--usable",
            "0x100000-0x1ffffff@0",
            "--usable",
            "0x2000000-0x2ffffff@1",
            "--usable",
            "0x3000000-0x3ffffff@0",
        ],
        "--usable",
    );
    refused(
        &[
            "zoneinfo",
            "--usable",
            "0x100000-0x1ffffff",
            "--reserve",
            "0-0xfffff@1",
        ],
        "--reserve",
    );
    refused(
        &[
            "zoneinfo",
            "--usable",
            "0x100000-0x1ffffff",
            "--cpus",
            "4294967295",
        ],
        "--usable and --cpus",
    );
    refused(
        &[
            "zoneinfo",
            "--usable",
            "0x100000-0x1ffffff",
            "--cpu-nodes",
            "0,1024",
        ],
        "--cpu-nodes",
    );
    refused(
        &["zoneinfo", "--usable", "0x100000-0x1ffffff@1024"],
        "--usable",
    );
    machine(&["--cpus", "0"], "--cpus");
    // 4 zones × 2^32 CPUs × a 128-byte pageset: a 2 TiB allocation aborted.
    machine(&["--cpus", "4294967295"], "--cpus");
    refused(
        &[
            "zoneinfo",
            "--zone",
            "0:Normal=1000",
            "--zone",
            "1:Normal=1000",
            "--cpus",
            "4294967295,1",
        ],
        "--cpus",
    );
    // The min watermark above the zone's 262144 managed pages (1048576 KiB).
    machine(&["--min-free-kbytes", "99999999999"], "--min-free-kbytes");
    machine(&["--min-free-kbytes", "1048580"], "--min-free-kbytes");
    machine(&["--min-free-kbytes", "-5"], "--min-free-kbytes");
    machine(&["--min-free-kbytes", "lots"], "--min-free-kbytes");
    machine(
        &["--watermark-boost-factor", "99999999999"],
        "--watermark-boost-factor",
    );
    machine(
        &["--percpu-pagelist-high-fraction", "-8"],
        "--percpu-pagelist-high-fraction",
    );
    // Linux's sysctl is an `int`: nothing above 2147483647 parses.
    machine(
        &["--percpu-pagelist-high-fraction", "4294967295"],
        "--percpu-pagelist-high-fraction",
    );
    machine(&["--llc-size", "lots"], "--llc-size");
    machine(&["--llc-size", "99999999999G"], "--llc-size");
    machine(&["--llc-shared-cpus", "0"], "--llc-shared-cpus");
    machine(&["--policy", "patch99"], "patch99");
    machine(&["--pcp-batch-scale-max", "7"], "--pcp-batch-scale-max");
    machine(&["--pcp-batch-scale-max", "-1"], "--pcp-batch-scale-max");
    machine(&["--pcp-batch-scale-max", "many"], "--pcp-batch-scale-max");
    machine(&["--stat-interval", "0"], "--stat-interval");
    machine(&["--stat-interval", "0ms"], "--stat-interval");
    machine(&["--stat-interval", "-1"], "--stat-interval");
    machine(&["--stat-interval", "99999999999"], "--stat-interval");
    machine(&["--stat-interval", "soon"], "--stat-interval");
}

#[test]
fn zoneinfo_live_names_the_snapshot_file_it_cannot_use() {
    let scratch = Scratch::new("bad-input-live");
    let root = scratch.path("root");
    std::fs::create_dir_all(scratch.dir().join("root/proc")).unwrap();
    refused(&["zoneinfo", "--live", "--root", &root], "root/proc/");
    std::fs::write(scratch.dir().join("root/proc/zoneinfo"), b"Node 0\xff\xfe").unwrap();
    refused(
        &["zoneinfo", "--live", "--root", &root],
        "root/proc/zoneinfo",
    );
}

#[test]
fn pcp_script_refuses_bad_files_naming_file_and_line() {
    let scratch = Scratch::new("bad-input-pcp");
    let script = |name: &str, text: &[u8], culprit: &str| {
        let path = scratch.file(name, text);
        refused(&["pcp-script", &path], &culprit.replace("FILE", &path));
    };
    script("empty", b"", "FILE: the script has no operations");
    script("comments", b"# only a comment\n\n", "FILE: the script has");
    script("binary", b"alloc 0\n\xff\xfe\x00\x01", "FILE:2: not UTF-8");
    script("truncated", b"alloc 0 as a\nalloc", "FILE:2:");
    script(
        "flipped",
        b"alloc 0 as a\nfree a\n0 alloc",
        "FILE:3: unknown operation",
    );
    script("flipped-count", b"alloc 0 x 5", "FILE:1:");
    script("zero", b"tick 0", "FILE:1:");
    script("negative", b"bulk -1", "FILE:1:");
    script("non-numeric", b"alloc many x 0", "FILE:1:");
    // More pages than the 192000 of the default machine.
    script("huge-alloc", b"alloc 1000000000 x 0", "FILE:1:");
    script("huge-order", b"alloc 1000 x 10", "FILE:1:");
    // Capacity overflow sizing the bulk list.
    script("huge-bulk", b"bulk 18446744073709551615", "FILE:1:");
    script("huge-cpu", b"cpu4294967295: alloc 0", "FILE:1:");
    script("huge-cpu-prefix", b"cpu99999999999: alloc 0", "FILE:1:");
    script("huge-node", b"drain zone 65535:Normal", "FILE:1:");
    script(
        "huge-set",
        b"set watermark_scale_factor=99999999999",
        "FILE:1:",
    );
    let missing = scratch.path("missing");
    refused(&["pcp-script", &missing], &missing);
    let dir = scratch.dir().display().to_string();
    refused(&["pcp-script", &dir], &dir);
    refused_with_stdin(&["pcp-script", "-"], Some(b"\xff"), "<stdin>:1: not UTF-8");
    refused_with_stdin(&["pcp-script", "-"], Some(b""), "<stdin>: the script has");
}

#[test]
fn pcp_script_refuses_impossible_machines_naming_the_flag() {
    let with = |extra: &[&str], culprit: &str| {
        let args = overriding(&["pcp-script", "-"], extra);
        refused_with_stdin(&args, Some(b"alloc 0"), culprit);
    };
    with(&["--zone", "Normal=0"], "--zone");
    with(&["--cpus", "4294967295"], "--cpus");
    with(&["--cpus", "100000000"], "--cpus");
    with(&["--min-free-kbytes", "99999999999"], "--min-free-kbytes");
    with(&["--drain", "sideways"], "--drain");
    with(&["--pcp-batch-scale-max", "7"], "--pcp-batch-scale-max");
    with(&["--stat-interval", "0s"], "--stat-interval");
}

#[test]
fn percpu_test_bounds_its_cgroups_by_memory_and_names_every_flag() {
    let test = |extra: &[&str], culprit: &str| {
        let base = ["percpu", "test", "--outer", "1", "--inner", "1"];
        refused(&overriding(&base, extra), culprit);
    };
    // A capacity overflow panic and an abort on a 24 TB allocation before.
    refused(
        &[
            "percpu",
            "test",
            "--outer",
            "10",
            "--inner",
            "100000000000000000",
        ],
        "--inner",
    );
    refused(
        &[
            "percpu",
            "test",
            "--outer",
            "1000000000000",
            "--inner",
            "10",
        ],
        "--outer",
    );
    refused(
        &[
            "percpu",
            "test",
            "--outer",
            "18446744073709551615",
            "--inner",
            "18446744073709551615",
        ],
        "--outer",
    );
    refused(&["percpu", "test", "--outer", "0"], "--outer");
    test(&["--cpus", "0"], "--cpus");
    test(&["--cpus", "100000000"], "--cpus");
    test(&["--nodes", "0"], "--nodes");
    test(&["--unit-size", "1"], "--unit-size");
    test(&["--unit-size", "99999999999999999999"], "--unit-size");
    test(&["--page-size", "8k"], "--page-size");
    test(&["--page-size", "lots"], "--page-size");
    test(&["--policy", "v6.0"], "--policy");
    test(&["--kernel", "linux-7.0"], "--kernel");
    test(&["--first-chunk", "s1,r2"], "--first-chunk");
    test(&["--first-chunk", "s202520,r0,d30952,s4"], "--first-chunk");
    test(&["--first-chunk", "x1,r0,d30952"], "--first-chunk");
    // Layouts Linux refuses at boot: no static data, too little dynamic room, not
    // ending on a page, larger than the unit.
    test(&["--first-chunk", "s0,r0,d32768"], "--first-chunk");
    test(&["--first-chunk", "s4096,r0,d16384"], "--first-chunk");
    test(&["--first-chunk", "s4000,r0,d28672"], "--first-chunk");
    test(
        &["--first-chunk", "s1m,r0,d28672", "--unit-size", "256k"],
        "--first-chunk",
    );
    // --live measures the host: the model's flags do not apply, and it refuses what the
    // kernel cannot hold before it checks for root.
    test(&["--live", "--policy", "v5.13"], "--policy");
    test(&["--live", "--kernel", "linux-6.18"], "--kernel");
    test(&["--live", "--cpus", "4"], "--cpus");
    test(&["--settle-seconds", "1"], "--live");
    test(&["--live", "--settle-seconds", "-1"], "--settle-seconds");
    test(&["--live", "--settle-seconds", "nan"], "--settle-seconds");
    test(
        &["--live", "--outer", "70000", "--inner", "0"],
        "MEM_CGROUP_ID_MAX",
    );
}

#[test]
fn percpu_objects_files_are_refused_with_file_and_line_and_status_2() {
    let scratch = Scratch::new("bad-input-objects");
    let objects = |name: &str, text: &[u8], culprit: &str| {
        let path = scratch.file(name, text);
        refused(&percpu_test_objects(&path), &culprit.replace("FILE", &path));
    };
    objects("empty", b"", "--objects FILE: the object list is empty");
    objects("binary", b"a 8\n\x80\x81", "--objects FILE:2: not UTF-8");
    objects("truncated", b"a 8\nb", "--objects FILE:2:");
    objects("flipped", b"8 a", "--objects FILE:1:");
    // A bad size exited 1 at the first allocation; a parse error exited 2.
    objects("zero", b"a 8\nb 0", "--objects FILE:2:");
    objects("huge", b"a 40k", "--objects FILE:1:");
    objects("negative", b"a -8", "--objects FILE:1:");
    objects("bad-align", b"a 8 3", "--objects FILE:1:");
    objects("huge-align", b"a 8 8192", "--objects FILE:1:");
    let missing = scratch.path("missing");
    refused(&percpu_test_objects(&missing), &missing);
}

/// `mmkit percpu test` at its smallest, with the object list `path`.
fn percpu_test_objects(path: &str) -> Vec<&str> {
    let mut args = vec!["percpu", "test", "--outer", "1", "--inner", "1"];
    args.extend(["--objects", path]);
    args
}

#[test]
fn stress_bounds_threads_memory_and_duration() {
    let stress = |extra: &[&str], culprit: &str| {
        let base = [
            "stress",
            "--threads",
            "1",
            "--seconds",
            "0.1",
            "--memory",
            "8M",
        ];
        refused(&overriding(&base, extra), culprit);
    };
    stress(&["--threads", "0"], "--threads");
    // 1,000,000 threads need 31,250 CPUs at 32 threads per CPU.
    stress(&["--threads", "1000000"], "--threads");
    stress(&["--seconds", "0"], "--seconds");
    stress(&["--seconds", "-1"], "--seconds");
    stress(&["--seconds", "nan"], "--seconds");
    // Panicked converting to a Duration.
    stress(&["--seconds", "1e300"], "--seconds");
    stress(&["--memory", "0"], "--memory");
    stress(&["--memory", "lots"], "--memory");
    stress(&["--memory", "999999999G"], "--memory");
    stress(&["--cpus", "0"], "--cpus");
    // A 38 GB pageset allocation aborted.
    stress(&["--cpus", "100000000"], "--cpus");
}

#[test]
fn bench_threads_bounds_batch_threads_and_duration_and_checks_its_output() {
    let scratch = Scratch::new("bad-input-bench-threads");
    let bench = |extra: &[&str], culprit: &str| {
        let base = [
            "bench",
            "threads",
            "--only",
            "mmkit",
            "--threads",
            "2",
            "--seconds",
            "0.01",
        ];
        refused(&overriding(&base, extra), culprit);
    };
    // The system and jemalloc peers mapped 400 GB per thread.
    bench(&["--batch", "100000000"], "--batch");
    bench(&["--batch", "0"], "--batch");
    bench(&["--batch", "-16"], "--batch");
    bench(&["--threads", "1000000"], "--threads");
    bench(&["--seconds", "1e300"], "--seconds");
    bench(&["--sample-every", "0"], "--sample-every");
    bench(&["--only", "nothing"], "nothing");
    let dir = scratch.dir().display().to_string();
    bench(&["--save-json", &dir], "--save-json");
    let in_missing = scratch.path("missing/report.json");
    bench(&["--save-json", &in_missing], "--save-json");
    assert!(scratch.names().is_empty(), "{:?}", scratch.names());
}

#[test]
fn bench_pagealloc_bounds_its_samples_and_checks_its_output() {
    let scratch = Scratch::new("bad-input-bench-pagealloc");
    let bench = |extra: &[&str], culprit: &str| {
        let base = [
            "bench",
            "pagealloc",
            "--only",
            "mmkit",
            "--orders",
            "0",
            "--max-n",
            "1",
            "--repeat",
            "1",
            "--sample-pages",
            "1",
        ];
        refused(&overriding(&base, extra), culprit);
    };
    bench(&["--repeat", "100000000000"], "--repeat");
    bench(&["--orders", "11"], "--orders");
    bench(&["--max-n", "0"], "--max-n");
    bench(&["--touch", "everything"], "--touch");
    let file = scratch.file("plots", "not a folder");
    bench(&["--plot", &file], "--plot");
    let in_missing = scratch.path("missing/report.json");
    bench(&["--save-json", &in_missing], "--save-json");
    assert_eq!(scratch.names(), ["plots"]);
}

#[test]
fn sim_and_demo_check_their_output_folder_before_simulating() {
    let scratch = Scratch::new("bad-input-sim");
    let file = scratch.file("f", "a file");
    // Ran all 18 simulations, then failed with "f: File exists".
    refused(&["demo", "--out", &file, "--scale", "0.001"], "--out");
    let below_file = format!("{file}/plots");
    refused(&["demo", "--out", &below_file, "--scale", "0.001"], "--out");
    // The demo writes OUT/report.html last, after every simulation and plot.
    let out = scratch.path("out");
    std::fs::create_dir_all(format!("{out}/report.html")).unwrap();
    refused(&["demo", "--out", &out, "--scale", "0.001"], "report.html");
    std::fs::remove_dir_all(&out).unwrap();
    refused(
        &[
            "sim",
            "--workload",
            "unix",
            "--cpus",
            "2",
            "--scale",
            "0.001",
            "--plot",
            &file,
        ],
        "--plot",
    );
    assert_eq!(scratch.names(), ["f"]);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "a file");
    refused(&["demo", "--scale", "-1"], "scale -1");
    refused(&["demo", "--scale", "1000"], "scale 1000");
    refused(&["demo", "--seed", "lots"], "--seed");
    let sim = |extra: &[&str], culprit: &str| {
        let base = [
            "sim",
            "--workload",
            "unix",
            "--cpus",
            "2",
            "--scale",
            "0.001",
        ];
        refused(&overriding(&base, extra), culprit);
    };
    sim(&["--whole-build"], "--whole-build");
    sim(
        &["--jobs-per-cpu", "4"],
        "--jobs-per-cpu 4: processes per CPU are kbuild's, not unix's",
    );
    sim(&["--merge-lines", "65"], "--merge-lines");
    sim(&["--merge-lines", "-1"], "--merge-lines");
    sim(&["--split-lines", "NaN"], "--split-lines");
    sim(&["--lock-lines", "65"], "--lock-lines 65");
    sim(&["--hold-per-block-ns", "NaN"], "--hold-per-block-ns");
    sim(&["--smt-yield", "0.9"], "--smt-yield");
    sim(&["--smt-yield", "2.5"], "--smt-yield");
    sim(&["--kbuild-faults-per-s", "0"], "--kbuild-faults-per-s 0");
    sim(&["--threads", "-1"], "--threads");
    sim(&["--cpus", "-2"], "--cpus");
    sim(&["--policies", ","], "unknown policy");
}

#[test]
fn demo_refuses_zero_threads_before_it_prints_anything() {
    refused(&["demo", "--threads", "0"], "--threads");
    refused(&["demo", "--scale", "0"], "--scale 0");
    refused(&["demo", "--seeds", "1-2", "--threads", "0"], "--threads");
    refused(&["demo", "--seeds", "1-2", "--scale", "0"], "--scale 0");
}

#[test]
fn sim_names_scale_flag_for_huge_scales() {
    refused(
        &[
            "sim",
            "--workload",
            "unix",
            "--cpus",
            "2",
            "--scale",
            "1e300",
        ],
        "--scale 1e300",
    );
}

/// Machines the simulator cannot lay out or tick are refused before any run; each
/// panicked inside its run: five nodes (`Sim::new` holds four), a node beyond the
/// mem_map limit (`MachineSpec::topology`, from a zoneinfo snapshot), and a vmstat tick
/// beyond the 19.5 hours an event key holds.
#[test]
fn sim_refuses_machines_it_cannot_lay_out_or_tick() {
    let scratch = Scratch::new("bad-input-sim-machines");
    refused(
        &[
            "sim",
            "--workload",
            "kbuild",
            "--sockets",
            "5",
            "--scale",
            "0.001",
        ],
        "--sockets 5",
    );
    let sim_on = |zoneinfo: &str, culprit: &str| {
        refused(
            &[
                "sim",
                "--workload",
                "kbuild",
                "--zoneinfo",
                zoneinfo,
                "--scale",
                "0.001",
            ],
            culprit,
        )
    };
    let huge = compile_zoneinfo(&scratch, "huge", |t| {
        t.replace("managed  2129920", "managed  212992000000")
    });
    sim_on(
        &huge,
        &format!("--zoneinfo {huge}: node 0 zone Normal ends beyond"),
    );
    // A count beyond any field's range names its line (it was skipped as not a number,
    // and the refusal said the snapshot had no populated Normal zone).
    let beyond = compile_zoneinfo(&scratch, "beyond", |t| {
        t.replace("managed  2129920", "managed  18446744073709551616")
    });
    sim_on(&beyond, "value out of range");
    refused(
        &[
            "sim",
            "--workload",
            "unix",
            "--cpus",
            "2",
            "--scale",
            "0.001",
            "--stat-interval",
            "100000s",
        ],
        "vm.stat_interval",
    );
}

#[test]
fn reclaim_pageout_names_its_flags_and_leaves_nothing_behind() {
    let scratch = Scratch::new("bad-input-pageout");
    let pageout = |extra: &[&str], culprit: &str| {
        let base = [
            "reclaim",
            "pageout",
            "--workers",
            "1",
            "--seconds",
            "0.01",
            "--repeat",
            "1",
            "--file-kib",
            "64",
        ];
        refused(&overriding(&base, extra), culprit);
    };
    let file = scratch.file("f", "a file");
    // Said only "pageout: File exists", after building the pool.
    pageout(&["--dir", &file], "--dir");
    pageout(&["--dir", &format!("{file}/below")], "--dir");
    pageout(&["--workers", "0"], "--workers");
    // 1024 workers × 4 GiB files × 2: a 32 GiB allocation aborted.
    pageout(
        &["--workers", "1024", "--file-kib", "4194304"],
        "--workers 1024 × --file-kib 4194304",
    );
    pageout(
        &["--repeat", "100000000000", "--seconds", "600"],
        "--repeat",
    );
    pageout(&["--repeat", "0"], "--repeat");
    pageout(&["--seconds", "nan"], "--seconds");
    pageout(&["--folio-order", "255"], "--folio-order");
    pageout(&["--folio-order", "256"], "--folio-order");
    pageout(&["--file-kib", "0"], "--file-kib");
    pageout(&["--file-kib", "99999999999999"], "--file-kib");
    pageout(&["--io", "sideways"], "--io");
    assert_eq!(scratch.names(), ["f"]);
}

#[test]
fn reclaim_lru_size_names_pages_and_memcgs() {
    let lru_size = |extra: &[&str], culprit: &str| {
        let base = [
            "reclaim",
            "lru-size",
            "--memcgs",
            "2",
            "--pages",
            "4",
            "--touches",
            "1",
            "--cpus",
            "2",
        ];
        refused(&overriding(&base, extra), culprit);
    };
    // Said "node 0 zone Normal ends beyond pfn 2^32-1" without naming --pages.
    lru_size(
        &["--memcgs", "500", "--pages", "1000000000"],
        "--pages 1000000000",
    );
    // Panicked multiplying.
    lru_size(&["--pages", "18446744073709551615"], "--pages");
    lru_size(
        &["--memcgs", "60000", "--pages", "1000000"],
        "--memcgs 60000",
    );
    lru_size(&["--touches", "100000000000"], "--touches");
    lru_size(&["--pages", "0"], "--pages");
    lru_size(&["--memcgs", "0"], "--memcgs");
    lru_size(&["--cpus", "0"], "--cpus");
    lru_size(&["--cpus", ""], "--cpus");
    lru_size(
        &["--memcgs", "500", "--zombies", "59501"],
        "--zombies 59501",
    );
    lru_size(&["--zombie-pages", "0"], "--zombie-pages");
    lru_size(&["--zombies", "-1"], "--zombies");
}

#[test]
fn trace_replay_names_the_file_it_cannot_use() {
    let scratch = Scratch::new("bad-input-replay");
    let trace = |name: &str, bytes: &[u8]| {
        let path = scratch.file(name, bytes);
        refused(&["trace", "replay", &path], &path);
    };
    trace("empty", b"");
    trace("binary", b"\x1f\x8b\x08\x00\xff\xfe\x00\x01garbage");
    trace("text", b"not a trace\n");
    let missing = scratch.path("missing");
    refused(&["trace", "replay", &missing], &missing);
    let zoneinfo = scratch.file("zoneinfo", b"Node 0, zone\xff\xfe");
    refused(
        &["trace", "replay", &compile_trace(), "--zoneinfo", &zoneinfo],
        &zoneinfo,
    );
    refused(
        &["trace", "replay", &compile_trace(), "--policies", "v9"],
        "v9",
    );
}

/// A device where a file belongs is refused before it is read: `/dev/zero` never ends,
/// and every command that reads its file whole read it until the kernel killed the
/// process for the memory (`trace replay` and `high-order` did, status 137).
#[test]
fn every_input_file_refuses_a_device_naming_it() {
    let zero = "/dev/zero";
    let compile = compile_trace();
    for args in [
        vec!["trace", "replay", zero],
        vec!["trace", "high-order", zero],
        vec!["trace", "lives", zero],
        vec!["trace", "replay", &compile, "--zoneinfo", zero],
        vec!["sim", "--workload", "unix", "--zoneinfo", zero],
        vec!["sim", "calibrate", "--targets", zero],
        vec!["sim", "merge", zero],
        vec!["pcp-script", zero],
        percpu_test_objects(zero),
    ] {
        refused(&args, &format!("{zero}: a device, not a file"));
    }
}

#[test]
fn trace_record_refuses_bad_durations_before_tracing() {
    refused(
        &["trace", "record", "--seconds", "0", "--", "true"],
        "--seconds",
    );
    refused(
        &["trace", "record", "--seconds", "-1", "--", "true"],
        "--seconds",
    );
    refused(
        &["trace", "record", "--warmup", "nan", "--", "true"],
        "--warmup",
    );
    refused(
        &["trace", "record", "--buffer-kb", "lots", "--", "true"],
        "--buffer-kb",
    );
}

/// The committed trace of a kernel compile.
fn compile_trace() -> String {
    format!(
        "{}/../trace/tests/data/compile.mmkit.gz",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// The committed zoneinfo snapshot of the compile trace, cut or changed by `edit`.
fn compile_zoneinfo(scratch: &Scratch, name: &str, edit: impl Fn(&str) -> String) -> String {
    let path = format!(
        "{}/../trace/tests/data/compile.zoneinfo.txt",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(path).unwrap();
    scratch.file(name, edit(&text))
}

#[test]
fn trace_replay_refuses_a_truncated_trace() {
    let scratch = Scratch::new("bad-input-replay-truncated");
    let bytes = std::fs::read(compile_trace()).unwrap();
    let truncated = scratch.file("truncated.mmkit.gz", &bytes[..bytes.len() / 4]);
    refused(&["trace", "replay", &truncated], &truncated);
}

#[test]
fn trace_replay_refuses_empty_truncated_and_flipped_zoneinfo() {
    let scratch = Scratch::new("bad-input-replay-zoneinfo");
    let empty = scratch.file("empty", "");
    let half = compile_zoneinfo(&scratch, "half", |t| t[..t.len() / 2].to_owned());
    let flipped = compile_zoneinfo(&scratch, "flipped", |t| t.replace("managed", "mangled"));
    for zoneinfo in [empty, half, flipped] {
        refused(
            &["trace", "replay", &compile_trace(), "--zoneinfo", &zoneinfo],
            &zoneinfo,
        );
    }
}

#[test]
fn trace_record_checks_its_output_and_buffer_before_tracing() {
    let scratch = Scratch::new("bad-input-record");
    let in_missing = scratch.path("missing/trace.gz");
    refused(
        &[
            "trace",
            "record",
            "--seconds",
            "0.1",
            "--out",
            &in_missing,
            "--",
            "true",
        ],
        "--out",
    );
    refused(
        &[
            "trace",
            "record",
            "--buffer-kb",
            "99999999999999",
            "--",
            "true",
        ],
        "--buffer-kb",
    );
}

#[test]
fn bench_handoff_refuses_what_it_cannot_measure() {
    refused(&["bench", "handoff", "--cpus", "0,0"], "two CPUs");
    refused(&["bench", "handoff", "--cpus", "0"], "--cpus");
    refused(&["bench", "handoff", "--cpus", "0,1,2"], "--cpus");
    refused(&["bench", "handoff", "--cpus", "0,99999"], "CPU 99999");
    refused(&["bench", "handoff", "--handoffs", "1"], "hand-offs");
    refused(&["bench", "handoff", "--repeat", "0"], "runs");
    refused(
        &["bench", "handoff", "--handoffs", "2000000000"],
        "--handoffs",
    );
}

#[test]
fn bench_latency_refuses_what_it_cannot_measure() {
    refused(&["bench", "latency", "--mib", "0"], "nothing to chase");
    refused(&["bench", "latency", "--loads", "0"], "loads");
    refused(&["bench", "latency", "--repeat", "0"], "runs");
    refused(&["bench", "latency", "--mib", "1000000"], "--mib");
    refused(&["bench", "latency", "--loads", "20000000000"], "--loads");
}
