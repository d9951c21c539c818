//! Black-box: the NVIDIA OpenShell documentation's policy examples that use `protocol: mcp`,
//! `json-rpc`, `graphql` and `websocket` (copied as they are, placeholders replaced where the
//! page says to, into `tests/fixtures/openshell-docs/`, each naming its source page) load with
//! `sluice policy check`, and `sluice policy explain --batch` gives the decisions the
//! documentation describes for the requests it mentions: a method, tool or operation allowed,
//! one refused. The GraphQL-over-WebSocket example does not load, in sluice as in the
//! reference (docs/policy.md, table of differences, row 29).
//!
//! Needs the binary: `cargo build -p sluice && cargo test -p sluice-e2e` (see `sluice_bin`).
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{Value, json};
use sluice_e2e::{fixture_dir, policy_check, sluice_bin};

/// One request the documentation describes, and the decision it says it gets.
struct Case {
    what: &'static str,
    query: Value,
    /// `allow`, `deny` (by the endpoint's rules) or `deny at l4` (no entry for the program).
    decision: &'static str,
}

/// A `POST` of `body` to `https://host/path` by `binary`.
fn post(binary: &str, host: &str, path: &str, body: &Value) -> Value {
    json!({
        "binary": binary, "ancestors": [], "host": host, "port": 443, "method": "POST",
        "path": path, "body": body.to_string(),
        "headers": [["content-type", "application/json"], ["accept", "application/json, text/event-stream"]],
    })
}

fn rpc(method: &str, params: &Value) -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
}

fn tool(name: &str) -> Value {
    rpc("tools/call", &json!({"name": name, "arguments": {}}))
}

fn gql(document: &str) -> Value {
    json!({ "query": document })
}

fn case(what: &'static str, query: Value, decision: &'static str) -> Case {
    Case {
        what,
        query,
        decision,
    }
}

/// Checks that `file` loads without errors, then asks each case and compares its decision.
fn check_fixture(file: &str, cases: &[Case]) {
    let path = fixture_dir("openshell-docs").join(file);
    let checked = policy_check(&[path.as_path()], &[]);
    assert_eq!(
        checked.code,
        Some(0),
        "{file} does not load:\n{}",
        checked.stderr
    );
    let answers = explain_batch(&path, cases.iter().map(|c| &c.query));
    assert_eq!(answers.len(), cases.len(), "{file}: {answers:#?}");
    for (c, a) in cases.iter().zip(&answers) {
        let (decision, stage) = match c.decision {
            "deny at l4" => ("deny", json!("l4")),
            "deny" => ("deny", json!("l7")),
            other => (other, Value::Null),
        };
        assert_eq!(a["decision"], decision, "{file}: {}: {a:#}", c.what);
        assert_eq!(a["stage"], stage, "{file}: {}: {a:#}", c.what);
        if c.query.get("ws_text").is_some() {
            assert_eq!(a["ws_stage"], "message", "{file}: {}: {a:#}", c.what);
        }
    }
}

