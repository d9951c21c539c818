//! What a JSON-RPC or MCP request body asks (spec §5.6; the reference's
//! `parse_jsonrpc_body_with_options`): its calls (method, and for MCP `tools/call` the tool),
//! whether it is a batch, whether it carries responses (client answers to server requests),
//! or why it is not a valid JSON-RPC 2.0 message. Pure: bytes in, an [`RpcBody`] out.

use serde_json::Value;

/// One call: a request or a notification.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Call {
    pub method: String,
    /// MCP `tools/call`: `params.name`.
    pub tool: Option<String>,
}

/// What a body asks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RpcBody {
    pub calls: Vec<Call>,
    pub is_batch: bool,
    /// It carries at least one response (`result` or `error`).
    pub has_response: bool,
    /// Why it is not a valid message (then `calls` is empty).
    pub error: Option<String>,
    /// The index in `calls` of the call that was refused, once judged.
    pub refused: Option<usize>,
}

impl RpcBody {
    fn rejected(is_batch: bool, error: String) -> RpcBody {
        RpcBody {
            is_batch,
            error: Some(error),
            ..RpcBody::default()
        }
    }
}

/// How to read a body: MCP (`tools/call` needs a string `params.name`), and whether tool
/// names must match `^[A-Za-z0-9_.-]{1,128}$`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reading {
    pub mcp: bool,
    pub strict_tool_names: bool,
}

/// Reads `body` as JSON-RPC 2.0 (one message or a non-empty batch).
pub fn parse(body: &[u8], how: Reading) -> RpcBody {
    let Ok(value) = serde_json::from_slice::<Value>(body) else {
        return RpcBody::rejected(false, "invalid JSON".to_string());
    };
    if let Value::Array(items) = value {
        if items.is_empty() {
            return RpcBody::rejected(true, "empty batch".to_string());
        }
        let mut out = RpcBody {
            is_batch: true,
            ..RpcBody::default()
        };
        for item in &items {
            match message(item, how) {
                Ok(Some(call)) => out.calls.push(call),
                Ok(None) => out.has_response = true,
                Err(e) => return RpcBody::rejected(true, format!("batch item invalid: {e}")),
            }
        }
        return out;
    }
    match message(&value, how) {
        Ok(Some(call)) => RpcBody {
            calls: vec![call],
            ..RpcBody::default()
        },
        Ok(None) => RpcBody {
            has_response: true,
            ..RpcBody::default()
        },
        Err(e) => RpcBody::rejected(false, e),
    }
}

/// One message: a call, or `None` for a response.
fn message(value: &Value, how: Reading) -> Result<Option<Call>, String> {
    let version = value
        .get("jsonrpc")
        .and_then(Value::as_str)
        .ok_or("missing or non-string 'jsonrpc' field")?;
    if version != "2.0" {
        return Err(format!("unsupported JSON-RPC version '{version}'"));
    }
    let has_method = value.get("method").is_some();
    let has_result = value.get("result").is_some();
    let has_error = value.get("error").is_some();
    if has_method && (has_result || has_error) {
        return Err("JSON-RPC message includes both method and result/error".to_string());
    }
    if has_result || has_error {
        if has_result && has_error {
            return Err("JSON-RPC response includes both result and error".to_string());
        }
        let id = value.get("id").ok_or("JSON-RPC response missing id")?;
        if !(id.is_string() || id.is_number() || id.is_null()) {
            return Err("JSON-RPC response id must be string, number, or null".to_string());
        }
        if value.get("error").is_some_and(|e| !e.is_object()) {
            return Err("JSON-RPC response error must be an object".to_string());
        }
        return Ok(None);
    }
    let method = value
        .get("method")
        .and_then(Value::as_str)
        .ok_or("missing or non-string 'method' field")?;
    if !how.mcp {
        return Ok(Some(Call {
            method: method.to_string(),
            tool: None,
        }));
    }
    mcp_call(value, method, how.strict_tool_names).map(Some)
}

/// A field a known MCP method's params must have.
#[derive(Clone, Copy)]
enum Kind {
    String,
    Object,
    /// A request id or progress token: a string or an integer.
    Id,
    Number,
}

