//! Black-box tests of `sluice policy check`: malformed policy fixtures and their exact
//! diagnostics, valid example policies, `--compat openshell`, `--deny-warnings`, and merging
//! several files.
//!
//! Each `tests/fixtures/policies/malformed/NN-name.yaml` holds one problem; `NN-name.expected`
//! holds the exact diagnostic lines `policy check` prints for it, with the file's path written
//! as `{FILE}`. Set `SLUICE_BLESS=1` to rewrite the `.expected` files from the current binary
//! (then read the diff: a changed message must be a better one).
//!
//! Needs the binary: `cargo build -p sluice && cargo test -p sluice-e2e` (see `sluice_bin`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use sluice_e2e::{CheckOutput, fixture_dir, policy_check, run_sluice, workspace_dir};

const PLACEHOLDER: &str = "{FILE}";

/// Fixtures refused in strict mode that `--compat openshell` accepts with a warning at the
/// same position and field (spec §13 "Strict" rows).
const STRICT_ONLY: &[&str] = &[
    "05-duplicate-policy-key",
    "07-version-2",
    "10-port-and-ports",
    "22-rules-without-protocol",
    "26-deny-rules-empty",
    "27-allow-rule-missing-path",
    "28-deny-rule-missing-path",
    "31-unknown-access-preset",
    "32-unknown-tls",
    "33-unknown-enforcement",
    "34-tls-skip-with-rest",
    "35-allowed-ips-invalid",
    "36-allowed-ips-loopback",
    "48-landlock-unknown-compat",
];

fn malformed_dir() -> PathBuf {
    fixture_dir("policies/malformed")
}

fn malformed(name: &str) -> PathBuf {
    malformed_dir().join(format!("{name}.yaml"))
}

fn path_str(p: &Path) -> &str {
    p.to_str()
        .unwrap_or_else(|| panic!("non-UTF-8 path {}", p.display()))
}

/// Files in `dir` with extension `ext`, sorted.
fn files_with_ext(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let Ok(read) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = read
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    out.sort();
    out
}

/// A fresh directory for one test's temporary policy files.
fn scratch(test: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("policy_check")
        .join(test);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    dir
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    path
}

/// `FILE:LINE:COL: [warning: ]field: message` → (`LINE:COL`, is warning, field).
fn split_diagnostic(line: &str) -> Option<(String, bool, String)> {
    let rest = line.strip_prefix(PLACEHOLDER)?.strip_prefix(':')?;
    let mut parts = rest.splitn(3, ':');
    let (l, c, tail) = (parts.next()?, parts.next()?, parts.next()?);
    let tail = tail.strip_prefix(' ')?;
    let (warning, tail) = match tail.strip_prefix("warning: ") {
        Some(t) => (true, t),
        None => (false, tail),
    };
    let field = tail.split_once(": ").map_or("", |(f, _)| f);
    Some((format!("{l}:{c}"), warning, field.to_string()))
}

fn describe(out: &CheckOutput) -> String {
    format!(
        "exit {:?}\n--- stderr\n{}--- stdout\n{}",
        out.code, out.stderr, out.stdout
    )
}

