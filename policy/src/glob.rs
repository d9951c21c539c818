//! The one glob engine of sluice, and its two languages.
//!
//! `Glob` is a segment-bound glob over a delimiter (`/` for paths and binaries, `.` for query
//! values): `*` and `?` stay inside a segment, `**` crosses segments with globset's rules
//! (`**/x` prefix, `x/**` suffix, `/**/` middle; elsewhere it degrades to `*`), `[...]` classes
//! and `{a,b}` alternation. `HostPattern` is the host-label language built on it (`*` inside one
//! label, `**` as the whole first label for one or more labels). Policy matching, credential
//! binding and the ambiguity check all use these types, and nothing else, so they cannot
//! disagree (the reference has four engines that do: spec §11.4).
//!
//! Both languages also answer "can these two patterns match a common string?"
//! (`Glob::intersects`, `HostPattern::intersects`), which the ambiguity check needs.

use std::fmt;

/// Bound on the alternatives a pattern may expand to (`{a,b}` and `/**/` multiply).
const MAX_ALTERNATIVES: usize = 256;

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GlobError {
    #[error("unclosed character class `[` in pattern `{0}`")]
    UnclosedClass(String),
    #[error("unclosed alternation `{{` in pattern `{0}`")]
    UnclosedAlternation(String),
    #[error("nested alternation `{{...{{` is not supported in pattern `{0}`")]
    NestedAlternation(String),
    #[error("unmatched `}}` in pattern `{0}`")]
    UnmatchedBrace(String),
    #[error("dangling escape `\\` at the end of pattern `{0}`")]
    DanglingEscape(String),
    #[error("pattern `{0}` expands to more than 256 alternatives")]
    TooManyAlternatives(String),
    #[error("invalid range in character class of pattern `{0}`")]
    InvalidRange(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Tok {
    /// A literal run.
    Lit(String),
    /// `?`: one character that is not the delimiter.
    One,
    /// `[...]`: one character (not the delimiter) in (or, negated, not in) the ranges.
    Class {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
    /// `*`: any run of characters without the delimiter.
    Star,
    /// From `**` forms: any run of characters, delimiter included.
    AnyStar,
}

/// One alternative: a sequence of tokens.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Seq(Vec<Tok>);

/// A compiled glob. Matching never allocates for literal and prefix patterns.
#[derive(Clone, PartialEq, Eq)]
pub struct Glob {
    source: String,
    delimiter: char,
    alts: Vec<Seq>,
}

impl fmt::Debug for Glob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Glob({:?})", self.source)
    }
}

impl fmt::Display for Glob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

/// Parse tree before expansion of alternatives.
enum Piece {
    Tok(Tok),
    Choice(Vec<Vec<Piece>>),
}

impl Glob {
    /// Compiles `pattern` with `delimiter` as the segment separator.
    pub fn new(pattern: &str, delimiter: char) -> Result<Glob, GlobError> {
        let pieces = parse(pattern, delimiter)?;
        let alts = if pieces.iter().any(|p| matches!(p, Piece::Choice(_))) {
            let mut alts = vec![Vec::new()];
            expand(&pieces, &mut alts, pattern)?;
            alts
        } else {
            vec![
                pieces
                    .into_iter()
                    .filter_map(|p| match p {
                        Piece::Tok(t) => Some(t),
                        Piece::Choice(_) => None,
                    })
                    .collect(),
            ]
        };
        let alts = alts
            .into_iter()
            .map(|toks| Seq(merge_literals(toks)))
            .collect();
        Ok(Glob {
            source: pattern.to_string(),
            delimiter,
            alts,
        })
    }

    /// Like `new`, but a pattern ending in `<d>**` also matches the bare prefix (`/x/**`
    /// covers `/x`). Used for deny rules (spec §13 row 18) and credential binding paths.
    pub fn new_covering_prefix(pattern: &str, delimiter: char) -> Result<Glob, GlobError> {
        let mut glob = Glob::new(pattern, delimiter)?;
        let suffix: String = [delimiter, '*', '*'].iter().collect();
        // `/x/**` and `/x/**/**` alike also cover `/x`.
        let mut stripped = pattern.strip_suffix(&suffix);
        while let Some(p) = stripped.and_then(|p| p.strip_suffix(&suffix)) {
            stripped = Some(p);
        }
        if let Some(prefix) = stripped
            && !prefix.is_empty()
            && !prefix.ends_with(delimiter)
        {
            let base = Glob::new(prefix, delimiter)?;
            glob.alts.extend(base.alts);
            if glob.alts.len() > MAX_ALTERNATIVES {
                return Err(GlobError::TooManyAlternatives(pattern.to_string()));
            }
        }
        Ok(glob)
    }

    pub(super) fn as_str(&self) -> &str {
        &self.source
    }

    /// True when the pattern has no glob syntax at all.
    pub fn is_literal(&self) -> bool {
        matches!(self.alts.as_slice(), [Seq(t)] if t.iter().all(|t| matches!(t, Tok::Lit(_))))
    }

    /// Number of characters that are not `*` (the reference's `path_specificity`).
    pub(super) fn specificity(&self) -> usize {
        self.source.chars().filter(|&c| c != '*').count()
    }

    pub fn is_match(&self, input: &str) -> bool {
        self.alts
            .iter()
            .any(|seq| seq.is_match(input, self.delimiter))
    }

    /// Whether some string is matched by both globs (same delimiter assumed).
    pub fn intersects(&self, other: &Glob) -> bool {
        self.alts.iter().any(|a| {
            other
                .alts
                .iter()
                .any(|b| seq_intersect(a, b, self.delimiter))
        })
    }
}

fn parse(pattern: &str, delim: char) -> Result<Vec<Piece>, GlobError> {
    let chars: Vec<char> = pattern.chars().collect();
    let mut top: Vec<Piece> = Vec::new();
    // Inside `{...}`: the alternatives so far and the current one.
    let mut alt: Option<(Vec<Vec<Piece>>, Vec<Piece>)> = None;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        // Each arm yields the piece and how many characters it consumed.
        let (piece, used) = match c {
            '\\' => {
                let Some(&next) = chars.get(i + 1) else {
                    return Err(GlobError::DanglingEscape(pattern.to_string()));
                };
                (Piece::Tok(Tok::Lit(next.to_string())), 2)
            }
            '?' => (Piece::Tok(Tok::One), 1),
            '[' => {
                let (tok, end) = parse_class(&chars, i, pattern)?;
                (Piece::Tok(tok), end + 1 - i)
            }
            '{' => {
                if alt.is_some() {
                    return Err(GlobError::NestedAlternation(pattern.to_string()));
                }
                alt = Some((Vec::new(), Vec::new()));
                i += 1;
                continue;
            }
            ',' if alt.is_some() => {
                if let Some((done, cur)) = alt.as_mut() {
                    done.push(std::mem::take(cur));
                }
                i += 1;
                continue;
            }
            '}' => {
                let Some((mut done, cur)) = alt.take() else {
                    return Err(GlobError::UnmatchedBrace(pattern.to_string()));
                };
                done.push(cur);
                top.push(Piece::Choice(done));
                i += 1;
                continue;
            }
            '*' if chars.get(i + 1) == Some(&'*') => double_star(&chars, i, delim),
            '*' => (Piece::Tok(Tok::Star), 1),
            other => (Piece::Tok(Tok::Lit(other.to_string())), 1),
        };
        i += used;
        let list = match alt.as_mut() {
            Some((_, cur)) => cur,
            None => &mut top,
        };
        // Runs of literal characters become one token (loading thousands of globs is hot).
        match (list.last_mut(), piece) {
            (Some(Piece::Tok(Tok::Lit(prev))), Piece::Tok(Tok::Lit(s))) => prev.push_str(&s),
            (_, piece) => list.push(piece),
        }
    }
    if alt.is_some() {
        return Err(GlobError::UnclosedAlternation(pattern.to_string()));
    }
    Ok(top)
}