/// The params of the MCP methods whose shape the reference checks (tower-mcp-types), in
/// declaration order (positional params fill them in order); other methods pass as
/// written.
fn known_params(method: &str) -> &'static [(&'static str, Kind)] {
    match method {
        "tools/call" | "prompts/get" => &[("name", Kind::String)],
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => {
            &[("uri", Kind::String)]
        }
        "initialize" => &[
            ("protocolVersion", Kind::String),
            ("capabilities", Kind::Object),
            ("clientInfo", Kind::Object),
        ],
        "logging/setLevel" => &[("level", Kind::String)],
        "completion/complete" => &[("ref", Kind::Object), ("argument", Kind::Object)],
        "notifications/cancelled" => &[("requestId", Kind::Id)],
        "notifications/progress" => &[("progressToken", Kind::Id), ("progress", Kind::Number)],
        _ => &[],
    }
}

fn is_id(v: &Value) -> bool {
    v.is_string() || v.is_i64() || v.is_u64()
}

/// An MCP request or notification: its id (a request's) is a string or an integer, a known
/// method's params have the fields it needs, and `tools/call` names its tool.
fn mcp_call(value: &Value, method: &str, strict: bool) -> Result<Call, String> {
    let what = if value.get("id").is_some() {
        "request"
    } else {
        "notification"
    };
    if let Some(id) = value.get("id")
        && !is_id(id)
    {
        return Err(format!(
            "invalid MCP {what}: data did not match any variant of untagged enum RequestId"
        ));
    }
    let params = value.get("params").filter(|p| !p.is_null());
    let mut tool = None;
    // A request's method is read as a request, a notification's as a notification: a
    // `tools/call` without an id names no tool.
    let known = if (what == "request") != method.starts_with("notifications/") {
        known_params(method)
    } else {
        &[]
    };
    for (i, (name, kind)) in known.iter().enumerate() {
        let field = match params {
            Some(Value::Object(map)) => map.get(*name),
            Some(Value::Array(items)) => items.get(i),
            _ => None,
        };
        let Some(field) = field else {
            return Err(format!(
                "invalid MCP {what} params: Serialization error: missing field `{name}`"
            ));
        };
        let ok = match kind {
            Kind::String => field.is_string(),
            Kind::Object => field.is_object(),
            Kind::Id => is_id(field),
            Kind::Number => field.is_number(),
        };
        if !ok {
            return Err(format!(
                "invalid MCP {what} params: Serialization error: invalid type for `{name}`"
            ));
        }
        if method == "tools/call" && *name == "name" {
            tool = field.as_str().map(str::to_string);
        }
    }
    if let Some(name) = tool.as_deref()
        && strict
        && !valid_tool_name(name)
    {
        return Err("MCP tool name must match ^[A-Za-z0-9_.-]{1,128}$ when strict".to_string());
    }
    Ok(Call {
        method: method.to_string(),
        tool,
    })
}

/// `^[A-Za-z0-9_.-]{1,128}$`.
fn valid_tool_name(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MCP: Reading = Reading {
        mcp: true,
        strict_tool_names: true,
    };
    const RPC: Reading = Reading {
        mcp: false,
        strict_tool_names: true,
    };

    #[test]
    fn calls_batches_responses_and_errors() {
        let b = parse(
            br#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"read_file"},"id":1}"#,
            MCP,
        );
        assert_eq!(
            b.calls,
            [Call {
                method: "tools/call".into(),
                tool: Some("read_file".into())
            }]
        );
        let b = parse(
            br#"[{"jsonrpc":"2.0","method":"a","id":1},{"jsonrpc":"2.0","result":{},"id":2}]"#,
            RPC,
        );
        assert!(b.is_batch && b.has_response && b.calls.len() == 1);
        assert_eq!(parse(b"[]", RPC).error.as_deref(), Some("empty batch"));
        assert_eq!(parse(b"{", RPC).error.as_deref(), Some("invalid JSON"));
        assert!(
            parse(br#"{"jsonrpc":"1.0","method":"a"}"#, RPC)
                .error
                .is_some()
        );
        assert!(
            parse(br#"{"jsonrpc":"2.0","method":"a","result":1,"id":1}"#, RPC)
                .error
                .is_some()
        );
        let bad_tool = br#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"a b"},"id":1}"#;
        assert!(parse(bad_tool, MCP).error.is_some());
        let lax = Reading {
            mcp: true,
            strict_tool_names: false,
        };
        assert_eq!(parse(bad_tool, lax).calls[0].tool.as_deref(), Some("a b"));
    }
}
