"""One probe through the network fence: a TCP connection or a UDP datagram to HOST:PORT.

Usage: fence_probe.py tcp|udp HOST PORT
Prints the first line the server sent, "refused" (ECONNREFUSED: an ICMP unreachable or a
reset came back), "blocked" (EPERM: the local firewall dropped the packet as it was sent),
"nothing" (no answer within 1.5 s) or "error: ...".
"""
import socket
import sys

proto, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
family = socket.AF_INET6 if ":" in host else socket.AF_INET
try:
    if proto == "tcp":
        s = socket.create_connection((host, port), timeout=3)
        s.settimeout(3)
        data = s.recv(200).decode().strip()
        print(data if data else "closed")
    else:
        s = socket.socket(family, socket.SOCK_DGRAM)
        s.settimeout(1.5)
        s.connect((host, port))
        s.send(b"ping")
        print(s.recv(200).decode())
except ConnectionRefusedError:
    print("refused")
except PermissionError:
    print("blocked")
except ConnectionResetError:
    print("reset")
except socket.timeout:
    print("nothing")
except OSError as e:
    print("error: %s" % e)
