"""SASL OAUTHBEARER tokens: OAuth 2.0 client credentials (RFC 6749, section 4.4) from the token
endpoint in ``[kafka]``, one token per process shared by every Kafka client, asked for again
before it expires.

aiokafka asks ``token()`` each time a connection authenticates. A token is kept until 80% of its
lifetime has passed (Kafka's own clients refresh at that point too), then a new one is fetched;
if the endpoint fails then, the old token is still handed out while it is valid, and the failure
is logged. After a failure the endpoint is not asked again for a while (1 s, doubling to 30 s):
connections meanwhile get the held token, or the same error, at once. With no valid token the
error names the endpoint, the client and what it answered: the connection fails, and the caller
reports it (``clients.connect``: exit status 3 at start; while running, aiokafka logs it and
connects again later).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import math
import threading
import time
from dataclasses import dataclass, field

import requests
from aiokafka.abc import AbstractTokenProvider
from aiokafka.errors import SaslAuthenticationFailed

from frazil.errors import first_line

log = logging.getLogger(__name__)

REFRESH_AT = 0.8        # of a token's lifetime
TIMEOUT_S = 10.0        # one request to the token endpoint
BACKOFF_S = (1.0, 30.0)   # after a failed request: the first wait, the longest


def _now() -> float:
    """The clock tokens are timed on (a function of this module: tests replace it alone)."""
    return time.monotonic()


class TokenError(SaslAuthenticationFailed):  # type: ignore[misc]  # aiokafka has no type hints
    """The token endpoint gave no usable token. A SASL authentication failure to aiokafka: the
    connection fails, is logged and tried again later, as when the broker refuses a token."""


@dataclass(frozen=True)
class Token:
    value: str = field(repr=False)
    fetched_at: float          # _now() when it was asked for
    lifetime_s: float | None   # None: the endpoint said nothing about when it expires

    @property
    def refresh_at(self) -> float:
        return self.fetched_at + REFRESH_AT * self.lifetime_s if self.lifetime_s is not None else self.fetched_at

    @property
    def expires_at(self) -> float:
        return self.fetched_at + self.lifetime_s if self.lifetime_s is not None else self.fetched_at


def lifetime(answer: dict[str, object], access_token: str) -> float | None:
    """Seconds the token is valid for: the answer's ``expires_in``, else the ``exp`` claim of a JWT
    (read, not verified: the broker verifies it), else None (the token is then asked for again at
    each connection)."""
    expires_in = answer.get("expires_in")
    if isinstance(expires_in, int | float) and not isinstance(expires_in, bool) and 0 < expires_in < math.inf:
        return float(expires_in)
    parts = access_token.split(".")
    if len(parts) == 3:
        try:
            claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
        except (ValueError, binascii.Error):
            return None
        exp = claims.get("exp") if isinstance(claims, dict) else None
        if isinstance(exp, int | float) and not isinstance(exp, bool) and math.isfinite(exp):
            return max(0.0, exp - time.time())
    return None


class ClientCredentials(AbstractTokenProvider):  # type: ignore[misc]  # aiokafka has no type hints
    """Tokens for ``client_id`` from ``url``. Thread-safe, and usable from any event loop: the
    HTTP request runs in a worker thread under a lock, so clients connecting together share one
    request."""

    def __init__(self, url: str, client_id: str, secret: str, scope: str = "", *,
                 session: requests.Session | None = None) -> None:
        self.url, self.client_id, self.scope = url, client_id, scope
        self._secret = secret
        self._http = session or requests.Session()
        self._lock = threading.Lock()
        self._token: Token | None = None
        self._failure: TokenError | None = None   # the last request's, until ``_retry_at``
        self._retry_at = 0.0
        self._backoff_s = BACKOFF_S[0]
        self.fetches = 0

    async def token(self) -> str:
        return await asyncio.to_thread(self.current)

    def current(self) -> str:
        with self._lock:
            now = _now()
            held = self._token
            if held is not None and now < held.refresh_at:
                return held.value
            if self._failure is not None and now < self._retry_at:   # backing off: answer at once
                if held is not None and now < held.expires_at:
                    return held.value
                raise self._failure
            try:
                self._token = self._fetch(now)
            except TokenError as exc:
                self._failure, self._retry_at = exc, now + self._backoff_s
                self._backoff_s = min(2 * self._backoff_s, BACKOFF_S[1])
                if held is not None and now < held.expires_at:
                    log.warning("kafka: no new OAuth token yet (%s); the current one is valid for %.0f s more", exc,
                                held.expires_at - now)
                    return held.value
                raise
            self._failure, self._backoff_s = None, BACKOFF_S[0]
            return self._token.value

    def _fetch(self, asked_at: float) -> Token:
        form = {"grant_type": "client_credentials", **({"scope": self.scope} if self.scope else {})}
        who = f"token endpoint {self.url} for client {self.client_id}"
        try:
            reply = self._http.post(self.url, data=form, auth=(self.client_id, self._secret), timeout=TIMEOUT_S,
                                    headers={"Accept": "application/json"})
        except requests.RequestException as exc:
            raise TokenError(f"{who} did not answer: {type(exc).__name__}: {first_line(exc)}") from None
        try:
            answer = reply.json()
        except ValueError:
            answer = None
        if reply.status_code != 200 or not isinstance(answer, dict):
            said = (f"{answer.get('error')}: {answer.get('error_description', '')}".rstrip(": ")
                    if isinstance(answer, dict) and "error" in answer else reply.text[:200])
            fix = ("check kafka.sasl_oauthbearer_client_id, its secret and kafka.sasl_oauthbearer_scope"
                   if 400 <= reply.status_code < 500 and reply.status_code != 429 else "asked again later")
            raise TokenError(f"{who} refused: HTTP {reply.status_code} {said}; {fix}")
        value = answer.get("access_token")
        if not isinstance(value, str) or not value:
            raise TokenError(f"{who} answered without an access_token (keys: {', '.join(sorted(answer))})")
        kind = answer.get("token_type", "bearer")
        if not isinstance(kind, str) or kind.lower() != "bearer":
            raise TokenError(f"{who} answered a {kind!r} token; SASL OAUTHBEARER sends bearer tokens")
        token = Token(value, asked_at, lifetime(answer, value))
        self.fetches += 1
        log.info("kafka: OAuth token for client %s from %s, valid %s", self.client_id, self.url,
                 f"{token.lifetime_s:.0f}s (asked again after {REFRESH_AT * token.lifetime_s:.0f}s)"
                 if token.lifetime_s is not None else "for an unknown time (asked again at each connection)")
        return token
