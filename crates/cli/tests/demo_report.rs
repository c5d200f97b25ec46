//! `mmkit demo`'s report.html, parsed with an HTML parser as a browser would: the three
//! tables hold every cell the terminal printed (simulated value, published value, mark),
//! every plot written to the folder is inline exactly once with its caption, and the page
//! references nothing outside itself. A demo at `--scale 0.001` (seconds) stands in for the
//! full one: the report's shape does not depend on the scale.

use crate::common;

use std::path::Path;

use base64::Engine;
use common::{mmkit, Scratch};
use scraper::{ElementRef, Html, Selector};

fn select<'a>(scope: ElementRef<'a>, css: &str) -> Vec<ElementRef<'a>> {
    let selector = Selector::parse(css).expect("a valid selector");
    scope.select(&selector).collect()
}

fn text(element: ElementRef) -> String {
    element.text().collect::<String>().trim().to_owned()
}

/// The one element `css` selects in `scope`.
fn only<'a>(scope: ElementRef<'a>, css: &str) -> ElementRef<'a> {
    let found = select(scope, css);
    assert_eq!(found.len(), 1, "{css}: one element expected");
    found[0]
}

/// The terminal's lines of one table: the row of each policy, below `heading`.
fn terminal_rows<'a>(stdout: &'a str, heading: &str) -> Vec<&'a str> {
    let mut lines = stdout.lines().skip_while(|line| *line != heading);
    assert!(lines.next().is_some(), "the terminal printed {heading:?}");
    let header = lines.next().expect("a header under the heading");
    assert!(header.starts_with("policy"), "{header}");
    lines.take(6).collect()
}

/// Check one table row against the terminal's: the same words, `|` aside, in order.
fn same_row_as_terminal(row: ElementRef, terminal: &str) {
    let mut words = vec![text(only(row, "th"))];
    for cell in select(row, "td") {
        for part in [".simulated", ".published", ".mark"] {
            words.extend(select(cell, part).into_iter().map(text));
        }
    }
    let terminal: Vec<&str> = terminal.split_whitespace().filter(|w| *w != "|").collect();
    assert_eq!(
        words, terminal,
        "the report's row and the terminal's differ"
    );
}

/// Check a scored cell: a simulated value, a published value, and a mark that agrees with
/// the cell's classes. Returns whether it is within tolerance.
fn scored_cell_is_complete(cell: ElementRef) -> bool {
    let classes: Vec<&str> = cell.value().classes().collect();
    let number = |part: &str| {
        let value = text(only(cell, part));
        value
            .parse::<f64>()
            .unwrap_or_else(|_| panic!("{part} {value:?} is a number"))
    };
    number(".simulated");
    number(".published");
    let mark = text(only(cell, ".mark"));
    let within = classes.contains(&"within");
    assert_ne!(within, classes.contains(&"out"), "{classes:?}");
    assert_eq!(mark.ends_with('✓'), within, "{mark} for {classes:?}");
    assert_eq!(mark.ends_with('✗'), !within, "{mark} for {classes:?}");
    assert_eq!(
        mark.starts_with('t'),
        classes.contains(&"trained"),
        "{mark}"
    );
    within
}

/// Check that every SVG in `dir` is inline exactly once in `page`, in a figure with its
/// caption, and that no other image is there.
fn every_plot_inline_once(page: &Html, dir: &Path) {
    let prefix = "data:image/svg+xml;base64,";
    let images: Vec<Vec<u8>> = select(page.root_element(), "img")
        .into_iter()
        .map(|img| {
            let src = img.value().attr("src").expect("an img has a src");
            let data = src.strip_prefix(prefix).expect("an inline SVG");
            base64::engine::general_purpose::STANDARD
                .decode(data)
                .expect("valid base64")
        })
        .collect();
    let mut svgs = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "svg") {
            let bytes = std::fs::read(&path).unwrap();
            let copies = images.iter().filter(|image| **image == bytes).count();
            assert_eq!(copies, 1, "{} inline {copies} times", path.display());
            svgs += 1;
        }
    }
    assert_eq!(svgs, 24, "the demo writes 24 plots");
    assert_eq!(images.len(), svgs, "an image that is no plot of the folder");
    for figure in select(page.root_element(), "figure") {
        only(figure, "img");
        let caption = text(only(figure, "figcaption"));
        assert!(caption.contains(".svg"), "{caption}");
    }
    assert_eq!(select(page.root_element(), "figure").len(), svgs);
}

/// Check that the page loads nothing: no URL in it, and every `src` or `href` a `data:`.
fn nothing_fetched(html: &str, page: &Html) {
    assert!(!html.contains("http://") && !html.contains("https://"));
    for element in select(page.root_element(), "[src], [href]") {
        for name in ["src", "href"] {
            if let Some(value) = element.value().attr(name) {
                assert!(value.starts_with("data:"), "{name}={value}");
            }
        }
    }
    assert!(select(page.root_element(), "link, script, iframe, object").is_empty());
}

