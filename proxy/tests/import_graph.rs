//! The module import graph of every workspace crate is acyclic, file by file.
//!
//! Owns the scanner that reads `use` declarations and `crate::`/`super::`/`self::`/child-module
//! paths out of each crate's `src/`, resolves them to the file that defines the named item
//! (following imports and re-exports), and the checks on the resulting graph: inside each
//! directory module, no two of its children (a child file with everything below it) reach each
//! other in a circle; at the crate root that is the top-level modules of each crate. The
//! directory module's own file (`mod.rs`, `lib.rs`) is not one of the nodes: it declares,
//! re-exports and drives its children, and a child may use what it defines. Code under
//! `#[cfg(test)]` is left out: a test may reach anywhere. And two layering rules of
//! `proxy/src`: `policy` imports nothing else of the crate, and nothing imports `cli`.
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
    "landlock-shim/src/lib.rs",
    "identity/src/lib.rs",
    "resolver/src/lib.rs",
];

/// Directory modules whose files are not yet held to the rule, with why. Adding one back is
/// deleting its line.
const NOT_YET: &[(&str, &str)] = &[];

// === lexer ===

#[derive(Clone, Debug, PartialEq, Eq)]
enum Tok {
    Ident(String),
    /// `::`
    PathSep,
    Punct(char),
    /// A literal, a lifetime or a number: never part of a module path.
    Other,
}

#[derive(Clone, Debug)]
struct Token {
    tok: Tok,
    line: usize,
}

fn lex(text: &str) -> Vec<Token> {
    let c: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let mut line = 1;
    let is_ident_start = |ch: char| ch.is_alphabetic() || ch == '_';
    let is_ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    // Skips a "..." string starting at the quote `at`; returns the index after it.
    let skip_string = |at: usize, line: &mut usize| -> usize {
        let mut j = at + 1;
        while j < c.len() && c[j] != '"' {
            if c[j] == '\\' {
                j += 1;
            }
            if j < c.len() && c[j] == '\n' {
                *line += 1;
            }
            j += 1;
        }
        j + 1
    };
    // Skips a raw string whose `#`s start at `at` (after the `r`).
    let skip_raw = |at: usize, line: &mut usize| -> usize {
        let mut j = at;
        let mut hashes = 0;
        while j < c.len() && c[j] == '#' {
            hashes += 1;
            j += 1;
        }
        j += 1; // the opening quote
        while j < c.len() {
            if c[j] == '"' && (0..hashes).all(|h| c.get(j + 1 + h) == Some(&'#')) {
                return j + 1 + hashes;
            }
            if c[j] == '\n' {
                *line += 1;
            }
            j += 1;
        }
        j
    };
    // Skips a char literal whose quote is at `at`.
    let skip_char = |at: usize| -> usize {
        let mut j = at + 1;
        if c.get(j) == Some(&'\\') {
            j += 1;
        }
        j += 1;
        while j < c.len() && c[j] != '\'' {
            j += 1;
        }
        j + 1
    };
    while i < c.len() {
        let ch = c[i];
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && c.get(i + 1) == Some(&'/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && c.get(i + 1) == Some(&'*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if c[i] == '\n' {
                        line += 1;
                    }
                    i += 1;
                }
            }
        } else if ch == '"' {
            let start = line;
            i = skip_string(i, &mut line);
            out.push(Token {
                tok: Tok::Other,
                line: start,
            });
        } else if ch == '\'' {
            // 'a' or '\n' is a char literal; 'a without a closing quote is a lifetime.
            let is_char = c.get(i + 1) == Some(&'\\') || c.get(i + 2) == Some(&'\'');
            if is_char {
                i = skip_char(i);
            } else {
                i += 1;
                while i < c.len() && is_ident(c[i]) {
                    i += 1;
                }
            }
            out.push(Token {
                tok: Tok::Other,
                line,
            });
        } else if is_ident_start(ch) {
            let start = i;
            while i < c.len() && is_ident(c[i]) {
                i += 1;
            }
            let word: String = c[start..i].iter().collect();
            let next = c.get(i).copied();
            let raw = matches!(word.as_str(), "r" | "br" | "cr");
            if matches!(word.as_str(), "b" | "c") && next == Some('"') {
                i = skip_string(i, &mut line);
                out.push(Token {
                    tok: Tok::Other,
                    line,
                });
            } else if raw
                && (next == Some('"')
                    || (next == Some('#') && matches!(c.get(i + 1), Some('#' | '"'))))
            {
                i = skip_raw(i, &mut line);
                out.push(Token {
                    tok: Tok::Other,
                    line,
                });
            } else if word == "r" && next == Some('#') {
                // A raw identifier: r#type.
                let s = i + 1;
                i = s;
                while i < c.len() && is_ident(c[i]) {
                    i += 1;
                }
                out.push(Token {
                    tok: Tok::Ident(c[s..i].iter().collect()),
                    line,
                });
            } else if word == "b" && next == Some('\'') {
                i = skip_char(i);
                out.push(Token {
                    tok: Tok::Other,
                    line,
                });
            } else {
                out.push(Token {
                    tok: Tok::Ident(word),
                    line,
                });
            }
        } else if ch.is_ascii_digit() {
            while i < c.len() && is_ident(c[i]) {
                i += 1;
            }
            out.push(Token {
                tok: Tok::Other,
                line,
            });
        } else if ch == ':' && c.get(i + 1) == Some(&':') {
            out.push(Token {
                tok: Tok::PathSep,
                line,
            });
            i += 2;
        } else {
            out.push(Token {
                tok: Tok::Punct(ch),
                line,
            });
            i += 1;
        }
    }
    out
}

