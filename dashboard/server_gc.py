"""The server's garbage-collector policy: every setting of Python's cyclic collector that the
dashboard's server makes, and why. The other modules call these functions; none calls ``gc``
itself.

The costs behind it. A full collection walks every object the process tracks. A server holds a
few hundred thousand objects that live as long as it does (Panel, Bokeh and their imports; the
run; PyTorch and Datashader's compiled drawing once they load), and each open session ~19,000
more (~400 Bokeh models, their property containers, Panel's watchers). With twenty sessions open
a full collection takes ~230 ms on the H200, and every session's brush waits for it. So:

- **Paused while libraries import and the run is read or computed** (:func:`paused`, which is
  :func:`pipeline.collector.paused`: the pipeline pauses through the same counter, so that nested
  pauses compose). Imports make hundreds of thousands of long-lived objects, and while they are
  being made the collector keeps deciding that the old generation has grown enough to be walked
  again; a run's arrays are freed by reference counting, so pausing leaves little behind. Paused:
  the server's job (run and views' preparation), the model's load (PyTorch), Datashader's
  compilation (Numba).
- **What lives as long as the process is frozen out of the collector's sight** (``gc.freeze``),
  so that full collections walk only what the sessions make: the server's own imports
  (:func:`imports_frozen`, ``python -m dashboard.serve``: a cached start on a 2-core CPU is usable
  after 2.73 s instead of 3.04 s, 12 interleaved starts each; on the H200 no difference shows
  within its start-to-start spread), the run and the views' shared data once prepared
  (:func:`freeze_run`; unfrozen, full collections walk millions of objects and pause every session
  for up to a second under twenty sessions), and what the background loads made, once they are
  done (:func:`freeze_loads`: PyTorch's modules and Numba's compiled code are ~300,000 objects,
  ~190 ms a full collection on two cores). A freeze collects first only where sessions ended
  during the loads (their cycles would be frozen for good): a collection first would lengthen the
  start, or walk the loads' objects (~190 ms on two cores) while the first brushes wait, to free
  ~13,000 objects of import-time cycles, which stay instead. Sessions open at a freeze are frozen
  with the rest: if they form cycles when they close, those few sessions' memory stays.
- **Brushes set off no collection** (:data:`THRESHOLDS`, set with the run's freeze). Python's
  young collection runs once the tracked objects allocated outnumber those freed by 700 (its
  default). A brush makes and frees thousands, so at 700 a young collection falls inside most
  brushes and moves whatever is alive at that instant to the older generations, which is what
  sets off full collections. At 10,000 a brush's objects are freed before any collection sees
  them: 400 brushes over twenty sessions, in one process on a 2-core CPU, set off 319 young, 29
  middle and one full collection (180 ms) at Python's defaults, and no young or full and one
  middle collection (24 ms) at these. Python's own schedule of full collections stays as a safety
  net, ten times rarer.
- **A session's end sets off one** (:func:`collect_after_session_end`). A closed session's models
  and documents reference each other, so only a full collection frees them. One runs
  :data:`COLLECT_AFTER_END_S` after sessions are discarded (one for a batch). Panel schedules one as
  well, but postpones it until no session has ended for five seconds, so a server whose sessions
  keep ending would keep their memory until Python's rare full collection (+1.8 MB per session on
  the H200 over 100 sessions).
- **Not while the background loads run** (:func:`loads_started`, :func:`freeze_loads`). Until the
  loads are frozen, a full collection walks their ~300,000 objects (50-240 ms on the H200, in a
  server's first seconds, while its first users brush), so sessions that end meanwhile are
  collected once, when the loads are frozen, rather than each on its own.
"""
from __future__ import annotations

import contextlib
import gc
import threading

from pipeline.collector import paused  # noqa: F401 - the one pause, for the dashboard's callers

THRESHOLDS = (10_000, 10, 100)   # young, middle, full (Python's: 700, 10, 10)
COLLECT_AFTER_END_S = 0.25       # sessions discarded together are collected once

_pending = None                  # the asyncio.TimerHandle of the collection to come
_lock = threading.Lock()
_loading = 0                     # background loads not frozen yet
_ended_while_loading = False


@contextlib.contextmanager
def imports_frozen():
    """The server's imports: no collection while they are made, and what they made frozen at the
    end (the collector then runs again)."""
    with paused():
        try:
            yield
        finally:
            gc.freeze()


def freeze_run() -> None:
    """The run and the views' shared data are prepared: freeze everything alive (no collection
    first) and set :data:`THRESHOLDS`. The server calls this once."""
    gc.freeze()
    configure()


def configure() -> None:
    """Set the thresholds."""
    gc.set_threshold(*THRESHOLDS)


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


def collect_after_session_end(session_context) -> None:
    """A session-destroyed callback: a full collection on the server's loop shortly after, one
    for all the sessions discarded meanwhile (or at once, outside a running loop)."""
    import asyncio

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
