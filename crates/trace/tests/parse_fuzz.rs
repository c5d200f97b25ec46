//! The parser never panics: random bytes, random lines built from trace-like pieces, and
//! truncations of a real recording (compressed and not) all load, with what could not be
//! read counted as problems.

use std::io::Read;

use mmkit_trace::parse::{self, ProblemKind};
use proptest::prelude::*;

fn recording() -> Vec<u8> {
    let path = format!("{}/tests/data/compile.mmkit.gz", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(path).unwrap()
}

fn recording_text() -> String {
    let mut text = String::new();
    flate2::read::GzDecoder::new(&recording()[..])
        .read_to_string(&mut text)
        .unwrap();
    text
}

const PIECES: [&str; 16] = [
    "bash-1",
    " [000] ",
    " [001] ",
    "..... ",
    "12.5: ",
    "7763.274331: ",
    "mm_page_alloc: ",
    "mm_page_free: ",
    "mm_page_pcpu_drain: ",
    "mm_page_alloc_zone_locked: ",
    "pfn=0x1000 ",
    "order=3 ",
    "order=99 ",
    "migratetype=1 ",
    "percpu_refill=1",
    "\n",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2000)) {
        let trace = parse::load(&bytes);
        if let Ok(trace) = trace {
            prop_assert!(trace.events.windows(2).all(|w| w[0].ts_ns <= w[1].ts_ns));
        }
    }

    #[test]
    fn trace_like_garbage_is_counted_not_fatal(
        picks in proptest::collection::vec(0..PIECES.len(), 0..300)
    ) {
        let text: String = picks.iter().map(|&i| PIECES[i]).collect();
        let trace = parse::parse_text(&text);
        let lines = text.lines().filter(|l| !l.trim().is_empty()).count();
        prop_assert!(trace.events.len() <= lines);
        for event in &trace.events {
            prop_assert!(event.order <= mmkit_core::page::MAX_ORDER);
        }
    }
}

#[test]
fn truncated_recordings_load_what_is_there() {
    let bytes = recording();
    for cut in [
        0,
        1,
        2,
        10,
        100,
        1000,
        bytes.len() / 3,
        bytes.len() / 2,
        bytes.len() - 1,
    ] {
        match parse::load(&bytes[..cut]) {
            Ok(trace) => {
                let complete = trace.recording.is_some_and(|r| r.complete);
                // Either the gzip stream reports the cut, or (cut inside the magic bytes)
                // the text is garbage with no events and no end marker.
                assert!(
                    trace.decompress_error.is_some() || (!complete && trace.events.is_empty()),
                    "cut at {cut} is noticed"
                );
            }
            Err(e) => assert!(cut < 1000, "cut at {cut}: {e}"),
        }
    }
    let text = recording_text();
    let full = parse::parse_text(&text).events.len();
    for fraction in [3, 5, 7] {
        let mut cut = text.len() * fraction / 8;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        let trace = parse::parse_text(&text[..cut]);
        assert!(!trace.recording.unwrap().complete);
        assert!(trace.events.len() < full);
        // The partial last line is a problem with its line number, not a panic.
        let partial = trace.problems.total();
        assert!(partial <= 1, "cut {cut}: {:?}", trace.problems);
    }
}

#[test]
fn malformed_lines_are_reported_with_their_numbers() {
    let text = "  a-1 [000] ..... 1.0: mm_page_free: pfn=0x10 order=0\n\
                not a trace line\n  a-1 [000] ..... 2.0: mm_page_frob: pfn=0x10\n\
                  a-1 [001] ..... 0.5: mm_page_free: pfn=0x11 order=0\n";
    let trace = parse::parse_text(text);
    let lines: Vec<(usize, ProblemKind)> = trace
        .problems
        .samples
        .iter()
        .map(|p| (p.line, p.kind))
        .collect();
    assert_eq!(
        lines,
        vec![
            (2, ProblemKind::Malformed),
            (3, ProblemKind::UnknownEvent),
            (4, ProblemKind::OutOfOrderAcrossCpus),
        ]
    );
    assert_eq!(trace.events.len(), 2);
}