// === parser ===

/// A module path from the crate root: `["policy", "validate"]`.
type ModPath = Vec<String>;

/// What one file says about modules: which it declares, what its `use`s bind, which paths
/// it names. Positions are the module (the file's own, or an inline module in it).
#[derive(Debug, Default)]
struct FileScan {
    /// `mod x;` declared in this file (not under `#[cfg(test)]`), by declaring module.
    file_children: Vec<(ModPath, String)>,
    /// `mod x { ... }` in this file (not under `#[cfg(test)]`).
    inline_modules: Vec<ModPath>,
    /// `use` bindings: (module, bound name or "*" for a glob, path as written, line).
    uses: Vec<(ModPath, String, Vec<String>, usize)>,
    /// Every path this file names (in `use`s and in code): (module, segments, line).
    paths: Vec<(ModPath, Vec<String>, usize)>,
}

fn ident(t: Option<&Token>) -> Option<&str> {
    match t.map(|t| &t.tok) {
        Some(Tok::Ident(s)) => Some(s),
        _ => None,
    }
}

fn punct(t: Option<&Token>, p: char) -> bool {
    matches!(t.map(|t| &t.tok), Some(Tok::Punct(q)) if *q == p)
}

fn is_sep(t: Option<&Token>) -> bool {
    matches!(t.map(|t| &t.tok), Some(Tok::PathSep))
}

/// Parses a use tree at `*i` (after `use`), appending (binding, full path) pairs.
fn use_tree(
    toks: &[Token],
    i: &mut usize,
    prefix: &[String],
    out: &mut Vec<(String, Vec<String>)>,
) {
    let mut path = prefix.to_vec();
    if is_sep(toks.get(*i)) {
        *i += 1; // a leading `::`: an external crate
        path.push("::".to_string());
    }
    loop {
        let t = toks.get(*i);
        if punct(t, '*') {
            *i += 1;
            out.push(("*".to_string(), path));
            return;
        }
        if punct(t, '{') {
            *i += 1;
            loop {
                if punct(toks.get(*i), '}') {
                    *i += 1;
                    return;
                }
                if toks.get(*i).is_none() {
                    return;
                }
                use_tree(toks, i, &path, out);
                if punct(toks.get(*i), ',') {
                    *i += 1;
                }
            }
        }
        let Some(name) = ident(t) else { return };
        *i += 1;
        if is_sep(toks.get(*i)) {
            path.push(name.to_string());
            *i += 1;
            continue;
        }
        // The last segment: `name`, `self`, `name as alias`.
        let bound = if name == "self" {
            path.last().cloned().unwrap_or_default()
        } else {
            path.push(name.to_string());
            name.to_string()
        };
        let bound = if ident(toks.get(*i)) == Some("as") {
            *i += 1;
            let alias = ident(toks.get(*i)).unwrap_or("_").to_string();
            *i += 1;
            alias
        } else {
            bound
        };
        out.push((bound, path));
        return;
    }
}

/// Skips one item starting at `*i`: to a `;` outside brackets, or past the closing `}` of its
/// body.
fn skip_item(toks: &[Token], i: &mut usize) {
    let mut depth = 0usize;
    while let Some(t) = toks.get(*i) {
        *i += 1;
        match t.tok {
            Tok::Punct('(' | '[' | '{') => depth += 1,
            Tok::Punct(')' | ']') => depth = depth.saturating_sub(1),
            Tok::Punct('}') => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return;
                }
            }
            Tok::Punct(';') if depth == 0 => return,
            _ => {}
        }
    }
}