/// globset's `**` rules (with `literal_separator`), for a `**` starting at `i`.
fn double_star(chars: &[char], i: usize, delim: char) -> (Piece, usize) {
    let at_start = i == 0;
    let after_delim = i > 0 && chars[i - 1] == delim;
    let at_end = i + 2 == chars.len();
    let before_delim = chars.get(i + 2) == Some(&delim);
    // `**/rest` or `a/**/b`: nothing, or anything that ends in a delimiter.
    let zero_or_more_segments = || {
        Piece::Choice(vec![
            vec![],
            vec![
                Piece::Tok(Tok::AnyStar),
                Piece::Tok(Tok::Lit(delim.to_string())),
            ],
        ])
    };
    // `**`, `**/`, `**/**/`: a pattern of nothing but recursive prefixes matches everything
    // (as in globset).
    let only_prefixes = chars[i..].chunks(3).all(|c| {
        c.len() >= 2 && c[0] == '*' && c[1] == '*' && c.get(2).is_none_or(|&d| d == delim)
    });
    if at_start && only_prefixes {
        (Piece::Tok(Tok::AnyStar), chars.len() - i)
    } else if (at_start || after_delim) && before_delim {
        (zero_or_more_segments(), 3)
    } else if after_delim && at_end {
        // `prefix/**`: the delimiter is already emitted; anything after it.
        (Piece::Tok(Tok::AnyStar), 2)
    } else {
        // Adjacent to other characters: two `*`, which is one.
        (Piece::Tok(Tok::Star), 2)
    }
}

