"""The schema-registry client's contract, against a small in-test HTTP(S) server: basic auth,
TLS with a CA file, caching, bounded retries, and which answers make records bad (404, not Avro,
references) rather than stop the pipeline. The real registry (Apicurio) is in
tests/integration/test_avro.py; this covers what it cannot be made to do (fail on purpose, TLS)."""

from __future__ import annotations

import base64
import json
import socket
import ssl
import subprocess
import threading
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from frazil.config import RegistryConfig, ValuesConfig
from frazil.errors import SchemaRegistryError
from frazil.flow import retry
from frazil.ingest import registry
from frazil.ingest.registry import Unusable, WriterSchemas

SCHEMA = json.dumps({"type": "record", "name": "E", "fields": [{"name": "id", "type": "long"}]})
AUTH = "Basic " + base64.b64encode(b"u:p").decode()


class Handler(BaseHTTPRequestHandler):
    calls: Counter[str] = Counter()

    def do_GET(self) -> None:   # http.server's name
        Handler.calls[self.path] += 1
        if self.headers.get("Authorization") != AUTH:
            return self._answer(401, {"error_code": 40101, "message": "unauthorized"})
        schema_id = self.path.rsplit("/", 1)[-1]
        if schema_id == "1":
            return self._answer(200, {"schema": SCHEMA})
        if schema_id == "2":   # fails twice, then answers
            return self._answer(503, {"message": "busy"}) if Handler.calls[self.path] <= 2 else \
                self._answer(200, {"schema": SCHEMA, "schemaType": "AVRO"})
        if schema_id == "4":
            return self._answer(200, {"schema": "syntax = \"proto3\";", "schemaType": "PROTOBUF"})
        if schema_id == "5":
            return self._answer(200, {"schema": SCHEMA,
                                      "references": [{"name": "com.x.Y", "subject": "y", "version": 1}]})
        if self.path.startswith("/wrong/"):   # a path the registry does not serve: 404 without its error code
            return self._answer(404, {"message": "RESTEASY003210: Could not find resource"})
        return self._answer(404, {"error_code": 40403, "message": f"Schema {schema_id} not found"})

    def _answer(self, status: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


def serve(context: ssl.SSLContext | None = None) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    if context is not None:
        server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    Handler.calls.clear()
    try:
        yield f"{'https' if context else 'http'}://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def url() -> Iterator[str]:
    yield from serve()


@pytest.fixture(autouse=True)
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "BACKOFF", retry.Backoff(0.01))


def schemas(url: str, *, username: str = "u", password: str = "p", ca_file: str = "",
            attempts: int = 3) -> WriterSchemas:
    return WriterSchemas(ValuesConfig("avro-confluent", registry=RegistryConfig(
        url, username, password, ca_file, timeout_s=5, max_attempts=attempts)))


def test_a_schema_is_asked_once_with_basic_auth_and_kept(url: str) -> None:
    client = schemas(url)
    assert client.get(1) == SCHEMA and client.get(1) == SCHEMA
    assert Handler.calls["/schemas/ids/1"] == 1


def test_server_errors_are_retried_a_bounded_number_of_times(url: str) -> None:
    assert schemas(url, attempts=3).get(2) == SCHEMA
    assert Handler.calls["/schemas/ids/2"] == 3
    Handler.calls.clear()
    with pytest.raises(SchemaRegistryError, match="2 attempts; last: HTTP 503"):
        schemas(url, attempts=2).get(2)


def test_answers_about_the_schema_make_its_records_bad_records(url: str) -> None:
    client = schemas(url)
    for schema_id, words in ((3, "unknown schema id 3"),
                             (4, 'PROTOBUF schema, and values.format = "avro-confluent" reads AVRO schemas'),
                             (5, "schema references")):
        got = client.get(schema_id)
        assert isinstance(got, Unusable) and words in got.reason, got
    # JSON values in the wire format read JSON schemas: an Avro one (no schemaType) is not theirs
    json_values = WriterSchemas(ValuesConfig("json-schema-confluent", registry=RegistryConfig(
        url, "u", "p", "", timeout_s=5, max_attempts=1)))
    got = json_values.get(1)
    assert isinstance(got, Unusable) and 'AVRO schema, and values.format = "json-schema-confluent" reads JSON' \
        in got.reason, got


def test_a_404_that_is_not_schema_not_found_is_a_wrong_url_not_a_bad_record(url: str) -> None:
    with pytest.raises(SchemaRegistryError, match="HTTP 404"):
        schemas(f"{url}/wrong").get(3)


def test_refused_credentials_and_an_unreachable_registry_stop_loudly(url: str) -> None:
    with pytest.raises(SchemaRegistryError, match="refused frazil \\(HTTP 401\\)"):
        schemas(url, password="wrong").get(1)
    with socket.socket() as s:   # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    with pytest.raises(SchemaRegistryError, match="could not be asked for schema id 1 \\(2 attempts"):
        schemas(closed, attempts=2).get(1)


def test_tls_is_checked_against_the_ca_file(tmp_path: Path) -> None:
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    for url in serve(context):
        assert schemas(url, ca_file=str(cert)).get(1) == SCHEMA
        with pytest.raises(SchemaRegistryError, match="SSLError"):   # not signed by a CA the system trusts
            schemas(url, attempts=1).get(1)