/// Skips the bracketed group that opens at `*i`.
fn skip_group(toks: &[Token], i: &mut usize) {
    let mut depth = 0usize;
    while let Some(t) = toks.get(*i) {
        *i += 1;
        match t.tok {
            Tok::Punct('(' | '[' | '{') => depth += 1,
            Tok::Punct(')' | ']' | '}') => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return;
                }
            }
            _ => {}
        }
    }
}

/// Reads an attribute whose `#` is at `*i`; returns whether it is `#[cfg(test)]`.
fn attribute(toks: &[Token], i: &mut usize) -> bool {
    *i += 1; // '#'
    if punct(toks.get(*i), '!') {
        *i += 1;
    }
    let start = *i;
    skip_group(toks, i);
    let body: Vec<&Tok> = toks[start..*i].iter().map(|t| &t.tok).collect();
    matches!(
        body.as_slice(),
        [Tok::Punct('['), Tok::Ident(cfg), Tok::Punct('('), Tok::Ident(test), Tok::Punct(')'), Tok::Punct(']')]
            if cfg == "cfg" && test == "test"
    )
}

fn scan_file(text: &str, module: &ModPath) -> FileScan {
    let toks = lex(text);
    let mut scan = FileScan::default();
    // Inline modules open in this file: (module path, brace depth at which it closes).
    let mut stack: Vec<(ModPath, usize)> = vec![(module.clone(), 0)];
    let mut depth = 0usize;
    let mut cfg_test = false;
    let mut i = 0;
    while i < toks.len() {
        let here = stack.last().map(|(m, _)| m.clone()).unwrap_or_default();
        let t = &toks[i];
        match &t.tok {
            Tok::Punct('#') if punct(toks.get(i + 1), '[') || punct(toks.get(i + 1), '!') => {
                cfg_test |= attribute(&toks, &mut i);
                continue;
            }
            Tok::Punct('{') => depth += 1,
            Tok::Punct('}') => {
                if stack.len() > 1 && stack.last().map(|(_, d)| *d) == Some(depth) {
                    stack.pop();
                }
                depth = depth.saturating_sub(1);
            }
            Tok::Ident(w)
                if cfg_test && !matches!(w.as_str(), "pub" | "crate" | "super" | "in") =>
            {
                // The item under #[cfg(test)]: a test module's file is not scanned at all.
                skip_item(&toks, &mut i);
                cfg_test = false;
                continue;
            }
            Tok::Ident(w) if w == "mod" => {
                if let Some(name) = ident(toks.get(i + 1)) {
                    if punct(toks.get(i + 2), ';') {
                        scan.file_children.push((here.clone(), name.to_string()));
                        i += 3;
                        continue;
                    }
                    if punct(toks.get(i + 2), '{') {
                        let mut inner = here.clone();
                        inner.push(name.to_string());
                        scan.inline_modules.push(inner.clone());
                        depth += 1;
                        stack.push((inner, depth));
                        i += 3;
                        continue;
                    }
                }
            }
            // `use` as an item (not `+ use<'a>` precise capturing).
            Tok::Ident(w) if w == "use" && !punct(toks.get(i + 1), '<') => {
                let line = t.line;
                i += 1;
                let mut bound = Vec::new();
                use_tree(&toks, &mut i, &[], &mut bound);
                for (name, path) in bound {
                    scan.paths.push((here.clone(), path.clone(), line));
                    scan.uses.push((here.clone(), name, path, line));
                }
                continue;
            }
            Tok::Ident(first)
                if is_sep(toks.get(i + 1)) && !is_sep(toks.get(i.wrapping_sub(1))) =>
            {
                let line = t.line;
                let mut path = vec![first.clone()];
                let mut j = i + 1;
                while is_sep(toks.get(j)) {
                    match ident(toks.get(j + 1)) {
                        Some(s) => path.push(s.to_string()),
                        None => break, // `::<` or `::{` (a use tree is parsed above)
                    }
                    j += 2;
                }
                scan.paths.push((here.clone(), path, line));
                i = j;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    scan
}

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
fn policy_imports_nothing_else_of_sluice_and_nothing_imports_cli() {
    let krate = load_crate(&workspace().join("proxy/src/lib.rs"));
    let top = |f: &Path| krate.module_of(f).and_then(|m| m.first()).cloned();
    let mut wrong = Vec::new();
    for ((from, to), line) in krate.edges() {
        let (Some(a), Some(b)) = (top(&from), top(&to)) else {
            continue;
        };
        if a != b && (a == "policy" || b == "cli") {
            wrong.push(format!("{}:{line} uses {}", shown(&from), shown(&to)));
        }
    }
    assert!(
        wrong.is_empty(),
        "policy must stand alone (it is the engine `sluice policy` and the proxy share), and \
         cli is the shell nothing else depends on:\n{}",
        wrong.join("\n")
    );
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
