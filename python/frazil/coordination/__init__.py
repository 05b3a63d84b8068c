"""The commit cycle's roles, one path for both coordination modes: the worker, the coordinator,
the pure commit-cycle state, the channels between them (the control topic; in process), where the
coordinator runs, and the transaction log's recovery at start."""
