"""moto's standalone server (``python -m moto.server``) with AWS Glue's optimistic lock.

AWS Glue documents ``UpdateTable``'s ``VersionId`` as the version the update applies to: an update
against an older version fails with ``ConcurrentModificationException``. Iceberg's Glue catalogs
(pyiceberg's and Java's) send it, and rely on it as their compare-and-swap. moto 5 accepts any
``VersionId``, so two writers' commits overwrite each other there (a lost update real Glue
refuses). This adds that one check, atomically; nothing else of moto changes.

    python -m frazil_dev.moto_server -H 127.0.0.1 -p PORT
"""

from __future__ import annotations

import threading
from typing import Any

from moto.glue import responses
from moto.glue.exceptions import GlueClientError
from moto.server import main


class ConcurrentModificationError(GlueClientError):
    def __init__(self, message: str) -> None:
        super().__init__("ConcurrentModificationException", message)


_lock = threading.Lock()
_update_table = responses.GlueResponse.update_table


def _checked_update_table(self: Any) -> Any:
    """Glue's ``UpdateTable``: with a ``VersionId``, only against the table's current version."""
    version = self.parameters.get("VersionId")
    with _lock:
        if version is not None:
            database, name = self.parameters.get("DatabaseName"), self.parameters["TableInput"]["Name"]
            table = self.glue_backend.get_table(database, name)
            if str(version) != str(table._current_version):
                raise ConcurrentModificationError(f"Update table failed due to concurrent modifications: version "
                                                  f"{version} is not the current {table._current_version}")
        return _update_table(self)


responses.GlueResponse.update_table = _checked_update_table   # type: ignore[method-assign]

if __name__ == "__main__":
    main()
