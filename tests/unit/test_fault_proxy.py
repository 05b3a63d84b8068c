"""The chaos run's fault proxy in front of the S3 server (frazil_dev.fault_proxy): healthy, it passes
requests and responses through untouched; failing, it cuts the connections open at that moment and
answers new requests 503 SlowDown; slow, it holds responses back."""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator

import pytest
import requests

from frazil_dev.fault_proxy import FaultProxy


class Echo(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_PUT(self) -> None:   # http.server calls it by this name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def proxy() -> Iterator[FaultProxy]:
    upstream = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    try:
        with FaultProxy.start(upstream.server_address[1]) as p:
            yield p
    finally:
        upstream.shutdown()
        upstream.server_close()


def test_healthy_it_passes_bodies_through_on_one_kept_alive_connection(proxy: FaultProxy) -> None:
    with requests.Session() as http_session:
        for size in (0, 10, 3_000_000):
            body = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
            reply = http_session.put(f"{proxy.endpoint}/bucket/key", data=body, timeout=10)
            assert reply.status_code == 200 and reply.content == body
    assert proxy.refused == 0


def test_failing_it_cuts_open_connections_and_answers_503_until_the_window_ends(proxy: FaultProxy) -> None:
    with requests.Session() as http_session:
        assert http_session.put(f"{proxy.endpoint}/k", data=b"a", timeout=5).status_code == 200
        proxy.fail(1.0)
        assert proxy.cut >= 2   # the kept-alive connection, both ends
        reply = requests.put(f"{proxy.endpoint}/k", data=b"b", timeout=5)
        assert reply.status_code == 503 and b"<Code>SlowDown</Code>" in reply.content and proxy.refused == 1
        time.sleep(1.1)
        reply = requests.put(f"{proxy.endpoint}/k", data=b"c", timeout=5)
        assert reply.status_code == 200 and reply.content == b"c"


def test_slow_it_holds_each_response_back(proxy: FaultProxy) -> None:
    proxy.slow(5.0, delay_s=0.5)
    started = time.monotonic()
    reply = requests.put(f"{proxy.endpoint}/k", data=b"late", timeout=10)
    assert reply.content == b"late" and time.monotonic() - started >= 0.5
