//! The module import graph of every workspace crate is acyclic, file by file.
//!
//! Owns the scanner that reads `use` declarations and `crate::`/`super::`/`self::`/child-module
//! paths out of each crate's `src/`, resolves them to the file that defines the named item
//! (following imports and re-exports), and the checks on the resulting graph: inside each
//! directory module, no two of its children (a child file with everything below it) reach each
//! other in a circle; at the crate root that is the top-level modules of each crate. The
//! directory module's own file (`mod.rs`, `lib.rs`) is not one of the nodes: it declares,
//! re-exports and drives its children, and a child may use what it defines. Code under
//! `#[cfg(test)]` is left out: a test may reach anywhere. And a layering rule of `proxy/src`:
//! nothing imports `cli`. (The policy engine stands alone by being its own crate,
//! `sluice-policy`, which depends on nothing of sluice but `sluice-addr` and `sluice-resolver`;
//! the crates at the bottom depend only on those below them, `sluice-addr` on none: `BELOW`.)
//!
//! The scanner is a small lexer (comments, strings, raw strings, char literals and lifetimes
//! skipped) and a parser of use trees; it does not expand macros, so a path written only inside
//! a macro's own definition is not seen. Paths inside macro *calls* (`format!`, `matches!`) are.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::path::{Path, PathBuf};

/// Each crate's library root, from the workspace root.
const CRATES: &[&str] = &[
    "proxy/src/lib.rs",
    "policy/src/lib.rs",
    "audit/src/lib.rs",
    "landlock-shim/src/lib.rs",
    "identity/src/lib.rs",
    "resolver/src/lib.rs",
];

/// Directory modules whose files are not yet held to the rule, with why. Adding one back is
/// deleting its line.
const NOT_YET: &[(&str, &str)] = &[];

mod import_scan;

use import_scan::{ModPath, scan_file};

// === crate model ===

/// One crate: its modules, the file each lives in, and what each `use` binds.
#[derive(Debug, Default)]
struct Crate {
    /// Module path → the file holding it (an inline module lives in its parent's file).
    files: BTreeMap<ModPath, PathBuf>,
    /// (module, name) → the path the name was imported from, already made absolute.
    bindings: HashMap<(ModPath, String), Vec<String>>,
    /// Module path → the modules glob-imported into it.
    globs: HashMap<ModPath, Vec<ModPath>>,
    /// File → (module, path, line) it names.
    paths: BTreeMap<PathBuf, Vec<(ModPath, Vec<String>, usize)>>,
}

/// `src/a/b.rs` or `src/a/b/mod.rs` for module `b` declared in `src/a.rs` or `src/a/mod.rs`.
fn child_file(parent_file: &Path, name: &str) -> PathBuf {
    let stem = parent_file
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("");
    let dir = parent_file.parent().unwrap_or(Path::new("."));
    let dir = if matches!(stem, "lib" | "main" | "mod") {
        dir.to_path_buf()
    } else {
        dir.join(stem)
    };
    let flat = dir.join(format!("{name}.rs"));
    if flat.exists() {
        flat
    } else {
        dir.join(name).join("mod.rs")
    }
}

fn load_crate(root: &Path) -> Crate {
    let mut krate = Crate::default();
    let mut queue = vec![(Vec::<String>::new(), root.to_path_buf())];
    while let Some((module, file)) = queue.pop() {
        let text = fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let scan = scan_file(&text, &module);
        krate.files.insert(module.clone(), file.clone());
        for inline in &scan.inline_modules {
            krate.files.insert(inline.clone(), file.clone());
        }
        for (parent, name) in &scan.file_children {
            assert_eq!(
                parent,
                &module,
                "{}: `mod {name};` inside an inline module",
                file.display()
            );
            let mut child = module.clone();
            child.push(name.clone());
            queue.push((child, child_file(&file, name)));
        }
        krate.paths.insert(file.clone(), scan.paths);
        for (at, name, path, _) in scan.uses {
            if name == "_" {
                continue;
            }
            if name == "*" {
                krate.globs.entry(at).or_default().push(path);
            } else {
                krate.bindings.insert((at, name), path);
            }
        }
    }
    // Make every binding absolute, now that every module is known.
    let raw: Vec<_> = krate
        .bindings
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for ((at, name), path) in raw {
        match krate.absolute(&at, &path) {
            Some(abs) => krate.bindings.insert((at, name), abs),
            None => krate.bindings.remove(&(at, name)),
        };
    }
    let raw: Vec<_> = krate
        .globs
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for (at, list) in raw {
        let abs = list.iter().filter_map(|p| krate.absolute(&at, p)).collect();
        krate.globs.insert(at, abs);
    }
    krate
}

