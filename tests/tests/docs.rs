//! The documentation as a reader uses it: every relative link in the repository's Markdown
//! resolves (the file exists and, for `#anchor`, a heading of that file makes that anchor the
//! way GitHub does), and the README's "Try it locally" walk-through runs as written with the
//! real binary, real curl and a real `openssl s_server` origin, in a network namespace of its
//! own so its fixed ports collide with nothing.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use sluice_e2e::proxy::{privileged, run};
use sluice_e2e::sluice_bin;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The Markdown files git tracks, plus any under docs/ (a new page is checked before it is
/// committed).
fn markdown_files() -> Vec<PathBuf> {
    let root = repo();
    let (code, out, err) = run(Command::new("git")
        .arg("-C")
        .arg(&root)
        .args(["ls-files", "*.md"]));
    assert_eq!(code, 0, "{err}");
    let mut files: BTreeSet<PathBuf> = out.lines().map(|l| root.join(l)).collect();
    if let Ok(dir) = std::fs::read_dir(root.join("docs")) {
        files.extend(
            dir.flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "md")),
        );
    }
    files.into_iter().filter(|p| p.exists()).collect()
}

/// The lines of a Markdown file outside fenced code blocks, with their numbers.
fn prose(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            out.push((i + 1, line));
        }
    }
    out
}

/// GitHub's anchor for a heading: lower case, punctuation but `-` and `_` dropped, spaces
/// made `-`; a repeated heading gets `-1`, `-2`...
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for (_, line) in prose(text) {
        let Some(title) = line
            .strip_prefix('#')
            .map(|l| l.trim_start_matches('#'))
            .and_then(|l| l.strip_prefix(' '))
        else {
            continue;
        };
        let slug: String = title
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let n = seen.entry(slug.clone()).or_insert(0);
        out.insert(if *n == 0 {
            slug.clone()
        } else {
            format!("{slug}-{n}")
        });
        *n += 1;
    }
    out
}

/// The targets of the inline links `[text](target)` on a line.
fn link_targets(line: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let Some(end) = after.find(')') else { break };
        let target = &after[..end];
        if !target.contains(char::is_whitespace) {
            out.push(target);
        }
        rest = &after[end..];
    }
    out
}

#[test]
fn every_relative_link_resolves() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in markdown_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        for (n, line) in prose(&text) {
            for target in link_targets(line) {
                if target.starts_with("http://")
                    || target.starts_with("https://")
                    || target.starts_with("mailto:")
                {
                    continue;
                }
                checked += 1;
                let (path, anchor) = target.split_once('#').unwrap_or((target, ""));
                let resolved = if path.is_empty() {
                    file.clone()
                } else {
                    file.parent().unwrap().join(path)
                };
                let shown = format!("{}:{n}: {target}", file.display());
                if !resolved.exists() {
                    broken.push(format!("{shown}: no such file"));
                    continue;
                }
                if !anchor.is_empty() && resolved.extension().is_some_and(|x| x == "md") {
                    let there = std::fs::read_to_string(&resolved).unwrap();
                    if !anchors(&there).contains(anchor) {
                        broken.push(format!("{shown}: no heading makes #{anchor}"));
                    }
                }
            }
        }
    }
    assert!(checked > 20, "only {checked} relative links found");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn anchors_are_made_the_way_github_makes_them() {
    let text = "# sluice\n## A shared gateway: `--tenants FILE`\n```\n# not a heading\n```\n## Status\n## Status\n";
    let got = anchors(text);
    for want in [
        "sluice",
        "a-shared-gateway---tenants-file",
        "status",
        "status-1",
    ] {
        assert!(got.contains(want), "{want} not in {got:?}");
    }
    assert!(!got.contains("not-a-heading"));
    assert_eq!(
        link_targets("see [a](docs/a.md#x) and [b](#y), not [c](has space)"),
        ["docs/a.md#x", "#y"]
    );
}

