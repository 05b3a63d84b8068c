"""glibc malloc settings for the daemon's allocation pattern.

Every fetch response (up to ``kafka.fetch_max_bytes``) is copied on its way in by the stream
reader and aiokafka, and every batch's columns are built, written and freed. With glibc's defaults
the heap's free top is handed back to the kernel past a small, moving threshold and big buffers
are mapped freshly, so the same few hundred MiB were page-faulted in again and again: about half
of frazil's system time on the benchmark's wide records (docs/benchmarks.md). Keeping up to
``TRIM_THRESHOLD`` of freed heap mapped, and taking buffers up to ``MMAP_THRESHOLD`` from the heap,
lets that memory be reused. The peak RSS it costs is at most the trim threshold above what was in
use; measured, the peak did not move.

A user's own ``MALLOC_TRIM_THRESHOLD_``, ``MALLOC_MMAP_THRESHOLD_`` or ``GLIBC_TUNABLES`` wins:
then nothing is changed. Off glibc
(musl, macOS) there is no ``mallopt`` and nothing is changed.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Mapping

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1   # glibc's mallopt parameter numbers (malloc.h)
M_MMAP_THRESHOLD = -3
TRIM_THRESHOLD = 128 << 20
MMAP_THRESHOLD = 32 << 20   # the ceiling of glibc's own moving threshold on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX)


USER_SETTINGS = ("GLIBC_TUNABLES", "MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_")


def settings(environ: Mapping[str, str]) -> dict[int, int]:
    """The mallopt parameters to set: none when the environment already tunes malloc."""
    if any(name in environ for name in USER_SETTINGS):
        return {}
    return {M_TRIM_THRESHOLD: TRIM_THRESHOLD, M_MMAP_THRESHOLD: MMAP_THRESHOLD}


def tune(environ: Mapping[str, str]) -> bool:
    """Apply :func:`settings` to this process's malloc; whether every one was taken."""
    wanted = settings(environ)
    if not wanted:
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False   # not glibc
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    taken = all(mallopt(param, value) == 1 for param, value in wanted.items())
    if not taken:
        log.debug("glibc refused a malloc setting (%s); its defaults stay", wanted)
    return taken
