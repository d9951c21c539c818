"""The "internet" of the pod test: origins on the given addresses, in their namespace.

Usage: pod_origins.py CERT KEY LOG IP...
On each IP: HTTPS on 443 and plain HTTP on 80 answering every request with its headers as
JSON (so a secret the origin received would reach the client if sluice did not scrub it),
a TCP echo server on 7000, and a UDP listener on 53 that logs every datagram (a DNS query
that reached "the internet") and answers nothing. Every HTTP request is logged as a JSON line (the address and
port it arrived on, Host, path, headers). Prints "ready" once everything is bound.
"""
import http.server
import json
import socket
import socketserver
import ssl
import sys
import threading

cert, key, log = sys.argv[1:4]
ips = sys.argv[4:]
lock = threading.Lock()


class Echo(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        local = self.connection.getsockname()
        record = {
            "peer": self.client_address[0],
            "ip": local[0],
            "port": local[1],
            "path": self.path,
            "host": self.headers.get("Host", ""),
            "headers": {k.lower(): v for k, v in self.headers.items()},
        }
        with lock, open(log, "a") as f:
            f.write(json.dumps(record) + "\n")
        body = json.dumps(record).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True


class EchoTcp(socketserver.BaseRequestHandler):
    def handle(self):
        while True:
            data = self.request.recv(4096)
            if not data:
                return
            self.request.sendall(data)


class TcpServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


class DnsSink(socketserver.BaseRequestHandler):
    def handle(self):
        data = self.request[0]
        with lock, open(log, "a") as f:
            f.write(json.dumps({"dns": data.decode("latin1")}) + "\n")


servers = []
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(cert, key)
for ip in ips:
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    http_class = type("Http", (Server,), {"address_family": family})
    tcp_class = type("Tcp", (TcpServer,), {"address_family": family})
    https = http_class((ip, 443), Echo)
    https.socket = context.wrap_socket(https.socket, server_side=True)
    udp_class = type("Udp", (socketserver.ThreadingUDPServer,), {"address_family": family})
    servers += [
        https,
        http_class((ip, 80), Echo),
        tcp_class((ip, 7000), EchoTcp),
        udp_class((ip, 53), DnsSink),
    ]
for s in servers:
    threading.Thread(target=s.serve_forever, daemon=True).start()
print("ready", flush=True)
threading.Event().wait()
