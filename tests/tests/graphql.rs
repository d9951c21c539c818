//! End-to-end: a real GraphQL server (Strawberry under uvicorn, over TLS, batching on) and a
//! real client (`gql`, over httpx and websockets) through sluice as their HTTPS proxy, on a
//! `protocol: graphql` endpoint that allows queries and the mutation `addComment`, denies
//! `deleteRepository` and trusts one persisted query. A query and the allowed mutation go
//! through; a refused mutation, an aliased one, one reached through a fragment, a batch
//! with one refused operation, an unregistered persisted query and documents that do not
//! parse never reach the server (the server logs what it receives); a registered persisted
//! query does. A subscription over WebSocket runs on a plain `websocket` endpoint and, on
//! one with GraphQL policy, its lifecycle messages pass and its `subscribe` is closed 1008,
//! as in the reference. The audit names operations by type and name, never variables.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use serde_json::Value;
use sluice_e2e::intercepted::{
    assert_refusal_audited_without, http_events_judging, logging_origin, post_bodies,
    python_json_via_env,
};
use sluice_e2e::origin::H2Origin;
use sluice_e2e::proxy::{Sluice, TempDir, assert_events_valid, python};

/// The GraphQL server: Strawberry's ASGI app (queries, mutations, a subscription over
/// graphql-transport-ws and graphql-ws, batches), each HTTP body and WebSocket message it
/// receives appended to the log file named by its third argument.
const SERVER: &str = r#"
import asyncio, socket, sys, typing, uvicorn, strawberry
from strawberry.asgi import GraphQL
from strawberry.schema.config import StrawberryConfig
log = sys.argv[3]
def note(b):
    with open(log, 'ab') as f: f.write(b + b'\n')
@strawberry.type
class Query:
    @strawberry.field
    def viewer(self) -> str: return 'octocat'
    @strawberry.field
    def secret(self) -> str: return 'hidden'
@strawberry.type
class Mutation:
    @strawberry.mutation
    def add_comment(self, text: str) -> str: return 'commented ' + text
    @strawberry.mutation
    def delete_repository(self, name: str) -> str: return 'deleted ' + name
@strawberry.type
class Subscription:
    @strawberry.subscription
    async def count(self, to: int) -> typing.AsyncGenerator[int, None]:
        for i in range(to):
            yield i
            await asyncio.sleep(0.01)
schema = strawberry.Schema(Query, Mutation, Subscription, config=StrawberryConfig(batching_config={'max_operations': 10}))
inner = GraphQL(schema)
async def app(scope, receive, send):
    if scope['type'] == 'http':
        msgs, body = [], b''
        while True:
            m = await receive(); msgs.append(m); body += m.get('body', b'')
            if not m.get('more_body'): break
        note(scope['method'].encode() + b' ' + scope.get('query_string', b'') + b' ' + body)
        it = iter(msgs)
        async def again():
            try: return next(it)
            except StopIteration: return await receive()
        return await inner(scope, again, send)
    if scope['type'] == 'websocket':
        async def logged():
            m = await receive()
            if m.get('type') == 'websocket.receive' and m.get('text'): note(b'WS ' + m['text'].encode())
            return m
        return await inner(scope, logged, send)
    return await inner(scope, receive, send)
sock = socket.socket(); sock.bind(('127.0.0.1', 0)); sock.listen(64)
print(sock.getsockname()[1], flush=True)
uvicorn.Server(uvicorn.Config(app, log_level='warning', ssl_certfile=sys.argv[1], ssl_keyfile=sys.argv[2])).run(sockets=[sock])
"#;

/// The client: each case through sluice, as `gql` sends it where `gql` can (a query, a
/// mutation, a batch, a subscription), else as httpx sends it; prints each case's status
/// or data, or the error it got.
const CLIENT: &str = r#"
import asyncio, json, ssl, sys, httpx
from gql import Client, gql as doc
from gql.transport.httpx import HTTPXTransport
from gql.transport.websockets import WebsocketsTransport
from gql.graphql_request import GraphQLRequest
base, ca = sys.argv[1], sys.argv[2]
out = {}
def run(name, f):
    try:
        out[name] = {'data': f()}
    except Exception as e:
        code = getattr(getattr(e, 'response', None), 'status_code', None) or getattr(e, 'code', None)
        out[name] = {'error': type(e).__name__, 'code': code, 'text': str(e)[:300]}
