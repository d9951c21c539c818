//! Origins run as child processes (Python's `ssl`, Node's `http2`) over TLS with a
//! certificate made by `openssl` on the spot: HTTPS, HTTP/2, static files, an echo of the
//! request as a bound API's error page might write it, a recorder of request bodies and a
//! streaming origin. Each prints its port on its first stdout line and is killed on drop.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::Duration;

/// An origin server run as a child process that prints its port on its first stdout line;
/// killed on drop.
#[derive(Debug)]
pub struct OriginProcess {
    pub port: u16,
    child: Child,
}

impl OriginProcess {
    /// Starts `cmd` (stdout piped, stderr inherited) and reads the port it prints.
    pub fn spawn(cmd: &mut Command, what: &str) -> OriginProcess {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("start {what}: {e}"));
        let mut line = String::new();
        let stdout = child.stdout.take().expect("origin stdout");
        BufReader::new(stdout)
            .read_line(&mut line)
            .unwrap_or_else(|e| panic!("{what} port: {e}"));
        let port = line
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{what} printed no port: {line:?}"));
        OriginProcess { port, child }
    }
}

impl Drop for OriginProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An origin script and what runs it.
#[derive(Clone, Copy, Debug)]
pub enum Script<'a> {
    /// `node -e SCRIPT`.
    Node(&'a str),
    /// `python3 -c SCRIPT`.
    Python(&'a str),
}

/// Starts `script` with a certificate made in `dir` ([`make_cert`]): its arguments are the
/// certificate, its key, then `args`. The process (its port the first line it prints) and
/// the CA that signs the certificate.
pub fn spawn_tls(
    dir: &Path,
    script: Script<'_>,
    args: &[&dyn AsRef<OsStr>],
    what: &str,
) -> (OriginProcess, PathBuf) {
    let (ca, cert, key) = make_cert(dir);
    let mut cmd = match script {
        Script::Node(text) => {
            let mut c = Command::new("node");
            c.arg("-e").arg(text);
            c
        }
        Script::Python(text) => {
            let mut c = Command::new("python3");
            c.arg("-c").arg(text);
            c
        }
    };
    cmd.arg(&cert)
        .arg(&key)
        .args(args.iter().map(|a| a.as_ref()));
    (OriginProcess::spawn(&mut cmd, what), ca)
}

/// A test CA and a server certificate it signed, for `localhost`, `127.0.0.1`, `127.0.0.26` (an
/// origin on port 443 of its own loopback address), `::1` and
/// `*.local.test`, made by `openssl` in `dir`: (CA certificate, server certificate, server key).
/// (A self-signed certificate is a CA, which verifiers refuse as a server certificate.)
pub fn make_cert(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let ca = dir.join("origin-ca.pem");
    let ca_key = dir.join("origin-ca-key.pem");
    let cert = dir.join("origin-cert.pem");
    let key = dir.join("origin-key.pem");
    let csr = dir.join("origin.csr");
    let ext = dir.join("origin.ext");
    std::fs::write(
        &ext,
        "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=DNS:localhost,DNS:*.local.test,DNS:origin.test,IP:127.0.0.1,IP:127.0.0.26,IP:::1\n",
    )
    .expect("write ext file");
    let openssl = |args: &[&str]| {
        let status = Command::new("openssl")
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("run openssl");
        assert!(status.success(), "openssl {args:?} failed");
    };
    let p = |p: &PathBuf| p.to_string_lossy().into_owned();
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=sluice test origin CA",
        "-keyout",
        &p(&ca_key),
        "-out",
        &p(&ca),
    ]);
    openssl(&[
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-subj",
        "/CN=localhost",
        "-keyout",
        &p(&key),
        "-out",
        &p(&csr),
    ]);
    openssl(&[
        "x509",
        "-req",
        "-in",
        &p(&csr),
        "-CA",
        &p(&ca),
        "-CAkey",
        &p(&ca_key),
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        &p(&ext),
        "-out",
        &p(&cert),
    ]);
    (ca, cert, key)
}

