"""Spark for the heavy data work: the pinned jars and one shared, lazily started session."""
