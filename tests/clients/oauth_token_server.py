"""An OAuth 2.0 token endpoint (oauthlib's server, RFC 6749 §4.4 and §6) over HTTPS, for
tests/tests/refresh.rs. Arguments: CERT KEY LOG. It knows one client (CLIENT_ID,
CLIENT_SECRET) and one refresh token (REFRESH_TOKEN) from its environment, checks them as
oauthlib does (more clients, `id:secret` pairs separated by commas, from MORE_CLIENTS), and
issues bearer tokens `tok-<n>-<random>` that live EXPIRES_IN seconds (a rotated
refresh token with each refresh-token grant). `POST /fail` makes every later request fail
with 503 (the endpoint is down), `POST /recover` undoes it. One JSON line per token request
goes to LOG: grant type, whether it was granted, the client, the token issued. With SA_EMAIL and
SA_PUBLIC_KEY (a PEM file), RS256 service-account assertions (RFC 7523, Google's
`google_service_account_jwt`) are verified with PyJWT and granted too. Prints its port first.
"""

import json
import os
import secrets
import ssl
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jwt
from oauthlib.oauth2 import RequestValidator, Server

CLIENT_ID = os.environ["CLIENT_ID"]
CLIENT_SECRET = os.environ["CLIENT_SECRET"]
CLIENTS = {CLIENT_ID: CLIENT_SECRET}
CLIENTS.update(p.split(":", 1) for p in os.environ.get("MORE_CLIENTS", "").split(",") if p)
REFRESH = {os.environ["REFRESH_TOKEN"]}
EXPIRES_IN = int(os.environ.get("EXPIRES_IN", "3"))
# A service account: its e-mail and the public half of its RS256 key (PEM file).
SA_EMAIL = os.environ.get("SA_EMAIL")
SA_PUBLIC = open(os.environ["SA_PUBLIC_KEY"]).read() if os.environ.get("SA_PUBLIC_KEY") else None
LOCK = threading.Lock()
STATE = {"n": 0, "down": False}


class Validator(RequestValidator):
    def client_authentication_required(self, request, *args, **kwargs):
        return True

    def authenticate_client(self, request, *args, **kwargs):
        if request.client_id in CLIENTS and request.client_secret == CLIENTS[request.client_id]:
            request.client = type("Client", (), {"client_id": request.client_id})()
            return True
        return False

    def validate_grant_type(self, client_id, grant_type, client, request, *args, **kwargs):
        return grant_type in ("client_credentials", "refresh_token")

    def get_default_scopes(self, client_id, request, *args, **kwargs):
        return ["read"]

    def validate_scopes(self, client_id, scopes, client, request, *args, **kwargs):
        return set(scopes) <= {"read", "write"}

    def validate_refresh_token(self, refresh_token, client, request, *args, **kwargs):
        with LOCK:
            return refresh_token in REFRESH

    def get_original_scopes(self, refresh_token, request, *args, **kwargs):
        return ["read"]

    def save_bearer_token(self, token, request, *args, **kwargs):
        with LOCK:
            if request.grant_type == "refresh_token":
                REFRESH.discard(request.refresh_token)
            if "refresh_token" in token:
                REFRESH.add(token["refresh_token"])


def token_generator(request):
    with LOCK:
        STATE["n"] += 1
        return f"tok-{STATE['n']}-{secrets.token_hex(8)}"


SERVER = Server(Validator(), token_expires_in=EXPIRES_IN, token_generator=token_generator)


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
        if STATE["down"]:
            return self.reply(503, {"Content-Type": "application/json"}, b'{"error":"temporarily_unavailable"}')
        form = dict(p.split("=", 1) for p in body.split("&") if "=" in p)
        if form.get("grant_type") == "urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer":
            return jwt_bearer_grant(self, form.get("assertion", ""))
        headers, answer, status = SERVER.create_token_response(
            f"https://localhost{self.path}", "POST", body, dict(self.headers)
        )
        parsed = json.loads(answer or "{}")
        with LOCK, open(sys.argv[3], "a") as f:
            grant = dict(p.split("=", 1) for p in body.split("&") if "=" in p).get("grant_type")
            client = dict(p.split("=", 1) for p in body.split("&") if "=" in p).get("client_id")
            f.write(json.dumps({"grant": grant, "status": status, "client": client, "token": parsed.get("access_token")}) + "\n")
        self.reply(status, headers, answer.encode())


def jwt_bearer_grant(handler, assertion):
    """RFC 7523 §2.1 as Google's token endpoint does it: an RS256 assertion from the service
    account, for this endpoint, current, with a scope."""
    audience = f"https://127.0.0.1:{handler.server.server_address[1]}/token"
    try:
        claims = jwt.decode(
            assertion, SA_PUBLIC, algorithms=["RS256"], audience=audience, issuer=SA_EMAIL,
            options={"require": ["iss", "aud", "iat", "exp"]},
        )
        ok = claims.get("scope") == "https://www.googleapis.com/auth/cloud-platform"
    except jwt.PyJWTError:
        ok = False
    token = token_generator(None) if ok else None
    with LOCK, open(sys.argv[3], "a") as f:
        f.write(json.dumps({"grant": "jwt-bearer", "status": 200 if ok else 400, "token": token}) + "\n")
    if not ok:
        return handler.reply(400, {"Content-Type": "application/json"}, b'{"error":"invalid_grant"}')
    answer = {"access_token": token, "token_type": "Bearer", "expires_in": EXPIRES_IN}
    handler.reply(200, {"Content-Type": "application/json"}, json.dumps(answer).encode())


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(sys.argv[1], sys.argv[2])
server.socket = context.wrap_socket(server.socket, server_side=True)
print(server.server_address[1], flush=True)
server.serve_forever()