/// An HTTPS origin (Python `http.server` + `ssl`) on 127.0.0.1: `GET /bytes/N` answers N
/// bytes, anything else `hello over tls`.
#[derive(Debug)]
pub struct HttpsOrigin {
    pub addr: SocketAddr,
    /// The CA that signed the origin's certificate: what a client must trust.
    pub cert: PathBuf,
    process: OriginProcess,
}

const HTTPS_ORIGIN: &str = r#"
import http.server, ssl, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def do_GET(self):
        if self.path.startswith("/bytes/"):
            n = int(self.path[7:])
            self.send_response(200); self.send_header("Content-Length", str(n)); self.end_headers()
            block = b"y" * 65536
            while n > 0:
                c = min(n, len(block)); self.wfile.write(block[:c]); n -= c
        else:
            body = b"hello over tls\n"
            self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
            self.wfile.write(body)
srv = http.server.ThreadingHTTPServer((sys.argv[3], 0), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); ctx.load_cert_chain(sys.argv[1], sys.argv[2])
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
print(srv.server_address[1], flush=True)
srv.serve_forever()
"#;

impl HttpsOrigin {
    pub fn start(dir: &Path) -> HttpsOrigin {
        let (process, ca) = spawn_tls(
            dir,
            Script::Python(HTTPS_ORIGIN),
            &[&"127.0.0.1"],
            "the https origin",
        );
        let port = process.port;
        HttpsOrigin {
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            cert: ca,
            process,
        }
    }

    pub fn port(&self) -> u16 {
        self.process.port
    }
}

/// An HTTPS origin that speaks HTTP/2 and HTTP/1.1 (Node's `http2` module, `allowHTTP1`),
/// answering each request with the protocol it arrived over: `proto=2 path=/x`. `/early`
/// answers before it has read the request body; `/silent` never answers.
#[derive(Debug)]
pub struct H2Origin {
    pub addr: SocketAddr,
    /// The CA that signed the origin's certificate.
    pub cert: PathBuf,
    /// JSON lines, one per request received: method, url, headers, body, and whether its
    /// stream was reset before the body ended (`aborted`).
    pub log: PathBuf,
    process: OriginProcess,
}

const H2_ORIGIN: &str = r#"
const http2 = require('http2'); const fs = require('fs');
const log = process.argv[3];
let stored = '';
const server = http2.createSecureServer({ key: fs.readFileSync(process.argv[2]), cert: fs.readFileSync(process.argv[1]), allowHTTP1: true },
  (req, res) => {
    const m = req.url.match(/^\/bytes\/(\d+)/);
    if (m) {
      let left = Number(m[1]); const block = Buffer.alloc(1 << 16, 120);
      res.setHeader('content-type', 'application/octet-stream');
      res.setHeader('content-length', String(left));
      const pump = () => { while (left > 0) { const c = Math.min(left, block.length); left -= c; if (!res.write(c === block.length ? block : block.subarray(0, c))) { res.once('drain', pump); return; } } res.end(); };
      pump(); return;
    }
    if (req.url.startsWith('/sse')) {
      res.setHeader('content-type', 'text/event-stream');
      let i = 0; const t = setInterval(() => { res.write(`data: ${i} ${Date.now()}\n\n`); if (++i === 3) { clearInterval(t); res.end(); } }, 1000);
      return;
    }
    if (req.url.startsWith('/early')) {
      res.setHeader('content-type', 'text/plain'); res.write('early\n');
      let n = 0; req.on('data', (c) => { n += c.length; });
      req.on('end', () => { fs.appendFileSync(log, JSON.stringify({ method: req.method, url: req.url, body: '', aborted: req.aborted }) + '\n'); res.end(`body=${n}\n`); });
      return;
    }
    if (req.url.startsWith('/silent')) { req.resume(); return; }
    if (req.url.startsWith('/count')) {
      let n = 0; req.on('data', (c) => { n += c.length; }); req.on('end', () => res.end(`count=${n}\n`)); return;
    }
    let n = 0; const chunks = [];
    req.on('data', (c) => { n += c.length; chunks.push(c); });
    req.on('end', () => {
      fs.appendFileSync(log, JSON.stringify({ method: req.method, url: req.url, headers: req.headers, body: Buffer.concat(chunks).toString('latin1'), aborted: req.aborted }) + '\n');
      res.setHeader('content-type', 'text/plain');
      res.end(`proto=${req.httpVersion} method=${req.method} path=${req.url} body=${n}\n`);
    });
  });
