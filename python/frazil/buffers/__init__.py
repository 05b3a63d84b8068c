"""What the ingest loop fills and the worker drains: each table's record buffer (``targets``),
where each source partition stands (``positions``), and the lock that keeps a batch from being
taken between a buffer's append and the positions that count its records (``state``). Neither
side reaches into the other: both hold a :class:`~frazil.buffers.state.Buffers`."""