t = HTTPXTransport(url=base + '/graphql', verify=ca)
c = Client(transport=t)
run('query', lambda: c.execute(doc('query Viewer { viewer }')))
run('mutation_allowed', lambda: c.execute(doc('mutation Add { addComment(text: "hi") }')))
run('mutation_refused', lambda: c.execute(doc('mutation Del { deleteRepository(name: "sluice") }')))
run('alias', lambda: c.execute(doc('mutation Add { addComment: deleteRepository(name: "alias") }')))
run('fragment', lambda: c.execute(doc('mutation M { ...F } fragment F on Mutation { deleteRepository(name: "frag") }')))
run('batch', lambda: c.execute_batch([GraphQLRequest('query Viewer { viewer }'), GraphQLRequest('mutation Del { deleteRepository(name: "batch") }')]))
run('batch_allowed', lambda: c.execute_batch([GraphQLRequest('query A { viewer }'), GraphQLRequest('mutation B { addComment(text: "b") }')]))
def raw(method, path, body=None, headers=None):
    with httpx.Client(verify=ca) as h:
        r = h.request(method, base + path, content=body, headers=headers or {'content-type': 'application/json'})
        try: j = r.json()
        except Exception: j = None
        return {'status': r.status_code, 'json': j, 'version': r.http_version}
attacks = {
  'persisted_registered': ('POST', '/graphql', json.dumps({'extensions': {'persistedQuery': {'version': 1, 'sha256Hash': 'registeredhash'}}})),
  'persisted_unregistered': ('POST', '/graphql', json.dumps({'extensions': {'persistedQuery': {'version': 1, 'sha256Hash': 'otherhash'}}})),
  'duplicate_names': ('POST', '/graphql', json.dumps({'query': 'mutation A { addComment(text: "x") } mutation A { deleteRepository(name: "dup") }', 'operationName': 'A'})),
  'operation_name_elsewhere': ('POST', '/graphql', json.dumps({'query': 'query A { viewer } mutation B { deleteRepository(name: "elsewhere") }', 'operationName': 'B'})),
  'comment_trick': ('POST', '/graphql', json.dumps({'query': '# query { viewer }\nmutation { deleteRepository(name: "comment") }'})),
  'duplicate_keys': ('POST', '/graphql', '{"query": "query { viewer }", "query": "mutation { deleteRepository(name: \\"dupkey\\") }"}'),
  'deep_nesting': ('POST', '/graphql', json.dumps({'query': '{' * 5000 + '}' * 5000})),
  'batch_smuggle': ('POST', '/graphql', json.dumps([{'query': 'query { viewer }'}, [{'query': 'mutation { deleteRepository(name: "nested") }'}]])),
  'gzip': ('POST', '/graphql', b'\x1f\x8b'),
  'get_query': ('GET', '/graphql?query=%7Bviewer%7D', None),
  'get_with_body': ('GET', '/graphql?query=%7Bviewer%7D', json.dumps({'query': 'mutation { deleteRepository(name: "getbody") }'})),
  'get_mutation': ('GET', '/graphql?query=mutation%7BdeleteRepository(name%3A%22get%22)%7D', None),
  'get_duplicate': ('GET', '/graphql?query=%7Bviewer%7D&query=mutation%7BdeleteRepository(name%3A%22getdup%22)%7D', None),
}
for name, (m, p, b) in attacks.items():
    headers = {'content-type': 'application/json'}
    if name == 'gzip': headers['content-encoding'] = 'gzip'
    run(name, lambda: raw(m, p, b, headers))
async def sub(path, transport_ws=False):
    ctx = ssl.create_default_context(cafile=ca)
    kw = {'subprotocols': [WebsocketsTransport.GRAPHQLWS_SUBPROTOCOL]} if transport_ws else {}
    wt = WebsocketsTransport(url=base.replace('https', 'wss') + path, ssl=ctx, **kw)
    async with Client(transport=wt) as s:
        got = []
        async for r in s.subscribe(doc('subscription Count { count(to: 3) }')):
            got.append(r['count'])
        return got
