"""An AWS-shaped HTTPS origin that verifies SigV4 the way AWS does, for tests/tests/sigv4.rs.

Arguments: CERT KEY LOG (or `--verify LOG`, below). The real keys come from the environment (REAL_ACCESS_KEY_ID,
REAL_SECRET_ACCESS_KEY, REAL_SESSION_TOKEN optional); the expected region from REGION.
Every request's signature is recomputed with botocore's own signer over the headers the
request says it signed, with the real secret key, and compared; a declared payload hash is
checked against the body; an `aws-chunked` body is decoded. A request that fails answers
403 `SignatureDoesNotMatch` (or `InvalidAccessKeyId`, `InvalidToken`, `XAmzContentSHA256Mismatch`).
One JSON line per request goes to LOG: method, path, the Authorization header received,
whether it verified and why not. Prints its port on its first stdout line.

Routes (after verification): S3 `PUT /<bucket>/<key>` stores, `GET /<bucket>/<key>` returns
it; `GET /<bucket>/echo-auth` answers with the signature headers it received (a reflection
sluice must scrub); Bedrock `POST /model/<id>/invoke` answers JSON about the body.
"""

import hashlib
import hmac
import json
import os
import ssl
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from botocore.auth import S3SigV4Auth, SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

ACCESS = os.environ["REAL_ACCESS_KEY_ID"]
SECRET = os.environ["REAL_SECRET_ACCESS_KEY"]
TOKEN = os.environ.get("REAL_SESSION_TOKEN") or None
REGION = os.environ.get("REGION", "us-east-1")
OBJECTS = {}
LOCK = threading.Lock()


def log(entry):
    with LOCK, open(sys.argv[3], "a") as f:
        f.write(json.dumps(entry) + "\n")


def read_chunked(rfile):
    out = b""
    while True:
        size = int(rfile.readline().split(b";")[0].strip(), 16)
        if size == 0:
            while rfile.readline() not in (b"\r\n", b"\n", b""):
                pass
            return out
        out += rfile.read(size)
        rfile.readline()


def aws_chunked(body):
    """The data of an aws-chunked body (unsigned chunks, trailers after the last)."""
    out, rest = b"", body
    while True:
        line, _, rest = rest.partition(b"\r\n")
        size = int(line.split(b";")[0], 16)
        if size == 0:
            return out
        out, rest = out + rest[:size], rest[size + 2 :]


def verify(method, path, headers, body):
    """None when the signature is AWS's own with the real keys; else (code, why)."""
    auth = headers.get("authorization", "")
    if not auth.startswith("AWS4-HMAC-SHA256 "):
        return ("MissingAuthenticationToken", "no SigV4 Authorization")
    fields = dict(
        part.strip().split("=", 1) for part in auth[len("AWS4-HMAC-SHA256 ") :].split(",")
    )
    access, date, region, service, _ = fields["Credential"].split("/")
    if access != ACCESS:
        return ("InvalidAccessKeyId", "access key id is not the real one")
    if TOKEN is not None and headers.get("x-amz-security-token") != TOKEN:
        return ("InvalidToken", "session token is not the real one")
    if region != REGION:
        return ("AuthorizationHeaderMalformed", f"region {region}, expected {REGION}")
    stamp = headers.get("x-amz-date", "")
    if stamp[:8] != date:
        return ("SignatureDoesNotMatch", "X-Amz-Date does not match the scope")
    declared = headers.get("x-amz-content-sha256")
    if declared and len(declared) == 64 and declared != hashlib.sha256(body).hexdigest():
        return ("XAmzContentSHA256Mismatch", "the body is not the one signed")
    signed = fields["SignedHeaders"].split(";")
    if "host" not in signed:
        return ("SignatureDoesNotMatch", "host is not signed")
    # S3 requires every x-amz-* header present to be signed.
    for name in headers:
        if name.startswith("x-amz-") and name not in signed:
            return ("AccessDenied", f"{name} is not signed")
    request = AWSRequest(
        method=method,
        url=f"https://{headers['host']}{path}",
        headers={n: headers[n] for n in signed if n in headers},
        data=body,
    )
    request.context["timestamp"] = stamp
    signer = (S3SigV4Auth if service == "s3" else SigV4Auth)(
        Credentials(ACCESS, SECRET, TOKEN), service, region
    )
    canonical = signer.canonical_request(request)
    want = signer.signature(signer.string_to_sign(request, canonical), request)
    if not hmac.compare_digest(want, fields["Signature"]):
        return ("SignatureDoesNotMatch", "the signature is not the real key's")
    return None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def answer(self, status, body, ctype="application/xml", extra=()):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def handle_any(self):
        headers = {k.lower(): v for k, v in self.headers.items()}
        if "content-length" in headers:
            body = self.rfile.read(int(headers["content-length"]))
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            body = read_chunked(self.rfile)
        else:
            body = b""
        failure = verify(self.command, self.path, headers, body)
        log(
            {
                "method": self.command,
                "path": self.path,
                "authorization": headers.get("authorization"),
                "token": headers.get("x-amz-security-token"),
                "payload": headers.get("x-amz-content-sha256"),
                "host": headers.get("host"),
                "verified": failure is None,
                "why": failure and failure[1],
            }
        )
        if failure:
            code, why = failure
            xml = f"<Error><Code>{code}</Code><Message>{why}</Message></Error>"
            return self.answer(403, xml.encode())
        if "aws-chunked" in headers.get("content-encoding", ""):
            body = aws_chunked(body)
        path = urlsplit(self.path).path
        if path.startswith("/model/") and path.endswith("/invoke"):
            reply = {"ok": True, "bytes": len(body), "sha256": hashlib.sha256(body).hexdigest()}
            return self.answer(200, json.dumps(reply).encode(), "application/json")
        if path.endswith("/echo-auth"):
            seen = {
                "authorization": headers.get("authorization"),
                "token": headers.get("x-amz-security-token"),
            }
            return self.answer(200, json.dumps(seen).encode(), "application/json")
        if self.command == "PUT":
            with LOCK:
                OBJECTS[path] = body
            etag = '"' + hashlib.md5(body).hexdigest() + '"'
            return self.answer(200, b"", extra=[("ETag", etag)])
        if self.command in ("GET", "HEAD"):
            with LOCK:
                data = OBJECTS.get(path)
            if data is None:
                return self.answer(404, b"<Error><Code>NoSuchKey</Code></Error>")
            return self.answer(200, data, "application/octet-stream")
        return self.answer(400, b"<Error><Code>InvalidRequest</Code></Error>")

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = handle_any


def verify_log(path):
    """`--verify LOG`: each request an HTTP/2 origin logged (method, url, headers with
    `:authority`, body as latin-1), verified offline: one JSON line each."""
    for line in open(path):
        r = json.loads(line)
        headers = {k.lower(): v for k, v in r["headers"].items() if not k.startswith(":")}
        headers["host"] = r["headers"][":authority"]
        failure = verify(r["method"], r["url"], headers, r["body"].encode("latin-1"))
        print(json.dumps({"path": r["url"], "verified": failure is None, "why": failure and failure[1]}))


if sys.argv[1] == "--verify":
    verify_log(sys.argv[2])
    sys.exit(0)
server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(sys.argv[1], sys.argv[2])
server.socket = context.wrap_socket(server.socket, server_side=True)
print(server.server_address[1], flush=True)
server.serve_forever()