fn parse_class(chars: &[char], start: usize, pattern: &str) -> Result<(Tok, usize), GlobError> {
    let mut i = start + 1;
    let negated = matches!(chars.get(i), Some('!' | '^'));
    if negated {
        i += 1;
    }
    let mut ranges = Vec::new();
    let mut first = true;
    loop {
        let Some(&c) = chars.get(i) else {
            return Err(GlobError::UnclosedClass(pattern.to_string()));
        };
        if c == ']' && !first {
            break;
        }
        first = false;
        if chars.get(i + 1) == Some(&'-') && chars.get(i + 2).is_some_and(|&e| e != ']') {
            let end = chars[i + 2];
            if end < c {
                return Err(GlobError::InvalidRange(pattern.to_string()));
            }
            ranges.push((c, end));
            i += 3;
        } else {
            ranges.push((c, c));
            i += 1;
        }
    }
    // `i` is at the closing `]`; the caller advances past it.
    Ok((Tok::Class { negated, ranges }, i))
}

fn expand(pieces: &[Piece], alts: &mut Vec<Vec<Tok>>, pattern: &str) -> Result<(), GlobError> {
    for piece in pieces {
        match piece {
            Piece::Tok(t) => alts.iter_mut().for_each(|a| a.push(t.clone())),
            Piece::Choice(options) => {
                let mut next = Vec::new();
                for option in options {
                    let mut branch = alts.clone();
                    expand(option, &mut branch, pattern)?;
                    next.extend(branch);
                    if next.len() > MAX_ALTERNATIVES {
                        return Err(GlobError::TooManyAlternatives(pattern.to_string()));
                    }
                }
                *alts = next;
            }
        }
    }
    Ok(())
}

fn merge_literals(toks: Vec<Tok>) -> Vec<Tok> {
    let mut out: Vec<Tok> = Vec::with_capacity(toks.len());
    for t in toks {
        match (out.last_mut(), t) {
            (Some(Tok::Lit(prev)), Tok::Lit(s)) => prev.push_str(&s),
            // `**` next to `*` is still one run.
            (Some(Tok::AnyStar), Tok::Star | Tok::AnyStar) => {}
            (Some(last @ Tok::Star), Tok::AnyStar) => *last = Tok::AnyStar,
            (Some(Tok::Star), Tok::Star) => {}
            (_, t) => out.push(t),
        }
    }
    out
}