/// Runs `policy explain --batch` on `policy` with one query line per query.
fn explain_batch<'a>(policy: &Path, queries: impl Iterator<Item = &'a Value>) -> Vec<Value> {
    let mut child = Command::new(sluice_bin())
        .args(["policy", "explain", "--batch", "--policy"])
        .arg(policy)
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run sluice: {e}"));
    let mut stdin = child.stdin.take().unwrap();
    for q in queries {
        writeln!(stdin, "{q}").unwrap();
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON {l:?}: {e}")))
        .collect()
}

/// docs/sandboxes/policies.mdx, "MCP and JSON-RPC matching": the client's initialization
/// messages and the listed tools are allowed, `delete_resource` is denied, and `tools/list`
/// is not allowed ("add that method when the client performs discovery").
#[test]
fn the_mcp_example_of_the_policies_page() {
    let py = "/usr/bin/python3";
    let host = "mcp.example.com";
    check_fixture(
        "policies-mcp.yaml",
        &[
            case(
                "initialize",
                post(
                    py,
                    host,
                    "/mcp",
                    &rpc(
                        "initialize",
                        &json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "c", "version": "1"}}),
                    ),
                ),
                "allow",
            ),
            case(
                "notifications/initialized",
                post(
                    py,
                    host,
                    "/mcp",
                    &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
                ),
                "allow",
            ),
            case(
                "read_status",
                post(py, host, "/mcp", &tool("read_status")),
                "allow",
            ),
            case(
                "submit_report",
                post(py, host, "/mcp", &tool("submit_report")),
                "allow",
            ),
            case(
                "list_reports",
                post(py, host, "/mcp", &tool("list_reports")),
                "allow",
            ),
            case(
                "delete_resource",
                post(py, host, "/mcp", &tool("delete_resource")),
                "deny",
            ),
            case(
                "an unlisted tool",
                post(py, host, "/mcp", &tool("shell")),
                "deny",
            ),
            case(
                "tools/list",
                post(py, host, "/mcp", &rpc("tools/list", &json!({}))),
                "deny",
            ),
            case(
                "a batch with a denied call",
                post(
                    py,
                    host,
                    "/mcp",
                    &json!([tool("read_status"), tool("delete_resource")]),
                ),
                "deny",
            ),
            case(
                "another binary",
                post("/usr/bin/curl", host, "/mcp", &tool("read_status")),
                "deny at l4",
            ),
        ],
    );
}

/// docs/reference/policy-schema.mdx, "MCP Allow And Deny Rules".
#[test]
fn the_mcp_example_of_the_schema_reference() {
    let c = "/usr/bin/curl";
    let host = "mcp.example.com";
    check_fixture(
        "schema-mcp.yaml",
        &[
            case(
                "search_web",
                post(c, host, "/mcp", &tool("search_web")),
                "allow",
            ),
            case(
                "create_issue",
                post(c, host, "/mcp", &tool("create_issue")),
                "allow",
            ),
            case(
                "list_issues",
                post(c, host, "/mcp", &tool("list_issues")),
                "allow",
            ),
            case(
                "send_email",
                post(c, host, "/mcp", &tool("send_email")),
                "deny",
            ),
            case(
                "execute_code",
                post(c, host, "/mcp", &tool("execute_code")),
                "deny",
            ),
        ],
    );
}

/// docs/reference/policy-schema.mdx, "JSON-RPC Allow Rule" and "JSON-RPC Deny Rule": exact
/// methods; `*` with a deny rule; one denied call denies the whole batch; client responses
/// are denied.
#[test]
fn the_json_rpc_examples_of_the_schema_reference() {
    let c = "/usr/bin/curl";
    let host = "jsonrpc.example.com";
    let call = |m: &str| rpc(m, &json!({}));
    check_fixture(
        "schema-jsonrpc-allow.yaml",
        &[
            case(
                "initialize",
                post(c, host, "/rpc", &call("initialize")),
                "allow",
            ),
            case(
                "reports.list",
                post(c, host, "/rpc", &call("reports.list")),
                "allow",
            ),
            case(
                "reports.search",
                post(c, host, "/rpc", &call("reports.search")),
                "allow",
            ),
            case(
                "reports.delete",
                post(c, host, "/rpc", &call("reports.delete")),
                "deny",
            ),
            case(
                "a batch with a denied call",
                post(
                    c,
                    host,
                    "/rpc",
                    &json!([call("reports.list"), call("reports.delete")]),
                ),
                "deny",
            ),
            case(
                "a client response",
                post(
                    c,
                    host,
                    "/rpc",
                    &json!({"jsonrpc": "2.0", "id": 1, "result": 1}),
                ),
                "deny",
            ),
        ],
    );
    check_fixture(
        "schema-jsonrpc-deny.yaml",
        &[
            case(
                "reports.list",
                post(c, host, "/rpc", &call("reports.list")),
                "allow",
            ),
            case(
                "any method",
                post(c, host, "/rpc", &call("anything.else")),
                "allow",
            ),
            case(
                "reports.delete",
                post(c, host, "/rpc", &call("reports.delete")),
                "deny",
            ),
            case(
                "a batch with a denied call",
                post(
                    c,
                    host,
                    "/rpc",
                    &json!([call("reports.list"), call("reports.delete")]),
                ),
                "deny",
            ),
        ],
    );
}

