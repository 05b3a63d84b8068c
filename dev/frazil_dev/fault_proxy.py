"""A TCP proxy in front of a local HTTP server (the test S3 server) that misbehaves on demand, as an
object store under load or in trouble does: for a while it answers every new request with HTTP 503
``SlowDown`` (S3's own "reduce your request rate") after cutting the connections open at that
moment, or it holds every response back before passing it on.

    proxy = FaultProxy.start(upstream_port)      # clients use proxy.endpoint instead
    proxy.fail(4.0)                              # 4 s of resets and 503s
    proxy.slow(6.0, delay_s=1.5)                 # 6 s in which each response waits 1.5 s

Healthy, it passes bytes through untouched (HTTP keep-alive, streamed and chunked bodies, SigV4
signatures: it never parses what it forwards). A faulty window only decides what happens to a
connection opened during it (a 503) or to data passing during it (held back); connections open
when ``fail`` starts are cut, so that a client cannot keep using one through the window.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from frazil_dev.kafka_broker import free_port

SLOW_DOWN = (b"HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\nConnection: close\r\n"
             b"Content-Length: %d\r\n\r\n%s")
SLOW_DOWN_BODY = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
                  b"<Message>Please reduce your request rate.</Message></Error>")


@dataclass
class FaultProxy:
    """A running proxy; ``stop`` is idempotent."""

    port: int
    upstream_port: int
    _listener: socket.socket
    _failing_until: float = 0.0
    _slow_until: float = 0.0
    _delay_s: float = 0.0
    _open: set[socket.socket] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stopped: threading.Event = field(default_factory=threading.Event)
    refused: int = 0      # requests answered 503
    cut: int = 0          # connections cut when a failing window began

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @classmethod
    def start(cls, upstream_port: int) -> FaultProxy:
        port = free_port()
        listener = socket.create_server(("127.0.0.1", port), reuse_port=False)
        listener.settimeout(0.5)
        proxy = cls(port, upstream_port, listener)
        threading.Thread(target=proxy._accept, name=f"fault-proxy-{port}", daemon=True).start()
        return proxy

    def fail(self, seconds: float) -> None:
        """For ``seconds``: every connection open now is cut, every new request answered 503."""
        with self._lock:
            self._failing_until = time.monotonic() + seconds
            victims = list(self._open)
        for sock in victims:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        with self._lock:
            self.cut += len(victims)

    def slow(self, seconds: float, delay_s: float) -> None:
        """For ``seconds``: every chunk of every response waits ``delay_s`` before it is passed on."""
        with self._lock:
            self._slow_until, self._delay_s = time.monotonic() + seconds, delay_s

    def stop(self) -> None:
        self._stopped.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            victims = list(self._open)
        for sock in victims:
            with contextlib.suppress(OSError):
                sock.close()

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the connections ----------------------------------------------------------------------

    def _failing(self) -> bool:
        return time.monotonic() < self._failing_until

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    @contextlib.contextmanager
    def _tracked(self, *socks: socket.socket) -> Iterator[None]:
        with self._lock:
            self._open.update(socks)
        try:
            yield
        finally:
            with self._lock:
                self._open.difference_update(socks)
            for sock in socks:
                with contextlib.suppress(OSError):
                    sock.close()

    def _serve(self, client: socket.socket) -> None:
        if self._failing():
            self._refuse(client)
            return
        try:
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=10)
        except OSError:
            client.close()
            return
        upstream.settimeout(None)
        with self._tracked(client, upstream):
            back = threading.Thread(target=self._pipe, args=(upstream, client, True), daemon=True)
            back.start()
            self._pipe(client, upstream, False)
            back.join()

    def _pipe(self, src: socket.socket, dst: socket.socket, response: bool) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if response and time.monotonic() < self._slow_until:
                    time.sleep(self._delay_s)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)

    def _refuse(self, client: socket.socket) -> None:
        """Read the request's head (a client writes it before it reads), answer 503, close."""
        with self._tracked(client):
            client.settimeout(5)
            head = b""
            with contextlib.suppress(OSError):
                while b"\r\n\r\n" not in head and len(head) < 65536:
                    chunk = client.recv(65536)
                    if not chunk:
                        return
                    head += chunk
                with self._lock:   # counted before the client can read the answer (and look at the count)
                    self.refused += 1
                client.sendall(SLOW_DOWN % (len(SLOW_DOWN_BODY), SLOW_DOWN_BODY))
