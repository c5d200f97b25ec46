//! What the write-out examples share: reading the file they are given.

use std::io::Read;

use flate2::read::MultiGzDecoder;

/// The bytes of `path` as text: a recording (gzip, possibly several members, as the
/// recorder writes it) is decompressed, anything else is taken as it is. On an error the
/// example `name` says what went wrong and exits, as a command-line tool would.
pub fn read_text(name: &str, path: &str) -> Vec<u8> {
    let raw = std::fs::read(path).unwrap_or_else(|e| {
        eprintln!("{name}: cannot read {path}: {e}");
        std::process::exit(1);
    });
    if !raw.starts_with(&[0x1f, 0x8b]) {
        return raw;
    }
    let mut text = Vec::new();
    if let Err(e) = MultiGzDecoder::new(&raw[..]).read_to_end(&mut text) {
        eprintln!("{name}: {path} is not whole gzip: {e}");
        std::process::exit(1);
    }
    text
}
