"""The OAUTHBEARER token source: client credentials sent as the endpoint expects, one token reused
until 80% of its lifetime, a new one asked for then, the old one kept while valid if the endpoint
fails, and an error naming the endpoint, the client and its answer. An in-process fake of the HTTP
session stands in for the token endpoint (the real one, Keycloak, is in the integration tests)."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from typing import Any

import pytest
import requests

from frazil.kafka import oauth
from frazil.kafka.oauth import ClientCredentials, TokenError


class Reply:
    def __init__(self, status: int, body: Any) -> None:
        self.status_code, self._body = status, body
        self.text = json.dumps(body) if not isinstance(body, str) else body

    def json(self) -> Any:
        if isinstance(self._body, str):
            raise ValueError("not JSON")
        return self._body


class Endpoint:
    """Answers each POST with the next of ``replies`` (an exception is raised), recording the calls."""

    def __init__(self, *replies: Reply | Exception) -> None:
        self.replies, self.calls = list(replies), []

    def post(self, url: str, **kwargs: Any) -> Reply:
        self.calls.append((url, kwargs))
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply


def token(value: str, expires_in: float | None = 100) -> Reply:
    return Reply(200, {"access_token": value, "token_type": "Bearer",
                       **({"expires_in": expires_in} if expires_in is not None else {})})


class Clock:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.now = 1000.0
        monkeypatch.setattr(oauth, "_now", lambda: self.now)


def provider(endpoint: Endpoint, scope: str = "") -> ClientCredentials:
    return ClientCredentials("https://idp/token", "frazil", "s3cret", scope, session=endpoint)  # type: ignore[arg-type]


def test_client_credentials_are_sent_with_basic_auth_and_the_token_is_reused_until_its_refresh_point(
        monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock(monkeypatch)
    endpoint = Endpoint(token("t1", 100), token("t2", 100))
    tokens = provider(endpoint, scope="kafka")
    assert asyncio.run(tokens.token()) == "t1"
    url, sent = endpoint.calls[0]
    assert url == "https://idp/token" and sent["auth"] == ("frazil", "s3cret")
    assert sent["data"] == {"grant_type": "client_credentials", "scope": "kafka"} and sent["timeout"] > 0
    clock.now += 79
    assert tokens.current() == "t1" and len(endpoint.calls) == 1
    clock.now += 1   # 80% of 100 s
    assert tokens.current() == "t2" and tokens.fetches == 2


def test_a_failing_endpoint_keeps_the_valid_token_and_only_an_expired_one_is_an_error(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock(monkeypatch)
    endpoint = Endpoint(token("t1", 100), requests.ConnectionError("refused"), requests.ConnectionError("refused"))
    tokens = provider(endpoint)
    assert tokens.current() == "t1"
    clock.now += 90
    assert tokens.current() == "t1"   # still valid for 10 s
    assert "no new OAuth token yet" in caplog.text and "valid for 10 s more" in caplog.text
    clock.now += 10
    with pytest.raises(TokenError, match="token endpoint https://idp/token for client frazil did not answer: "
                                         "ConnectionError: refused"):
        tokens.current()


@pytest.mark.parametrize(("reply", "message"), [
    (Reply(401, {"error": "unauthorized_client", "error_description": "Invalid client credentials"}),
     "refused: HTTP 401 unauthorized_client: Invalid client credentials; check kafka.sasl_oauthbearer_client_id"),
    (Reply(400, {"error": "invalid_scope"}), "refused: HTTP 400 invalid_scope; check"),
    (Reply(502, "<html>bad gateway</html>"), "refused: HTTP 502 <html>bad gateway</html>; asked again later"),
    (Reply(429, {"error": "slow_down"}), "refused: HTTP 429 slow_down; asked again later"),
    (Reply(200, {"token_type": "Bearer"}), "answered without an access_token (keys: token_type)"),
    (Reply(200, {"access_token": "t", "token_type": "mac"}), "answered a 'mac' token; SASL OAUTHBEARER sends bearer"),
])
def test_an_endpoint_answer_without_a_usable_token_names_the_endpoint_the_client_and_the_answer(
        reply: Reply, message: str) -> None:
    with pytest.raises(TokenError) as raised:
        provider(Endpoint(reply)).current()
    assert "token endpoint https://idp/token for client frazil" in str(raised.value)
    assert message in str(raised.value) and "s3cret" not in str(raised.value)


def test_after_a_failure_the_endpoint_is_left_alone_for_a_backoff_that_doubles(monkeypatch: pytest.MonkeyPatch) -> None:
    """Connections that keep failing (aiokafka reconnects fast) do not hammer the endpoint, nor wait
    out its timeout one after another: they get the last error at once until the backoff ends."""
    clock = Clock(monkeypatch)
    endpoint = Endpoint(requests.ConnectionError("refused"), requests.ConnectionError("refused"), token("t1"))
    tokens = provider(endpoint)
    for _ in range(2):
        with pytest.raises(TokenError, match="did not answer"):
            tokens.current()
    assert len(endpoint.calls) == 1   # the second got the first's error
    clock.now += 1.0
    with pytest.raises(TokenError):
        tokens.current()
    assert len(endpoint.calls) == 2
    clock.now += 1.5   # the backoff doubled to 2 s
    with pytest.raises(TokenError):
        tokens.current()
    clock.now += 0.5
    assert tokens.current() == "t1" and len(endpoint.calls) == 3
    assert "t1" not in repr(tokens._token)


def jwt(claims: dict[str, Any]) -> str:
    part = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    return f"eyJhbGciOiJSUzI1NiJ9.{part}.c2ln"


def test_the_lifetime_comes_from_expires_in_else_the_jwt_exp_claim_else_the_token_is_asked_for_each_time(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert oauth.lifetime({"expires_in": 300}, "opaque") == 300
    assert 59 <= (oauth.lifetime({}, jwt({"exp": time.time() + 60})) or 0) <= 60
    assert oauth.lifetime({"expires_in": True}, "opaque") is None
    assert oauth.lifetime({"expires_in": float("inf")}, "opaque") is None
    assert oauth.lifetime({}, "opaque") is None and oauth.lifetime({}, "a.!!.c") is None
    Clock(monkeypatch)
    endpoint = Endpoint(token("t1", None), token("t2", None))
    tokens = provider(endpoint)
    assert tokens.current() == "t1" and tokens.current() == "t2"


def test_every_kafka_client_of_a_pipeline_shares_one_token_source() -> None:
    from frazil.config.models import KafkaConfig, KafkaSecurity
    from frazil.kafka import clients

    sec = KafkaSecurity(protocol="SASL_SSL", sasl_mechanism="OAUTHBEARER",
                        sasl_oauthbearer_token_endpoint_url="https://idp/token", sasl_oauthbearer_client_id="c",
                        sasl_oauthbearer_client_secret="s")
    kafka = KafkaConfig(bootstrap_servers="k:9093", topics=("t",), group_id="g", client_id="c", security=sec)
    first, second = clients.options(kafka), clients.options(kafka)
    assert first["sasl_mechanism"] == "OAUTHBEARER" and "sasl_plain_password" not in first
    assert first["sasl_oauth_token_provider"] is second["sasl_oauth_token_provider"]