impl Crate {
    /// A path as written in module `at`, from the crate root; None for another crate's path
    /// or a name that is not a module here (a type, a variant, a local).
    fn absolute(&self, at: &ModPath, path: &[String]) -> Option<Vec<String>> {
        let (first, rest) = path.split_first()?;
        let mut base: ModPath = match first.as_str() {
            "crate" => Vec::new(),
            "self" => at.clone(),
            "super" => at[..at.len().checked_sub(1)?].to_vec(),
            _ => {
                let mut child = at.clone();
                child.push(first.clone());
                if self.files.contains_key(&child) {
                    child
                } else {
                    return None;
                }
            }
        };
        let mut rest = rest;
        while rest.first().map(String::as_str) == Some("super") {
            base.pop();
            rest = &rest[1..];
        }
        base.extend(rest.iter().cloned());
        Some(base)
    }

    /// The file that defines what an absolute path names, following imports and re-exports.
    fn defining_file(&self, path: &[String], hops: usize) -> Option<&PathBuf> {
        let mut module: ModPath = Vec::new();
        for (k, seg) in path.iter().enumerate() {
            let mut next = module.clone();
            next.push(seg.clone());
            if self.files.contains_key(&next) {
                module = next;
                continue;
            }
            // `seg` is an item of `module`: defined there, or imported into it.
            if hops < 8
                && let Some(target) = self.bindings.get(&(module.clone(), seg.clone()))
            {
                let mut full = target.clone();
                full.extend(path[k + 1..].iter().cloned());
                return self.defining_file(&full, hops + 1);
            }
            break;
        }
        self.files.get(&module)
    }

    /// The module a file holds.
    fn module_of(&self, file: &Path) -> Option<&ModPath> {
        self.files.iter().find(|(_, f)| *f == file).map(|(m, _)| m)
    }

    /// Every file → file reference, with the line of its first occurrence.
    fn edges(&self) -> BTreeMap<(PathBuf, PathBuf), usize> {
        let mut edges = BTreeMap::new();
        for (file, paths) in &self.paths {
            for (at, path, line) in paths {
                let abs = match path.first().map(String::as_str) {
                    Some("crate" | "self" | "super") => self.absolute(at, path),
                    Some(first) => {
                        // A child module, or a name a `use` of this module bound.
                        match self.bindings.get(&(at.clone(), first.to_string())) {
                            Some(bound) => {
                                let mut full = bound.clone();
                                full.extend(path[1..].iter().cloned());
                                Some(full)
                            }
                            None => self.absolute(at, path),
                        }
                    }
                    None => None,
                };
                let Some(abs) = abs else { continue };
                let Some(target) = self.defining_file(&abs, 0) else {
                    continue;
                };
                if target != file {
                    edges.entry((file.clone(), target.clone())).or_insert(*line);
                }
            }
        }
        edges
    }
}

// === graph ===

/// The strongly connected components with more than one node (Tarjan).
fn cycles<N: Ord + Clone>(nodes: &BTreeSet<N>, edges: &BTreeSet<(N, N)>) -> Vec<Vec<N>> {
    let index_of: BTreeMap<&N, usize> = nodes.iter().enumerate().map(|(i, n)| (n, i)).collect();
    let names: Vec<&N> = nodes.iter().collect();
    let mut adj = vec![Vec::new(); nodes.len()];
    for (a, b) in edges {
        if let (Some(&x), Some(&y)) = (index_of.get(a), index_of.get(b)) {
            adj[x].push(y);
        }
    }
    struct State {
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        out: Vec<Vec<usize>>,
    }
    fn connect(v: usize, adj: &[Vec<usize>], s: &mut State) {
        s.index[v] = Some(s.next);
        s.low[v] = s.next;
        s.next += 1;
        s.stack.push(v);
        s.on_stack[v] = true;
        for &w in &adj[v] {
            match s.index[w] {
                None => {
                    connect(w, adj, s);
                    s.low[v] = s.low[v].min(s.low[w]);
                }
                Some(iw) if s.on_stack[w] => s.low[v] = s.low[v].min(iw),
                Some(_) => {}
            }
        }
        if Some(s.low[v]) == s.index[v] {
            let mut scc = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack[w] = false;
                scc.push(w);
                if w == v {
                    break;
                }
            }
            if scc.len() > 1 {
                s.out.push(scc);
            }
        }
    }
    let mut s = State {
        index: vec![None; nodes.len()],
        low: vec![0; nodes.len()],
        on_stack: vec![false; nodes.len()],
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in 0..nodes.len() {
        if s.index[v].is_none() {
            connect(v, &adj, &mut s);
        }
    }
    s.out
        .into_iter()
        .map(|scc| {
            let mut names: Vec<N> = scc.into_iter().map(|i| names[i].clone()).collect();
            names.sort();
            names
        })
        .collect()
}

