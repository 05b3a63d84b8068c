"""Iceberg side: catalog and table set-up, stored offsets, the exactly-once committer."""
