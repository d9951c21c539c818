//! A YAML document as a tree of nodes that remember where they came from.
//!
//! Owns the step "text → positioned tree": it drives `saphyr-parser`'s event stream, resolves
//! aliases (with a node budget, so an alias bomb is an error, not an allocation storm) and
//! records every node's line and column. It knows nothing about policies: the schema lives in
//! `raw.rs`. Duplicate mapping keys are kept here (in order) so the schema layer can decide
//! whether a duplicate is an error or, in `--compat openshell`, a warning.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;

use saphyr_parser::{Event, Parser, ScalarStyle, Span};

/// Upper bound on nodes materialised from one document, aliases expanded.
const MAX_NODES: usize = 1_000_000;
/// Upper bound on nodes materialised by alias expansion. Checked before an alias is copied, so
/// a bomb (each anchor ten aliases of the previous one) is refused before it allocates; a
/// policy reuses a few small lists, never thousands of nodes.
const MAX_ALIAS_NODES: usize = 100_000;
/// Upper bound on nesting depth, so a hostile document cannot blow the stack.
const MAX_DEPTH: usize = 128;

/// A 1-based line and column in a source file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Pos {
    pub line: u32,
    pub col: u32,
}

impl Pos {
    pub const fn new(line: u32, col: u32) -> Self {
        Pos { line, col }
    }

    fn from_span(span: &Span) -> Self {
        // saphyr lines are 1-based, columns 0-based.
        let line = u32::try_from(span.start.line()).unwrap_or(u32::MAX);
        let col = u32::try_from(span.start.col().saturating_add(1)).unwrap_or(u32::MAX);
        Pos { line, col }
    }
}

impl fmt::Display for Pos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.col)
    }
}

/// How a scalar was written, which decides how it may be read (a quoted `"443"` is text).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    Plain,
    Quoted,
}

/// Scalars borrow from the source text where the parser allows it: a policy of thousands of
/// endpoints has hundreds of thousands of scalars, most of them keys that are only compared.
#[derive(Clone, Debug, PartialEq)]
pub enum Kind<'a> {
    Scalar(Cow<'a, str>, Style),
    Seq(Vec<Node<'a>>),
    Map(Vec<(Node<'a>, Node<'a>)>),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Node<'a> {
    pub kind: Kind<'a>,
    pub pos: Pos,
}

impl Node<'_> {
    /// True for `~`, `null`, `Null`, `NULL` and an empty plain scalar (YAML 1.2 core schema).
    pub fn is_null(&self) -> bool {
        matches!(&self.kind, Kind::Scalar(s, Style::Plain) if matches!(s.as_ref(), "" | "~" | "null" | "Null" | "NULL"))
    }

    /// A short word for the node's type, for "expected X, found Y" messages.
    pub fn type_name(&self) -> &'static str {
        match &self.kind {
            Kind::Seq(_) => "a list",
            Kind::Map(_) => "a mapping",
            Kind::Scalar(..) if self.is_null() => "null",
            Kind::Scalar(_, Style::Quoted) => "a string",
            Kind::Scalar(s, Style::Plain) => {
                if parse_bool(s).is_some() {
                    "a boolean"
                } else if parse_int(s).is_some() {
                    "an integer"
                } else if s.parse::<f64>().is_ok() {
                    "a number"
                } else {
                    "a string"
                }
            }
        }
    }
}

/// YAML 1.2 core-schema booleans.
pub fn parse_bool(s: &str) -> Option<bool> {
    match s {
        "true" | "True" | "TRUE" => Some(true),
        "false" | "False" | "FALSE" => Some(false),
        _ => None,
    }
}

/// YAML 1.2 core-schema integers (decimal, `0o` octal, `0x` hex), as i128 so range errors
/// can be reported by the caller with the number the user wrote.
pub fn parse_int(s: &str) -> Option<i128> {
    let (neg, digits) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let value = if let Some(hex) = digits.strip_prefix("0x") {
        i128::from_str_radix(hex, 16).ok()?
    } else if let Some(oct) = digits.strip_prefix("0o") {
        i128::from_str_radix(oct, 8).ok()?
    } else if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        digits.parse::<i128>().ok()?
    } else {
        return None;
    };
    Some(if neg { -value } else { value })
}