#[test]
fn malformed_fixtures_report_exact_diagnostics() {
    let bless = std::env::var_os("SLUICE_BLESS").is_some_and(|v| v == "1");
    let dir = malformed_dir();
    let fixtures = files_with_ext(&dir, "yaml");
    let mut failures = String::new();

    // Every .expected needs its fixture.
    for expected in files_with_ext(&dir, "expected") {
        if !expected.with_extension("yaml").is_file() {
            let _ = writeln!(
                failures,
                "{}: no matching .yaml fixture",
                expected.display()
            );
        }
    }

    for fixture in &fixtures {
        let name = fixture
            .file_stem()
            .map_or_else(String::new, |s| s.to_string_lossy().into_owned());
        let file = path_str(fixture);
        let out = policy_check(&[fixture], &[]);
        let got = out.diagnostics_for(file, PLACEHOLDER);
        let expected_path = fixture.with_extension("expected");

        if bless {
            let mut text = got.join("\n");
            text.push('\n');
            std::fs::write(&expected_path, text)
                .unwrap_or_else(|e| panic!("cannot write {}: {e}", expected_path.display()));
        }

        let mut problems = Vec::new();
        if out.code != Some(1) {
            problems.push(format!("exit code {:?}, expected 1", out.code));
        }
        if out.panicked() {
            problems.push("stderr contains a panic".to_string());
        }
        // Every stderr line is a diagnostic of this file or the final summary.
        let errors = got
            .iter()
            .filter(|l| split_diagnostic(l).is_some_and(|(_, w, _)| !w))
            .count();
        let summary = format!("sluice: policy check failed: {errors} error(s)");
        for line in out.stderr.lines() {
            if !line.starts_with(file) && line != summary {
                problems.push(format!("unexpected stderr line: {line}"));
            }
        }
        if errors == 0 {
            problems.push("no error diagnostic".to_string());
        }
        match std::fs::read_to_string(&expected_path) {
            Err(e) => problems.push(format!("cannot read {}: {e}", expected_path.display())),
            Ok(text) => {
                let want: Vec<&str> = text.lines().collect();
                if want != got {
                    problems.push(format!(
                        "diagnostics differ\n  expected:\n{}\n  got:\n{}",
                        indent(&want),
                        indent(&got)
                    ));
                }
            }
        }
        if !problems.is_empty() {
            let _ = writeln!(failures, "== {name}\n{}\n", problems.join("\n"));
        }
    }

    assert!(
        fixtures.len() >= 25,
        "only {} malformed fixtures found in {}",
        fixtures.len(),
        dir.display()
    );
    assert!(
        failures.is_empty(),
        "{} fixture(s) checked; mismatches:\n{failures}",
        fixtures.len()
    );
}