/// One concrete circle through `scc`, starting at its first node (breadth first).
fn one_circle<N: Ord + Clone>(scc: &[N], edges: &BTreeSet<(N, N)>) -> Vec<N> {
    let start = &scc[0];
    let inside: BTreeSet<&N> = scc.iter().collect();
    let mut prev: BTreeMap<N, N> = BTreeMap::new();
    let mut frontier = vec![start.clone()];
    while !frontier.is_empty() {
        let mut next = Vec::new();
        for n in frontier {
            for (_, b) in edges.iter().filter(|(a, _)| *a == n) {
                if !inside.contains(b) {
                    continue;
                }
                if b == start {
                    let mut path = vec![n.clone()];
                    let mut at = n.clone();
                    while let Some(p) = prev.get(&at) {
                        path.push(p.clone());
                        at = p.clone();
                    }
                    path.reverse();
                    path.push(start.clone());
                    return path;
                }
                if !prev.contains_key(b) && b != start {
                    prev.insert(b.clone(), n.clone());
                    next.push(b.clone());
                }
            }
        }
        frontier = next;
    }
    scc.to_vec()
}

// === the checks ===

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn shown(file: &Path) -> String {
    let ws = workspace();
    let ws = ws.canonicalize().unwrap_or(ws);
    let file = file.canonicalize().unwrap_or(file.to_path_buf());
    file.strip_prefix(&ws)
        .unwrap_or(&file)
        .display()
        .to_string()
}

/// The directory a module's children live in, when it has any in files of their own.
fn child_dir(file: &Path) -> PathBuf {
    let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    let dir = file.parent().unwrap_or(Path::new("."));
    if matches!(stem, "lib" | "main" | "mod") {
        dir.to_path_buf()
    } else {
        dir.join(stem)
    }
}

/// The circles among the children of each directory module of one crate: each child stands
/// for itself and every file below it. Returns (directory, circle of children, evidence).
fn circles_in(krate: &Crate) -> Vec<(String, Vec<String>, Vec<String>)> {
    let edges = krate.edges();
    let mut found = Vec::new();
    for (module, file) in &krate.files {
        // The children held in files of their own (inline modules belong to their file).
        let children: Vec<&ModPath> = krate
            .files
            .iter()
            .filter(|(m, f)| m.len() == module.len() + 1 && m.starts_with(module) && *f != file)
            .map(|(m, _)| m)
            .collect();
        if children.is_empty() {
            continue;
        }
        let dir = shown(&child_dir(file));
        // Which child of `module` a file belongs to, if any.
        let child_of = |f: &PathBuf| -> Option<String> {
            let (m, _) = krate.files.iter().find(|(_, g)| *g == f)?;
            (m.len() > module.len() && m.starts_with(module)).then(|| m[module.len()].clone())
        };
        let nodes: BTreeSet<String> = children.iter().map(|m| m[module.len()].clone()).collect();
        let mut lifted: BTreeSet<(String, String)> = BTreeSet::new();
        let mut evidence: BTreeMap<(String, String), String> = BTreeMap::new();
        for ((from, to), line) in &edges {
            if let (Some(a), Some(b)) = (child_of(from), child_of(to))
                && a != b
            {
                lifted.insert((a.clone(), b.clone()));
                evidence
                    .entry((a, b))
                    .or_insert_with(|| format!("{}:{line} uses {}", shown(from), shown(to)));
            }
        }
        for scc in cycles(&nodes, &lifted) {
            let circle = one_circle(&scc, &lifted);
            let why = circle
                .windows(2)
                .map(|w| evidence[&(w[0].clone(), w[1].clone())].clone())
                .collect();
            let mut why: Vec<String> = why;
            why.push(format!("(everything in the circle: {})", scc.join(", ")));
            found.push((dir.clone(), circle, why));
        }
    }
    found
}

