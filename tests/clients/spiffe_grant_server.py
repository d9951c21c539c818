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

With GRANT=token_exchange the token endpoint grants RFC 8693 token exchanges instead (for
tests/tests/token_exchange.rs): oauthlib has no token-exchange grant, so one is registered
through its extension point (a `GrantTypeBase` in the `TokenEndpoint`'s `grant_types`). It
reads the trust domain's JWT bundle (JWKS) from the Workload API over gRPC
(FetchJWTBundles) and checks the `subject_token` against it (signature, `kid`, issuer key,
subject, audience, expiry: PyJWT), the `subject_token_type` (JWT), the `audience` and
`resource` against EXCHANGE_AUDIENCES and EXCHANGE_RESOURCES, the scopes and the
`requested_token_type`; it issues `xchg-<audience>-<n>-<random>` with `issued_token_type`
ISSUED_TYPE (default: the requested one, else the access-token type).
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
from oauthlib.oauth2.rfc6749 import errors
from oauthlib.oauth2.rfc6749.endpoints.token import TokenEndpoint
from oauthlib.oauth2.rfc6749.grant_types.base import GrantTypeBase
from oauthlib.oauth2.rfc6749.tokens import BearerToken

CERT, KEY, LOG, SOCKET = sys.argv[1:5]
SPIFFE_ID = "spiffe://example.org/agent"
ASSERTION_TYPE = os.environ.get("ASSERTION_TYPE", "urn:ietf:params:oauth:client-assertion-type:jwt-bearer")
SVID_AUDIENCE = os.environ["SVID_AUDIENCE"]
EXPIRES_IN = int(os.environ.get("EXPIRES_IN", "300"))
SIGNING = ec.generate_private_key(ec.SECP256R1())
KID = "workload-key-1"
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
            headers={"kid": KID},
        )
        log({"server": "workload", "audience": list(request.audience), "svid": svid})
        return workload_pb2.JWTSVIDResponse(svids=[workload_pb2.JWTSVID(spiffe_id=SPIFFE_ID, svid=svid)])

    def FetchJWTBundles(self, request, context):
        if dict(context.invocation_metadata()).get("workload.spiffe.io") != "true":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "security header missing from request")
        key = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(SIGNING.public_key()))
        key.update({"kid": KID, "use": "jwt-svid"})
        jwks = json.dumps({"keys": [key]}).encode()
        yield workload_pb2.JWTBundlesResponse(bundles={"spiffe://example.org": jwks})


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

TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
JWT_TYPE = "urn:ietf:params:oauth:token-type:jwt"
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"
EXCHANGE_AUDIENCES = set(filter(None, os.environ.get("EXCHANGE_AUDIENCES", "").split(",")))
EXCHANGE_RESOURCES = set(filter(None, os.environ.get("EXCHANGE_RESOURCES", "").split(",")))
ISSUED_TYPE = os.environ.get("ISSUED_TYPE")


def trust_bundle():
    """The trust domain's JWKS, as a relying party gets it: FetchJWTBundles on the socket."""
    channel = grpc.insecure_channel(f"unix:{SOCKET}")
    stub = workload_pb2_grpc.SpiffeWorkloadAPIStub(channel)
    first = next(stub.FetchJWTBundles(workload_pb2.JWTBundlesRequest(), metadata=[("workload.spiffe.io", "true")]))
    return jwt.PyJWKSet.from_json(first.bundles["spiffe://example.org"].decode())


class ExchangeValidator(Validator):
    def client_authentication_required(self, request, *args, **kwargs):
        return False

    def authenticate_client_id(self, client_id, request, *args, **kwargs):
        return True

    def validate_scopes(self, client_id, scopes, client, request, *args, **kwargs):
        return set(scopes) <= {"demo", "alpha", "beta"}


class InvalidTargetError(errors.OAuth2Error):
    """RFC 8693 §2.2.2: the audience or resource is not one this server issues for."""

    error = "invalid_target"
    status_code = 400


class TokenExchangeGrant(GrantTypeBase):
    """RFC 8693 §2: the subject token is a JWT-SVID of this trust domain."""

    def __init__(self, validator, bundle):
        super().__init__(validator)
        self.bundle = bundle

    def create_token_response(self, request, token_handler):
        headers = self._get_default_headers()
        try:
            issued_type = self.validate_token_request(request)
        except errors.OAuth2Error as e:
            headers.update(e.headers)
            return headers, e.json, e.status_code
        token = token_handler.create_token(request, refresh_token=False)
        token["issued_token_type"] = issued_type
        return headers, json.dumps(token), 200

    def validate_token_request(self, request):
        form = dict(request.decoded_body or [])
        if form.get("grant_type") != TOKEN_EXCHANGE:
            raise errors.UnsupportedGrantTypeError(request=request)
        for name in ("subject_token", "subject_token_type"):
            if not form.get(name):
                raise errors.InvalidRequestError(description=f"missing {name}", request=request)
        if form["subject_token_type"] != JWT_TYPE:
            raise errors.InvalidRequestError(description="unsupported subject_token_type", request=request)
        try:
            kid = jwt.get_unverified_header(form["subject_token"]).get("kid")
            key = self.bundle[kid]
            claims = jwt.decode(
                form["subject_token"], key.key, algorithms=["ES256"], audience=SVID_AUDIENCE,
                options={"require": ["sub", "aud", "exp"]},
            )
        except (jwt.PyJWTError, KeyError):
            raise errors.InvalidGrantError(description="subject_token rejected", request=request)
        if claims["sub"] != SPIFFE_ID:
            raise errors.InvalidGrantError(description="unknown subject", request=request)
        if form.get("audience") not in EXCHANGE_AUDIENCES:
            raise InvalidTargetError(request=request)
        if EXCHANGE_RESOURCES and form.get("resource") not in EXCHANGE_RESOURCES:
            raise InvalidTargetError(request=request)
        requested = form.get("requested_token_type")
        if requested not in (None, ACCESS_TOKEN_TYPE, JWT_TYPE):
            raise errors.InvalidRequestError(description="unsupported requested_token_type", request=request)
        request.client_id = SPIFFE_ID
        request.client = type("Client", (), {"client_id": SPIFFE_ID})()
        self.validate_scopes(request)
        return ISSUED_TYPE or requested or ACCESS_TOKEN_TYPE


def exchange_token_generator(request):
    audience = dict(request.decoded_body or []).get("audience", "none")
    with LOCK:
        STATE["n"] += 1
        return f"xchg-{audience}-{STATE['n']}-{secrets.token_hex(8)}"


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
        asked = {k: v for k, v in form.items() if k not in ("subject_token", "client_assertion")}
        log({"server": "token", "status": status, "audience": form.get("audience"), "scope": form.get("scope"), "token": token, "form": asked})
        self.reply(status, headers, answer.encode())


workload = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
workload_pb2_grpc.add_SpiffeWorkloadAPIServicer_to_server(Workload(), workload)
workload.add_insecure_port(f"unix:{SOCKET}")
workload.start()
if os.environ.get("GRANT") == "token_exchange":
    validator = ExchangeValidator()
    SERVER = TokenEndpoint(
        default_grant_type=TOKEN_EXCHANGE,
        default_token_type=BearerToken(validator, token_generator=exchange_token_generator, expires_in=EXPIRES_IN),
        grant_types={TOKEN_EXCHANGE: TokenExchangeGrant(validator, trust_bundle())},
    )
server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(CERT, KEY)
server.socket = context.wrap_socket(server.socket, server_side=True)
print(server.server_address[1], flush=True)
server.serve_forever()
