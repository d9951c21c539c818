"""One POST through an intercepting proxy (CONNECT, then TLS with the proxy's CA), reading
the response's framing as a client can see it: the size of each HTTP/1.1 chunk or HTTP/2
DATA frame and when it arrived (ms after the request went out). Prints one JSON object:
{"status": N, "pieces": [[size, ms], ...], "end_ms": ms, "body": "..."}.

usage: frames_probe.py PROXY_HOST:PORT CA_FILE ORIGIN_HOST:PORT PATH BODY 1.1|2
"""
import json
import socket
import ssl
import sys
import time

proxy, ca, origin, path, body, version = sys.argv[1:7]
body = body.encode()
host, port = proxy.rsplit(":", 1)
raw = socket.create_connection((host, int(port)), timeout=20)
raw.sendall(f"CONNECT {origin} HTTP/1.1\r\nHost: {origin}\r\n\r\n".encode())
head = b""
while b"\r\n\r\n" not in head:
    got = raw.recv(1)
    if not got:
        sys.exit("the proxy closed the tunnel")
    head += got
if b" 200 " not in head.split(b"\r\n")[0]:
    sys.exit(f"CONNECT refused: {head!r}")
context = ssl.create_default_context(cafile=ca)
context.set_alpn_protocols(["h2"] if version == "2" else ["http/1.1"])
tls = context.wrap_socket(raw, server_hostname=origin.rsplit(":", 1)[0])
start = time.monotonic()


def now():
    return round((time.monotonic() - start) * 1000)


def http1():
    tls.sendall(
        f"POST {path} HTTP/1.1\r\nHost: {origin}\r\nContent-Type: text/plain\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )
    buf = b""

    def more():
        nonlocal buf
        got = tls.recv(65536)
        if not got:
            raise EOFError
        buf += got

    while b"\r\n\r\n" not in buf:
        more()
    head, buf = buf.split(b"\r\n\r\n", 1)
    status = int(head.split(b" ")[1])
    if b"transfer-encoding: chunked" not in head.lower():
        sys.exit(f"not chunked: {head!r}")
    pieces, text = [], b""
    while True:
        while b"\r\n" not in buf:
            more()
        line, buf = buf.split(b"\r\n", 1)
        size = int(line.split(b";")[0], 16)
        if size == 0:
            return status, pieces, now(), text
        pieces.append([size, now()])
        while len(buf) < size + 2:
            more()
        text += buf[:size]
        buf = buf[size + 2 :]


def http2():
    import h2.config
    import h2.connection
    import h2.events

    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    conn.send_headers(
        1,
        [
            (":method", "POST"),
            (":scheme", "https"),
            (":authority", origin),
            (":path", path),
            ("content-type", "text/plain"),
            ("content-length", str(len(body))),
        ],
    )
    conn.send_data(1, body, end_stream=True)
    tls.sendall(conn.data_to_send())
    status, pieces, text = None, [], b""
    while True:
        got = tls.recv(65536)
        if not got:
            sys.exit("the connection closed before the stream ended")
        for event in conn.receive_data(got):
            if isinstance(event, h2.events.ResponseReceived):
                status = int(dict(event.headers)[b":status"])
            elif isinstance(event, h2.events.DataReceived):
                if event.data:
                    pieces.append([len(event.data), now()])
                    text += event.data
                conn.acknowledge_received_data(event.flow_controlled_length, 1)
            elif isinstance(event, h2.events.StreamEnded):
                return status, pieces, now(), text
            elif isinstance(event, h2.events.StreamReset):
                sys.exit(f"stream reset: {event.error_code}")
        tls.sendall(conn.data_to_send())


status, pieces, end, text = http2() if version == "2" else http1()
print(json.dumps({"status": status, "pieces": pieces, "end_ms": end, "body": text.decode("latin1")}))
