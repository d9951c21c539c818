//! An HTTP/2 client (node) that reaches a local HTTPS origin through sluice (CONNECT, then
//! TLS with sluice's CA) and sends each request's body in the pieces a test chooses, each
//! its own DATA frame with a pause after it: the control over framing and pacing that curl
//! does not give. The client's executable is node's (see [`node_path`] for the policy).

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;

/// One request: `POST path` with `body`, cut into pieces at `cuts`, `pause_ms` after each.
#[derive(Clone, Debug)]
pub struct H2Request {
    pub path: String,
    pub content_type: String,
    pub body: Vec<u8>,
    pub cuts: Vec<usize>,
    pub pause_ms: u64,
}

/// What the client read: the status (0 without a response), the response body, the
/// stream's error (a reset, with its code) if it ended in one, and how many body bytes it
/// wrote before the stream was closed under it (the client writes on whatever the answer).
#[derive(Clone, Debug)]
pub struct H2Answer {
    pub status: u16,
    pub body: String,
    pub error: Option<String>,
    pub sent: usize,
}

const CLIENT: &str = r#"
const http = require('http'), tls = require('tls'), http2 = require('http2'), fs = require('fs');
const [proxyHost, proxyPort, port, ca, planFile] = process.argv.slice(1);
const plan = JSON.parse(fs.readFileSync(planFile));
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const connect = () => new Promise((resolve, reject) => {
  const req = http.request({ host: proxyHost, port: Number(proxyPort), method: 'CONNECT', path: `127.0.0.1:${port}` });
  req.on('connect', (res, socket) => {
    if (res.statusCode !== 200) { reject(new Error(`CONNECT answered ${res.statusCode}`)); return; }
    const t = tls.connect({ socket, host: '127.0.0.1', ca: fs.readFileSync(ca), ALPNProtocols: ['h2'] }, () => {
      const client = http2.connect(`https://127.0.0.1:${port}`, { createConnection: () => t });
      client.on('error', () => {});
      resolve(client);
    });
    t.on('error', reject);
  });
  req.on('error', reject);
  req.end();
});
const one = async (client, r) => {
  const body = Buffer.from(r.body, 'hex');
  const s = client.request({ ':method': 'POST', ':path': r.path, 'content-type': r.content_type });
  let status = 0; const chunks = [];
  const answered = new Promise((resolve) => {
    let done = false;
    const finish = (error) => { if (!done) { done = true; resolve(error); } };
    s.on('response', (h) => { status = h[':status']; });
    s.on('data', (c) => chunks.push(c));
    s.on('end', () => finish(null));
    s.on('error', (e) => finish(String(e.code || e)));
    s.on('close', () => finish(s.rstCode ? `reset ${s.rstCode}` : null));
  });
  // The body goes on whatever the answer, until the stream is closed under it.
  let sent = 0; let from = 0;
  for (const to of [...r.cuts, body.length]) {
    if (s.destroyed || s.closed) break;
    if (to > from) { s.write(body.subarray(from, to)); sent = to; }
    from = to;
    await sleep(r.pause_ms);
  }
  if (!s.destroyed && !s.closed) s.end();
  const error = await answered;
  return { status, body: Buffer.concat(chunks).toString(), error, sent };
};
(async () => {
  const client = await connect();
  for (const r of plan) console.log(JSON.stringify(await one(client, r)));
  client.close();
})().catch((e) => { console.log(JSON.stringify({ fatal: String(e) })); process.exit(1); });
"#;

/// node's executable, as a policy's `binaries` names it.
pub fn node_path() -> String {
    crate::proxy::realpath("/usr/bin/node")
}

/// Sends `requests` one after another on one HTTP/2 connection through `proxy` to the
/// origin on `127.0.0.1:port` (trusting `ca`); the plan is written to `dir`.
pub fn send(
    proxy: SocketAddr,
    port: u16,
    ca: &Path,
    dir: &Path,
    requests: &[H2Request],
) -> Vec<H2Answer> {
    let plan: Vec<serde_json::Value> = requests
        .iter()
        .map(|r| {
            let hex: String = r.body.iter().map(|b| format!("{b:02x}")).collect();
            serde_json::json!({
                "path": r.path,
                "content_type": r.content_type,
                "body": hex,
                "cuts": r.cuts,
                "pause_ms": r.pause_ms,
            })
        })
        .collect();
    let plan_file = dir.join("h2-plan.json");
    std::fs::write(&plan_file, serde_json::Value::from(plan).to_string()).expect("write plan");
    let out = Command::new("node")
        .arg("-e")
        .arg(CLIENT)
        .arg(proxy.ip().to_string())
        .arg(proxy.port().to_string())
        .arg(port.to_string())
        .arg(ca)
        .arg(&plan_file)
        .output()
        .expect("run the h2 client (node)");
    let text = String::from_utf8_lossy(&out.stdout);
    let answers: Vec<H2Answer> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .map(|v| {
            assert!(v.get("fatal").is_none(), "h2 client: {v}");
            H2Answer {
                status: v["status"]
                    .as_u64()
                    .and_then(|s| u16::try_from(s).ok())
                    .unwrap_or(0),
                body: v["body"].as_str().unwrap_or_default().to_string(),
                error: v["error"].as_str().map(str::to_string),
                sent: v["sent"]
                    .as_u64()
                    .and_then(|n| usize::try_from(n).ok())
                    .unwrap_or(0),
            }
        })
        .collect();
    assert_eq!(
        answers.len(),
        requests.len(),
        "h2 client: {text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    answers
}
