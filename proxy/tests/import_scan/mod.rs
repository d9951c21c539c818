//! The scanner of `import_graph.rs`: a small lexer (comments, strings, raw strings, char
//! literals and lifetimes skipped) and a parser of use trees, which reads what one source
//! file declares, imports and names. It does not expand macros.

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
pub(crate) type ModPath = Vec<String>;

/// What one file says about modules: which it declares, what its `use`s bind, which paths
/// it names. Positions are the module (the file's own, or an inline module in it).
#[derive(Debug, Default)]
pub(crate) struct FileScan {
    /// `mod x;` declared in this file (not under `#[cfg(test)]`), by declaring module.
    pub(crate) file_children: Vec<(ModPath, String)>,
    /// `mod x { ... }` in this file (not under `#[cfg(test)]`).
    pub(crate) inline_modules: Vec<ModPath>,
    /// `use` bindings: (module, bound name or "*" for a glob, path as written, line).
    pub(crate) uses: Vec<(ModPath, String, Vec<String>, usize)>,
    /// Every path this file names (in `use`s and in code): (module, segments, line).
    pub(crate) paths: Vec<(ModPath, Vec<String>, usize)>,
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

pub(crate) fn scan_file(text: &str, module: &ModPath) -> FileScan {
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