/// The circles of one crate, exempt directories left out, as a report (empty: none).
fn report(root: &Path, exempt: &[(&str, &str)]) -> String {
    let krate = load_crate(root);
    assert!(
        krate.files.len() > 1,
        "{}: no modules found",
        root.display()
    );
    let mut report = String::new();
    for (dir, circle, why) in circles_in(&krate) {
        let at = |d: &str| dir == d || dir.starts_with(&format!("{d}/"));
        if let Some((d, reason)) = exempt.iter().find(|(d, _)| at(d)) {
            eprintln!("not yet checked ({reason}): {d}: {}", circle.join(" -> "));
            continue;
        }
        report.push_str(&format!("{dir}: {}\n", circle.join(" -> ")));
        for w in why {
            report.push_str(&format!("    {w}\n"));
        }
    }
    report
}

#[test]
fn no_directory_module_imports_in_a_circle() {
    let report: String = CRATES
        .iter()
        .map(|root| report(&workspace().join(root), NOT_YET))
        .collect();
    assert!(
        report.is_empty(),
        "modules that import each other in a circle:\n{report}"
    );
}

#[test]
fn nothing_imports_cli() {
    let krate = load_crate(&workspace().join("proxy/src/lib.rs"));
    let top = |f: &Path| krate.module_of(f).and_then(|m| m.first()).cloned();
    let mut wrong = Vec::new();
    for ((from, to), line) in krate.edges() {
        let (Some(a), Some(b)) = (top(&from), top(&to)) else {
            continue;
        };
        if a != b && b == "cli" {
            wrong.push(format!("{}:{line} uses {}", shown(&from), shown(&to)));
        }
    }
    assert!(
        wrong.is_empty(),
        "cli is the shell nothing else depends on:\n{}",
        wrong.join("\n")
    );
}

/// The crates at the bottom of the workspace and the only sluice crates each may depend on:
/// `sluice-addr` on none (every crate spells addresses through it), and each crate above it
/// on the ones below only.
const BELOW: &[(&str, &[&str])] = &[
    ("addr", &[]),
    ("resolver", &["sluice-addr"]),
    ("policy", &["sluice-addr", "sluice-resolver"]),
    ("audit", &["sluice-addr", "sluice-policy"]),
];

/// The sluice crates in the `[dependencies]` table of `manifest` (a Cargo.toml's text).
fn sluice_dependencies(manifest: &str) -> Vec<String> {
    let mut table = "";
    let mut found = Vec::new();
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            table = line;
        } else if table == "[dependencies]" && line.starts_with("sluice") {
            let name = line.split(['.', ' ', '=']).next().unwrap_or(line);
            found.push(name.to_string());
        }
    }
    found
}