/// A YAML syntax error, with where the parser stopped.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct SyntaxError {
    pub pos: Pos,
    pub message: String,
    /// The document was well formed but over a size budget (nodes, aliases, nesting): no
    /// authoring hint about the text at `pos` applies.
    pub over_budget: bool,
}

/// Parses one YAML document. An empty file is `Ok(None)`; more than one document is an error.
pub fn parse(text: &str) -> Result<Option<Node<'_>>, SyntaxError> {
    let mut builder = Builder {
        parser: Parser::new_from_str(text),
        anchors: HashMap::new(),
        nodes: 0,
        alias_nodes: 0,
        last_pos: Pos::new(1, 1),
    };
    builder.document()
}

struct Builder<'a> {
    parser: Parser<'a, saphyr_parser::StrInput<'a>>,
    /// Anchored nodes with their size in nodes, so an alias is counted before it is copied.
    anchors: HashMap<usize, (Node<'a>, usize)>,
    nodes: usize,
    alias_nodes: usize,
    last_pos: Pos,
}

impl<'a> Builder<'a> {
    fn next(&mut self) -> Result<(Event<'a>, Pos), SyntaxError> {
        match self.parser.next_event() {
            Some(Ok((event, span))) => {
                let pos = Pos::from_span(&span);
                self.last_pos = pos;
                Ok((event, pos))
            }
            Some(Err(e)) => {
                let m = e.marker();
                Err(SyntaxError {
                    pos: Pos::new(
                        u32::try_from(m.line()).unwrap_or(u32::MAX),
                        u32::try_from(m.col().saturating_add(1)).unwrap_or(u32::MAX),
                    ),
                    message: format!("invalid YAML: {}", e.info()),
                    over_budget: false,
                })
            }
            None => Err(self.error(self.last_pos, "invalid YAML: unexpected end of input")),
        }
    }

    fn error(&self, pos: Pos, message: &str) -> SyntaxError {
        SyntaxError {
            pos,
            message: message.to_string(),
            over_budget: false,
        }
    }

    fn over_budget(&self, pos: Pos, message: &str) -> SyntaxError {
        SyntaxError {
            over_budget: true,
            ..self.error(pos, message)
        }
    }