impl Tok {
    fn accepts(&self, c: char, delim: char) -> bool {
        match self {
            Tok::One => c != delim,
            Tok::Class { negated, ranges } => {
                c != delim && (ranges.iter().any(|&(lo, hi)| lo <= c && c <= hi) != *negated)
            }
            Tok::Star => c != delim,
            Tok::AnyStar => true,
            Tok::Lit(_) => false,
        }
    }
}

impl Seq {
    fn is_match(&self, input: &str, delim: char) -> bool {
        let toks = self.0.as_slice();
        // Fast paths for the shapes policies use most.
        match toks {
            [] => return input.is_empty(),
            [Tok::Lit(l)] => return input == l,
            [Tok::Lit(l), Tok::AnyStar] => return input.starts_with(l.as_str()),
            [Tok::AnyStar] => return true,
            _ => {}
        }
        // Set of reachable byte positions, advanced token by token.
        let mut positions: Vec<usize> = vec![0];
        let mut next: Vec<usize> = Vec::new();
        for tok in toks {
            next.clear();
            match tok {
                Tok::Lit(l) => {
                    for &p in &positions {
                        if input[p..].starts_with(l.as_str()) {
                            next.push(p + l.len());
                        }
                    }
                }
                Tok::One | Tok::Class { .. } => {
                    for &p in &positions {
                        if let Some(c) = input[p..].chars().next()
                            && tok.accepts(c, delim)
                        {
                            next.push(p + c.len_utf8());
                        }
                    }
                }
                Tok::Star => {
                    // Runs from increasing start positions end at the same delimiter, so a
                    // start inside the previous run adds nothing new.
                    let mut run_end: Option<usize> = None;
                    for &p in &positions {
                        if run_end.is_some_and(|end| p <= end) {
                            continue;
                        }
                        next.push(p);
                        let mut end = p;
                        for (off, c) in input[p..].char_indices() {
                            if c == delim {
                                break;
                            }
                            end = p + off + c.len_utf8();
                            next.push(end);
                        }
                        run_end = Some(end);
                    }
                }
                Tok::AnyStar => {
                    if let Some(&min) = positions.first() {
                        next.extend(
                            input
                                .char_indices()
                                .map(|(i, _)| i)
                                .filter(|&i| i >= min)
                                .chain(std::iter::once(input.len())),
                        );
                    }
                }
            }
            next.sort_unstable();
            next.dedup();
            std::mem::swap(&mut positions, &mut next);
            if positions.is_empty() {
                return false;
            }
        }
        positions.last() == Some(&input.len())
    }
}

/// Character-level token for the intersection automaton.
#[derive(Clone, Debug)]
enum CTok<'a> {
    Char(char),
    Other(&'a Tok),
}

fn char_toks(seq: &Seq) -> Vec<CTok<'_>> {
    let mut out = Vec::new();
    for t in &seq.0 {
        match t {
            Tok::Lit(s) => out.extend(s.chars().map(CTok::Char)),
            other => out.push(CTok::Other(other)),
        }
    }
    out
}

fn is_loop(t: &CTok<'_>) -> bool {
    matches!(t, CTok::Other(Tok::Star | Tok::AnyStar))
}

fn ctok_accepts(t: &CTok<'_>, c: char, delim: char) -> bool {
    match t {
        CTok::Char(x) => *x == c,
        CTok::Other(tok) => tok.accepts(c, delim),
    }
}

