//! Local origins for the end-to-end tests: a plain HTTP/1.1 server in a thread (with
//! behaviours a proxy must cope with: sized bodies, echo, silence, slow streams), a receiver
//! of POSTs (an OTLP collector), and, in `scripted`, TLS origins run as child processes.
//! All listen on loopback only and record what they received.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

mod scripted;

pub use scripted::{
    EchoOrigin, H2Origin, HttpsOrigin, OriginProcess, Recorded, RecordingOrigin, STREAMER, Script,
    StaticHttpsOrigin, WS_ECHO, make_cert, spawn_tls, streaming_origin,
};

/// A received request: the request line and the headers, as text.
#[derive(Clone, Debug)]
pub struct Received {
    pub request_line: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A plain HTTP/1.1 origin on 127.0.0.1 (or `[::1]`). Paths:
/// - `/bytes/N`: N bytes of `x` with Content-Length;
/// - `/chunked/N`: N bytes in chunked encoding;
/// - `/echo...`: the request line as the body;
/// - `/silent`: reads the request and never answers;
/// - `/slow/MS`: answers after MS milliseconds;
/// - anything else: `hello from origin`.
#[derive(Debug)]
pub struct HttpOrigin {
    pub addr: SocketAddr,
    received: Arc<Mutex<Vec<Received>>>,
    stop: Arc<AtomicBool>,
}

impl HttpOrigin {
    pub fn start() -> HttpOrigin {
        HttpOrigin::start_on("127.0.0.1:0")
    }

    pub fn start_on(bind: &str) -> HttpOrigin {
        let listener = TcpListener::bind(bind).expect("bind origin");
        let addr = listener.local_addr().expect("origin addr");
        let received = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (rec, st) = (Arc::clone(&received), Arc::clone(&stop));
        thread::spawn(move || {
            for stream in listener.incoming() {
                if st.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let rec = Arc::clone(&rec);
                thread::spawn(move || serve(stream, &rec));
            }
        });
        HttpOrigin {
            addr,
            received,
            stop,
        }
    }

    pub fn received(&self) -> Vec<Received> {
        self.received.lock().map(|r| r.clone()).unwrap_or_default()
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }
}

impl Drop for HttpOrigin {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wake the accept loop so the thread ends.
        let _ = TcpStream::connect(self.addr);
    }
}

