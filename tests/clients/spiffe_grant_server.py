"""A SPIFFE Workload API (grpcio, from workload.proto, on a Unix socket) and an OAuth 2.0
token endpoint (oauthlib's server, over HTTPS) that grants client-credentials tokens only to
a client authenticated by a JWT-SVID from that Workload API (RFC 7523 §2.2 client
assertion), for tests/tests/token_grant.rs.

Arguments: CERT KEY LOG SOCKET. Prints the token endpoint's port first.

The Workload API answers FetchJWTSVID only with the `workload.spiffe.io: true` header, with
an ES256 JWT-SVID for spiffe://example.org/agent and the requested audience, living 300 s.
The token endpoint checks the assertion type (ASSERTION_TYPE), the SVID's signature, issuer
key, subject, audience (SVID_AUDIENCE) and expiry (PyJWT), and the requested scopes, and
issues `grant-<audience>-<n>-<random>` tokens living EXPIRES_IN seconds. `POST /fail` makes it
refuse every grant, `POST /recover` undoes it. LOG gets one JSON line per SVID and per grant.
"""

import json
import os
import secrets
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl

import grpc
import jwt
from cryptography.hazmat.primitives.asymmetric import ec
from oauthlib.oauth2 import BackendApplicationServer, RequestValidator

CERT, KEY, LOG, SOCKET = sys.argv[1:5]
SPIFFE_ID = "spiffe://example.org/agent"
ASSERTION_TYPE = os.environ.get("ASSERTION_TYPE", "urn:ietf:params:oauth:client-assertion-type:jwt-bearer")
SVID_AUDIENCE = os.environ["SVID_AUDIENCE"]
EXPIRES_IN = int(os.environ.get("EXPIRES_IN", "300"))
SIGNING = ec.generate_private_key(ec.SECP256R1())
LOCK = threading.Lock()
STATE = {"n": 0, "down": False}


def log(entry):
    with LOCK, open(LOG, "a") as f:
        f.write(json.dumps(entry) + "\n")


# The Workload API, compiled from the proto at start.
out = tempfile.mkdtemp()
here = os.path.dirname(os.path.abspath(__file__))
subprocess.run(
    [sys.executable, "-m", "grpc_tools.protoc", f"-I{here}", f"--python_out={out}", f"--grpc_python_out={out}", "workload.proto"],
    check=True,
)
sys.path.insert(0, out)
import workload_pb2  # noqa: E402
import workload_pb2_grpc  # noqa: E402


class Workload(workload_pb2_grpc.SpiffeWorkloadAPIServicer):
    def FetchJWTSVID(self, request, context):
        if dict(context.invocation_metadata()).get("workload.spiffe.io") != "true":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "security header missing from request")
        now = int(time.time())
        svid = jwt.encode(
            {"sub": SPIFFE_ID, "aud": list(request.audience), "iat": now, "exp": now + 300},
            SIGNING,
            algorithm="ES256",
        )
        log({"server": "workload", "audience": list(request.audience), "svid": svid})
        return workload_pb2.JWTSVIDResponse(svids=[workload_pb2.JWTSVID(spiffe_id=SPIFFE_ID, svid=svid)])


class Validator(RequestValidator):
    def client_authentication_required(self, request, *args, **kwargs):
        return True

    def authenticate_client(self, request, *args, **kwargs):
        form = dict(request.decoded_body or [])
        if form.get("client_assertion_type") != ASSERTION_TYPE:
            return False
        try:
            claims = jwt.decode(
                form.get("client_assertion", ""), SIGNING.public_key(), algorithms=["ES256"],
                audience=SVID_AUDIENCE, options={"require": ["sub", "aud", "exp"]},
            )
        except jwt.PyJWTError:
            return False
        if claims["sub"] != SPIFFE_ID:
            return False
        request.client = type("Client", (), {"client_id": SPIFFE_ID})()
        request.client_id = SPIFFE_ID
        return True

    def validate_grant_type(self, client_id, grant_type, client, request, *args, **kwargs):
        return grant_type == "client_credentials"

    def get_default_scopes(self, client_id, request, *args, **kwargs):
        return []

    def validate_scopes(self, client_id, scopes, client, request, *args, **kwargs):
        return set(scopes) <= {"demo", "alpha", "beta"}

    def save_bearer_token(self, token, request, *args, **kwargs):
        pass


def token_generator(request):
    audience = dict(request.decoded_body or []).get("audience", "none")
    with LOCK:
        STATE["n"] += 1
        return f"grant-{audience}-{STATE['n']}-{secrets.token_hex(8)}"


SERVER = BackendApplicationServer(Validator(), token_generator=token_generator, token_expires_in=EXPIRES_IN)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def reply(self, status, headers, body):
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0"))).decode()
        if self.path in ("/fail", "/recover"):
            STATE["down"] = self.path == "/fail"
            return self.reply(200, {}, b"ok\n")
        form = dict(parse_qsl(body))
        if STATE["down"]:
            log({"server": "token", "status": 400, "audience": form.get("audience")})
            return self.reply(400, {"Content-Type": "application/json"}, b'{"error":"invalid_client"}')
        headers, answer, status = SERVER.create_token_response(
            f"https://localhost{self.path}", "POST", body, dict(self.headers)
        )
        token = json.loads(answer or "{}").get("access_token")
        log({"server": "token", "status": status, "audience": form.get("audience"), "scope": form.get("scope"), "token": token})
        self.reply(status, headers, answer.encode())


workload = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
workload_pb2_grpc.add_SpiffeWorkloadAPIServicer_to_server(Workload(), workload)
workload.add_insecure_port(f"unix:{SOCKET}")
workload.start()
server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(CERT, KEY)
server.socket = context.wrap_socket(server.socket, server_side=True)
print(server.server_address[1], flush=True)
server.serve_forever()
