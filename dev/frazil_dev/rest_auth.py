"""An OAuth 2.0 resource server in front of a REST catalog, for tests: every request under ``/v1``
must carry a bearer token issued by the authorization server (Keycloak, ``oauth_server``), not
expired, granting the catalog's scope; anything else is answered 401 with the Iceberg REST error
model, as an authenticating catalog (Polaris, Nessie, Unity, Glue's endpoint) answers it.

Each token is checked on every request as a JWT access token (RFC 9068): its RS256 signature
against the server's published keys (JWKS), its issuer, its expiry and its ``scope``; so an expired
token is refused at once and a client has to get a new one. (Keycloak's token introspection says
"not active" for the client-credentials grant's session-less tokens, so it cannot be used here.)
Authorized requests are passed to the REST catalog fixture (``rest_catalog``) unchanged. This is
an in-test server of the documented protocols (RFC 6750 bearer tokens, RFC 9068), not a product:
the REST servers that check tokens themselves (Polaris, Nessie) are not on Maven Central.

With ``--sigv4 REGION/SERVICE/ACCESS_KEY/SECRET_KEY`` it checks AWS Signature Version 4 instead,
as a catalog behind AWS's API gateway or Glue's Iceberg endpoint does: the ``Authorization``
header's credential scope (the key, region and service), a date within 15 minutes, the signed
payload hash against the body, and the signature, computed again with botocore's SigV4 signer
over the request as received. (No REST server that checks SigV4 can be started here.)

``GET /_auth/stats`` (no token) reports what it saw: requests authorized and refused, and how many
distinct tokens were used, so a test can tell that a client refreshed.

    python -m frazil_dev.rest_auth --port P --upstream http://127.0.0.1:U --jwks URL --issuer URL \\
        --scope catalog
    python -m frazil_dev.rest_auth --port P --upstream http://127.0.0.1:U --sigv4 us-east-1/execute-api/AK/SK
"""

from __future__ import annotations

import argparse
import base64
import calendar
import hashlib
import hmac
import json
import os
import sys
import threading
import time
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import requests
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicKey, RSAPublicNumbers

from frazil_dev.kafka_broker import free_port
from frazil_dev.server import ServerProcess

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "host", "content-length"}