    fn document(&mut self) -> Result<Option<Node<'a>>, SyntaxError> {
        let mut root = None;
        loop {
            let (event, pos) = self.next()?;
            match event {
                Event::StreamStart | Event::Nothing => {}
                Event::StreamEnd => return Ok(root),
                Event::DocumentStart(_) => {
                    if root.is_some() {
                        return Err(self.error(
                            pos,
                            "a policy file holds one YAML document; found a second one",
                        ));
                    }
                    let (event, pos) = self.next()?;
                    root = Some(self.node(event, pos, 0)?);
                }
                Event::DocumentEnd => {}
                _ => return Err(self.error(pos, "invalid YAML: unexpected event")),
            }
        }
    }

    fn count(&mut self, pos: Pos, add: usize) -> Result<(), SyntaxError> {
        self.nodes = self.nodes.saturating_add(add);
        if self.nodes > MAX_NODES {
            return Err(self.over_budget(
                pos,
                "document too large: more than 1000000 nodes (alias bomb?)",
            ));
        }
        Ok(())
    }

    fn node(&mut self, event: Event<'a>, pos: Pos, depth: usize) -> Result<Node<'a>, SyntaxError> {
        if depth > MAX_DEPTH {
            return Err(self.over_budget(pos, "document nested too deeply (more than 128 levels)"));
        }
        self.count(pos, 1)?;
        let (node, anchor) = match event {
            Event::Scalar(value, style, anchor, tag) => {
                let style = match style {
                    ScalarStyle::Plain if tag.is_none() => Style::Plain,
                    ScalarStyle::Plain => tagged_style(tag.as_deref(), pos)?,
                    _ => Style::Quoted,
                };
                (
                    Node {
                        kind: Kind::Scalar(value, style),
                        pos,
                    },
                    anchor,
                )
            }
            Event::SequenceStart(anchor, _) => {
                let mut items = Vec::new();
                loop {
                    let (event, item_pos) = self.next()?;
                    if event == Event::SequenceEnd {
                        break;
                    }
                    items.push(self.node(event, item_pos, depth + 1)?);
                }
                (
                    Node {
                        kind: Kind::Seq(items),
                        pos,
                    },
                    anchor,
                )
            }
            Event::MappingStart(anchor, _) => {
                let mut pairs = Vec::new();
                loop {
                    let (event, key_pos) = self.next()?;
                    if event == Event::MappingEnd {
                        break;
                    }
                    let key = self.node(event, key_pos, depth + 1)?;
                    let (event, value_pos) = self.next()?;
                    let value = self.node(event, value_pos, depth + 1)?;
                    pairs.push((key, value));
                }
                (
                    Node {
                        kind: Kind::Map(pairs),
                        pos,
                    },
                    anchor,
                )
            }
            Event::Alias(id) => {
                let Some(&(_, target_size)) = self.anchors.get(&id) else {
                    return Err(self.error(pos, "invalid YAML: alias to an unknown anchor"));
                };
                self.alias_nodes = self.alias_nodes.saturating_add(target_size);
                if self.alias_nodes > MAX_ALIAS_NODES {
                    return Err(self.over_budget(
                        pos,
                        "aliases expand to more than 100000 nodes (alias bomb?)",
                    ));
                }
                // The alias node itself was counted above; its content is counted here.
                self.count(pos, target_size.saturating_sub(1))?;
                let Some((target, _)) = self.anchors.get(&id) else {
                    return Err(self.error(pos, "invalid YAML: alias to an unknown anchor"));
                };
                // The alias is reported where it is used, its content where it was written.
                return Ok(target.clone());
            }
            _ => return Err(self.error(pos, "invalid YAML: unexpected event")),
        };
        if anchor != 0 {
            let node_size = size(&node);
            self.anchors.insert(anchor, (node.clone(), node_size));
        }
        Ok(node)
    }
}

/// `!!str 443` is text; other explicit tags are not part of the policy format.
fn tagged_style(tag: Option<&saphyr_parser::Tag>, pos: Pos) -> Result<Style, SyntaxError> {
    match tag {
        Some(t) if t.is_yaml_core_schema() && t.suffix == "str" => Ok(Style::Quoted),
        Some(t) if t.is_yaml_core_schema() => Ok(Style::Plain),
        Some(t) => Err(SyntaxError {
            pos,
            message: format!("unsupported YAML tag {}{}", t.handle, t.suffix),
            over_budget: false,
        }),
        None => Ok(Style::Plain),
    }
}

