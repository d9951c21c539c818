//! End-to-end: an MCP server and client from the official Python SDK (`mcp`, streamable
//! HTTP), the client through sluice as its HTTPS proxy, on a `protocol: mcp` endpoint whose
//! rules allow the session's methods and the tools `read_*`: a tool allowed goes through, a
//! tool refused and an unknown tool name never reach the server (403 naming the tool), and
//! the audit names each call's method and tool, never its arguments.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use sluice_e2e::intercepted::{http_events_judging, python_json_via_env};
use sluice_e2e::origin::{Script, spawn_tls};
use sluice_e2e::proxy::{Sluice, TempDir, assert_events_valid, python};

/// The MCP server (`MCPServer`, streamable HTTP at `/mcp`, served by uvicorn over TLS) with
/// two tools.
const SERVER: &str = r#"
import socket, sys, uvicorn
from mcp.server.mcpserver import MCPServer
srv = MCPServer("sluice-test")
@srv.tool()
def read_file(path: str) -> str:
    return "contents of " + path
@srv.tool()
def delete_repo(name: str) -> str:
    return "deleted " + name
app = srv.streamable_http_app()
sock = socket.socket(); sock.bind(('127.0.0.1', 0)); sock.listen(64)
print(sock.getsockname()[1], flush=True)
kw = {}
if len(sys.argv) > 2:
    kw = dict(ssl_certfile=sys.argv[1], ssl_keyfile=sys.argv[2])
uvicorn.Server(uvicorn.Config(app, log_level='warning', **kw)).run(sockets=[sock])
"#;

/// The MCP client: initialize, list the tools, call `read_file`, `delete_repo` and an
/// unknown tool; prints what each call gave.
const CLIENT: &str = r#"
import asyncio, json, sys
from mcp.client.streamable_http import streamable_http_client
from mcp.client.session import ClientSession
url = sys.argv[1]
async def main():
    out = {}
    async with streamable_http_client(url) as streams:
        async with ClientSession(streams[0], streams[1]) as s:
            await s.initialize()
            tools = await s.list_tools()
            out['tools'] = sorted(t.name for t in tools.tools)
            for name, args in [('read_file', {'path': '/etc/motd'}), ('delete_repo', {'name': 'sluice'}), ('no_such_tool', {})]:
                try:
                    r = await s.call_tool(name, args)
                    out[name] = {'error': getattr(r, 'is_error', None), 'text': [c.text for c in r.content if hasattr(c, 'text')]}
                except Exception as e:
                    out[name] = {'exception': type(e).__name__, 'text': str(e)[:300]}
    print(json.dumps(out))
asyncio.run(main())
"#;

#[test]
fn the_official_mcp_sdk_calls_an_allowed_tool_and_not_a_refused_one() {
    let dir = TempDir::new("mcpsdk");
    let (origin, origin_ca) = spawn_tls(dir.path(), Script::Python(SERVER), &[], "the MCP server");
    let port = origin.port;
    let policy = format!(
        "version: 1
network_policies:
  tools:
    endpoints:
      - host: 127.0.0.1
        port: {port}
        protocol: mcp
        enforcement: enforce
        rules:
          - allow: {{method: initialize}}
          - allow: {{method: notifications/initialized}}
          - allow: {{method: tools/list}}
          - allow: {{method: tools/call, tool: 'read_*'}}
    binaries:
      - path: {}
",
        python()
    );
    let (sluice, ca) = Sluice::intercepting(&dir, &policy, &[origin_ca.as_path()], None, &[]);
    let url = format!("https://127.0.0.1:{port}/mcp");
    let got = python_json_via_env(&sluice, &ca, CLIENT, &[&url]);
    assert_eq!(
        got["tools"],
        serde_json::json!(["delete_repo", "read_file"]),
        "{got}"
    );
    assert_eq!(
        got["read_file"]["text"][0],
        "contents of /etc/motd",
        "{got}\n{}",
        sluice.stderr()
    );
    for refused in ["delete_repo", "no_such_tool"] {
        let text = got[refused].to_string();
        assert!(
            !text.contains("deleted"),
            "{refused} reached the server: {got}"
        );
        assert!(
            got[refused]["exception"].is_string() || got[refused]["error"] == true,
            "{got}"
        );
    }
    let calls = http_events_judging(
        &sluice,
        "tools/call delete_repo",
        "sluice\"}",
        "tools/call read_file",
    );
    assert!(
        calls
            .iter()
            .any(|e| e.contains("tools/call no_such_tool") && e.contains("\"action_id\":2"))
    );
    assert_events_valid(&sluice);
}
