//! The `distlock` command lines the guide (`docs/src/cli.md`) and the README show as samples
//! are accepted by the command as written: each is run with `--help` put after its options
//! (before the `--` of `exec`, and without the shell's redirection or comment), so clap parses
//! and validates every option and value up to there and then prints help instead of acting.
//! The samples name hosts of the reader's, so they cannot run for real here.

use crate::support::{run, text, BIN};

use std::path::Path;
use std::process::Command;

/// The pages whose `text` blocks show `distlock` commands.
const PAGES: [&str; 2] = ["docs/src/cli.md", "README.md"];

/// The `distlock` command lines of the page's `text` blocks, continuation lines joined.
fn command_lines(page: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut in_text = false;
    let mut pending = String::new();
    for line in page.lines() {
        if line.starts_with("```") {
            in_text = !in_text && line.trim() == "```text";
            continue;
        }
        if !in_text {
            continue;
        }
        let joined = format!("{pending}{}", line.trim());
        if let Some(head) = joined.strip_suffix('\\') {
            pending = format!("{} ", head.trim_end());
            continue;
        }
        pending.clear();
        if joined.starts_with("distlock ") {
            lines.push(joined);
        }
    }
    lines
}

/// The arguments to parse: the line's words after `distlock`, up to a comment, a redirection
/// or `exec`'s `--`.
fn arguments(line: &str) -> Vec<&str> {
    line.split_whitespace()
        .skip(1)
        .take_while(|w| !w.starts_with('#') && !w.starts_with('>') && *w != "--")
        .collect()
}

#[test]
fn the_guides_command_lines_parse() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut checked = 0;
    for page in PAGES {
        let path = root.join(page);
        let content =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        for line in command_lines(&content) {
            let args = arguments(&line);
            let out = run(Command::new(BIN)
                .env_remove("DISTLOCK_URL")
                .args(&args)
                .arg("--help"));
            assert!(
                out.status.success() && !out.stdout.is_empty(),
                "{page}: `{line}` is not accepted by distlock ({:?}):\n{}",
                out.status,
                text(&out.stderr)
            );
            checked += 1;
        }
    }
    assert!(checked >= 12, "only {checked} command lines found in {PAGES:?}");
}

#[test]
fn a_bad_sample_would_fail() {
    for args in [
        &["exec", "--wait", "soon", "job"][..],
        &["exec", "--no-such-option", "job"][..],
    ] {
        let out = run(Command::new(BIN)
            .env_remove("DISTLOCK_URL")
            .args(args)
            .arg("--help"));
        assert!(!out.status.success(), "{args:?} was accepted");
    }
    assert_eq!(
        arguments("distlock schema --url u > x.sql   # note"),
        ["schema", "--url", "u"]
    );
    assert_eq!(
        command_lines("```text\ndistlock exec --wait 1s \\\n    job -- ./x\nnot this\n```\ndistlock no\n"),
        ["distlock exec --wait 1s job -- ./x"]
    );
}
