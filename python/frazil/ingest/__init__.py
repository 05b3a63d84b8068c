"""Data path: the Kafka source, the native record buffer facade, the ingest pipeline."""
