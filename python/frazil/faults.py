"""Named fault points, so tests can make the process fail at an exact step of the protocol.

Arm with the environment (``FRAZIL_FAULTS="commit.after_catalog=raise"``; several separated by
commas) or with :func:`arm`. Actions: ``kill`` (SIGKILL this process), ``raise`` (an OSError, as
a lost response would), ``raise-once`` (the same, then disarms). Unarmed points cost one dict
lookup.
"""

from __future__ import annotations

import os
import signal

POINTS = (
    "commit.before_catalog",     # data files about to be committed
    "commit.after_catalog",      # catalog commit landed, before we learn it did
    "commit.after_kafka_offsets",  # consumer-group low watermark committed
)

_armed: dict[str, str] = {}


class InjectedFault(OSError):
    """Raised by a fault point armed with ``raise``."""


def _parse(spec: str) -> dict[str, str]:
    out = {}
    for item in filter(None, (s.strip() for s in spec.split(","))):
        point, _, action = item.partition("=")
        if point not in POINTS or action not in ("kill", "raise", "raise-once"):
            raise ValueError(f"bad fault spec {item!r}: points are {', '.join(POINTS)}; actions kill, raise, raise-once")
        out[point] = action
    return out


def arm(point: str, action: str) -> None:
    _armed.update(_parse(f"{point}={action}"))


def disarm() -> None:
    _armed.clear()


def hit(point: str) -> None:
    action = _armed.get(point)
    if action is None:
        return
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if action == "raise-once":
        del _armed[point]
    raise InjectedFault(f"injected fault at {point}")


_armed.update(_parse(os.environ.get("FRAZIL_FAULTS", "")))
