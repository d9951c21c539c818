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
    let body = format!(
        "set -e\nmkdir -p /tmp/checkout/target/release\nln -s {} /tmp/checkout/target/release/sluice\ncd /tmp/checkout\n{}\n{rest}\n",
        sluice_bin().display(),
        &first[build.len()..]
    );
    // Its own network, pid and mount namespaces: the fixed ports (3128, 8443) are its own,
    // /tmp is a fresh tmpfs, and every process it started ends with it.
    let (code, out, err) = run(Command::new("unshare")
        .args(["--net", "--pid", "--fork", "--mount", "--mount-proc", "--"])
        .args(["bash", "-c"])
        .arg(
            "mount -t tmpfs tmpfs /tmp && ip link set lo up && timeout 120 bash -c \"$0\"; rc=$?; cat /tmp/sluice-try/sluice.log >&2; exit $rc",
        )
        .arg(body));
    assert_eq!(code, 0, "the walk-through failed:\n{out}\n{err}");
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
