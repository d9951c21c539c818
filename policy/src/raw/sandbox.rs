//! The sandbox sections of a policy as written: `filesystem_policy`, `landlock` and
//! `process`.
//!
//! Owns their keys and shapes. It does not judge the values (a path, a compatibility mode, a
//! user id): `validate/sandbox.rs` does.

use crate::yaml::{Node, Pos};

use super::Spanned;
use super::reader::{Field, Reader};

#[derive(Clone, Debug, Default)]
pub struct RawFilesystem {
    pub pos: Pos,
    pub include_workdir: Option<Spanned<bool>>,
    pub read_only: Vec<Spanned<String>>,
    pub read_write: Vec<Spanned<String>>,
}

#[derive(Clone, Debug)]
pub struct RawLandlock {
    pub pos: Pos,
    pub compatibility: Option<Spanned<String>>,
}

#[derive(Clone, Debug)]
pub struct RawProcess {
    pub pos: Pos,
    pub run_as_user: Option<Spanned<String>>,
    pub run_as_group: Option<Spanned<String>>,
}

const FILESYSTEM_FIELDS: &[&str] = &["include_workdir", "read_only", "read_write"];
const LANDLOCK_FIELDS: &[&str] = &["compatibility"];
const PROCESS_FIELDS: &[&str] = &["run_as_user", "run_as_group"];

impl Reader<'_> {
    pub(super) fn filesystem(&mut self, node: &Node) -> Option<RawFilesystem> {
        const PATH: &str = "filesystem_policy";
        let fields = self.fields(node, Field::Name(PATH), FILESYSTEM_FIELDS, &[])?;
        let mut fs = RawFilesystem {
            pos: node.pos,
            ..RawFilesystem::default()
        };
        for (k, v) in fields {
            let field = Field::Key(&Field::Name(PATH), k);
            match k {
                "include_workdir" => fs.include_workdir = self.bool(v, field),
                "read_only" => {
                    fs.read_only = self.strings(v, field).map(|s| s.value).unwrap_or_default()
                }
                "read_write" => {
                    fs.read_write = self.strings(v, field).map(|s| s.value).unwrap_or_default();
                }
                _ => {}
            }
        }
        Some(fs)
    }

    pub(super) fn landlock(&mut self, node: &Node) -> Option<RawLandlock> {
        const PATH: &str = "landlock";
        let fields = self.fields(node, Field::Name(PATH), LANDLOCK_FIELDS, &[])?;
        let mut out = RawLandlock {
            pos: node.pos,
            compatibility: None,
        };
        for (_, v) in fields {
            out.compatibility =
                self.string(v, Field::Key(&Field::Name("landlock"), "compatibility"));
        }
        Some(out)
    }

    pub(super) fn process(&mut self, node: &Node) -> Option<RawProcess> {
        const PATH: &str = "process";
        let fields = self.fields(node, Field::Name(PATH), PROCESS_FIELDS, &[])?;
        let mut out = RawProcess {
            pos: node.pos,
            run_as_user: None,
            run_as_group: None,
        };
        for (k, v) in fields {
            let field = Field::Key(&Field::Name(PATH), k);
            match k {
                "run_as_user" => out.run_as_user = self.string(v, field),
                "run_as_group" => out.run_as_group = self.string(v, field),
                _ => {}
            }
        }
        Some(out)
    }
}
