"""moto's STS over TLS and an AWS-shaped origin that accepts only the temporary credentials
that STS issued, while they are valid, for tests/tests/sts.rs.

Arguments: CERT KEY LOG. Prints its port on its first stdout line: STS answers at `/`, the
origin on every other path.

STS (moto's own server application, `moto[server]`) answers AssumeRole only when the request
is SigV4-signed, for service `sts`, with the long-lived keys in SOURCE_ACCESS_KEY_ID and
SOURCE_SECRET_ACCESS_KEY (botocore's signer recomputes the signature); anything else is
refused 403 before moto sees it. STS_DURATION (seconds), when set, caps how long the
credentials it issues live (AWS caps role chaining the same way), so a test can watch them
expire.

The origin verifies every request's SigV4 signature with botocore's signer and the secret key
moto issued for the request's access key id, checks the session token is the one issued with
it, and refuses credentials past their expiry (`ExpiredToken`). Routes after verification:
`POST /model/<id>/invoke` answers JSON about the body; `GET /echo-auth` answers with the
signature headers it received (a reflection sluice must scrub). One JSON line per request
(either server) goes to LOG.
"""

import datetime
import hashlib
import hmac
import io
import json
import logging
import os
import ssl
import sys
import threading
from urllib.parse import parse_qs

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from moto.core import DEFAULT_ACCOUNT_ID
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from moto.sts.models import STSBackend, sts_backends
from werkzeug.serving import make_server

CERT, KEY, LOG = sys.argv[1:4]
SOURCE = Credentials(os.environ["SOURCE_ACCESS_KEY_ID"], os.environ["SOURCE_SECRET_ACCESS_KEY"])
DURATION = os.environ.get("STS_DURATION")
LOCK = threading.Lock()


def log(entry):
    with LOCK, open(LOG, "a") as f:
        f.write(json.dumps(entry) + "\n")


def signature_ok(method, url, headers, body, creds):
    """None when `headers` carry botocore's own SigV4 signature with `creds`; else why not."""
    auth = headers.get("authorization", "")
    if not auth.startswith("AWS4-HMAC-SHA256 "):
        return "no SigV4 Authorization"
    fields = dict(p.strip().split("=", 1) for p in auth[len("AWS4-HMAC-SHA256 ") :].split(","))
    access, _date, region, service, _ = fields["Credential"].split("/")
    if access != creds.access_key:
        return "not the expected access key id"
    signed = fields["SignedHeaders"].split(";")
    request = AWSRequest(
        method=method, url=url, headers={n: headers[n] for n in signed if n in headers}, data=body
    )
    request.context["timestamp"] = headers.get("x-amz-date", "")
    signer = SigV4Auth(creds, service, region)
    want = signer.signature(signer.string_to_sign(request, signer.canonical_request(request)), request)
    if not hmac.compare_digest(want, fields["Signature"]):
        return "the signature is not the key's"
    return None


if DURATION:
    assume_role = STSBackend.assume_role

    def capped(self, **kwargs):
        kwargs["duration"] = min(int(kwargs["duration"]), int(DURATION))
        return assume_role(self, **kwargs)

    STSBackend.assume_role = capped

moto_app = DomainDispatcherApplication(create_backend_app)


def request_of(environ):
    """The lower-case headers and the body of a WSGI request."""
    body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
    headers = {k[5:].replace("_", "-").lower(): v for k, v in environ.items() if k.startswith("HTTP_")}
    for name in ("CONTENT_TYPE", "CONTENT_LENGTH"):
        if environ.get(name):
            headers[name.replace("_", "-").lower()] = environ[name]
    return headers, body


def url_of(environ, headers):
    query = environ.get("QUERY_STRING")
    return f"https://{headers.get('host')}{environ.get('PATH_INFO', '/')}" + (f"?{query}" if query else "")


def sts_app(environ, start_response):
    """Verifies the AssumeRole request's signature, then hands it to moto."""
    headers, body = request_of(environ)
    why = signature_ok(environ["REQUEST_METHOD"], url_of(environ, headers), headers, body, SOURCE)
    form = parse_qs(body.decode())
    log({"server": "sts", "action": form.get("Action"), "role": form.get("RoleArn"), "verified": why is None, "why": why, "duration": form.get("DurationSeconds")})
    if why:
        start_response("403 Forbidden", [("Content-Type", "text/xml")])
        return [f"<ErrorResponse><Error><Code>SignatureDoesNotMatch</Code><Message>{why}</Message></Error></ErrorResponse>".encode()]
    environ["wsgi.input"] = io.BytesIO(body)
    # moto picks the service from the Authorization header's scope.
    return moto_app(environ, start_response)


def issued(access_key_id):
    backend = sts_backends[DEFAULT_ACCOUNT_ID]["aws"]
    return backend.get_assumed_role_from_access_key(access_key_id)


def origin_app(environ, start_response):
    """The AWS-shaped origin: the temporary credentials STS issued, while valid, or 403."""
    headers, body = request_of(environ)
    path = environ.get("PATH_INFO", "/")
    auth = headers.get("authorization", "")
    access = auth.split("Credential=", 1)[-1].split("/", 1)[0] if "Credential=" in auth else ""
    role = issued(access)
    code = why = None
    now = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
    if role is None:
        code, why = "InvalidClientTokenId", "no such access key id was issued"
    elif headers.get("x-amz-security-token") != role.session_token:
        code, why = "InvalidToken", "the session token is not the one issued with the key"
    elif now >= role.expiration.replace(tzinfo=None):
        code, why = "ExpiredToken", "the credentials have expired"
    else:
        creds = Credentials(role.access_key_id, role.secret_access_key, role.session_token)
        why = signature_ok(environ["REQUEST_METHOD"], url_of(environ, headers), headers, body, creds)
        code = why and "SignatureDoesNotMatch"
    # The issued secret and token too, so that the test can sweep for them everywhere.
    issued_secrets = role and [role.secret_access_key, role.session_token]
    log({"server": "origin", "path": path, "access": access, "verified": why is None, "why": why, "issued": issued_secrets})
    if why:
        reply, status = {"code": code, "why": why}, "403 Forbidden"
    elif path.endswith("/echo-auth"):
        secret = role.secret_access_key
        reply, status = {"authorization": auth, "token": headers.get("x-amz-security-token"), "secret": secret}, "200 OK"
    else:
        reply = {"ok": True, "bytes": len(body), "sha256": hashlib.sha256(body).hexdigest()}
        status = "200 OK"
    data = json.dumps(reply).encode()
    start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
    return [data]


def app(environ, start_response):
    """STS at `/`, the origin everywhere else."""
    if environ.get("PATH_INFO", "/") == "/":
        return sts_app(environ, start_response)
    return origin_app(environ, start_response)


logging.getLogger("werkzeug").setLevel(logging.ERROR)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(CERT, KEY)
server = make_server("127.0.0.1", 0, app, threaded=True, ssl_context=context)
print(server.server_port, flush=True)
server.serve_forever()
