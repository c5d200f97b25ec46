//! `mmkit demo`'s report.html: the demo's output as one page a browser opens offline — the
//! command and version that produced it, the three tables with each simulated value beside
//! its published one (Huang 2023) and marked in or out of tolerance, the score and
//! tolerance lines, and every plot inline with its caption.
//!
//! It is written from what the terminal prints ([`DemoTable`], the score line, the plots
//! `mmkit_sim::plot` returns), never from the runs again, so the two cannot disagree. No
//! stylesheet, script, font or image is fetched: the style is in the page and each plot is
//! in an `<img>` as a `data:` URL (why: [`figure`]).

use std::fmt::Write;

use mmkit_sim::plot::Plot;

use crate::demo::{self, DemoTable, TableColumn, Value};
use crate::CliError;

/// The report's file name in the demo's `--out` folder.
pub const FILE_NAME: &str = "report.html";

/// One workload's part of the report: its table and its plots.
pub struct Section {
    /// The table, as the terminal printed it.
    pub table: DemoTable,
    /// The plots written for the workload.
    pub plots: Vec<Plot>,
}

/// What the report shows besides the sections.
pub struct Report<'a> {
    /// The command line that produced it ([`command_line`]).
    pub command: String,
    /// The demo's first line: what it simulates, the number of runs, seed and scale.
    pub intro: &'a str,
    /// The random seed of the runs.
    pub seed: u64,
    /// The scale of the runs.
    pub scale: f64,
    /// One section per workload.
    pub sections: &'a [Section],
    /// The "N of 66 cells within tolerance" line.
    pub score: &'a str,
}

