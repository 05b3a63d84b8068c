"""Every change frazil makes to pyiceberg's internals, installed by one call on tested releases only.

A pyiceberg commit costs more with every snapshot in the table's history: 191 ms at a table's 10th
commit and 548 ms at its 200th, before these changes (docs/benchmarks.md, "Commit cost"). These
modules remove that growth, each by changing or reaching into pyiceberg internals. ``UPSTREAM.md``
says, for each, what it changes, what it saves, which upstream change would retire it and which
test pins it:

- ``metadata_copies``: table metadata is shared, not deep-copied, after each change;
- ``metadata_cache``: parsed metadata is kept by file location, and each snapshot's JSON is written
  once (``history`` is the pure per-table fold it shares with the committer's commit-id lookup);
- ``manifest_lists``: manifest lists are kept from the write that made them, each record encoded once;
- ``data_file_records``: each data file's manifest record is encoded once (``avro_records`` is shared
  by those two);
- ``manifest_merge``: the tiered append, pyiceberg's merge append with a tiered merge plan;
- ``row_delta``: data files plus position deletes in one snapshot (keyed tables), built on that append;
- ``pyarrow_io``: the private write helpers ``iceberg/writes.py`` calls unchanged (not a patch;
  named here so that this package holds frazil's whole private pyiceberg surface).

**One policy: refuse to start on a pyiceberg release not in ``TESTED``.** ``install_all`` raises
``UntestedPyiceberg``, naming the installed and the tested releases and what to install.
Switching the patches off with a warning instead is not open to all of them: keyed tables delete
only through ``row_delta``, and every frazil commit goes through the tiered append; both subclass
private pyiceberg classes and have no unpatched fallback. Switching off only the others would keep
the data right but bring back a commit cost that grows with the table's history, with only a log
line to say so. A daemon that starts and then falls behind its topics is worse than one that
refuses and says what to install. The aiokafka hook (``kafka/fetch.py``) follows the same policy.
``pyproject.toml`` pins a range of releases; ``TESTED`` lists the ones that were checked.

Importing the package checks the release first (the modules subclass pyiceberg's private
classes when they load), and everything here is used only after ``install_all`` has accepted it:
``iceberg/catalog.load`` calls it before any table is opened, and frazil commits only to tables from
a catalog that call loaded. ``install_all`` is idempotent. A second call costs the version check
and nine attribute assignments, on catalog loads only, never on the commit path.

To move to another pyiceberg release: install it, run the tests ``UPSTREAM.md`` names (each
patch's first test fails on a release not in ``TESTED`` and says what to check again), then add
the release here.
"""

from __future__ import annotations

import pyiceberg

from frazil.errors import UntestedPyiceberg

# the pyiceberg releases every module here was checked against, by the tests UPSTREAM.md names
TESTED = frozenset({"0.12.0"})


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(part) if part.isdigit() else -1 for part in version.split("."))


def check() -> None:
    """Raise ``UntestedPyiceberg`` unless the installed pyiceberg is in ``TESTED``."""
    found = pyiceberg.__version__
    if found not in TESTED:
        newest = max(TESTED, key=_release)
        raise UntestedPyiceberg(
            f"pyiceberg {found} is installed, but frazil changes pyiceberg's internals to keep each commit's cost "
            f"flat and has tested those changes with pyiceberg {', '.join(sorted(TESTED, key=_release))} only: "
            f"install pyiceberg=={newest} (pip install 'pyiceberg=={newest}'). frazil does not run without them: "
            "keyed tables delete through them, and every commit would cost more as its table's history grows")


# Before the patches load: they import and subclass pyiceberg's private names, which another
# release may not have (an ImportError traceback instead of this package's refusal).
check()

from frazil.iceberg.pyiceberg_patches import (  # noqa: E402 - after the version check, on purpose
    data_file_records,
    manifest_lists,
    metadata_cache,
    metadata_copies,
)


def install_all() -> None:
    """Check the installed pyiceberg (``check``), then install every patch. Idempotent."""
    check()
    metadata_copies.install()
    metadata_cache.install()
    manifest_lists.install()
    data_file_records.install()


def installed() -> bool:
    """Whether every patch is installed."""
    return (metadata_copies.installed() and metadata_cache.installed() and manifest_lists.installed()
            and data_file_records.installed())