#[test]
fn the_crates_at_the_bottom_depend_only_on_those_below_them() {
    let mut wrong = Vec::new();
    for (krate, allowed) in BELOW {
        let manifest = workspace().join(krate).join("Cargo.toml");
        let text = fs::read_to_string(&manifest).unwrap_or_default();
        assert!(text.contains("[dependencies]"), "no {}", manifest.display());
        for dep in sluice_dependencies(&text) {
            if !allowed.contains(&dep.as_str()) {
                wrong.push(format!("{krate}/Cargo.toml depends on {dep}"));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // The reader sees a dependency where there is one.
    let text = "[dependencies]\nthiserror = \"2\"\nsluice-audit.workspace = true\n[dev-dependencies]\nsluice-e2e = { path = \"x\" }\n";
    assert_eq!(sluice_dependencies(text), ["sluice-audit"]);
}

// === the scanner on its own ===

/// A scratch crate in a fresh directory, removed when dropped.
struct Scratch {
    dir: PathBuf,
    root: PathBuf,
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.root
    }
}

/// A scratch crate from (file, text) pairs under `src/`; derefs to its `src/lib.rs`.
fn scratch(name: &str, files: &[(&str, &str)]) -> Scratch {
    let dir =
        std::env::temp_dir().join(format!("sluice-import-graph-{}-{name}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    for (file, text) in files {
        let path = dir.join("src").join(file);
        let made = path
            .parent()
            .map(fs::create_dir_all)
            .and_then(Result::ok)
            .and_then(|()| fs::write(&path, text).ok());
        assert!(made.is_some(), "cannot write {}", path.display());
    }
    Scratch {
        root: dir.join("src/lib.rs"),
        dir,
    }
}

#[test]
fn a_circle_between_siblings_is_reported_with_its_lines() {
    let root = scratch(
        "siblings",
        &[
            ("lib.rs", "pub mod a;\npub mod b;\npub mod c;\n"),
            ("a.rs", "use crate::b::B;\npub struct A;\n"),
            ("b.rs", "pub struct B;\nfn f() { super::c::g(); }\n"),
            (
                "c.rs",
                "pub fn g() {}\nfn h() -> crate::a::A { crate::a::A }\n",
            ),
        ],
    );
    let report = report(&root, &[]);
    assert!(report.contains("a -> b -> c -> a"), "{report}");
    assert!(report.contains("src/a.rs:1 uses "), "{report}");
    assert!(report.contains("src/b.rs:2 uses "), "{report}");
    assert!(report.contains("src/c.rs:2 uses "), "{report}");
}

#[test]
fn re_exports_resolve_to_the_defining_file_and_nested_directories_are_checked() {
    // `top::x` and `top::y` only meet through `top/mod.rs`'s re-export of `Y`, which is
    // defined in y.rs: the circle is x <-> y, not x <-> mod.rs.
    let root = scratch(
        "reexport",
        &[
            ("lib.rs", "mod top;\n"),
            (
                "top/mod.rs",
                "mod x;\nmod y;\npub use y::Y;\nuse self::x::X;\n",
            ),
            ("top/x.rs", "pub struct X(super::Y);\n"),
            ("top/y.rs", "use super::x::{self, X};\npub struct Y;\n"),
        ],
    );
    let report = report(&root, &[]);
    assert!(report.contains("top: x -> y -> x"), "{report}");
    assert!(!report.contains("mod.rs"), "{report}");
}

#[test]
fn comments_strings_and_test_code_are_not_imports() {
    let root = scratch(
        "quiet",
        &[
            ("lib.rs", "pub mod a;\npub mod b;\n"),
            ("a.rs", "pub fn a() { crate::b::b(); }\n"),
            (
                "b.rs",
                r####"//! Uses [`crate::a::a`] in a doc link only.
pub fn b() {
    // crate::a::a();
    /* crate::a::a(); /* nested */ crate::a::a(); */
    let _ = "crate::a::a()";
    let _ = r#"crate::a::a() "quoted" "#;
    let _ = b"crate::a::a";
    let _ = ('"', '\'', b'"');
    let _: &'static str = "\"crate::a::a";
}
#[cfg(test)]
mod tests {
    use crate::a::a;
}
#[cfg(test)]
fn helper() { crate::a::a(); }
"####,
            ),
        ],
    );
    assert_eq!(report(&root, &[]), "");
    // The same file with one real use is a circle: the scanner is not blind.
    let root = scratch(
        "loud",
        &[
            ("lib.rs", "pub mod a;\npub mod b;\n"),
            ("a.rs", "pub fn a() { crate::b::b(); }\n"),
            ("b.rs", "pub fn b() { let _ = '\"'; crate::a::a(); }\n"),
        ],
    );
    assert!(report(&root, &[]).contains("a -> b -> a"));
}

#[test]
fn an_exempt_directory_is_skipped_by_name_only() {
    let files: &[(&str, &str)] = &[
        ("lib.rs", "mod p;\nmod q;\n"),
        ("p/mod.rs", "mod x;\nmod y;\n"),
        ("p/x.rs", "use super::y::Y;\npub struct X;\n"),
        ("p/y.rs", "use super::x::X;\npub struct Y;\n"),
        ("q/mod.rs", "mod x;\nmod y;\n"),
        ("q/x.rs", "use super::y::Y;\npub struct X;\n"),
        ("q/y.rs", "use super::x::X;\npub struct Y;\n"),
    ];
    let root = scratch("exempt", files);
    let dir = root.parent().unwrap();
    let p = shown(&dir.join("p"));
    let report = report(&root, &[(p.as_str(), "test")]);
    assert!(report.contains("q: x -> y -> x"), "{report}");
    assert!(!report.contains("p: "), "{report}");
}