server.listen(Number(process.argv[5] || 0), process.argv[4], () => { console.log(server.address().port); });
"#;

impl H2Origin {
    pub fn start(dir: &Path) -> H2Origin {
        H2Origin::start_on(dir, IpAddr::from([127, 0, 0, 1]))
    }

    /// Like [`H2Origin::start`], listening on `ip` (`::1` for an IPv6-literal origin).
    pub fn start_on(dir: &Path, ip: IpAddr) -> H2Origin {
        H2Origin::start_at(dir, SocketAddr::from((ip, 0)))
    }

    /// Like [`H2Origin::start`], listening on `addr` (port 0: any).
    pub fn start_at(dir: &Path, addr: SocketAddr) -> H2Origin {
        let ip = addr.ip();
        let log = dir.join(format!("h2-origin-{}.jsonl", std::process::id()));
        let (process, ca) = spawn_tls(
            dir,
            Script::Node(H2_ORIGIN),
            &[&log, &ip.to_string(), &addr.port().to_string()],
            "the h2 origin (node)",
        );
        let port = process.port;
        H2Origin {
            addr: SocketAddr::from((ip, port)),
            cert: ca,
            log,
            process,
        }
    }

    pub fn port(&self) -> u16 {
        self.process.port
    }

    /// Everything the origin received so far, one JSON value per request.
    pub fn received(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

/// A static HTTPS file server (Python) for a directory: a dumb-HTTP git remote, a simple
/// package index. Listens on 127.0.0.1; its certificate is for `origin.test` among others.
#[derive(Debug)]
pub struct StaticHttpsOrigin {
    pub addr: SocketAddr,
    /// The CA that signed the origin's certificate.
    pub cert: PathBuf,
    process: OriginProcess,
}

const STATIC_ORIGIN: &str = r#"
import functools, http.server, ssl, sys
H = functools.partial(http.server.SimpleHTTPRequestHandler, directory=sys.argv[3])
H.log_message = lambda *a: None
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); ctx.load_cert_chain(sys.argv[1], sys.argv[2])
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
print(srv.server_address[1], flush=True)
srv.serve_forever()
"#;

impl StaticHttpsOrigin {
    pub fn start(cert_dir: &Path, root: &Path) -> StaticHttpsOrigin {
        let (process, ca) = spawn_tls(
            cert_dir,
            Script::Python(STATIC_ORIGIN),
            &[&root],
            "the static origin",
        );
        let port = process.port;
        StaticHttpsOrigin {
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            cert: ca,
            process,
        }
    }