fn size(node: &Node<'_>) -> usize {
    match &node.kind {
        Kind::Scalar(..) => 1,
        Kind::Seq(items) => 1 + items.iter().map(size).sum::<usize>(),
        Kind::Map(pairs) => 1 + pairs.iter().map(|(k, v)| size(k) + size(v)).sum::<usize>(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scalar<'a>(node: &'a Node<'a>) -> &'a str {
        match &node.kind {
            Kind::Scalar(s, _) => s,
            other => panic!("not a scalar: {other:?}"),
        }
    }

    #[test]
    fn positions_are_one_based() {
        let doc = parse("version: 1\nnetwork_policies:\n  a:\n    name: x\n")
            .unwrap()
            .unwrap();
        let Kind::Map(pairs) = &doc.kind else {
            panic!()
        };
        assert_eq!(pairs[0].0.pos, Pos::new(1, 1));
        assert_eq!(pairs[0].1.pos, Pos::new(1, 10));
        let Kind::Map(inner) = &pairs[1].1.kind else {
            panic!()
        };
        assert_eq!(inner[0].0.pos, Pos::new(3, 3));
        assert_eq!(scalar(&inner[0].0), "a");
    }

    #[test]
    fn quoted_scalars_are_marked() {
        let doc = parse("a: \"443\"\nb: 443\nc: !!str 7\n").unwrap().unwrap();
        let Kind::Map(pairs) = &doc.kind else {
            panic!()
        };
        assert_eq!(pairs[0].1.kind, Kind::Scalar("443".into(), Style::Quoted));
        assert_eq!(pairs[1].1.kind, Kind::Scalar("443".into(), Style::Plain));
        assert_eq!(pairs[2].1.kind, Kind::Scalar("7".into(), Style::Quoted));
    }

    #[test]
    fn empty_file_is_none() {
        assert_eq!(parse("").unwrap(), None);
        assert_eq!(parse("# only a comment\n").unwrap(), None);
    }

    #[test]
    fn syntax_error_has_position() {
        let err = parse("a: [1, 2\nb: 3\n").unwrap_err();
        assert!(err.message.starts_with("invalid YAML"), "{err:?}");
        assert!(err.pos.line >= 1);
    }

    #[test]
    fn second_document_is_refused() {
        let err = parse("a: 1\n---\nb: 2\n").unwrap_err();
        assert_eq!(err.pos.line, 2);
        assert!(err.message.contains("second"));
    }

    #[test]
    fn aliases_expand_and_bombs_are_bounded() {
        let doc = parse("a: &x [1, 2]\nb: *x\n").unwrap().unwrap();
        let Kind::Map(pairs) = &doc.kind else {
            panic!()
        };
        assert_eq!(pairs[0].1.kind, pairs[1].1.kind);

        let mut bomb = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..9 {
            let p = i - 1;
            bomb.push_str(&format!(
                "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
            ));
        }
        let err = parse(&bomb).unwrap_err();
        assert_eq!(
            err.message,
            "aliases expand to more than 100000 nodes (alias bomb?)"
        );
        // a1..a3 expand 110 + 1110 + 11110 nodes; a4's aliases of a3 (11111 nodes each) pass
        // the budget at the eighth one, line 5, column 10 + 7 * 5: nothing larger was built.
        assert_eq!(err.pos, Pos::new(5, 45), "{err:?}");
    }

    #[test]
    fn aliases_within_the_budget_expand() {
        // 9 aliases of a 10001-node list: 90009 nodes through aliases, under the budget.
        let list = format!("[{}]", vec!["x"; 10_000].join(", "));
        let text = format!(
            "a: &a {list}
b: [{}]
",
            ["*a"; 9].join(", ")
        );
        let doc = parse(&text).unwrap().unwrap();
        assert_eq!(size(&doc), 1 + 2 + 10 * 10_001 + 1);
        let text = format!(
            "a: &a {list}
b: [{}]
",
            ["*a"; 10].join(", ")
        );
        let err = parse(&text).unwrap_err();
        assert!(err.message.contains("alias bomb"), "{err:?}");
        assert_eq!(err.pos, Pos::new(2, 5 + 4 * 9));
    }

    #[test]
    fn deep_nesting_is_refused() {
        let text = "[".repeat(200) + &"]".repeat(200);
        let err = parse(&text).unwrap_err();
        assert!(err.message.contains("nested") || err.message.contains("invalid YAML"));
    }

    #[test]
    fn core_schema_scalars() {
        assert_eq!(parse_int("443"), Some(443));
        assert_eq!(parse_int("0x1bb"), Some(443));
        assert_eq!(parse_int("-1"), Some(-1));
        assert_eq!(parse_int("44a"), None);
        assert_eq!(parse_bool("True"), Some(true));
        assert_eq!(parse_bool("yes"), None);
    }
}
