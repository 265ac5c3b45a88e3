"""Python's cyclic garbage collector, paused while a run imports its libraries and computes.

Importing PyTorch, scikit-learn, cuDF or Numba makes hundreds of thousands of objects that live
as long as the process. While they are being made, the collector keeps deciding that the old
generation has grown enough to be walked again, and each full collection walks every object the
process holds, though none of those is garbage: a good part of the imports' time, and most of a
cached run's reading, went to such walks (the figures: docs/performance-history.md). A run's own
work frees its arrays by reference counting, so pausing leaves little behind: a few thousand
objects in import-time cycles (reclaimed at the next collection after the pause, or frozen with
everything else by a server, whose whole collector policy is :mod:`dashboard.server_gc`).

:func:`paused` nests and may be entered from several threads at once: the collector runs again
when the last one leaves, and only if it ran when the first one came in.
"""
from __future__ import annotations

import contextlib
import gc
import threading

_lock = threading.Lock()
_depth = 0
_was_enabled = False


@contextlib.contextmanager
def paused():
    """Pause automatic cyclic collections for the duration of the block (see the module)."""
    global _depth, _was_enabled
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                gc.enable()
