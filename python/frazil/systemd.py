"""systemd's service notification protocol (sd_notify(3)), for ``Type=notify`` units.

Datagrams of ``KEY=value`` lines to the socket named by ``NOTIFY_SOCKET`` (a path, or ``@name``
for an abstract socket). frazil sends ``READY=1`` once the consumer group assigned this process
its partitions and they are positioned, ``WATCHDOG=1`` from a task on the event loop (a stuck
loop stops it, and systemd restarts the process after ``WatchdogSec``), ``STATUS=`` lines a
person reads in ``systemctl status``, and ``STOPPING=1`` when it starts draining. Without
``NOTIFY_SOCKET`` (not under systemd) every call does nothing.

The protocol is a few lines over a Unix datagram socket; it is written here rather than taken
from a package (python-systemd needs libsystemd's headers to build, the small PyPI clients are
unmaintained).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Callable, Mapping

log = logging.getLogger(__name__)


class Notifier:
    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        env = os.environ if env is None else env
        path = env.get("NOTIFY_SOCKET", "")
        self._address = ("\0" + path[1:]) if path.startswith("@") else path
        self._socket: socket.socket | None = None
        usec = env.get("WATCHDOG_USEC", "")
        pid = env.get("WATCHDOG_PID", "")
        wanted = usec.isdigit() and int(usec) > 0 and (not pid or pid == str(os.getpid()))
        # systemd's advice: ping at half the interval
        self.watchdog_interval_s: float | None = int(usec) / 2_000_000 if wanted else None

    @property
    def enabled(self) -> bool:
        return bool(self._address)

    def send(self, *lines: str) -> None:
        if not self._address:
            return
        try:
            if self._socket is None:
                self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self._socket.sendto("\n".join(lines).encode(), self._address)
        except OSError as exc:   # systemd went away or the socket is wrong: say so, never stop ingesting for it
            log.warning("systemd notification %s not sent: %s", lines[0].split("=")[0], exc)

    def ready(self, status: str) -> None:
        self.send("READY=1", f"STATUS={status}", f"MAINPID={os.getpid()}")

    def status(self, status: str) -> None:
        self.send(f"STATUS={status}")

    def stopping(self, status: str = "draining: committing what is buffered") -> None:
        self.send("STOPPING=1", f"STATUS={status}")

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None


async def serve(notifier: Notifier, stop: asyncio.Event, finished: asyncio.Event, *, ready: Callable[[], bool],
                status: Callable[[], str], tick_s: float = 1.0) -> None:
    """Until ``finished`` is set: READY once ``ready()`` holds, STOPPING once ``stop`` is set (the
    drain), WATCHDOG every half watchdog interval (through the drain too), STATUS when it changes.
    Runs on the event loop, so a blocked loop sends nothing."""
    if not notifier.enabled:
        return
    interval = min(tick_s, notifier.watchdog_interval_s or tick_s)
    said_ready, said_stopping, last_status = False, False, ""
    loop = asyncio.get_running_loop()
    next_ping = loop.time()
    while not finished.is_set():
        if stop.is_set() and not said_stopping:
            notifier.stopping()
            said_stopping = True
        elif not said_ready and not said_stopping and ready():
            last_status = status()
            notifier.ready(last_status)
            said_ready = True
            log.info("told systemd the service is ready")
        elif said_ready and not said_stopping and (now := status()) != last_status:
            notifier.status(now)
            last_status = now
        if notifier.watchdog_interval_s is not None and loop.time() >= next_ping:
            notifier.send("WATCHDOG=1")
            next_ping = loop.time() + notifier.watchdog_interval_s
        # woken by the stop too: STOPPING goes out when the drain starts, even a drain shorter than a tick
        events = [asyncio.ensure_future(e.wait()) for e in ((finished,) if said_stopping else (finished, stop))]
        try:
            await asyncio.wait(events, timeout=interval, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for event in events:
                event.cancel()
    if stop.is_set() and not said_stopping:
        notifier.stopping()
