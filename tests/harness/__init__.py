"""Harnesses the tests, ``make eos`` and ``make outage`` drive: multi-process kill runs, a catalog
outage under load, a standalone Spark cluster. Not part of the frazil package."""