run('subscription_open', lambda: asyncio.run(sub('/ws-open')))
run('subscription_judged', lambda: asyncio.run(sub('/ws-judged')))
run('subscription_open_transport_ws', lambda: asyncio.run(sub('/ws-open', True)))
run('subscription_judged_transport_ws', lambda: asyncio.run(sub('/ws-judged', True)))
print(json.dumps(out))
"#;

#[test]
fn a_real_graphql_client_and_server_through_sluice() {
    let dir = TempDir::new("graphql");
    let (origin, origin_ca, log) = logging_origin(&dir, SERVER, "the GraphQL server");
    let port = origin.port;
    let policy = format!(
        "version: 1
network_policies:
  gql:
    endpoints:
      - host: 127.0.0.1
        port: {port}
        path: /graphql
        protocol: graphql
        enforcement: enforce
        persisted_queries: allow_registered
        graphql_persisted_queries:
          registeredhash: {{operation_type: query, operation_name: Viewer, fields: [viewer]}}
        rules:
          - allow: {{operation_type: query, fields: [viewer]}}
          - allow: {{operation_type: mutation, fields: [addComment]}}
        deny_rules:
          - {{operation_type: mutation, fields: [deleteRepository]}}
      - host: 127.0.0.1
        port: {port}
        path: /ws-open
        protocol: websocket
        enforcement: enforce
        access: read-write
      - host: 127.0.0.1
        port: {port}
        path: /ws-judged
        protocol: websocket
        enforcement: enforce
        access: read-write
        deny_rules:
          - {{operation_type: subscription, fields: [secret]}}
    binaries:
      - path: {}
",
        python()
    );
    let (sluice, ca) = Sluice::intercepting(&dir, &policy, &[origin_ca.as_path()], None, &[]);
    let base = format!("https://127.0.0.1:{port}");
    let got = python_json_via_env(&sluice, &ca, CLIENT, &[&base, ca.to_str().unwrap()]);
    let received = std::fs::read_to_string(&log).unwrap();
    let ctx = format!("{got:#}\nreceived:\n{received}\n{}", sluice.stderr());

    // Allowed: answered by the server.
    assert_eq!(got["query"]["data"]["viewer"], "octocat", "{ctx}");
    assert_eq!(
        got["mutation_allowed"]["data"]["addComment"], "commented hi",
        "{ctx}"
    );
    assert_eq!(
        got["batch_allowed"]["data"][1]["addComment"], "commented b",
        "{ctx}"
    );
    assert_eq!(got["get_query"]["data"]["status"], 200, "{ctx}");
    // The registered persisted query reaches the server (which has no store of its own).
    assert!(received.contains("registeredhash"), "{ctx}");
    assert_eq!(
        got["subscription_open"]["data"],
        serde_json::json!([0, 1, 2]),
        "{ctx}"
    );

    // Refused: never reached the server.
    for refused in ["mutation_refused", "alias", "fragment", "batch"] {
        assert_eq!(got[refused]["code"], 403, "{refused}: {ctx}");
    }
    let statuses = [
        ("persisted_unregistered", 403),
        ("duplicate_names", 400),
        ("operation_name_elsewhere", 403),
        ("comment_trick", 403),
        ("duplicate_keys", 403),
        ("deep_nesting", 400),
        ("batch_smuggle", 400),
        ("gzip", 400),
        ("get_mutation", 403),
        ("get_duplicate", 400),
        ("get_with_body", 400),
    ];
    for (name, status) in statuses {
        assert_eq!(got[name]["data"]["status"], status, "{name}: {ctx}");
    }
    assert_eq!(
        got["persisted_unregistered"]["data"]["json"]["error"], "policy_denied",
        "{ctx}"
    );
    assert_eq!(
        got["deep_nesting"]["data"]["json"]["error"], "invalid_graphql_request",
        "{ctx}"
    );
    for leaked in ["deleteRepository", "otherhash", "secret"] {
        assert!(
            !received.contains(leaked),
            "{leaked} reached the server: {ctx}"
        );
    }
    assert!(!received.contains("deleteRepository"), "{ctx}");
    // Over WebSocket with GraphQL policy: connection_init passes (the server answered it),
    // the subscription is closed before it reaches the server.
    assert!(received.contains("connection_init"), "{ctx}");
    assert_eq!(
        got["subscription_open_transport_ws"]["data"],
        serde_json::json!([0, 1, 2]),
        "{ctx}"
    );
    for judged in ["subscription_judged", "subscription_judged_transport_ws"] {
        assert!(got[judged]["error"].is_string(), "{judged}: {ctx}");
    }
    let operations = received.lines().filter(|l| {
        l.starts_with("WS ") && (l.contains("\"start\"") || l.contains("\"subscribe\""))
    });
    assert_eq!(
        operations.count(),
        2,
        "only the open endpoint's start and subscribe reached the server: {ctx}"
    );

    // The audit: operations by type and name, never variables or arguments.
    let http = http_events_judging(&sluice, "mutation Del", "sluice\\\"", "query Viewer");
    assert!(
        http.iter().any(
            |e| e.contains("GraphQL operation blocked by endpoint policy")
                && e.contains("subscription Count")
        ),
        "the refused subscription is audited by name: {http:#?}"
    );
    assert_events_valid(&sluice);
    drop(origin);
}

