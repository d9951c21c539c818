"""One HTTPS request through the proxy in the environment (HTTPS_PROXY), by a real client
library, printed as `STATUS HTTP-VERSION BODY` on one line.

usage: py_client.py requests|httpx URL CA_FILE [HEADER: VALUE]
"""
import sys

kind, url, ca = sys.argv[1], sys.argv[2], sys.argv[3]
headers = {}
if len(sys.argv) > 4:
    name, _, value = sys.argv[4].partition(": ")
    headers[name] = value

if kind == "requests":
    import requests

    r = requests.get(url, headers=headers, verify=ca, timeout=20)
    version = {10: "HTTP/1.0", 11: "HTTP/1.1"}.get(r.raw.version, str(r.raw.version))
    print(r.status_code, version, r.text.replace("\n", " ").strip())
elif kind == "httpx":
    import httpx

    with httpx.Client(http2=True, verify=ca, timeout=20) as client:
        r = client.get(url, headers=headers)
        print(r.status_code, r.http_version, r.text.replace("\n", " ").strip())
else:
    sys.exit(f"unknown client {kind}")