/// docs/sandboxes/policies.mdx, "GraphQL matching": every root field must match an allow
/// rule's `fields`, the mutation's name must match `Issue*`, `deleteRepository` is denied.
#[test]
fn the_graphql_example_of_the_policies_page() {
    let gh = "/usr/bin/gh";
    let host = "api.github.com";
    let q = |d: &str| post(gh, host, "/graphql", &gql(d));
    check_fixture(
        "policies-graphql.yaml",
        &[
            case("a viewer query", q("query { viewer { login } }"), "allow"),
            case(
                "a repository query",
                q("query Repo { repository(owner: \"o\", name: \"r\") { id } }"),
                "allow",
            ),
            case(
                "a query of an unlisted field",
                q("query { organization(login: \"o\") { id } }"),
                "deny",
            ),
            case(
                "createIssue named Issue*",
                q("mutation IssueCreate { createIssue(input: {}) { clientMutationId } }"),
                "allow",
            ),
            case(
                "createIssue under another name",
                q("mutation Make { createIssue(input: {}) { clientMutationId } }"),
                "deny",
            ),
            case(
                "deleteRepository",
                q("mutation IssueDelete { deleteRepository(input: {}) { clientMutationId } }"),
                "deny",
            ),
        ],
    );
}

/// docs/reference/policy-schema.mdx, "GraphQL Deny Rule": `access: read-write` allows
/// queries and mutations but not a `deleteRepository` field nor a mutation named `Admin*`.
#[test]
fn the_graphql_deny_example_of_the_schema_reference() {
    let q = |d: &str| post("/usr/bin/curl", "api.github.com", "/graphql", &gql(d));
    check_fixture(
        "schema-graphql-deny.yaml",
        &[
            case("a query", q("query { viewer { login } }"), "allow"),
            case(
                "a mutation",
                q("mutation { addComment(input: {}) { clientMutationId } }"),
                "allow",
            ),
            case(
                "deleteRepository",
                q("mutation { deleteRepository(input: {}) { clientMutationId } }"),
                "deny",
            ),
            case(
                "a mutation named Admin*",
                q("mutation AdminTidy { addComment(input: {}) { clientMutationId } }"),
                "deny",
            ),
        ],
    );
}

/// A WebSocket upgrade of `path` by curl, and a text message sent after it.
fn ws(path: &str, text: Option<&str>) -> Value {
    let mut q = json!({
        "binary": "/usr/bin/curl", "ancestors": [], "host": "realtime.example.com", "port": 443,
        "method": "GET", "path": path, "websocket": true,
    });
    if let Some(text) = text {
        q["ws_text"] = json!(text);
    }
    q
}

/// docs/reference/policy-schema.mdx, "WebSocket Deny Rule": `access: read-write` opens the
/// socket and sends text, except on `/v1/admin/**`.
#[test]
fn the_websocket_deny_example_of_the_schema_reference() {
    check_fixture(
        "schema-websocket-deny.yaml",
        &[
            case("the upgrade", ws("/v1/chat", None), "allow"),
            case("a text message", ws("/v1/chat", Some("hello")), "allow"),
            case(
                "a text message on /v1/admin",
                ws("/v1/admin/users", Some("drop")),
                "deny",
            ),
        ],
    );
}