fn indent<S: AsRef<str>>(lines: &[S]) -> String {
    lines
        .iter()
        .map(|l| format!("    {}", l.as_ref()))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn example_policies_pass() {
    let mut policies = files_with_ext(&workspace_dir().join("configs/policies"), "yaml");
    policies.extend(files_with_ext(
        &workspace_dir().join("configs/policies"),
        "yml",
    ));
    // The embedded default always exists, so this test checks at least one valid policy.
    let default = run_sluice(["policy", "default"]);
    assert_eq!(
        default.status.code(),
        Some(0),
        "`sluice policy default` failed"
    );
    let dir = scratch("example_policies_pass");
    policies.push(write(
        &dir,
        "default.yaml",
        &String::from_utf8_lossy(&default.stdout),
    ));

    let mut failures = String::new();
    for policy in &policies {
        let out = policy_check(&[policy], &[]);
        if out.code != Some(0) || out.panicked() || !out.stdout.starts_with("ok: ") {
            let _ = writeln!(failures, "== {}\n{}", policy.display(), describe(&out));
        }
    }
    assert!(failures.is_empty(), "valid policies refused:\n{failures}");
}

#[test]
fn compat_openshell_turns_strict_errors_into_warnings() {
    let mut failures = String::new();
    for name in STRICT_ONLY {
        let fixture = malformed(name);
        let file = path_str(&fixture);
        let strict = policy_check(&[&fixture], &[]);
        let compat = policy_check(&[&fixture], &["--compat", "openshell"]);
        let strict_diags: Vec<_> = strict
            .diagnostics_for(file, PLACEHOLDER)
            .iter()
            .filter_map(|l| split_diagnostic(l))
            .collect();
        let compat_lines = compat.diagnostics_for(file, PLACEHOLDER);
        let compat_diags: Vec<_> = compat_lines
            .iter()
            .filter_map(|l| split_diagnostic(l))
            .collect();

        let mut problems = Vec::new();
        if strict.code != Some(1) {
            problems.push(format!("strict exit {:?}, expected 1", strict.code));
        }
        if compat.code != Some(0) || compat.panicked() {
            problems.push(format!("compat: {}", describe(&compat)));
        }
        if compat_diags.len() != compat_lines.len() || compat_diags.is_empty() {
            problems.push(format!(
                "compat diagnostics malformed or missing: {compat_lines:?}"
            ));
        }
        if compat_diags.iter().any(|(_, warning, _)| !warning) {
            problems.push(format!("compat still reports an error: {compat_lines:?}"));
        }
        // Each strict error becomes a warning at the same place, about the same field.
        for (pos, warning, field) in &strict_diags {
            if !warning && !compat_diags.contains(&(pos.clone(), true, field.clone())) {
                problems.push(format!(
                    "no compat warning at {pos} for `{field}`; got {compat_lines:?}"
                ));
            }
        }
        if !problems.is_empty() {
            let _ = writeln!(failures, "== {name}\n{}", problems.join("\n"));
        }
    }
    assert!(failures.is_empty(), "{failures}");
}

#[test]
fn deny_warnings_fails_a_warning_only_policy() {
    // Strict mode, one warning: an L7 endpoint without `enforcement`.
    let dir = scratch("deny_warnings");
    let policy = write(
        &dir,
        "audit-default.yaml",
        "version: 1\n\
         network_policies:\n  \
           github:\n    \
             endpoints:\n      \
               - host: api.github.com\n        \
                 port: 443\n        \
                 protocol: rest\n        \
                 access: read-only\n    \
             binaries:\n      \
               - path: /usr/bin/curl\n",
    );
    let file = path_str(&policy);
    let plain = policy_check(&[&policy], &[]);
    let lines = plain.diagnostics_for(file, PLACEHOLDER);
    assert_eq!(plain.code, Some(0), "{}", describe(&plain));
    assert!(
        !lines.is_empty() && lines.iter().all(|l| l.starts_with("{FILE}:5:9: warning: ")),
        "expected only the defaulted-enforcement warning: {lines:?}"
    );
    let denied = policy_check(&[&policy], &["--deny-warnings"]);
    assert_eq!(denied.code, Some(1), "{}", describe(&denied));
    assert_eq!(denied.diagnostics_for(file, PLACEHOLDER), lines);
    assert!(!denied.panicked(), "{}", describe(&denied));

    // A compat warning counts too.
    let fixture = malformed("33-unknown-enforcement");
    let compat = policy_check(&[&fixture], &["--compat", "openshell"]);
    assert_eq!(compat.code, Some(0), "{}", describe(&compat));
    let denied = policy_check(&[&fixture], &["--compat", "openshell", "--deny-warnings"]);
    assert_eq!(denied.code, Some(1), "{}", describe(&denied));
}

#[test]
fn same_policy_key_in_two_files_names_both() {
    let dir = scratch("same_key_two_files");
    let text = "version: 1\n\
                network_policies:\n  \
                  github:\n    \
                    endpoints:\n      \
                      - host: api.github.com\n        \
                        port: 443\n    \
                    binaries:\n      \
                      - path: /usr/bin/curl\n";
    let a = write(&dir, "a.yaml", text);
    let b = write(
        &dir,
        "b.yaml",
        &text.replace("api.github.com", "uploads.github.com"),
    );
    let out = policy_check(&[&a, &b], &[]);
    assert_eq!(out.code, Some(1), "{}", describe(&out));
    assert!(!out.panicked(), "{}", describe(&out));
    let (a, b) = (path_str(&a), path_str(&b));
    let expected =
        format!("{b}:3:3: network_policies.github: policy `github` is already defined in {a}:3:3");
    let diags: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.starts_with(a) || l.starts_with(b))
        .collect();
    assert_eq!(diags, [expected.as_str()], "{}", describe(&out));

    // Each file alone is fine.
    for f in [a, b] {
        let alone = policy_check(&[Path::new(f)], &[]);
        assert_eq!(alone.code, Some(0), "{}", describe(&alone));
    }
}

/// A file that cannot be read, or is not UTF-8, is reported like every other problem:
/// `FILE:LINE:COL: message` (at its start), so that tools reading the output need one pattern.
#[test]
fn an_unreadable_or_non_utf8_file_is_named_with_a_position() {
    let dir = scratch("unreadable");
    let missing = dir.join("missing.yaml");
    let binary = dir.join("binary.yaml");
    std::fs::write(&binary, b"version: 1\n\xff\xfe\n").unwrap();
    for (file, message) in [(&missing, "cannot read"), (&binary, "not valid UTF-8")] {
        let out = policy_check(&[file], &[]);
        assert_eq!(out.code, Some(1), "{}", describe(&out));
        let want = format!("{}:1:1: {message}", path_str(file));
        assert!(
            out.stderr.lines().any(|l| l.starts_with(&want)),
            "{}",
            describe(&out)
        );
    }
}

