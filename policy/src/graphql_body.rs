//! What a GraphQL request asks (spec §5.5; the reference's `classify_request`): its
//! operations (type, name, root fields by field name, never alias), from a `GET`'s query
//! parameters or a `POST`'s JSON body (one envelope or a non-empty batch), persisted-query
//! hashes and ids, or why it is not a GraphQL request. Pure: text in, a [`GraphqlRequest`]
//! out. Documents are parsed by `apollo-parser` (as in the reference) within its recursion
//! limit (128) and token limit (20,000), and root fields are gathered without recursion, so
//! no document can exhaust the stack.

use std::collections::{BTreeSet, HashMap, HashSet};

use apollo_parser::{Parser, cst};
use serde_json::Value;

/// One operation, as the policy sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Operation {
    /// `query`, `mutation`, `subscription`, or empty for a hash-only persisted query
    /// (then the registry says what it is).
    pub operation_type: String,
    pub operation_name: Option<String>,
    /// Root fields selected (through fragments on the root too), by name, sorted.
    pub fields: Vec<String>,
    pub persisted_hash: Option<String>,
    pub persisted_id: Option<String>,
}

impl Operation {
    /// A hash-only persisted query: only the registry can say what it does.
    pub fn needs_registry(&self) -> bool {
        self.operation_type.is_empty()
            && (self.persisted_hash.is_some() || self.persisted_id.is_some())
    }

    /// The registry key: the hash, else the id.
    pub fn registry_key(&self) -> Option<&str> {
        self.persisted_hash
            .as_deref()
            .or(self.persisted_id.as_deref())
    }

    /// `query Name`, `mutation -`, or the persisted query's key, for records and refusals.
    pub fn describe(&self) -> String {
        if self.needs_registry() {
            return format!(
                "persisted query {}",
                self.registry_key().unwrap_or_default()
            );
        }
        format!(
            "{} {}",
            self.operation_type,
            self.operation_name.as_deref().unwrap_or("-")
        )
    }
}

/// What a request asks: its operations, or why it is not a GraphQL request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GraphqlRequest {
    pub operations: Vec<Operation>,
    pub error: Option<String>,
    /// The index in `operations` of the one refused, once judged.
    pub refused: Option<usize>,
}

impl GraphqlRequest {
    fn of(r: Result<Vec<Operation>, String>) -> GraphqlRequest {
        match r {
            Ok(operations) => GraphqlRequest {
                operations,
                ..GraphqlRequest::default()
            },
            Err(e) => GraphqlRequest {
                error: Some(e),
                ..GraphqlRequest::default()
            },
        }
    }
}

/// The request `method` (upper case) asks, with its decoded query parameters and body. A
/// `GET` with a body is refused (the reference judges its URL and relays the body).
pub fn parse(method: &str, query: &[(String, String)], body: &[u8]) -> GraphqlRequest {
    GraphqlRequest::of(match method {
        // A server that read the body of a GET would run what was not judged.
        "GET" if !body.is_empty() => Err("GraphQL GET request must not carry a body".to_string()),
        "GET" => get(query),
        "POST" => post(body),
        other => Err(format!("unsupported GraphQL HTTP method {other}")),
    })
}

/// Why the reference's reader refuses a request's body before reading it, from its
/// headers: a `Content-Encoding` other than `identity`, or a `multipart/` content type.
pub fn unreadable<'a>(headers: impl IntoIterator<Item = (&'a str, &'a [u8])>) -> Option<String> {
    for (name, value) in headers {
        let value = String::from_utf8_lossy(value).trim().to_ascii_lowercase();
        if name.eq_ignore_ascii_case("content-encoding") && !value.is_empty() && value != "identity"
        {
            return Some(format!(
                "GraphQL request content-encoding {value:?} is not supported"
            ));
        }
        if name.eq_ignore_ascii_case("content-type") && value.starts_with("multipart/") {
            return Some("GraphQL multipart requests are not supported".to_string());
        }
    }
    None
}

/// A client text message on a WebSocket with GraphQL policy (graphql-transport-ws,
/// legacy graphql-ws).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WsMessage {
    /// A lifecycle message (`connection_init`, `ping`, `pong`, `complete`, `stop`,
    /// `connection_terminate`): allowed.
    Control(String),
    /// `subscribe` / `start` (its payload's operation), or anything else (an error).
    Operation(GraphqlRequest),
}

