"""Many workers, one coordinator: commit-cycle state (pure), and later the control-topic channel,
the coordinator, the worker and the election."""
