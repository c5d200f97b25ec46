//! How long the recorder's write-out takes once tracing has stopped: the merge of the
//! CPUs' traces alone, the gzip compression alone, and both as the recorder runs them
//! (`mmkit_trace::record::write_trace`, the compression on a thread of its own).
//! `cargo run --release -p mmkit-trace --example write_out -- FILE [CPUS]`: FILE a
//! recording, whose trace lines are dealt out to CPUS streams (default 64) as if each
//! were a CPU's `per_cpu/cpuN/trace`, line i to stream i mod CPUS, so that the merge
//! takes a line from another stream at every step.

use std::io::{Cursor, Write};
use std::time::Instant;

use flate2::write::GzEncoder;
use flate2::Compression;
use mmkit_trace::parse::{END_MARKER, SECTION_PREFIX};
use mmkit_trace::record::write_trace;

mod common;

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(path), cpus) = (args.next(), args.next()) else {
        eprintln!("usage: write_out FILE [CPUS] (FILE a recording)");
        std::process::exit(2);
    };
    let cpus: usize = match cpus.map(|c| c.parse()) {
        None => 64,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => {
            eprintln!("write_out: CPUS must be a positive number");
            std::process::exit(2);
        }
    };
    let Ok(text) = String::from_utf8(common::read_text("write_out", &path)) else {
        eprintln!("write_out: {path} is not text");
        std::process::exit(1);
    };
    let trace_heading = format!("{SECTION_PREFIX}trace");
    let Some(start) = text.lines().position(|l| l == trace_heading) else {
        eprintln!("write_out: {path} has no trace section");
        std::process::exit(1);
    };
    let lines: Vec<&str> = text
        .lines()
        .skip(start + 1)
        .take_while(|l| *l != END_MARKER)
        .collect();
    let mut streams = vec![String::new(); cpus];
    for (i, line) in lines.iter().enumerate() {
        streams[i % cpus] += line;
        streams[i % cpus].push('\n');
    }
    let bytes: usize = streams.iter().map(String::len).sum();
    println!(
        "{} lines, {bytes} bytes of text, {cpus} streams",
        lines.len()
    );
    let readers =
        || -> Vec<Cursor<&[u8]>> { streams.iter().map(|s| Cursor::new(s.as_bytes())).collect() };

    let started = Instant::now();
    let (n, _) = write_trace(readers(), std::io::sink(), &mut |_| {}).expect("merge");
    println!(
        "merge alone:       {:.2} s ({n} lines)",
        started.elapsed().as_secs_f64()
    );

    let started = Instant::now();
    let mut gz = GzEncoder::new(std::io::sink(), Compression::default());
    for stream in &streams {
        gz.write_all(stream.as_bytes()).expect("compress");
    }
    gz.finish().expect("compress");
    println!(
        "gzip alone:        {:.2} s",
        started.elapsed().as_secs_f64()
    );

    let started = Instant::now();
    let gz = GzEncoder::new(std::io::sink(), Compression::default());
    let (_, gz) = write_trace(readers(), gz, &mut |_| {}).expect("write");
    gz.finish().expect("compress");
    println!(
        "merge and gzip:    {:.2} s",
        started.elapsed().as_secs_f64()
    );
}
