"""Peak memory and CPU time of a process and all its descendants (a JVM under PySpark, say).

A thread samples the tree every ``interval`` seconds with psutil: the peak of the summed RSS,
and the CPU seconds (user + system) last seen for every process that ever appeared, plus what
the root collected from children it reaped. A process that lives and dies between two samples
is missed; the systems measured here keep their processes for the whole run.
"""

from __future__ import annotations

import threading

import psutil


class TreeMonitor:
    def __init__(self, pid: int, interval: float = 0.2) -> None:
        self._root = psutil.Process(pid)
        self._interval = interval
        self._cpu: dict[int, float] = {}
        self._reaped = 0.0
        self.peak_rss = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        try:
            procs = [self._root, *self._root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return
        rss = 0
        for p in procs:
            try:
                with p.oneshot():
                    times = p.cpu_times()
                    rss += p.memory_info().rss
            except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
                continue
            self._cpu[p.pid] = times.user + times.system
            if p.pid == self._root.pid:
                self._reaped = times.children_user + times.children_system
        self.peak_rss = max(self.peak_rss, rss)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self._sample()

    def stop(self) -> dict[str, float]:
        """Take a last sample and return ``{"rss_peak_mb", "cpu_s"}``."""
        self._sample()
        self._stop.set()
        self._thread.join()
        return {"rss_peak_mb": round(self.peak_rss / 2**20, 1),
                "cpu_s": round(sum(self._cpu.values()) + self._reaped, 2)}
