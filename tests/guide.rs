//! Checks the guide (`docs/src`, an mdBook), the README and the crates' READMEs as text: every relative link and
//! `#anchor` resolves, every page is in `SUMMARY.md`, and every code block is checked by
//! something.
//!
//! A test of our own rather than `mdbook-linkcheck`, which is unmaintained and pinned to an
//! old mdBook; it needs no network and nothing installed. Links to other sites are not
//! followed (CI has no network for them). What checks each kind of code block:
//! - `rust`: compiled and run as a doc test (`src/lib.rs` includes each page that has one
//!   under `#[cfg(doctest)]`; this test fails if a page is missing there);
//! - `sql`: only `{{#include ../ddl/*.sql}}` of files that `crates/distlock-cli/tests/cli/schema.rs`
//!   compares with what `distlock schema` prints;
//! - `sh`: only in the README, only the two commands (`.ci/run` runs `scripts/test-all`, and
//!   `tests/examples.rs` runs the quickstart);
//! - `text`: samples, not run (commands against hosts of the reader's, output, DDL grants);
//!   the `distlock` command lines among them are parsed by the command itself
//!   (`crates/distlock-cli/tests/cli/guide_commands.rs`).

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};

/// The repository's root (this package's manifest directory).
fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The guide's source directory: all that mdBook ships.
fn guide_src() -> PathBuf {
    root().join("docs").join("src")
}

/// Every Markdown page of the guide, sorted.
fn guide_pages() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
            .map(|e| e.expect("a directory entry").path())
            .collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|x| x == "md") {
                out.push(path);
            }
        }
    }
    let mut pages = Vec::new();
    walk(&guide_src(), &mut pages);
    assert!(!pages.is_empty(), "no pages under {}", guide_src().display());
    pages
}

/// Every page checked: the guide's, the README and the crates' READMEs.
fn all_pages() -> Vec<PathBuf> {
    let mut pages = guide_pages();
    pages.push(root().join("README.md"));
    let mut crates: Vec<PathBuf> = std::fs::read_dir(root().join("crates"))
        .expect("the crates directory")
        .map(|e| e.expect("a directory entry").path().join("README.md"))
        .filter(|p| p.is_file())
        .collect();
    crates.sort();
    pages.extend(crates);
    pages
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

fn shown(path: &Path) -> String {
    path.strip_prefix(root()).unwrap_or(path).display().to_string()
}

/// A fenced code block: its info string, its lines, and the line it starts on (1-based).
struct Block {
    info: String,
    body: Vec<String>,
    line: usize,
}

/// The page's prose lines (code blocks blanked, so line numbers stay) and its code blocks.
fn split(text: &str) -> (Vec<String>, Vec<Block>) {
    let mut prose = Vec::new();
    let mut blocks = Vec::new();
    let mut open: Option<(String, Block)> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        match &mut open {
            None => {
                if let Some(info) = trimmed.strip_prefix("```") {
                    let indent = line.len() - trimmed.len();
                    open = Some((
                        format!("{}```", " ".repeat(indent)),
                        Block {
                            info: info.trim().to_owned(),
                            body: Vec::new(),
                            line: i + 1,
                        },
                    ));
                    prose.push(String::new());
                } else {
                    prose.push(line.to_owned());
                }
            }
            Some((fence, block)) => {
                if line.trim_end() == fence.as_str() || trimmed.trim_end() == "```" {
                    blocks.push(std::mem::replace(
                        block,
                        Block {
                            info: String::new(),
                            body: Vec::new(),
                            line: 0,
                        },
                    ));
                    open = None;
                } else {
                    block.body.push(line.to_owned());
                }
                prose.push(String::new());
            }
        }
    }
    assert!(open.is_none(), "a code block is never closed");
    (prose, blocks)
}

/// `line` without its inline code spans.
fn without_code_spans(line: &str) -> String {
    let mut out = String::new();
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
        } else if !in_code {
            out.push(c);
        }
    }
    out
}

/// The targets of the Markdown links and images on one line: `[text](target)`.
fn link_targets(line: &str) -> Vec<String> {
    let line = without_code_spans(line);
    let mut targets = Vec::new();
    let mut rest = line.as_str();
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        match after.find(')') {
            Some(end) => {
                let target = after[..end].split_whitespace().next().unwrap_or("");
                targets.push(target.to_owned());
                rest = &after[end..];
            }
            None => break,
        }
    }
    targets
}

/// The anchor mdBook (and GitHub, for these headings) gives a heading: lower case, letters,
/// digits, `_` and `-` kept, spaces made `-`, everything else dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .chars()
        .filter_map(|c| {
            if c.is_alphanumeric() || c == '_' || c == '-' {
                Some(c.to_lowercase().collect::<String>())
            } else if c.is_whitespace() {
                Some("-".to_owned())
            } else {
                None
            }
        })
        .collect()
}

/// The anchors of a page's headings.
fn anchors(text: &str) -> BTreeSet<String> {
    let (prose, _) = split(text);
    prose
        .iter()
        .filter_map(|l| {
            let hashes = l.chars().take_while(|c| *c == '#').count();
            (hashes > 0 && l[hashes..].starts_with(' ')).then(|| anchor(&l[hashes..]))
        })
        .collect()
}

