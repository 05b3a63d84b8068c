"""Named fault points, so tests can make the process fail at an exact step of the protocol.

Arm with the environment (``FRAZIL_FAULTS="commit.after_catalog=raise"``; several separated by
commas) or with :func:`arm`. Actions: ``kill`` (SIGKILL this process), ``kill@N`` (SIGKILL on the
Nth time the point is reached), ``raise`` (an OSError, as a lost response would), ``raise-once``
(the same, then disarms). Unarmed points cost one dict lookup.
"""

from __future__ import annotations

import os
import signal

POINTS = (
    "commit.before_catalog",     # data files about to be committed
    "commit.after_catalog",      # catalog commit landed, before we learn it did
    "commit.after_kafka_offsets",  # consumer-group low watermark committed
    "txlog.before_fsync",        # journal records written, not yet synced
    "txlog.checkpoint.before_rename",   # checkpoint written to its temporary file
    "txlog.checkpoint.before_cleanup",  # checkpoint in place, old segments not yet deleted
    "worker.after_files_written",       # a reply's data files written, nothing sent
    "worker.before_reply",              # the reply is about to go out in its transaction
    "worker.after_reply",               # the reply's transaction committed
    "coordinator.after_start_commit",   # StartCommit sent, no reply read yet
    "coordinator.after_catalog_commits",  # every table committed, CommitComplete not sent
    "coordinator.after_commit_complete",  # CommitComplete sent, control-topic position not moved
)

_armed: dict[str, str] = {}
_hits: dict[str, int] = {}


class InjectedFault(OSError):
    """Raised by a fault point armed with ``raise``."""


def _parse(spec: str) -> dict[str, str]:
    out = {}
    for item in filter(None, (s.strip() for s in spec.split(","))):
        point, _, action = item.partition("=")
        counted = action.startswith("kill@") and action[5:].isdigit() and int(action[5:]) > 0
        if point not in POINTS or not (counted or action in ("kill", "raise", "raise-once")):
            raise ValueError(f"bad fault spec {item!r}: points are {', '.join(POINTS)}; "
                             "actions kill, kill@N, raise, raise-once")
        out[point] = action
    return out


def arm(point: str, action: str) -> None:
    _armed.update(_parse(f"{point}={action}"))


def disarm() -> None:
    _armed.clear()
    _hits.clear()


def hit(point: str) -> None:
    action = _armed.get(point)
    if action is None:
        return
    if action.startswith("kill@"):
        _hits[point] = _hits.get(point, 0) + 1
        if _hits[point] < int(action[5:]):
            return
        action = "kill"
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if action == "raise-once":
        del _armed[point]
    raise InjectedFault(f"injected fault at {point}")


_armed.update(_parse(os.environ.get("FRAZIL_FAULTS", "")))
