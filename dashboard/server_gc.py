"""The server's garbage collector: when it walks the sessions' objects, and when it does not.

A session holds ~19,000 objects that Python's cyclic collector tracks (~400 Bokeh models, their
property containers, Panel's watchers). A full collection walks every open session's objects:
~230 ms with twenty open on the H200, during which every session's brush waits. So:

- **Brushes set off no collection.** Python's young collection runs once the tracked objects
  allocated outnumber those freed by 700 (its default). A brush makes and frees thousands, so a
  young collection fell inside most brushes and moved whatever was alive at that instant to the
  older generations; those moves are what set off full collections. At 10,000 a brush's objects
  are freed before any collection sees them. In process on the 2-core CPU, 400 brushes over twenty
  sessions: 319 young, 29 middle and one full collection (180 ms) at Python's defaults; here no
  young or full collection and one middle one (24 ms).
- **A session's end does.** A closed session's models and documents reference each other, so only
  a full collection frees them. One runs shortly after sessions are discarded (one for a batch).
  Panel schedules one as well, but postpones it until no session has ended for five seconds, so a
  server whose sessions keep ending kept their memory until Python's schedule, now rare, got to it
  (measured: +1.8 MB per session on the H200 over 100 sessions).
- **Not while the background loads run.** What lives as long as the process (the libraries, the
  run, then what the background loads make: PyTorch, the model, Datashader's compiled drawing) is
  frozen out of the collector's sight (``gc.freeze``) by ``dashboard.app``. Until the loads are
  frozen, a full collection walks their ~300,000 objects (50-240 ms on the H200, in a server's first
  seconds, while its first users brush), so sessions that end meanwhile are collected once, when
  the loads are frozen, rather than each on its own.
- Python's own schedule of full collections stays as a safety net, ten times rarer.
"""
from __future__ import annotations

import asyncio
import gc
import threading

THRESHOLDS = (10_000, 10, 100)   # young, middle, full (Python's: 700, 10, 10)
COLLECT_AFTER_END_S = 0.25       # sessions discarded together are collected once

_pending: asyncio.TimerHandle | None = None
_lock = threading.Lock()
_loading = 0                     # background loads not frozen yet
_ended_while_loading = False


def loads_started() -> None:
    """Background loads began: collections after sessions' ends wait for :func:`freeze_loads`."""
    global _loading
    with _lock:
        _loading += 1


def freeze_loads() -> None:
    """Background loads finished: freeze what they made, collecting first only if sessions ended
    meanwhile (their cycles would be frozen for good otherwise)."""
    global _loading, _ended_while_loading
    with _lock:
        if _ended_while_loading:
            gc.collect()
            _ended_while_loading = False
        gc.freeze()
        _loading = max(_loading - 1, 0)


def configure() -> None:
    """Set the thresholds (the server calls this once, when the run is prepared)."""
    gc.set_threshold(*THRESHOLDS)


def collect_after_session_end(session_context) -> None:
    """A session-destroyed callback: a full collection on the server's loop shortly after, one
    for all the sessions discarded meanwhile (or at once, outside a running loop)."""
    global _pending, _ended_while_loading
    with _lock:
        if _loading:
            _ended_while_loading = True
            return
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        gc.collect()
        return
    if _pending is None:
        _pending = loop.call_later(COLLECT_AFTER_END_S, _collect)


def _collect() -> None:
    global _pending
    _pending = None
    gc.collect()