/// Emptiness of the intersection of two token sequences, by exploring the product automaton
/// over an alphabet that represents every character class the patterns can tell apart: all
/// printable ASCII, the delimiter, every non-ASCII literal and one non-ASCII stand-in.
fn seq_intersect(a: &Seq, b: &Seq, delim: char) -> bool {
    let ta = char_toks(a);
    let tb = char_toks(b);
    let mut alphabet: Vec<char> = (0x20u8..0x7f).map(char::from).collect();
    alphabet.push(delim);
    alphabet.push('\u{e000}');
    for t in ta.iter().chain(tb.iter()) {
        match t {
            CTok::Char(c) => alphabet.push(*c),
            CTok::Other(Tok::Class { ranges, .. }) => {
                for &(lo, hi) in ranges {
                    alphabet.push(lo);
                    alphabet.push(hi);
                }
            }
            CTok::Other(_) => {}
        }
    }
    alphabet.sort_unstable();
    alphabet.dedup();

    let (na, nb) = (ta.len(), tb.len());
    let mut seen = vec![false; (na + 1) * (nb + 1)];
    let mut stack = vec![(0usize, 0usize)];
    while let Some((i, j)) = stack.pop() {
        if seen[i * (nb + 1) + j] {
            continue;
        }
        seen[i * (nb + 1) + j] = true;
        if i == na && j == nb {
            return true;
        }
        // Epsilon moves: a loop token may match nothing.
        if i < na && is_loop(&ta[i]) {
            stack.push((i + 1, j));
        }
        if j < nb && is_loop(&tb[j]) {
            stack.push((i, j + 1));
        }
        if i == na || j == nb {
            continue;
        }
        for &c in &alphabet {
            if ctok_accepts(&ta[i], c, delim) && ctok_accepts(&tb[j], c, delim) {
                let ni = if is_loop(&ta[i]) { i } else { i + 1 };
                let nj = if is_loop(&tb[j]) { j } else { j + 1 };
                stack.push((ni, nj));
            }
        }
    }
    false
}

// === impl HostPattern ===

/// Why a host pattern was refused at load.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HostPatternError {
    #[error(
        "a wildcard host needs at least three labels (`{0}` would match a whole top-level domain)"
    )]
    TooBroad(String),
    #[error("`**` is only allowed as the whole first label (`**.example.com`), not in `{0}`")]
    MisplacedDoubleStar(String),
    #[error(
        "a partial-label wildcard such as `api-*` is only allowed in the first label, not in `{0}`"
    )]
    PartialLabelWildcard(String),
    #[error("empty label in host `{0}`")]
    EmptyLabel(String),
    #[error("{0}")]
    Glob(#[from] GlobError),
}

/// One label of a wildcard host pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Label {
    Lit(String),
    Glob(Glob),
}

impl Label {
    fn is_match(&self, label: &str) -> bool {
        match self {
            Label::Lit(l) => l == label,
            Label::Glob(g) => g.is_match(label),
        }
    }

    fn as_glob(&self) -> Glob {
        match self {
            Label::Glob(g) => g.clone(),
            // A literal label cannot fail to compile once escaped.
            Label::Lit(l) => Glob {
                source: l.clone(),
                delimiter: '.',
                alts: vec![Seq(vec![Tok::Lit(l.clone())])],
            },
        }
    }
}

/// A policy host: exact (compared case-insensitively, as text: spec §13 row 5), a wildcard
/// pattern over labels, or any host (an endpoint with only `allowed_ips`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostPattern {
    Any,
    Exact(String),
    Wildcard {
        source: String,
        /// `**` as the first label: one or more labels before `labels`.
        leading_multi: bool,
        labels: Vec<Label>,
    },
}

impl HostPattern {
    /// Compiles a host from a policy. Like the reference, a host is a pattern only when it
    /// contains `*` (spec §13 row 2); otherwise `?`, `[` and `{` are literal text.
    pub fn new(host: &str) -> Result<HostPattern, HostPatternError> {
        let host = host.to_ascii_lowercase();
        // One trailing dot names the same host (the fully qualified form): dropped, as the
        // target's is (`canon::normalize_host`).
        let host = match host.strip_suffix('.') {
            Some(h) if !h.is_empty() => h.to_string(),
            _ => host,
        };
        if host.is_empty() {
            return Ok(HostPattern::Any);
        }
        if !host.contains('*') {
            return Ok(HostPattern::Exact(host));
        }
        let parts: Vec<&str> = host.split('.').collect();
        if parts.len() <= 2 {
            return Err(HostPatternError::TooBroad(host));
        }
        let mut leading_multi = false;
        let mut labels = Vec::with_capacity(parts.len());
        for (i, part) in parts.iter().enumerate() {
            if part.is_empty() {
                return Err(HostPatternError::EmptyLabel(host));
            }
            if part.contains("**") {
                if i == 0 && *part == "**" {
                    leading_multi = true;
                    continue;
                }
                return Err(HostPatternError::MisplacedDoubleStar(host));
            }
            if part.contains('*') && *part != "*" && i != 0 {
                return Err(HostPatternError::PartialLabelWildcard(host));
            }
            if part.contains(['*', '?', '[', '{', '\\']) {
                labels.push(Label::Glob(Glob::new(part, '.')?));
            } else {
                labels.push(Label::Lit((*part).to_string()));
            }
        }
        Ok(HostPattern::Wildcard {
            source: host,
            leading_multi,
            labels,
        })
    }