    pub fn port(&self) -> u16 {
        self.process.port
    }
}

/// An HTTPS origin that speaks HTTP/2 and HTTP/1.1 (Node's `http2`, `allowHTTP1`) and echoes
/// each request back, as a bound API's error page might: every request header as an
/// `x-echo-<name>` response header, the URL as `x-echo-url`, and `{url, headers}` as a JSON
/// body sent seven bytes at a time (each its own chunk or DATA frame, so that an echoed
/// secret is split across them) under a `Content-Length` of the echo. `/gzip...` answers the
/// echo gzip-encoded whatever the request accepts; `/rawgzip...` gzipped without saying so;
/// `/escape...` with `/` JSON-escaped as `\/` and letters, digits, `+`, `=`, `-` as `\u00xx`
/// (upper-case hex for `/escape-upper`). `/store...` keeps the request's `Authorization`,
/// `/fetch...` answers it as text (a byte range of it, `206`, to `Range`, `Request-Range`,
/// `X-Ms-Range` or the origin's own `X-Object-Range`), `/fetch-split?at=N` in two parts
/// (cut at N, 600 ms apart). `/reflect...` answers the request body as text
/// (`/reflect-slow...` ends it 1.5 s after). `/html...` answers the echo as HTML, its
/// special characters escaped as entities; `/named...` names a response header after each
/// request header's value. Every request is logged like
/// [`H2Origin`]'s, with its trailers.
#[derive(Debug)]
pub struct EchoOrigin {
    pub addr: SocketAddr,
    /// The CA that signed the origin's certificate.
    pub cert: PathBuf,
    /// JSON lines, one per request received: method, url, headers, body, trailers.
    pub log: PathBuf,
    process: OriginProcess,
}

const ECHO_ORIGIN: &str = r#"
const http2 = require('http2'); const fs = require('fs'); const zlib = require('zlib');
const log = process.argv[3];
let stored = '';
const server = http2.createSecureServer({ key: fs.readFileSync(process.argv[2]), cert: fs.readFileSync(process.argv[1]), allowHTTP1: true },
  (req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      fs.appendFileSync(log, JSON.stringify({ method: req.method, url: req.url, headers: req.headers, body: Buffer.concat(chunks).toString('latin1'), trailers: req.trailers }) + '\n');
      if (req.url.startsWith('/store')) stored = req.headers.authorization || '';
      if (req.url.startsWith('/reflect')) {
        // The request body back as text, ending where the client chose; `-slow` pauses
        // 1.5 s before it ends the body.
        res.setHeader('content-type', 'text/plain');
        const body = Buffer.concat(chunks);
        if (req.url.startsWith('/reflect-slow')) {
          res.write(body); setTimeout(() => res.end(), 1500); return;
        }
        res.end(body); return;
      }
      if (req.url.startsWith('/fetch-split')) {
        // The stored value cut at `at`, with a pause of 600 ms between the two parts.
        res.setHeader('content-type', 'text/plain');
        const at = Number(new URL(req.url, 'https://x').searchParams.get('at') || '0');
        res.write(stored.slice(0, at));
        setTimeout(() => res.end(stored.slice(at) + ' (end)'), 600); return;
      }
      if (req.url.startsWith('/fetch')) {
        res.setHeader('content-type', 'text/plain');
        // Byte ranges, as any file server answers them (`bytes=A-B`).
        // Apache's `Request-Range` and Azure's `x-ms-range` too, and `x-object-range`, a
        // spelling of this API's own that no proxy could know.
        const asked = req.headers.range || req.headers['request-range'] || req.headers['x-ms-range'] || req.headers['x-object-range'] || '';
        const range = /^bytes=(\d+)-(\d+)$/.exec(asked);
        if (range) {
          const [a, b] = [Number(range[1]), Math.min(Number(range[2]), stored.length - 1)];
          res.statusCode = 206;
          res.setHeader('content-range', `bytes ${a}-${b}/${stored.length}`);
          res.end(stored.slice(a, b + 1)); return;
        }
        res.end(stored); return;
      }
      let echo = Buffer.from(JSON.stringify({ url: req.url, headers: req.headers }));
      if (req.url.startsWith('/gzip')) {
        res.setHeader('content-encoding', 'gzip'); res.end(zlib.gzipSync(echo)); return;
      }
      if (req.url.startsWith('/rawgzip')) {
        res.setHeader('content-type', 'application/octet-stream'); res.end(zlib.gzipSync(echo)); return;
      }
      if (req.url.startsWith('/html')) {
        // As an HTML error page quotes a request: every special character an entity.
        const ent = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
        res.setHeader('content-type', 'text/html');
        res.end(`<p>${echo.toString().replace(/[&<>"']/g, (c) => ent[c])}</p>`); return;
      }
      if (req.url.startsWith('/named')) {
        // Each request header's value (its last word, as a token) as a response header's name.
        for (const v of Object.values(req.headers)) {
          const word = String(v).split(' ').pop().replace(/[^A-Za-z0-9!#$%&'*+.^_`|~-]/g, '');
          if (word) { try { res.setHeader('x-named-' + word, '1'); } catch (e) {} }
        }
        res.end('named'); return;
      }
      if (req.url.startsWith('/escape')) {
        const hex = (c) => c.charCodeAt(0).toString(16).padStart(2, '0');
        const up = req.url.includes('upper');
        echo = Buffer.from(echo.toString().replace(/[\/+=A-Za-z0-9-]/g, (c) => c === '/' ? '\\/' : '\\u00' + (up ? hex(c).toUpperCase() : hex(c))));
      }
      for (const [k, v] of Object.entries(req.headers)) {
        if (!k.startsWith(':') && typeof v === 'string') { try { res.setHeader('x-echo-' + k, v); } catch (e) {} }
      }
      res.setHeader('x-echo-url', req.url);
      res.setHeader('content-type', 'application/json');
      res.setHeader('content-length', String(echo.length));
      let i = 0;
      const step = () => { if (i >= echo.length) { res.end(); return; } res.write(echo.subarray(i, i + 7)); i += 7; setTimeout(step, 1); };
      step();
    });
  });
server.listen(0, '127.0.0.1', () => { console.log(server.address().port); });
"#;

impl EchoOrigin {
    pub fn start(dir: &Path) -> EchoOrigin {
        let log = dir.join(format!("echo-origin-{}.jsonl", std::process::id()));
        let (process, ca) = spawn_tls(
            dir,
            Script::Node(ECHO_ORIGIN),
            &[&log],
            "the echo origin (node)",
        );
        let port = process.port;
        EchoOrigin {
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            cert: ca,
            log,
            process,
        }
    }

