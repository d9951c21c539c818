"""Stand-in servers for the network fence test: each listens on the given TCP and UDP
addresses and answers with its label. A TCP server also reports the connection's original
destination (SO_ORIGINAL_DST / IP6T_SO_ORIGINAL_DST) when nftables redirected it there.

Usage: fence_servers.py LABEL tcp:IP:PORT|udp:IP:PORT...   (IPv6 as tcp:[::1]:PORT)
Prints "ready" once every socket is bound.
"""
import ipaddress
import socket
import struct
import sys
import threading

SO_ORIGINAL_DST = 80  # SOL_IP; IP6T_SO_ORIGINAL_DST is the same number at SOL_IPV6


def split(spec):
    proto, rest = spec.split(":", 1)
    host, port = rest.rsplit(":", 1)
    return proto, host.strip("[]"), int(port)


def original_destination(conn, family):
    try:
        if family == socket.AF_INET:
            raw = conn.getsockopt(socket.SOL_IP, SO_ORIGINAL_DST, 16)
            port = struct.unpack("!H", raw[2:4])[0]
            return "%s:%d" % (socket.inet_ntoa(raw[4:8]), port)
        raw = conn.getsockopt(socket.IPPROTO_IPV6, SO_ORIGINAL_DST, 28)
        port = struct.unpack("!H", raw[2:4])[0]
        return "[%s]:%d" % (ipaddress.IPv6Address(raw[8:24]), port)
    except OSError:
        return "-"


def serve_tcp(label, sock, family):
    while True:
        conn, _ = sock.accept()
        conn.sendall(("%s %s\n" % (label, original_destination(conn, family))).encode())
        conn.close()


def serve_udp(label, sock):
    while True:
        _, peer = sock.recvfrom(2048)
        sock.sendto(label.encode(), peer)


label = sys.argv[1]
for spec in sys.argv[2:]:
    proto, host, port = split(spec)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    kind = socket.SOCK_STREAM if proto == "tcp" else socket.SOCK_DGRAM
    s = socket.socket(family, kind)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, port))
    if proto == "tcp":
        s.listen(16)
        threading.Thread(target=serve_tcp, args=(label, s, family), daemon=True).start()
    else:
        threading.Thread(target=serve_udp, args=(label, s), daemon=True).start()
print("ready", flush=True)
threading.Event().wait()