/// Classifies a client text message (the reference's `classify_graphql_websocket_message`).
pub fn websocket_message(text: &[u8]) -> WsMessage {
    let error = |e: String| {
        WsMessage::Operation(GraphqlRequest {
            error: Some(e),
            ..GraphqlRequest::default()
        })
    };
    let value: Value = match serde_json::from_slice(text) {
        Ok(v) => v,
        Err(e) => return error(format!("GraphQL WebSocket message is not valid JSON: {e}")),
    };
    let Some(obj) = value.as_object() else {
        return error("GraphQL WebSocket message must be a JSON object".into());
    };
    let Some(kind) = obj.get("type").and_then(Value::as_str) else {
        return error("GraphQL WebSocket message missing string type".into());
    };
    match kind {
        "subscribe" | "start" => {
            if obj
                .get("id")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                return error("GraphQL WebSocket operation message missing non-empty id".into());
            }
            match obj.get("payload").filter(|p| p.is_object()) {
                Some(payload) => WsMessage::Operation(GraphqlRequest::of(envelope(payload))),
                None => error("GraphQL WebSocket operation message missing object payload".into()),
            }
        }
        "connection_init" | "connection_terminate" | "ping" | "pong" | "complete" | "stop" => {
            WsMessage::Control(kind.to_string())
        }
        other => error(format!(
            "unsupported GraphQL WebSocket client message type {other:?}"
        )),
    }
}

fn get(query: &[(String, String)]) -> Result<Vec<Operation>, String> {
    let document = unique(query, "query")?;
    let name = unique(query, "operationName")?;
    let extensions = unique(query, "extensions")?.and_then(|e| serde_json::from_str(e).ok());
    let mut id: Option<(&str, &str)> = None;
    for key in ["id", "documentId", "queryId"] {
        if let Some(v) = unique(query, key)? {
            if let Some((first, _)) = id {
                return Err(format!(
                    "GraphQL GET persisted-query id parameters {first:?} and {key:?} must not be combined"
                ));
            }
            id = Some((key, v));
        }
    }
    classify(
        document,
        name,
        extensions.as_ref(),
        id.map(|(_, v)| v.to_string()),
    )
}

/// A GET parameter given at most once; empty is absent.
fn unique<'q>(query: &'q [(String, String)], key: &str) -> Result<Option<&'q str>, String> {
    let mut values = query.iter().filter(|(k, _)| k == key);
    let first = values.next();
    if values.next().is_some() {
        return Err(format!(
            "GraphQL GET parameter {key:?} must not appear more than once"
        ));
    }
    Ok(first.map(|(_, v)| v.as_str()).filter(|v| !v.is_empty()))
}

fn post(body: &[u8]) -> Result<Vec<Operation>, String> {
    if body.is_empty() {
        return Err("GraphQL POST body is empty".to_string());
    }
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| format!("GraphQL request body is not valid JSON: {e}"))?;
    match &value {
        Value::Array(items) if items.is_empty() => {
            Err("GraphQL batch request is empty".to_string())
        }
        Value::Array(items) => {
            let mut out = Vec::with_capacity(items.len());
            for item in items {
                out.extend(envelope(item)?);
            }
            Ok(out)
        }
        Value::Object(_) => envelope(&value),
        _ => Err("GraphQL JSON envelope must be an object or array".to_string()),
    }
}

fn envelope(value: &Value) -> Result<Vec<Operation>, String> {
    let obj = value
        .as_object()
        .ok_or("GraphQL batch item must be an object")?;
    let id = ["id", "documentId", "queryId"]
        .iter()
        .find_map(|k| obj.get(*k))
        .and_then(Value::as_str)
        .map(str::to_string);
    classify(
        obj.get("query").and_then(Value::as_str),
        obj.get("operationName").and_then(Value::as_str),
        obj.get("extensions"),
        id,
    )
}

fn classify(
    document: Option<&str>,
    name: Option<&str>,
    extensions: Option<&Value>,
    id: Option<String>,
) -> Result<Vec<Operation>, String> {
    let hash = extensions
        .and_then(|e| e.get("persistedQuery"))
        .and_then(|p| p.get("sha256Hash"))
        .and_then(Value::as_str)
        .filter(|h| !h.is_empty())
        .map(str::to_string);
    if let Some(document) = document.filter(|d| !d.trim().is_empty()) {
        let mut op = operation(document, name)?;
        op.persisted_hash = hash;
        op.persisted_id = id;
        return Ok(vec![op]);
    }
    if hash.is_some() || id.is_some() {
        return Ok(vec![Operation {
            operation_name: name.map(str::to_string),
            persisted_hash: hash,
            persisted_id: id,
            ..Operation::default()
        }]);
    }
    Err("GraphQL request has no query document or persisted query identifier".to_string())
}