/// docs/sandboxes/providers-v2.mdx, "Policy Composition": the generated GitHub provider entry
/// reads the REST API and runs GraphQL queries (`access: read-only`), not mutations.
#[test]
fn the_github_provider_example_of_the_providers_page() {
    let q = |d: &str| post("/usr/bin/gh", "api.github.com", "/graphql", &gql(d));
    let rest = json!({
        "binary": "/usr/bin/gh", "ancestors": [], "host": "api.github.com", "port": 443,
        "method": "GET", "path": "/user",
    });
    check_fixture(
        "providers-v2-github.yaml",
        &[
            case("a REST read", rest, "allow"),
            case("a GraphQL query", q("query { viewer { login } }"), "allow"),
            case(
                "a GraphQL mutation",
                q("mutation { addStar(input: {}) { clientMutationId } }"),
                "deny",
            ),
        ],
    );
}

/// docs/sandboxes/policies.mdx, "GraphQL-over-WebSocket matching": this example does not load,
/// in sluice as in the reference (docs/policy.md, table of differences, row 29: no allow rule
/// naming operations can load on a WebSocket endpoint there). The refusal names both
/// operation rules and says where the allowed operations come from instead.
#[test]
fn the_graphql_over_websocket_example_does_not_load_as_in_the_reference() {
    let path = fixture_dir("openshell-docs").join("policies-graphql-websocket.yaml");
    for extra in [&[][..], &["--compat", "openshell"][..]] {
        let checked = policy_check(&[path.as_path()], extra);
        assert_eq!(checked.code, Some(1), "{extra:?}: {}", checked.stderr);
        let errors: Vec<&str> = checked
            .stderr
            .lines()
            .filter(|l| l.contains(": network_policies.") && !l.contains(": warning: "))
            .collect();
        assert_eq!(errors.len(), 2, "{errors:#?}");
        for (line, rule) in errors.iter().zip(["rules[1]", "rules[2]"]) {
            assert!(
                line.contains(&format!("endpoints[0].{rule}.allow:"))
                    && line.contains("must not combine method/path/query with operation_type")
                    && line.contains("come from `access`"),
                "{line}"
            );
        }
        assert!(
            checked
                .stderr
                .contains("every `subscribe`/`start` operation is refused"),
            "{}",
            checked.stderr
        );
    }
}

/// docs/sandboxes/policies.mdx, "Granular rules": read-only REST for general API paths, full
/// REST write access for `alpha-repo`, create/edit issues only for `bravo-repo`, and GraphQL
/// operation inspection on `/graphql` (queries, three issue mutations; destructive roots
/// denied), the `/graphql` scope deciding there over the REST `/**` one.
#[test]
fn the_granular_github_example_of_the_policies_page() {
    let rest = |method: &str, path: &str| {
        json!({
            "binary": "/usr/bin/gh", "ancestors": [], "host": "api.github.com", "port": 443,
            "method": method, "path": path,
        })
    };
    let q = |d: &str| post("/usr/bin/gh", "api.github.com", "/graphql", &gql(d));
    check_fixture(
        "policies-github-granular.yaml",
        &[
            case("a REST read", rest("GET", "/user"), "allow"),
            case(
                "a write to alpha-repo",
                rest("DELETE", "/repos/acme/alpha-repo/issues/1"),
                "allow",
            ),
            case(
                "an issue in bravo-repo",
                rest("POST", "/repos/acme/bravo-repo/issues"),
                "allow",
            ),
            case(
                "another write to bravo-repo",
                rest("DELETE", "/repos/acme/bravo-repo"),
                "deny",
            ),
            case("a GraphQL query", q("query { viewer { login } }"), "allow"),
            case(
                "createIssue",
                q("mutation { createIssue(input: {}) { clientMutationId } }"),
                "allow",
            ),
            case(
                "deleteRepository",
                q("mutation { deleteRepository(input: {}) { clientMutationId } }"),
                "deny",
            ),
            case(
                "an unlisted mutation",
                q("mutation { addStar(input: {}) { clientMutationId } }"),
                "deny",
            ),
        ],
    );
}