#[test]
fn the_demo_report_holds_every_table_cell_and_plot_and_fetches_nothing() {
    let scratch = Scratch::new("demo-report");
    let out = scratch.path("out");
    // A report left by an earlier demo in the folder is replaced.
    std::fs::create_dir_all(scratch.dir().join("out")).unwrap();
    scratch.file("out/report.html", "an earlier report");
    let args = ["demo", "--scale", "0.001", "--out", &out];
    let output = mmkit().args(args).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(scratch.names(), ["out"], "the demo writes only into --out");
    let stdout = String::from_utf8(output.stdout).unwrap();
    let html = std::fs::read_to_string(Path::new(&out).join("report.html")).unwrap();
    let page = Html::parse_document(&html);
    assert!(page.errors.is_empty(), "parse errors: {:?}", page.errors);
    let root = page.root_element();

    assert_eq!(
        text(only(root, "#command")),
        format!("mmkit {}", args.join(" "))
    );
    assert!(text(only(root, "#version")).starts_with("mmkit "));
    assert_eq!(text(only(root, "#seed")), "1");
    assert_eq!(text(only(root, "#scale")), "0.001");

    let tables = select(root, "table");
    assert_eq!(tables.len(), 3, "kbuild, netperf and lmbench");
    let mut scored = 0;
    let mut within = 0;
    for table in tables {
        let heading = text(only(table, "caption"));
        let terminal = terminal_rows(&stdout, &heading);
        let rows = select(table, "tbody tr");
        assert_eq!(rows.len(), 6, "{heading}: one row per policy");
        for (row, terminal) in rows.into_iter().zip(terminal) {
            assert_eq!(select(row, "td").len(), 6, "{heading}: six columns");
            same_row_as_terminal(row, terminal);
            for cell in select(row, "td.scored") {
                scored += 1;
                within += usize::from(scored_cell_is_complete(cell));
            }
        }
    }
    assert_eq!(scored, 66, "the 66 published cells are scored");
    let score = text(only(root, "#score"));
    assert!(stdout.lines().any(|line| line == score), "{score}");
    assert!(score.starts_with(&format!("{within} of 66 cells within tolerance")));
    for note in [".used-memory", ".high-order"] {
        let line = text(only(root, note));
        assert!(stdout.lines().any(|l| l == line), "{note}: {line}");
    }
    // Issue 19: the pagesets' share of used memory, beside the published +18.4 %.
    let used = text(only(root, ".used-memory"));
    assert!(
        used.contains("published: up to +18.4 %; pagesets hold ")
            && used.contains(" % with patch7, ")
            && used.ends_with(" % with patch9"),
        "{used}"
    );
    let tolerances = text(only(root, "#tolerances"));
    assert!(stdout.lines().any(|line| line == tolerances));

    every_plot_inline_once(&page, Path::new(&out));
    nothing_fetched(&html, &page);
}

/// `mmkit demo --timing` prints each run's speed on standard error, in the demo's order,
/// and names the speed target's run; the tables on standard output are the same as
/// without it (host time is never part of a result). `--merge` runs nothing, so it takes
/// no `--timing`.
#[test]
fn the_demos_timing_prints_each_runs_speed_and_changes_no_table() {
    let scratch = Scratch::new("demo-timing");
    let run = |out: &str, timing: bool| {
        let mut args = vec!["demo", "--scale", "0.001", "--out", out];
        if timing {
            args.push("--timing");
        }
        let output = mmkit().args(&args).output().unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let stdout = String::from_utf8(output.stdout).unwrap();
        // Every line but the last, which names the --out folder.
        let tables: Vec<String> = stdout
            .lines()
            .filter(|l| !l.contains(out))
            .map(str::to_owned)
            .collect();
        (tables, String::from_utf8(output.stderr).unwrap())
    };
    let (plain, plain_err) = run(&scratch.path("plain"), false);
    let (timed, timed_err) = run(&scratch.path("timed"), true);
    assert_eq!(plain, timed, "--timing changed the tables");
    assert!(!plain_err.contains("speed"), "{plain_err}");
    let speeds: Vec<&str> = timed_err
        .lines()
        .filter(|l| l.starts_with("speed: "))
        .collect();
    assert_eq!(speeds.len(), 18, "{timed_err}");
    let mut expected = Vec::new();
    for workload in ["kbuild", "netperf", "unix"] {
        for policy in ["base", "patch1", "patch3", "patch5", "patch7", "patch9"] {
            expected.push(format!("speed: {workload} / {policy} on "));
        }
    }
    for (line, start) in speeds.iter().zip(&expected) {
        assert!(line.starts_with(start.as_str()), "{line}, not {start}");
        assert!(line.contains("× real time"), "{line}");
    }
    assert!(
        timed_err
            .lines()
            .any(|l| l.starts_with("speed target: kbuild / base at scale 1")),
        "{timed_err}"
    );
    let refused = mmkit()
        .args(["demo", "--merge", "a.json", "--timing"])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
}
