"""Named fault points, so tests can make the process fail at an exact step of the protocol.

Arm with the environment (``FRAZIL_FAULTS="commit.after_catalog=raise"``; several separated by
commas) or with :func:`arm`. Actions: ``kill`` (SIGKILL this process), ``kill@N`` (SIGKILL on the
Nth time the point is reached), ``raise`` (an OSError, as a lost response would), ``raise-once``
(the same, then disarms), ``raise*N`` (the same, the first N times the point is reached: an
outage that ends), ``stop`` (SIGSTOP this process, once: it goes on where it stopped when
someone sends SIGCONT, as a paused VM or a long GC does), ``kill-after-stop`` (SIGKILL, but only
once a ``stop`` point has stopped this process: a zombie that says one thing on waking, then
dies). Unarmed points cost one dict lookup.

A point reached for one table can be armed for that table only: ``point[table]=action``
(``commit.before_catalog[ev.a]=raise`` fails every commit of ``ev.a`` and no other table's).

A running process can be re-armed: with ``FRAZIL_FAULTS_FILE`` set, ``frazil run`` re-reads that
file on SIGUSR1 and what it says replaces what was armed (an empty file disarms). The chaos runner
(tests/harness/chaos.py) arms points in live processes at random times this way.

One switch is not a point: ``fencing=off`` turns off what refuses a zombie's writes (the
coordinator's generation check and the committer's contiguity check) so a test can show that
its zombie really would have written twice. Never in production; the process says so loudly.
"""

from __future__ import annotations

import os
import signal

POINTS = (
    "commit.before_catalog",     # data files about to be committed
    "commit.after_deletes_written",  # a keyed table's position deletes written, not committed
    "merge.before_commit",       # a Spark merge read its staged changes, its MERGE about to run
    "merge.after_commit",        # the MERGE landed; its mark not yet kept as a property, staging not cleaned
    "commit.after_catalog",      # catalog commit landed, before we learn it did
    "commit.after_kafka_offsets",  # consumer-group low watermark committed
    "expiry.after_catalog",      # in-process snapshot expiry landed, its unreferenced manifests not yet deleted
    "txlog.before_fsync",        # journal records written, not yet synced
    "txlog.checkpoint.before_rename",   # checkpoint written to its temporary file
    "txlog.checkpoint.before_cleanup",  # checkpoint in place, old segments not yet deleted
    "worker.after_files_written",       # a reply's data files written, nothing sent
    "worker.before_reply",              # the reply is about to go out in its transaction
    "worker.in_reply_transaction",      # the reply is sent, its transaction not committed
    "worker.after_reply",               # the reply's transaction committed
    "worker.before_settle",             # CommitComplete read, the table's offsets about to be read
    "coordinator.after_start_commit",   # StartCommit sent, no reply read yet
    "coordinator.after_catalog_commits",  # every table committed, CommitComplete not sent
    "coordinator.after_commit_complete",  # CommitComplete sent, control-topic position not moved
    "dead_letter.before_commit",        # a landed commit's bad records sent, their transaction not committed
    "dead_letter.after_commit",         # their transaction committed, not yet noted in the log (or CommitComplete)
)

SWITCHES = ("fencing",)
FILE_ENV = "FRAZIL_FAULTS_FILE"
ACTIONS = ("kill", "raise", "raise-once", "stop", "kill-after-stop")

_armed: dict[str, str] = {}
_off: set[str] = set()
_stopped = False
_hits: dict[str, int] = {}


class InjectedFault(OSError):
    """Raised by a fault point armed with ``raise``."""


def _parse(spec: str) -> tuple[dict[str, str], set[str]]:
    out, off = {}, set()
    for item in filter(None, (s.strip() for s in spec.split(","))):
        point, _, action = item.partition("=")
        if point in SWITCHES and action == "off":
            off.add(point)
            continue
        counted = any(action.startswith(p) and action[len(p):].isdigit() and int(action[len(p):]) > 0
                      for p in ("kill@", "raise*"))
        name, bracket, scope = point.partition("[")
        scoped = not bracket or (scope.endswith("]") and len(scope) > 1)
        if name not in POINTS or not scoped or not (counted or action in ACTIONS):
            raise ValueError(f"bad fault spec {item!r}: points are {', '.join(POINTS)} (or point[table]); actions "
                             f"{', '.join(ACTIONS)}, kill@N, raise*N; or a switch ({', '.join(SWITCHES)}) =off")
        out[point] = action
    return out, off


def arm(point: str, action: str) -> None:
    armed, off = _parse(f"{point}={action}")
    _armed.update(armed)
    _off.update(off)


def disarm() -> None:
    global _stopped
    _armed.clear()
    _off.clear()
    _hits.clear()
    _stopped = False


def rearm_from_file() -> None:
    """Replace what is armed with the spec in ``$FRAZIL_FAULTS_FILE`` (SIGUSR1's handler)."""
    path = os.environ.get(FILE_ENV)
    if not path:
        return
    with open(path, encoding="utf-8") as f:
        armed, off = _parse(f.read())
    disarm()
    _armed.update(armed)
    _off.update(off)


def off(switch: str) -> bool:
    """Whether a safety ``switch`` (see SWITCHES) has been turned off for a test."""
    assert switch in SWITCHES, switch
    return switch in _off


def is_armed(point: str) -> bool:
    return point in _armed


def armed() -> str:
    """What is armed, for the process's start-up log ("" when nothing)."""
    return ",".join([f"{p}={a}" for p, a in sorted(_armed.items())] + [f"{s}=off" for s in sorted(_off)])


def hit(point: str, scope: str | None = None) -> None:
    """Reach ``point`` (for table ``scope``, where the point is about one table)."""
    global _stopped
    if scope is not None and f"{point}[{scope}]" in _armed:
        point = f"{point}[{scope}]"
    action = _armed.get(point)
    if action is None:
        return
    if action == "stop":
        del _armed[point]
        _stopped = True
        os.kill(os.getpid(), signal.SIGSTOP)   # returns once someone sends SIGCONT
        return
    if action == "kill-after-stop":
        if not _stopped:
            return
        action = "kill"
    if action.startswith("kill@"):
        _hits[point] = _hits.get(point, 0) + 1
        if _hits[point] < int(action[5:]):
            return
        action = "kill"
    if action.startswith("raise*"):
        _hits[point] = _hits.get(point, 0) + 1
        if _hits[point] >= int(action[6:]):
            del _armed[point]
        action = "raise"
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if action == "raise-once":
        del _armed[point]
    raise InjectedFault(f"injected fault at {point}")


_armed, _off = _parse(os.environ.get("FRAZIL_FAULTS", ""))