fn serve(stream: TcpStream, received: &Mutex<Vec<Received>>) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    let mut writer = match stream.try_clone() {
        Ok(w) => w,
        Err(_) => return,
    };
    let mut reader = BufReader::new(stream);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let request_line = line.trim_end().to_string();
        let mut headers = Vec::new();
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((n, v)) = h.split_once(':') {
                headers.push((n.trim().to_string(), v.trim().to_string()));
            }
        }
        let get = |name: &str| {
            headers
                .iter()
                .find(|(n, _): &&(String, String)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.clone())
        };
        let mut body = Vec::new();
        if let Some(len) = get("content-length").and_then(|l| l.parse::<usize>().ok()) {
            body.resize(len, 0);
            if reader.read_exact(&mut body).is_err() {
                return;
            }
        } else if get("transfer-encoding").is_some_and(|t| t.eq_ignore_ascii_case("chunked")) {
            loop {
                let mut size = String::new();
                if reader.read_line(&mut size).unwrap_or(0) == 0 {
                    return;
                }
                let n = usize::from_str_radix(size.trim().split(';').next().unwrap_or("0"), 16)
                    .unwrap_or(0);
                if n == 0 {
                    let mut end = String::new();
                    let _ = reader.read_line(&mut end);
                    break;
                }
                let mut chunk = vec![0u8; n + 2];
                if reader.read_exact(&mut chunk).is_err() {
                    return;
                }
                body.extend_from_slice(&chunk[..n]);
            }
        }
        let path = request_line.split(' ').nth(1).unwrap_or("/").to_string();
        let method = request_line.split(' ').next().unwrap_or("GET").to_string();
        if let Ok(mut r) = received.lock() {
            r.push(Received {
                request_line: request_line.clone(),
                headers: headers.clone(),
                body: body.clone(),
            });
        }
        let close = get("connection").is_some_and(|c| c.eq_ignore_ascii_case("close"));
        let ok = if path == "/silent" {
            thread::sleep(Duration::from_secs(120));
            return;
        } else if let Some(ms) = path
            .strip_prefix("/slow/")
            .and_then(|n| n.parse::<u64>().ok())
        {
            thread::sleep(Duration::from_millis(ms));
            let text = "slow hello from origin\n";
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nContent-Type: text/plain\r\n\r\n",
                text.len()
            );
            writer.write_all(head.as_bytes()).is_ok() && writer.write_all(text.as_bytes()).is_ok()
        } else if let Some(n) = path
            .strip_prefix("/bytes/")
            .and_then(|n| n.parse::<usize>().ok())
        {
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {n}\r\nContent-Type: application/octet-stream\r\n\r\n"
            );
            writer.write_all(head.as_bytes()).is_ok()
                && (method == "HEAD" || write_repeated(&mut writer, n))
        } else if let Some(n) = path
            .strip_prefix("/chunked/")
            .and_then(|n| n.parse::<usize>().ok())
        {
            let mut ok = writer
                .write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                .is_ok();
            let mut left = n;
            while ok && left > 0 {
                let c = left.min(10_000);
                ok = writer.write_all(format!("{c:x}\r\n").as_bytes()).is_ok()
                    && write_repeated(&mut writer, c)
                    && writer.write_all(b"\r\n").is_ok();
                left -= c;
            }
            ok && writer.write_all(b"0\r\n\r\n").is_ok()
        } else if path.starts_with("/echo") {
            let text = format!("{request_line}\n");
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nContent-Type: text/plain\r\n\r\n",
                text.len() + body.len()
            );
            writer.write_all(head.as_bytes()).is_ok()
                && writer.write_all(text.as_bytes()).is_ok()
                && writer.write_all(&body).is_ok()
        } else {
            let text = "hello from origin\n";
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nContent-Type: text/plain\r\n\r\n",
                text.len()
            );
            writer.write_all(head.as_bytes()).is_ok() && writer.write_all(text.as_bytes()).is_ok()
        };
        if !ok || close {
            return;
        }
    }
}

fn write_repeated(w: &mut TcpStream, n: usize) -> bool {
    let block = vec![b'x'; 64 * 1024];
    let mut left = n;
    while left > 0 {
        let c = left.min(block.len());
        if w.write_all(&block[..c]).is_err() {
            return false;
        }
        left -= c;
    }
    true
}

/// An HTTP/1.1 receiver on loopback (an OTLP/HTTP collector, as sluice's export sees one):
/// each request's path and `Content-Length` body go to `on_body`, and each is answered
/// `200` with an empty protobuf body, on kept-alive connections. Returns its port.
pub fn serve_posts(on_body: impl Fn(&str, Vec<u8>) + Send + Sync + 'static) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let on_body = Arc::new(on_body);
    thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let on_body = Arc::clone(&on_body);
            thread::spawn(move || {
                let mut rd = BufReader::new(stream.try_clone().unwrap());
                let mut wr = stream;
                while let Some((path, body)) = read_post(&mut rd) {
                    on_body(&path, body);
                    let _ = wr.write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n",
                    );
                }
            });
        }
    });
    port
}

/// One request from `rd`: its path and its `Content-Length` body; `None` at the end.
fn read_post(rd: &mut impl BufRead) -> Option<(String, Vec<u8>)> {
    let mut request_line = String::new();
    if rd.read_line(&mut request_line).ok()? == 0 {
        return None;
    }
    let path = request_line
        .split(' ')
        .nth(1)
        .unwrap_or_default()
        .to_string();
    let mut length = 0usize;
    loop {
        let mut h = String::new();
        if rd.read_line(&mut h).ok()? == 0 {
            return None;
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':')
            && k.eq_ignore_ascii_case("content-length")
        {
            length = v.trim().parse().ok()?;
        }
    }
    let mut body = vec![0u8; length];
    rd.read_exact(&mut body).ok()?;
    Some((path, body))
}
