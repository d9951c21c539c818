//! The `binaries` of a policy entry: which executables an entry admits (an exact path or a
//! `/`-bound glob), and the warnings about paths that admit more than they seem to (shells
//! and interpreters, globs that match everything, glob characters read literally).
//!
//! It does not decide which binary a connection comes from: `identity` does, and
//! `decide.rs` matches it against what this module built.

use crate::glob::Glob;
use crate::model::{Binary, BinaryMatcher};
use crate::raw::RawBinary;
use crate::report::Validator;

/// Basenames whose grants pass to everything they run (spec §2.3).
const LAUNCHERS: &[&str] = &[
    "sh", "bash", "dash", "zsh", "ksh", "mksh", "fish", "csh", "tcsh", "ash", "busybox", "env",
    "python", "python2", "python3", "node", "nodejs", "deno", "bun", "perl", "ruby", "php", "lua",
    "java", "pwsh", "tclsh", "sudo", "nohup", "xargs", "timeout", "nice", "make",
];

impl Validator<'_> {
    pub(super) fn binary(&mut self, raw: &RawBinary, field: &str) -> Option<Binary> {
        let source = raw.path.value.clone();
        let pos = raw.path.pos;
        let field = format!("{field}.path");
        let matcher = if source == "*" {
            // Binary globs are segment-bound: `*` does not cross `/`, and every executable
            // the kernel reports is an absolute path.
            if !self.lenient(
                pos,
                &field,
                "`*` does not cross `/`, so it matches no executable (write `/**` to admit every executable)",
                "loads it and it admits no executable",
            ) {
                return None;
            }
            BinaryMatcher::Glob(Glob::new("*", '/').ok()?)
        } else if source.contains('*') {
            match Glob::new(&source, '/') {
                Ok(g) => {
                    if g.is_match("/usr/bin/anything") && g.is_match("/tmp/x") {
                        self.warning(pos, &field, format!("`{source}` admits every executable"));
                    }
                    BinaryMatcher::Glob(g)
                }
                Err(e) => {
                    self.error(pos, &field, e.to_string());
                    return None;
                }
            }
        } else {
            if source.contains(['?', '[', ']', '{', '}']) {
                self.warning(
                    pos,
                    &field,
                    format!(
                        "`{source}` has glob characters but no `*`; like the reference, sluice \
                         reads it as a literal path, so it only matches an executable with \
                         exactly that name"
                    ),
                );
            }
            if !source.starts_with('/') {
                let accepted = self.lenient(
                    pos,
                    &field,
                    &format!(
                        "`{source}` is not an absolute path, so it can never match an executable"
                    ),
                    "accepts it and it never matches",
                );
                if !accepted {
                    return None;
                }
            }
            BinaryMatcher::Exact(source.clone())
        };
        let base = source.rsplit('/').next().unwrap_or(&source);
        let base_trimmed =
            base.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.' || c == '*');
        if LAUNCHERS.contains(&base) || LAUNCHERS.contains(&base_trimmed) {
            self.warning(
                pos,
                &field,
                format!(
                    "`{source}` is a shell or interpreter: every program it runs (curl, pip, \
                     a script) inherits this policy's grants; list the programs that need \
                     the network instead"
                ),
            );
        }
        Some(Binary {
            source,
            matcher,
            location: self.location(pos),
        })
    }
}
