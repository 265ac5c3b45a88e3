"""The batch's live progress on stderr: one bar over recordings, counts by status, the stage of
each running recording (from the workers' events), elapsed time and ETA.

See Also
--------
pipeline.batch.run_batch : feeds the bar as tasks report and finish.
"""
from __future__ import annotations

import sys
import threading
from collections import Counter
from typing import TYPE_CHECKING

from pipeline.recordings import display_name

if TYPE_CHECKING:
    from pipeline.cluster import Cluster


class ProgressBar:
    """One tqdm bar over recordings on stderr; stage events arrive on Dask's event thread."""

    def __init__(self, total: int, enabled: bool, cluster: Cluster):
        self.enabled, self.total = enabled, total
        self.lock = threading.Lock()
        self.counts: Counter = Counter()
        self.running: dict[str, str] = {}
        self.done: set[str] = set()
        self.bar = None
        if not enabled:
            return
        from tqdm import tqdm

        where = f"{cluster.workers} worker{'s' if cluster.workers != 1 else ''} ({cluster.kind})"
        print(f"batch: {total} recording{'s' if total != 1 else ''} on {where}"
              + (f"; Dask dashboard {cluster.dashboard}" if cluster.dashboard else ""), file=sys.stderr)
        self.bar = tqdm(total=total, desc="recordings", unit="rec", file=sys.stderr, dynamic_ncols=True,
                        bar_format="{desc} {n}/{total} |{bar:20}| {elapsed}<{remaining}{postfix}")

    def event(self, event) -> None:
        _, msg = event
        with self.lock:
            if msg["stage"] == "done":  # sent as the task returns, before its result is collected
                self.running.pop(msg["input"], None)
            elif msg["input"] not in self.done:
                self.running[msg["input"]] = msg["stage"]
            self._postfix()

    def finished(self, row: dict) -> None:
        with self.lock:
            self.done.add(row["input"])
            self.running.pop(row["input"], None)
            self.counts[row["status"]] += 1
            if self.bar is not None:
                self._postfix()
                self.bar.update(1)

    def tick(self) -> None:
        with self.lock:
            if self.bar is not None:
                self.bar.refresh()

    def _postfix(self) -> None:
        if self.bar is None:
            return
        from pipeline.stages import STAGES

        counts = " ".join(f"{status} {self.counts[status]}" for status in ("ok", "cached", "failed")
                          if self.counts[status])
        stages = ", ".join(f"{display_name(path)}: {STAGES.get(stage, 'starting').lower()}"
                           for path, stage in list(self.running.items())[:3])
        more = f" +{len(self.running) - 3}" if len(self.running) > 3 else ""
        self.bar.set_postfix_str(f"{counts}{' · ' if counts else ''}running {len(self.running)}"
                                 + (f" [{stages}{more}]" if stages else ""), refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()