def _decoded(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def _number(part: str) -> int:
    return int.from_bytes(_decoded(part), "big")


class _State:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.lock = threading.Lock()
        self.authorized = 0
        self.refused = 0
        self.tokens: set[str] = set()
        self.keys: dict[str, RSAPublicKey] = {}
        self.local = threading.local()   # a connection pool per request thread: Session is not thread-safe

    @property
    def session(self) -> requests.Session:
        if not hasattr(self.local, "session"):
            self.local.session = requests.Session()
        out: requests.Session = self.local.session
        return out

    def key(self, kid: str) -> RSAPublicKey | None:
        """The issuer's signing key ``kid``, its key set fetched again when the id is new."""
        with self.lock:
            if kid not in self.keys:
                for jwk in self.session.get(self.args.jwks, timeout=10).json()["keys"]:
                    if jwk.get("kty") == "RSA" and jwk.get("use", "sig") == "sig":
                        self.keys[jwk["kid"]] = RSAPublicNumbers(_number(jwk["e"]), _number(jwk["n"])).public_key()
            return self.keys.get(kid)

    def check_sigv4(self, method: str, path: str, headers: Message, body: bytes) -> str | None:
        """None when the request is signed with the configured key for the region and service."""
        from botocore.auth import SigV4Auth  # type: ignore[import-untyped]
        from botocore.awsrequest import AWSRequest  # type: ignore[import-untyped]
        from botocore.credentials import Credentials  # type: ignore[import-untyped]

        region, service, access_key, secret_key = self.args.sigv4.split("/")
        header = headers.get("Authorization") or ""
        if not header.startswith("AWS4-HMAC-SHA256 "):
            return "no AWS Signature Version 4"
        try:
            fields = dict(part.strip().split("=", 1) for part in header.split(None, 1)[1].split(","))
            key, _, signed_region, signed_service, _ = fields["Credential"].split("/")
            signed, signature = fields["SignedHeaders"].split(";"), fields["Signature"]
        except (KeyError, ValueError):
            return "a malformed SigV4 Authorization header"
        if key != access_key:
            return f"unknown access key {key!r}"
        if (signed_region, signed_service) != (region, service):
            return f"signed for {signed_region}/{signed_service}, not {region}/{service}"
        stamp = headers.get("X-Amz-Date") or ""
        try:
            skew = abs(time.time() - calendar.timegm(time.strptime(stamp, "%Y%m%dT%H%M%SZ")))
        except ValueError:
            return "no X-Amz-Date"
        if skew > 900:
            return f"X-Amz-Date {stamp} is {skew:.0f}s away"
        claimed = headers.get("X-Amz-Content-SHA256")
        digest = hashlib.sha256(body).digest()
        # hex as AWS documents it (botocore), or base64 as Iceberg's Java signer sends it; either way
        # the value as sent is what the signature covers
        if claimed is not None and claimed not in (digest.hex(), base64.b64encode(digest).decode()):
            return "the body does not match its signed hash"
        if "host" not in signed:
            return "the Host header is not signed"
        request = AWSRequest(method=method, url=f"http://{headers['Host']}{path}", data=body or None,
                             headers={name: headers[name] or "" for name in signed})
        request.context["timestamp"] = stamp
        signer = SigV4Auth(Credentials(access_key, secret_key), service, region)
        # the canonical request ends with the payload's hash as the service computes it (hex), whatever
        # the x-amz-content-sha256 header says (its value is covered as a signed header)
        canonical = signer.canonical_request(request).rsplit("\n", 1)[0] + "\n" + digest.hex()
        expected = signer.signature(signer.string_to_sign(request, canonical), request)
        if not hmac.compare_digest(expected, signature):
            return "the signature does not verify"
        return None

    def check(self, header: str | None) -> str | None:
        """None when the request may pass, else why not."""
        if not header or not header.lower().startswith("bearer "):
            return "no bearer token"
        token = header.split(None, 1)[1].strip()
        try:
            head, body, signature = token.split(".")
            header_claims, claims = json.loads(_decoded(head)), json.loads(_decoded(body))
        except ValueError:
            return "the token is not a JWT"
        if header_claims.get("alg") != "RS256" or (key := self.key(str(header_claims.get("kid")))) is None:
            return "the token is not signed by the issuer's keys"
        try:
            key.verify(_decoded(signature), f"{head}.{body}".encode(), padding.PKCS1v15(), hashes.SHA256())
        except InvalidSignature:
            return "the token's signature does not verify"
        if claims.get("iss") != self.args.issuer:
            return f"the token was issued by {claims.get('iss')!r}"
        if not isinstance(claims.get("exp"), int) or claims["exp"] <= time.time():
            return "the token has expired"
        if self.args.scope not in str(claims.get("scope", "")).split():
            return f"the token does not grant scope {self.args.scope!r}"
        with self.lock:
            self.tokens.add(hashlib.sha256(token.encode()).hexdigest())
        return None


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:   # quiet: the test reads stats, not a log
        pass

    def _reply(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _body(self) -> bytes:
        """The request's body, sent with a length or in chunks (Java's HTTP client does that)."""
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            chunks = []
            while size := int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16):
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):   # trailers
                pass
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _handle(self) -> None:
        state = self.server.state
        body = self._body()
        if self.path == "/_auth/stats":
            with state.lock:
                stats = {"authorized": state.authorized, "refused": state.refused, "tokens": len(state.tokens)}
            self._reply(200, json.dumps(stats).encode(), {"Content-Type": "application/json"})
            return
        why = (state.check_sigv4(self.command, self.path, self.headers, body) if state.args.sigv4
               else state.check(self.headers.get("Authorization")))
        if why is not None:
            with state.lock:
                state.refused += 1
            error = {"error": {"message": f"Not authorized: {why}", "type": "NotAuthorizedException", "code": 401}}
            challenge = "AWS4-HMAC-SHA256" if state.args.sigv4 else 'Bearer error="invalid_token"'
            self._reply(401, json.dumps(error).encode(), {"Content-Type": "application/json",
                                                         "WWW-Authenticate": challenge})
            return
        with state.lock:
            state.authorized += 1
        headers = {k: v for k, v in self.headers.items()
                   if k.lower() not in _HOP_BY_HOP | {"authorization"} and not k.lower().startswith("x-amz-")}
        upstream = state.session.request(self.command, state.args.upstream + self.path, data=body or None,
                                         headers=headers, timeout=120)
        self._reply(upstream.status_code, upstream.content,
                    {k: v for k, v in upstream.headers.items() if k.lower() not in _HOP_BY_HOP | {"content-encoding"}})

    do_GET = do_POST = do_DELETE = do_HEAD = do_PUT = _handle


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    state: _State


class RestAuthProxy(ServerProcess):
    LOG = "rest-auth.log"
    WHAT = "the REST catalog's OAuth proxy"

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stats(self) -> dict[str, int]:
        out: dict[str, int] = requests.get(f"{self.uri}/_auth/stats", timeout=5).json()
        return out

    @classmethod
    def start(cls, workdir: Path, *, upstream: str, jwks: str, issuer: str, scope: str) -> RestAuthProxy:
        port = free_port()
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}   # dev/, for -m below
        server = cls.spawn([sys.executable, "-m", "frazil_dev.rest_auth", "--port", str(port), "--upstream", upstream,
                            "--jwks", jwks, "--issuer", issuer, "--scope", scope], Path(workdir), port, env=env)
        return server.ready(f"{server.uri}/_auth/stats", 30)

    @classmethod
    def start_sigv4(cls, workdir: Path, *, upstream: str, region: str, service: str, access_key: str,
                    secret_key: str) -> RestAuthProxy:
        port = free_port()
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
        server = cls.spawn([sys.executable, "-m", "frazil_dev.rest_auth", "--port", str(port), "--upstream", upstream,
                            "--sigv4", f"{region}/{service}/{access_key}/{secret_key}"], Path(workdir), port, env=env)
        return server.ready(f"{server.uri}/_auth/stats", 30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstream", required=True)
    for name in ("--jwks", "--issuer", "--scope", "--sigv4"):
        parser.add_argument(name)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    if not args.sigv4 and not (args.jwks and args.issuer and args.scope):
        parser.error("give --jwks, --issuer and --scope (OAuth 2.0), or --sigv4")
    server = _Server(("127.0.0.1", args.port), _Handler)
    server.state = _State(args)
    server.serve_forever()


if __name__ == "__main__":
    main()