    pub fn is_wildcard(&self) -> bool {
        matches!(self, HostPattern::Wildcard { .. })
    }

    /// True when the last label is a wildcard (`api.example.*`), which `policy check` warns about.
    pub fn has_wildcard_tld(&self) -> bool {
        match self {
            HostPattern::Wildcard { labels, .. } => matches!(labels.last(), Some(Label::Glob(_))),
            _ => false,
        }
    }

    /// The literal labels after the last wildcard label, joined (`*.api.example.com` →
    /// `api.example.com`); used to index wildcard endpoints by suffix.
    pub fn literal_suffix(&self) -> Option<String> {
        match self {
            HostPattern::Wildcard { labels, .. } => {
                let lits: Vec<&str> = labels
                    .iter()
                    .rev()
                    .map_while(|l| match l {
                        Label::Lit(s) => Some(s.as_str()),
                        Label::Glob(_) => None,
                    })
                    .collect();
                if lits.is_empty() {
                    None
                } else {
                    Some(lits.into_iter().rev().collect::<Vec<_>>().join("."))
                }
            }
            _ => None,
        }
    }

    /// `host` must already be lower-case (the target parser lower-cases it).
    pub fn is_match(&self, host: &str) -> bool {
        match self {
            HostPattern::Any => true,
            HostPattern::Exact(h) => h == host,
            HostPattern::Wildcard {
                leading_multi,
                labels,
                ..
            } => {
                let mut it = host.rsplit('.');
                for label in labels.iter().rev() {
                    match it.next() {
                        Some(part) if label.is_match(part) => {}
                        _ => return false,
                    }
                }
                if *leading_multi {
                    it.next().is_some()
                } else {
                    it.next().is_none()
                }
            }
        }
    }

    /// Whether some host name matches both patterns.
    pub fn intersects(&self, other: &HostPattern) -> bool {
        match (self, other) {
            (HostPattern::Any, _) | (_, HostPattern::Any) => true,
            (HostPattern::Exact(a), b) => b.is_match(a),
            (a, HostPattern::Exact(b)) => a.is_match(b),
            (
                HostPattern::Wildcard {
                    leading_multi: ma,
                    labels: la,
                    ..
                },
                HostPattern::Wildcard {
                    leading_multi: mb,
                    labels: lb,
                    ..
                },
            ) => {
                // Align from the right; the shorter side's `**` must absorb the rest.
                let common = la.len().min(lb.len());
                let suffix_ok = la
                    .iter()
                    .rev()
                    .zip(lb.iter().rev())
                    .take(common)
                    .all(|(x, y)| x.as_glob().intersects(&y.as_glob()));
                if !suffix_ok {
                    return false;
                }
                match (ma, mb) {
                    (false, false) => la.len() == lb.len(),
                    (true, true) => true,
                    // Only `a` has `**`: `b` needs more labels than `a`'s fixed part.
                    (true, false) => lb.len() > la.len(),
                    (false, true) => la.len() > lb.len(),
                }
            }
        }
    }
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostPattern::Any => f.write_str("<any-host>"),
            HostPattern::Exact(h) => f.write_str(h),
            HostPattern::Wildcard { source, .. } => f.write_str(source),
        }
    }
}

#[cfg(test)]
mod tests;