    pub fn port(&self) -> u16 {
        self.process.port
    }

    /// Everything the origin received so far, one JSON value per request.
    pub fn received(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// The raw log: every byte the origin recorded.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// An origin (node; HTTPS, HTTP/2 and HTTP/1.1) that records every request as its body ends,
/// whole or cut off (the stream reset or the connection closed first): a JSON line with the
/// URL, whether the body was complete, and the file its bytes were written to.
const RECORDING_ORIGIN: &str = r#"
const http2 = require('http2'); const fs = require('fs'); const path = require('path');
const dir = process.argv[3]; let seq = 0;
const server = http2.createSecureServer({ key: fs.readFileSync(process.argv[2]), cert: fs.readFileSync(process.argv[1]), allowHTTP1: true },
  (req, res) => {
    const chunks = []; let done = false;
    const record = (complete) => {
      if (done) return; done = true;
      const file = path.join(dir, `body-${seq++}.bin`);
      fs.writeFileSync(file, Buffer.concat(chunks));
      fs.appendFileSync(path.join(dir, 'log.jsonl'), JSON.stringify({ url: req.url, complete, file }) + '\n');
    };
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => { record(true); res.end('stored\n'); });
    req.on('close', () => record(false));
    req.on('error', () => record(false));
  });
server.on('sessionError', () => {}); server.on('clientError', () => {});
server.listen(0, '127.0.0.1', () => { console.log(server.address().port); });
"#;

/// A request as the [`RecordingOrigin`] saw it: its URL, whether its body ended, its bytes.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub url: String,
    pub complete: bool,
    pub body: Vec<u8>,
}

#[derive(Debug)]
pub struct RecordingOrigin {
    dir: PathBuf,
    /// The CA that signed the origin's certificate.
    pub cert: PathBuf,
    process: OriginProcess,
}

impl RecordingOrigin {
    pub fn start(dir: &Path) -> RecordingOrigin {
        let store = dir.join("received");
        std::fs::create_dir_all(&store).expect("origin store");
        let (process, ca) = spawn_tls(
            dir,
            Script::Node(RECORDING_ORIGIN),
            &[&store],
            "the recording origin (node)",
        );
        RecordingOrigin {
            dir: store,
            cert: ca,
            process,
        }
    }

    /// What reached the origin for `url`, once there is something (waiting up to 5 s: a
    /// cut-off request is recorded when the origin sees its stream or connection end).
    pub fn port(&self) -> u16 {
        self.process.port
    }