/// The style of the page: plain, system fonts, marks coloured.
const STYLE: &str = "\
body { font-family: sans-serif; margin: 2em auto; max-width: 1100px; padding: 0 1em; color: #1f2328; }
h1 { font-size: 1.6em; }
h2 { font-size: 1.15em; margin-top: 2.5em; }
dl.provenance { display: grid; grid-template-columns: max-content auto; gap: 0.2em 1em; }
dl.provenance dt { font-weight: bold; }
dl.provenance dd { margin: 0; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; }
caption { text-align: left; padding-bottom: 0.4em; color: #59636e; }
th, td { border: 1px solid #d1d9e0; padding: 0.25em 0.6em; text-align: right; white-space: nowrap; }
th { background: #f6f8fa; }
th[scope=row] { text-align: left; }
.published { color: #59636e; }
.separator { color: #d1d9e0; }
.mark, .no-mark { display: inline-block; min-width: 1.6em; text-align: left; padding-left: 0.3em; font-weight: bold; }
td.within .mark { color: #1a7f37; }
td.out .mark { color: #cf222e; }
td.out { background: #fff5f5; }
td.trained { font-style: italic; }
figure { margin: 1.5em 0; }
figure img { max-width: 100%; height: auto; border: 1px solid #d1d9e0; }
figcaption { color: #59636e; }
";

/// The report as HTML. Reads the plot files back to inline them.
pub fn render(report: &Report) -> Result<String, CliError> {
    let mut out = String::new();
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <title>mmkit demo: Huang 2023's PCP tables in the simulator</title>\n\
         <style>\n{STYLE}</style>\n</head>\n<body>\n<h1>mmkit demo</h1>\n<p class=\"intro\">{}</p>\n",
        escape(report.intro)
    );
    provenance(&mut out, report);
    let _ = writeln!(out, "<p class=\"legend\">{}</p>", escape(demo::LEGEND));
    for section in report.sections {
        let table = &section.table;
        let _ = writeln!(out, "<section class=\"workload\">");
        let _ = writeln!(out, "<h2>{}</h2>", escape(table.title));
        render_table(&mut out, table);
        for plot in &section.plots {
            figure(&mut out, plot)?;
        }
        let _ = writeln!(out, "</section>");
    }
    let _ = writeln!(out, "<p id=\"score\">{}</p>", escape(report.score));
    let _ = writeln!(out, "<p id=\"tolerances\">{}</p>", escape(demo::TOLERANCES));
    out.push_str("</body>\n</html>\n");
    Ok(out)
}

/// What produced the report. The command is on a line of its own: it is the one line in
/// which a merge's report differs from the single run's.
fn provenance(out: &mut String, report: &Report) {
    let version = match option_env!("MMKIT_GIT_COMMIT") {
        Some(commit) => format!("mmkit {} (git {commit})", env!("CARGO_PKG_VERSION")),
        None => format!("mmkit {}", env!("CARGO_PKG_VERSION")),
    };
    let _ = write!(
        out,
        "<dl class=\"provenance\">\n\
         <dt>command</dt><dd><code id=\"command\">{}</code></dd>\n\
         <dt>version</dt><dd id=\"version\">{}</dd>\n\
         <dt>random seed</dt><dd id=\"seed\">{}</dd>\n\
         <dt>scale</dt><dd id=\"scale\">{}</dd>\n</dl>\n",
        escape(&report.command),
        escape(&version),
        report.seed,
        report.scale
    );
}

/// One table: a row per policy, a cell per column, each scored cell classed `scored` and
/// `within` or `out` (and `trained` for a training target) with the terminal's mark.
fn render_table(out: &mut String, table: &DemoTable) {
    let _ = writeln!(
        out,
        "<table>\n<caption>{}</caption>",
        escape(&table.heading)
    );
    out.push_str("<thead><tr><th>policy</th>");
    for column in &table.columns {
        let _ = write!(out, "<th>{}</th>", escape(&column.name));
    }
    out.push_str("</tr></thead>\n<tbody>\n");
    for (policy, values) in &table.rows {
        let _ = write!(out, "<tr><th scope=\"row\">{}</th>", escape(policy));
        for (column, value) in table.columns.iter().zip(values) {
            cell(out, column, value);
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody>\n</table>\n");
    if let Some(line) = &table.used_memory {
        let _ = writeln!(out, "<p class=\"used-memory\">{}</p>", escape(line));
    }
    if let Some(line) = &table.high_order {
        let _ = writeln!(out, "<p class=\"high-order\">{}</p>", escape(line));
    }
}

/// One value: simulated, published beside it, and the mark of a scored cell.
fn cell(out: &mut String, column: &TableColumn, value: &Value) {
    let (class, title) = match &value.cell {
        None => ("unscored".to_owned(), String::new()),
        Some(cell) => {
            let (verdict, said) = match cell.within {
                true => ("within", "within tolerance"),
                false => ("out", "out of tolerance"),
            };
            let (trained, why) = match cell.trained {
                true => (" trained", ", a base-row training target"),
                false => ("", ""),
            };
            (
                format!("scored {verdict}{trained}"),
                format!(" title=\"{said}{why}\""),
            )
        }
    };
    let _ = write!(
        out,
        "<td class=\"{class}\"{title}><span class=\"simulated\">{}</span>",
        escape(&column.simulated_text(value))
    );
    if let Some(published) = column.published_text(value) {
        let _ = write!(
            out,
            "<span class=\"separator\"> | </span><span class=\"published\">{}</span>",
            escape(&published)
        );
        // An unscored cell keeps the mark's room, so the column's numbers line up.
        match &value.cell {
            Some(cell) => {
                let mark = demo::mark(Some(cell)).trim_start();
                let _ = write!(out, "<span class=\"mark\">{}</span>", escape(mark));
            }
            None => out.push_str("<span class=\"no-mark\"></span>"),
        }
    }
    out.push_str("</td>");
}

/// One plot with its caption. The SVG goes in as `<img src="data:image/svg+xml;base64,…">`
/// rather than as inline `<svg>` markup: the file's bytes go in unchanged (a test decodes
/// them and compares), nothing in the SVG can clash with the page (element ids, the XML
/// namespace, text that HTML would parse differently), and an image runs no script.
fn figure(out: &mut String, plot: &Plot) -> Result<(), CliError> {
    let svg = std::fs::read(&plot.path)
        .map_err(|e| CliError::failed(format!("{}: {e}", plot.path.display())))?;
    let name = plot
        .path
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let _ = writeln!(
        out,
        "<figure>\n<img src=\"data:image/svg+xml;base64,{}\" alt=\"{}\" data-file=\"{}\">\n\
         <figcaption>{} (<code>{}</code>)</figcaption>\n</figure>",
        base64(&svg),
        escape(&plot.caption),
        escape(&name),
        escape(&plot.caption),
        escape(&name)
    );
    Ok(())
}

/// The command line of this process as a shell would take it back, the program named
/// `mmkit` whatever path it was run by.
pub fn command_line() -> String {
    std::iter::once("mmkit".to_owned())
        .chain(
            std::env::args_os()
                .skip(1)
                .map(|arg| shell_word(&arg.to_string_lossy())),
        )
        .collect::<Vec<_>>()
        .join(" ")
}

/// `word` as is if a shell takes it so, else in single quotes.
fn shell_word(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_-./=:,@%+".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        return word.to_owned();
    }
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// `text` with the five characters HTML gives meaning to replaced by their entities, for
/// element content and quoted attribute values alike.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `bytes` in base64 (RFC 4648, with padding).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let byte = |i: usize| u32::from(chunk.get(i).copied().unwrap_or(0));
        let group = byte(0) << 16 | byte(1) << 8 | byte(2);
        // 3 bytes make 4 sextets; n bytes fill n + 1 of them and `=` pads the rest.
        for i in 0..4 {
            match i <= chunk.len() {
                true => out.push(char::from(ALPHABET[(group >> (18 - 6 * i)) as usize & 63])),
                false => out.push('='),
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_rfc_4648_test_vectors() {
        let vectors = [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ];
        for (plain, encoded) in vectors {
            assert_eq!(base64(plain.as_bytes()), encoded, "{plain:?}");
        }
    }

    #[test]
    fn escape_leaves_no_markup_and_no_open_attribute() {
        assert_eq!(
            escape(r#"<a href="x">&'</a>"#),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;&lt;/a&gt;"
        );
        assert_eq!(escape("pcp->high ✓"), "pcp-&gt;high ✓");
    }

    #[test]
    fn shell_words_quote_only_what_a_shell_would_split_or_expand() {
        assert_eq!(shell_word("--out"), "--out");
        assert_eq!(shell_word("/tmp/a-b_c.d"), "/tmp/a-b_c.d");
        assert_eq!(shell_word("my dir"), "'my dir'");
        assert_eq!(shell_word("it's"), r"'it'\''s'");
        assert_eq!(shell_word("$HOME"), "'$HOME'");
        assert_eq!(shell_word(""), "''");
    }
}
