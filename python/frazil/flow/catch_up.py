"""When a backlog's last rows land (pure; the pipeline does the I/O).

A pipeline that was at least ``lag`` records behind its partitions' ends (summed) and has just
reached them asks for a cycle at once, so a backfill's last rows land then rather than at the
next interval. A pipeline that keeps up never has such a backlog, so its commits keep to the
interval.

The ask stays due until it is made: the partitions often reach their ends while a cycle the
record or memory limit started is still being written, when no cycle can be asked for, and the
rows after it waited a whole interval (make bench, clickstream: the last 75k of 2M rows waited
1.3 s of a 5 s run). It lapses when a cycle took every row meanwhile.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class CatchUp:
    lag: int                  # records behind the ends (summed) that make a backlog
    backlog: bool = False     # the partitions were that far behind since the last catch-up
    asking: bool = False      # they caught up since: a cycle for the rest is due

    def polled(self, behind: int, taken: int, buffered: int) -> None:
        """After a poll that took ``taken`` records: ``behind`` records are left before the ends,
        ``buffered`` rows wait for a cycle."""
        if behind + taken >= self.lag:
            self.backlog = True
        if self.backlog and behind == 0 and buffered:
            self.backlog = False
            self.asking = True

    def due(self, buffered: int) -> bool:
        """Whether to ask for a cycle for the caught-up rows now (``buffered`` rows wait)."""
        if not buffered:
            self.asking = False   # a cycle took them all
        return self.asking

    def asked(self) -> None:
        self.asking = False