    pub fn received(&self, url: &str) -> Vec<Recorded> {
        for _ in 0..50 {
            let got = self.read(url);
            if !got.is_empty() {
                return got;
            }
            thread::sleep(Duration::from_millis(100));
        }
        self.read(url)
    }

    fn read(&self, url: &str) -> Vec<Recorded> {
        self.all().into_iter().filter(|r| r.url == url).collect()
    }

    /// Every request recorded so far, in the order their bodies ended.
    pub fn all(&self) -> Vec<Recorded> {
        std::fs::read_to_string(self.dir.join("log.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .map(|r| Recorded {
                url: r["url"].as_str().unwrap_or_default().to_string(),
                complete: r["complete"].as_bool().unwrap_or(false),
                body: std::fs::read(r["file"].as_str().unwrap_or_default()).unwrap_or_default(),
            })
            .collect()
    }
}

/// [`STREAMING_ORIGIN`] started with a certificate made in `dir` (its `closed.txt` the file
/// it appends to): the process and the CA that signs its certificate.
pub fn streaming_origin(dir: &Path) -> (OriginProcess, PathBuf) {
    spawn_tls(
        dir,
        Script::Node(STREAMING_ORIGIN),
        &[&dir.join("closed.txt")],
        "the streaming origin (node)",
    )
}

/// An origin (node; HTTP/2 and HTTP/1.1) whose `/stream` sends a line every 200 ms and
/// appends `closed` to the file named by its third argument when the stream closes; other
/// paths answer `ok`. Arguments: certificate, key, that file.
pub const STREAMING_ORIGIN: &str = r#"
const http2 = require('http2'); const fs = require('fs');
const closed = process.argv[3];
const server = http2.createSecureServer({ key: fs.readFileSync(process.argv[2]), cert: fs.readFileSync(process.argv[1]), allowHTTP1: true },
  (req, res) => {
    if (req.url.startsWith('/stream')) {
      res.setHeader('content-type', 'text/plain');
      let i = 0; const t = setInterval(() => { res.write(`line ${i++}\n`); }, 200);
      res.on('close', () => { clearInterval(t); fs.appendFileSync(closed, 'closed\n'); });
      return;
    }
    res.setHeader('content-type', 'text/plain'); res.end('ok\n');
  });
server.listen(0, '127.0.0.1', () => { console.log(server.address().port); });
"#;

/// An httpx HTTP/2 client streaming `/stream`: prints each line as it arrives, then `END`
/// and what ended the stream.
pub const STREAMER: &str = r#"
import sys, httpx
proxy, ca, base = sys.argv[1:4]
with httpx.Client(proxy=proxy, verify=ca, http1=False, http2=True, timeout=30) as c:
    try:
        with c.stream('GET', base + '/stream') as r:
            print('STATUS', r.status_code, r.http_version, flush=True)
            for line in r.iter_lines():
                print(line, flush=True)
        print('END complete', flush=True)
    except Exception as e:
        print('END', type(e).__name__, flush=True)
"#;

/// A WebSocket server (Python, raw sockets): answers the handshake with `101`, then echoes
/// every byte back until the client closes.
pub const WS_ECHO: &str = r#"
import base64, hashlib, socket, threading
s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(5)
print(s.getsockname()[1], flush=True)
def serve(c):
    data = b''
    while b'\r\n\r\n' not in data:
        data += c.recv(4096)
    head, rest = data.split(b'\r\n\r\n', 1)
    key = [l.split(b':', 1)[1].strip() for l in head.split(b'\r\n') if l.lower().startswith(b'sec-websocket-key')][0]
    accept = base64.b64encode(hashlib.sha1(key + b'258EAFA5-E914-47DA-95CA-C5AB0DC85B11').digest())
    c.sendall(b'HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ' + accept + b'\r\n\r\n' + rest)
    while True:
        d = c.recv(4096)
        if not d:
            break
        c.sendall(d)
    c.close()
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"#;