// Loader problems found while writing the fixtures above, now fixed; these keep them fixed.

#[test]
fn version_of_wrong_type_is_not_called_missing() {
    // Fixture 06: `version: "1"`. raw.rs drops the ill-typed value, and validate.rs then warns
    // "`version` is missing" at 1:1 next to the real error at 1:10.
    let fixture = malformed("06-version-quoted");
    let out = policy_check(&[&fixture], &[]);
    let lines = out.diagnostics_for(path_str(&fixture), PLACEHOLDER);
    assert_eq!(
        lines,
        ["{FILE}:1:10: version: expected an integer, found a string"],
        "{}",
        describe(&out)
    );
}

#[test]
fn compat_does_not_silently_accept_empty_rules() {
    // Fixture 25. The reference refuses `rules: []` (spec §1.4, §1.9), but rules.rs only
    // reports it in strict mode; in compat the endpoint loads with no rules (every request
    // denied) and without even a warning.
    let fixture = malformed("25-rules-empty");
    let out = policy_check(&[&fixture], &["--compat", "openshell"]);
    assert!(
        !out.diagnostics_for(path_str(&fixture), PLACEHOLDER)
            .is_empty(),
        "no diagnostic at all: {}",
        describe(&out)
    );
}

#[test]
fn malformed_rule_items_are_not_called_empty_rules() {
    // Fixture 57: flat rules under `rules` (missing the `allow:` wrapper). raw.rs drops the
    // bad items, so rules.rs sees an empty list and adds "`rules: []` is empty".
    let fixture = malformed("57-allow-rule-without-allow-wrapper");
    let out = policy_check(&[&fixture], &[]);
    let lines = out.diagnostics_for(path_str(&fixture), PLACEHOLDER);
    assert!(
        !lines.iter().any(|l| l.contains("`rules: []`")),
        "{lines:#?}"
    );
}

#[test]
fn explain_with_a_bare_program_name_suggests_its_absolute_path() {
    let out = run_sluice([
        "policy",
        "explain",
        "--binary",
        "curl",
        "https://api.github.com/",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    let curl = std::fs::canonicalize("/usr/bin/curl").unwrap();
    assert!(
        err.contains(&format!("did you mean --binary {}?", curl.display())),
        "{err}"
    );
}

/// Peak resident memory, in KiB, of `sluice policy check FILE`, measured by python3's
/// `getrusage(RUSAGE_CHILDREN)` around the one child it runs (so the test's own memory and
/// other tests' children do not count).
fn policy_check_peak_kib(file: &Path) -> u64 {
    let script = "import resource, subprocess, sys\n\
                  r = subprocess.run(sys.argv[1:], capture_output=True)\n\
                  sys.stderr.write(r.stderr.decode(errors='replace'))\n\
                  print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n";
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(sluice_e2e::sluice_bin())
        .args(["policy", "check"])
        .arg(file)
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap_or_else(|e| panic!("cannot run python3: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked at"), "{stderr}");
    let mut fields = stdout.split_whitespace();
    let (Some(code), Some(kib)) = (fields.next(), fields.next()) else {
        panic!("unexpected python3 output {stdout:?}, stderr {stderr}");
    };
    assert_eq!(code, "1", "the bomb must be refused: {stderr}");
    kib.parse()
        .unwrap_or_else(|e| panic!("bad ru_maxrss {kib:?}: {e}"))
}

#[test]
fn alias_bomb_is_refused_before_it_allocates() {
    // Fixture 58: 658 bytes whose aliases expand to 10^10 nodes. Before aliases had their
    // own budget, checked before an alias is copied, `policy check` peaked at about 90 MiB
    // (137 MB in release) before refusing it; now about 6 MiB above a small refused policy.
    let baseline = policy_check_peak_kib(&malformed("57-allow-rule-without-allow-wrapper"));
    let bomb = policy_check_peak_kib(&malformed("58-alias-bomb"));
    assert!(
        bomb < baseline + 16 * 1024,
        "the alias bomb peaked at {bomb} KiB, a small policy at {baseline} KiB"
    );
}