/// The operation `name` selects in `document` (the only one when no name is given).
fn operation(document: &str, name: Option<&str>) -> Result<Operation, String> {
    let tree = Parser::new(document)
        .recursion_limit(128)
        .token_limit(20_000)
        .parse();
    if let Some(e) = tree.errors().next() {
        return Err(format!("GraphQL document parse error: {e}"));
    }
    let mut operations = Vec::new();
    let mut fragments = HashMap::new();
    for definition in tree.document().definitions() {
        match definition {
            cst::Definition::OperationDefinition(op) => operations.push(op),
            cst::Definition::FragmentDefinition(f) => {
                if let Some(n) = f.fragment_name().and_then(|n| n.name()) {
                    fragments.insert(n.text().to_string(), f);
                }
            }
            _ => {}
        }
    }
    if operations.is_empty() {
        return Err("GraphQL document contains no executable operation".to_string());
    }
    // Two operations of one name make a document invalid (GraphQL spec, "Operation Name
    // Uniqueness"): which one a server would run is not for sluice to guess.
    let mut names = HashSet::new();
    for op in &operations {
        if let Some(n) = op.name()
            && !names.insert(n.text().to_string())
        {
            return Err(format!(
                "GraphQL document has more than one operation named {:?}",
                n.text().as_str()
            ));
        }
    }
    let selected = match name.filter(|n| !n.is_empty()) {
        Some(wanted) => operations
            .into_iter()
            .find(|op| op.name().is_some_and(|n| n.text().as_ref() == wanted))
            .ok_or_else(|| format!("GraphQL operationName {wanted:?} was not found"))?,
        None if operations.len() == 1 => operations.remove(0),
        None => {
            return Err("GraphQL document has multiple operations but no operationName".into());
        }
    };
    let operation_type = match selected.operation_type() {
        Some(t) if t.mutation_token().is_some() => "mutation",
        Some(t) if t.subscription_token().is_some() => "subscription",
        _ => "query",
    };
    let set = selected
        .selection_set()
        .ok_or("GraphQL operation has no selection set")?;
    Ok(Operation {
        operation_type: operation_type.to_string(),
        operation_name: selected.name().map(|n| n.text().to_string()),
        fields: root_fields(set, &fragments),
        ..Operation::default()
    })
}

/// The root fields of a selection set, through inline fragments and fragment spreads
/// (each fragment once), by field name: a work list, not recursion.
fn root_fields(
    set: cst::SelectionSet,
    fragments: &HashMap<String, cst::FragmentDefinition>,
) -> Vec<String> {
    let mut fields = BTreeSet::new();
    let mut visited = HashSet::new();
    let mut work = vec![set];
    while let Some(set) = work.pop() {
        for selection in set.selections() {
            match selection {
                cst::Selection::Field(f) => {
                    if let Some(n) = f.name() {
                        fields.insert(n.text().to_string());
                    }
                }
                cst::Selection::InlineFragment(f) => work.extend(f.selection_set()),
                cst::Selection::FragmentSpread(s) => {
                    let Some(n) = s.fragment_name().and_then(|n| n.name()) else {
                        continue;
                    };
                    let n = n.text().to_string();
                    if visited.insert(n.clone())
                        && let Some(set) = fragments.get(&n).and_then(|f| f.selection_set())
                    {
                        work.push(set);
                    }
                }
            }
        }
    }
    fields.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn post_ops(body: &str) -> GraphqlRequest {
        parse("POST", &[], body.as_bytes())
    }

    #[test]
    fn fields_by_name_not_alias_through_fragments() {
        let r = post_ops(
            r#"{"query":"mutation M { safe: deleteRepo(id:1) { id } ...F ... on Mutation { other } } fragment F on Mutation { viaFragment }"}"#,
        );
        assert_eq!(r.error, None);
        let op = &r.operations[0];
        assert_eq!(op.operation_type, "mutation");
        assert_eq!(op.operation_name.as_deref(), Some("M"));
        assert_eq!(op.fields, ["deleteRepo", "other", "viaFragment"]);
    }

    #[test]
    fn errors_batches_and_persisted_queries() {
        assert!(post_ops("").error.is_some());
        assert!(post_ops("[]").error.unwrap().contains("empty"));
        assert!(
            post_ops(r#"{"query":"query A{a} query B{b}"}"#)
                .error
                .unwrap()
                .contains("multiple operations")
        );
        assert!(
            post_ops(r#"{"query":"query A{a}","operationName":"B"}"#)
                .error
                .unwrap()
                .contains("not found")
        );
        let b = post_ops(r#"[{"query":"{a}"},{"query":"mutation{b}"}]"#);
        assert_eq!(b.operations.len(), 2);
        let p = post_ops(r#"{"extensions":{"persistedQuery":{"sha256Hash":"abc"}}}"#);
        assert!(p.operations[0].needs_registry());
        assert_eq!(p.operations[0].registry_key(), Some("abc"));
        let dup = [
            ("query".to_string(), "{a}".to_string()),
            ("query".to_string(), "{b}".to_string()),
        ];
        assert!(
            parse("GET", &dup, b"")
                .error
                .unwrap()
                .contains("more than once")
        );
        assert!(parse("PUT", &[], b"").error.is_some());
    }

    #[test]
    fn deep_documents_and_fragment_chains_are_bounded() {
        let deep = format!(
            "{{\"query\":\"{}{}\"}}",
            "{a".repeat(5000),
            "}".repeat(5000)
        );
        assert!(post_ops(&deep).error.is_some());
        let mut chain = String::from("query Q { ...F0 } ");
        for i in 0..2000 {
            chain.push_str(&format!("fragment F{i} on Query {{ f{i} ...F{} }} ", i + 1));
        }
        let body = serde_json::json!({ "query": chain }).to_string();
        // Over the token limit: refused, not walked.
        assert!(post_ops(&body).error.is_some());
    }
}