/// The README's walk-through, between its `<!-- try-it` and `<!-- /try-it -->` markers, with
/// its code fence removed.
fn walk_through() -> String {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let start = readme
        .find("<!-- try-it")
        .expect("README has a try-it block");
    let end = readme[start..]
        .find("<!-- /try-it -->")
        .expect("the try-it block ends")
        + start;
    readme[start..end]
        .lines()
        .filter(|l| !l.starts_with("<!--") && !l.starts_with("```"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The README's block of what the walk-through prints, between its `<!-- try-it-output`
/// and `<!-- /try-it-output -->` markers.
fn expected_output() -> String {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let start = readme
        .find("<!-- try-it-output")
        .expect("README shows what the walk-through prints");
    let end = readme[start..]
        .find("<!-- /try-it-output -->")
        .expect("the try-it-output block ends")
        + start;
    readme[start..end]
        .lines()
        .filter(|l| !l.starts_with("<!--") && !l.starts_with("```"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// An audit line with its time and process ids replaced by `T` and `(P)`; `None` for any
/// other line.
fn audit_line(line: &str) -> Option<String> {
    let (time, rest) = line.split_once(' ')?;
    let is_time = time.len() > 20
        && time.ends_with('Z')
        && time.as_bytes()[10] == b'T'
        && time[..4].bytes().all(|b| b.is_ascii_digit());
    if !is_time {
        return None;
    }
    let mut out = String::from("T ");
    let mut chars = rest.chars().peekable();
    while let Some(c) = chars.next() {
        out.push(c);
        if c == '(' && chars.peek().is_some_and(char::is_ascii_digit) {
            while chars.peek().is_some_and(char::is_ascii_digit) {
                chars.next();
            }
            out.push('P');
        }
    }
    Some(out)
}

/// The lines of an output that are not audit lines, in order, and its audit lines (times
/// and process ids aside), sorted.
fn split_audit(output: &str) -> (Vec<String>, Vec<String>) {
    let mut text = Vec::new();
    let mut audit = Vec::new();
    for line in output.lines().map(str::trim_end) {
        match audit_line(line) {
            Some(a) => audit.push(a),
            None => text.push(line.to_string()),
        }
    }
    audit.sort();
    (text, audit)
}

#[test]
fn audit_lines_are_compared_without_times_and_pids() {
    assert_eq!(
        audit_line("2026-12-07T14:13:36.897Z NET:OPEN [INFO] ALLOWED /usr/bin/curl(28) -> h:1"),
        Some("T NET:OPEN [INFO] ALLOWED /usr/bin/curl(P) -> h:1".to_string())
    );
    assert_eq!(audit_line("< X-Sluice-Error: policy_denied"), None);
    assert_eq!(audit_line("<pre>"), None);
}

#[test]
fn the_readme_walk_through_runs_as_written() {
    if !privileged("the_readme_walk_through_runs_as_written") {
        return;
    }
    let script = walk_through();
    // The first line builds the release binary and puts it on PATH. The build is what
    // `./scripts/test` has just done (in debug): the binary under test stands in for it at
    // the path the line names, and the rest of the line runs as written.
    let (first, rest) = script.split_once('\n').unwrap();
    let build = "cargo build --release -p sluice && ";
    assert!(first.starts_with(build), "{first}");
    // The checkout stands in as a directory holding target/release/sluice, made inside the
    // fresh /tmp below.
    // The binary is copied to a tmpfs of the test's own mount namespace first: the fresh
    // /tmp hides it when the checkout itself is under /tmp.
    let body = format!(
        "set -e\nmkdir -p /tmp/checkout/target/release\nln -s /mnt/sluice /tmp/checkout/target/release/sluice\ncd /tmp/checkout\n{}\n{rest}\n",
        &first[build.len()..]
    );
    // Its own network, pid and mount namespaces: the fixed ports (3128, 8443) are its own,
    // /tmp is a fresh tmpfs, and every process it started ends with it.
    let (code, out, err) = run(Command::new("unshare")
        .args(["--net", "--pid", "--fork", "--mount", "--mount-proc", "--"])
        .args(["bash", "-c"])
        .arg(
            "mount -t tmpfs tmpfs /mnt && cp \"$1\" /mnt/sluice && mount -t tmpfs tmpfs /tmp && ip link set lo up && timeout 120 bash -c \"$0\"; rc=$?; cat /tmp/sluice-try/sluice.log >&2; exit $rc",
        )
        .arg(body)
        .arg(sluice_bin()));
    assert_eq!(code, 0, "the walk-through failed:\n{out}\n{err}");
    // What it prints is what the README says it prints (the audit lines in any order: a
    // connection's close may be written after the next one opens).
    let (shown_text, shown_audit) = split_audit(&expected_output());
    let (got_text, got_audit) = split_audit(&out);
    assert_eq!(
        got_text, shown_text,
        "the walk-through's output is not the README's:\n{out}\n{err}"
    );
    assert_eq!(
        got_audit, shown_audit,
        "the walk-through's audit lines are not the README's:\n{out}\n{err}"
    );
    for expected in [
        // The GET reached the origin: the start of openssl's status page.
        "<pre>",
        // The POST, refused by the L7 rules, with the reason in the body.
        "\"error\":\"policy_denied\"",
        "POST / not permitted by policy",
        // example.com, refused before any connection left.
        "< HTTP/1.1 403",
        "* CONNECT tunnel failed, response 403",
        // The audit lines of each.
        "ALLOWED /usr/bin/curl",
        "DENIED /usr/bin/curl",
        "example.com:443",
    ] {
        assert!(
            out.contains(expected),
            "`{expected}` is not in the walk-through's output:\n{out}\n{err}"
        );
    }
}