/// `path` with `.` and `..` resolved, without touching the file system.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let mut broken = Vec::new();
    for page in all_pages() {
        let text = read(&page);
        let in_guide = page.starts_with(guide_src());
        let (prose, _) = split(&text);
        for (i, line) in prose.iter().enumerate() {
            for target in link_targets(line) {
                let at = format!("{}:{}: {target}", shown(&page), i + 1);
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                let (file, fragment) = match target.split_once('#') {
                    Some((file, fragment)) => (file, Some(fragment)),
                    None => (target.as_str(), None),
                };
                let resolved = if file.is_empty() {
                    page.clone()
                } else {
                    normalize(&page.parent().expect("a page's directory").join(file))
                };
                if !resolved.exists() {
                    broken.push(format!("{at}: no such file"));
                    continue;
                }
                if in_guide && !resolved.starts_with(guide_src()) {
                    broken.push(format!(
                        "{at}: outside docs/src, which is all the built guide holds"
                    ));
                    continue;
                }
                if let Some(fragment) = fragment {
                    if resolved.extension().is_none_or(|x| x != "md") {
                        broken.push(format!("{at}: an anchor into a file that is not a page"));
                    } else if !anchors(&read(&resolved)).contains(fragment) {
                        broken.push(format!("{at}: no heading with that anchor"));
                    }
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn every_page_is_in_the_summary_and_every_include_exists() {
    let summary = read(&guide_src().join("SUMMARY.md"));
    let listed: BTreeSet<PathBuf> = summary
        .lines()
        .flat_map(link_targets)
        .map(|t| normalize(&guide_src().join(t)))
        .collect();
    let mut problems = Vec::new();
    for page in guide_pages() {
        if page.file_name().is_some_and(|n| n == "SUMMARY.md") {
            continue;
        }
        if !listed.contains(&page) {
            problems.push(format!(
                "{}: not in SUMMARY.md, so mdBook never shows it",
                shown(&page)
            ));
        }
        for (i, line) in read(&page).lines().enumerate() {
            let mut rest = line;
            while let Some(at) = rest.find("{{#include ") {
                let after = &rest[at + "{{#include ".len()..];
                let end = after.find("}}").unwrap_or(after.len());
                let file = after[..end].trim().split(':').next().unwrap_or("");
                if !page.parent().expect("a page's directory").join(file).is_file() {
                    problems.push(format!(
                        "{}:{}: includes {file}, which does not exist",
                        shown(&page),
                        i + 1
                    ));
                }
                rest = &after[end..];
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The only `sh` block: the README's two commands, which CI runs.
const README_COMMANDS: [&str; 2] = ["cargo run --example quickstart", "scripts/test-all"];

#[test]
fn every_code_block_is_checked_or_marked_a_sample() {
    let lib = read(&root().join("src").join("lib.rs"));
    let mut problems = Vec::new();
    for page in all_pages() {
        let text = read(&page);
        let (_, blocks) = split(&text);
        let relative = page.strip_prefix(root()).expect("a page of the repository");
        let include = format!("include_str!(\"../{}\")", relative.display());
        for block in &blocks {
            let at = format!("{}:{}", shown(&page), block.line);
            let lang = block.info.split(',').next().unwrap_or("").trim();
            match lang {
                "rust" => {
                    if block.info.contains("ignore") {
                        problems.push(format!(
                            "{at}: an ignored Rust block; make it compile (hidden `# ` lines)"
                        ));
                    }
                    if !lib.contains(&include) {
                        problems.push(format!(
                            "{at}: a Rust block, but src/lib.rs does not run this page's blocks as doc tests ({include})"
                        ));
                    }
                }
                "sql" => {
                    let ok = block.body.len() == 1
                        && block.body[0].trim().starts_with("{{#include ../ddl/")
                        && block.body[0].trim().ends_with(".sql}}");
                    if !ok {
                        problems.push(format!(
                            "{at}: SQL is included from docs/src/ddl, which a test compares with `distlock schema`"
                        ));
                    }
                }
                "sh" => {
                    let commands: Vec<&str> = block
                        .body
                        .iter()
                        .map(|l| l.split('#').next().unwrap_or("").trim())
                        .filter(|l| !l.is_empty())
                        .collect();
                    if !page.ends_with("README.md") || commands != README_COMMANDS {
                        problems.push(format!(
                            "{at}: an `sh` block that no test runs; mark it `text` (a sample) or run it in a test"
                        ));
                    }
                }
                "text" => {}
                other => problems.push(format!(
                    "{at}: a `{other}` block: use rust, sql (included), sh or text"
                )),
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn anchors_follow_mdbook() {
    assert_eq!(anchor("The `distlock` command"), "the-distlock-command");
    assert_eq!(
        anchor("The long run: semaphores and read-write locks"),
        "the-long-run-semaphores-and-read-write-locks"
    );
    assert_eq!(anchor("MySQL / MariaDB"), "mysql--mariadb");
    assert_eq!(
        link_targets("see [the `a](b)` page](x.md#y) and ![pic](images/p.svg)"),
        ["x.md#y", "images/p.svg"]
    );
}