/// The same judgement over HTTP/1.1 and HTTP/2 (one place judges a body read whole): an
/// allowed query reaches the origin, a refused mutation gets a 403 naming the operation and
/// the rule it would need, a document that does not parse `400 invalid_graphql_request`.
#[test]
fn graphql_is_judged_alike_over_http1_and_http2() {
    let dir = TempDir::new("graphqlwire");
    let origin = H2Origin::start(dir.path());
    let port = origin.addr.port();
    let policy = format!(
        "version: 1
network_policies:
  gql:
    endpoints:
      - host: 127.0.0.1
        port: {port}
        protocol: graphql
        enforcement: enforce
        access: read-only
    binaries:
      - path: {}
",
        python()
    );
    let (sluice, ca) = Sluice::intercepting(&dir, &policy, &[origin.cert.as_path()], None, &[]);
    let allowed = r#"{"query":"query Viewer { viewer { login } }"}"#;
    let refused = r#"{"query":"mutation Drop($v: String) { gone: deleteRepository(name: $v) { id } }","variables":{"v":"secret-variable"}}"#;
    for version in ["1", "2"] {
        let got = post_bodies(
            &sluice,
            &ca,
            &format!("https://127.0.0.1:{port}/graphql"),
            version,
            &[allowed, refused, "{\"query\": \"{\"}"],
        );
        let want = if version == "2" { "HTTP/2" } else { "HTTP/1.1" };
        assert!(
            got.as_array().unwrap().iter().all(|a| a["version"] == want),
            "{got}"
        );
        assert_eq!(got[0]["status"], 200, "{got}\n{}", sluice.stderr());
        assert_eq!(got[1]["status"], 403, "{got}");
        let body: Value = serde_json::from_str(got[1]["body"].as_str().unwrap()).unwrap();
        assert_eq!(body["error"], "policy_denied", "{body}");
        assert_eq!(body["operation_type"], "mutation", "{body}");
        assert_eq!(body["operation_name"], "Drop", "{body}");
        assert_eq!(
            body["missing"],
            serde_json::json!({"operation_type": "mutation", "operation_name": "Drop", "fields": ["deleteRepository"]}),
            "{body}"
        );
        assert_eq!(got[2]["status"], 400, "{got}");
        let body: Value = serde_json::from_str(got[2]["body"].as_str().unwrap()).unwrap();
        assert_eq!(body["error"], "invalid_graphql_request", "{body}");
    }
    let received = std::fs::read_to_string(&origin.log).unwrap();
    assert_eq!(received.matches("Viewer").count(), 2, "{received}");
    assert!(!received.contains("deleteRepository"), "{received}");
    assert_refusal_audited_without(&sluice, "graphql: mutation Drop", "secret-variable");
    assert_events_valid(&sluice);
}
