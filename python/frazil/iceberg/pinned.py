"""frazil's changes to pyiceberg internals (``metadata_copies``, ``metadata_cache``,
``manifest_lists``) are installed only on the pyiceberg version each was checked against."""

from __future__ import annotations

import logging

import pyiceberg

log = logging.getLogger(__name__)


def on_checked_version(checked: str, what: str, without: str) -> bool:
    """Whether the running pyiceberg is ``checked``, the version ``what`` was checked against; if
    not, says so and what happens ``without`` it."""
    if pyiceberg.__version__ == checked:
        return True
    log.info("pyiceberg %s is not the version whose %s were checked (%s): %s", pyiceberg.__version__, what, checked,
             without)
    return False
