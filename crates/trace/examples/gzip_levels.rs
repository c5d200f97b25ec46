//! How long the recorder's compression takes at flate2's fast, default and best levels,
//! and how large each file is: `cargo run --release -p mmkit-trace --example gzip_levels
//! -- FILE`, FILE a recording (gzip) or plain text. The text is written line by line, as
//! the recorder writes it (docs/ARCHITECTURE.md, the compression bullet).

use std::io::Write;
use std::time::Instant;

use flate2::write::GzEncoder;
use flate2::Compression;

mod common;

fn main() {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: gzip_levels FILE (a recording or plain text)");
        std::process::exit(2);
    };
    let text = common::read_text("gzip_levels", &path);
    println!("{} bytes of text", text.len());
    for (name, level) in [
        ("fast", Compression::fast()),
        ("default", Compression::default()),
        ("best", Compression::best()),
    ] {
        let started = Instant::now();
        let mut gz = GzEncoder::new(Vec::new(), level);
        for line in text.split(|&b| b == b'\n') {
            gz.write_all(line)
                .and_then(|()| gz.write_all(b"\n"))
                .unwrap();
        }
        let out = gz.finish().unwrap();
        println!(
            "{name:>7}: {:.2} s, {} bytes",
            started.elapsed().as_secs_f64(),
            out.len()
        );
    }
}
