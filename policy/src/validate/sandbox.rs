//! The sandbox sections of a policy: `filesystem_policy` (at most 256 paths, each one
//! `values.rs` accepts), `landlock` (its compatibility mode) and `process` (`run_as_user`,
//! `run_as_group`: `sandbox` or a numeric id, never root).
//!
//! It does not apply them: the shim (`landlock-shim`) does.

use crate::model::{LandlockCompat, RunAs};
use crate::raw::{RawDocument, Spanned};
use crate::report::Validator;

use super::Validated;
use super::values::fs_path_problem;

impl Validator<'_> {
    pub(super) fn sandbox(&mut self, doc: &RawDocument, out: &mut Validated) {
        if let Some(fs) = &doc.filesystem_policy {
            out.sections
                .push(("filesystem_policy", self.location(fs.pos)));
            out.sandbox.include_workdir = fs.include_workdir.as_ref().map(|b| b.value);
            let total = fs.read_only.len() + fs.read_write.len();
            if total > 256 {
                self.error(
                    fs.pos,
                    "filesystem_policy",
                    format!("{total} paths listed; at most 256 are allowed"),
                );
            }
            for (name, list, rw) in [
                ("read_only", &fs.read_only, false),
                ("read_write", &fs.read_write, true),
            ] {
                for (i, p) in list.iter().enumerate() {
                    let f = format!("filesystem_policy.{name}[{i}]");
                    if let Some(msg) = fs_path_problem(&p.value, rw) {
                        self.error(p.pos, &f, msg);
                    } else if rw {
                        out.sandbox.read_write.push(p.value.clone());
                    } else {
                        out.sandbox.read_only.push(p.value.clone());
                    }
                }
            }
        }
        if let Some(l) = &doc.landlock {
            out.sections.push(("landlock", self.location(l.pos)));
            out.sandbox.landlock = Some(match l.compatibility.as_ref().map(|c| c.value.as_str()) {
                None | Some("best_effort") => LandlockCompat::BestEffort,
                Some("hard_requirement") => LandlockCompat::HardRequirement,
                Some(other) => {
                    let pos = l.compatibility.as_ref().map_or(l.pos, |c| c.pos);
                    self.lenient(
                        pos,
                        "landlock.compatibility",
                        &format!("unknown `compatibility` value `{other}` (expected best_effort or hard_requirement)"),
                        "treats it as best_effort",
                    );
                    LandlockCompat::BestEffort
                }
            });
        }
        if let Some(p) = &doc.process {
            out.sections.push(("process", self.location(p.pos)));
            out.sandbox.run_as_user = p
                .run_as_user
                .as_ref()
                .and_then(|u| self.run_as(u, "process.run_as_user"));
            out.sandbox.run_as_group = p
                .run_as_group
                .as_ref()
                .and_then(|g| self.run_as(g, "process.run_as_group"));
        }
    }

    fn run_as(&mut self, v: &Spanned<String>, field: &str) -> Option<RunAs> {
        if v.value == "sandbox" {
            return Some(RunAs::Sandbox);
        }
        match v.value.parse::<u32>() {
            Ok(id) if id != 0 && id != u32::MAX => Some(RunAs::Id(id)),
            _ => {
                self.error(
                    v.pos,
                    field,
                    format!(
                        "`{}` must be `sandbox` or a numeric id from 1 to 4294967294 (never root)",
                        v.value
                    ),
                );
                None
            }
        }
    }
}
