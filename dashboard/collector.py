"""Full garbage collections on the server's schedule rather than Python's.

A full collection walks every object the collector tracks. The run and the libraries are kept out
of its sight (``gc.freeze()`` once the run is prepared, :func:`dashboard.app.prepare`), but each
live session adds ~19,000 objects (its Bokeh models' property containers, Param's watchers, dicts
and lists), so with twenty sessions open one full collection pauses every session for ~200 ms on
two cores. Python starts one whenever the objects that survived its young collections have grown
by a quarter since the last; a brush replaces a few hundred of a session's objects, so twenty
sessions brushing hit that every ~150 brushes, and twenty sessions opening at once hit it several
times over.

A server process therefore turns Python's automatic full collections off (the young generations
stay automatic: they only walk what was made since) and runs one from its event loop every
``ECG_GC_PERIOD_S`` seconds (default 30), when anything was promoted to the old generation
meanwhile. Cyclic garbage lives at most that long; Panel still collects a few seconds after a
session closes. ``ECG_GC_PERIOD_S=0`` leaves the collector as Python has it.
"""
from __future__ import annotations

import datetime as dt
import gc
import os
import sys

PERIOD_S = 30.0
_NEVER = 2**31 - 1      # an old-generation threshold no count reaches
_TASK = "ecg-full-gc"


def period_s() -> float:
    """The seconds between full collections, from ``ECG_GC_PERIOD_S`` (0: Python's own schedule)."""
    value = os.environ.get("ECG_GC_PERIOD_S", "")
    try:
        period = float(value) if value else PERIOD_S
    except ValueError:
        raise ValueError(f"ECG_GC_PERIOD_S must be a number of seconds, not {value!r}") from None
    if period < 0:
        raise ValueError(f"ECG_GC_PERIOD_S must be 0 or more seconds, not {value!r}")
    return period


def collect_if_needed() -> bool:
    """One full collection if any young collection has promoted objects since the last one (an idle
    server skips it). Returns whether it collected."""
    if gc.get_count()[2] == 0:
        return False
    gc.collect()
    return True


def take_over(period: float | None = None) -> bool:
    """Schedule full collections on this server process's event loop and stop Python's automatic
    ones; once per process (later calls do nothing). Call it from the server's thread. Returns
    whether the schedule is in place."""
    import panel as pn

    if period is None:
        try:
            period = period_s()
        except ValueError as err:      # a typo in the environment must not stop the server
            print(f"ECG dashboard: {err}; full collections every {PERIOD_S:g} s", file=sys.stderr, flush=True)
            period = PERIOD_S
    if period == 0:
        return False
    every = dt.timedelta(seconds=period)
    pn.state.schedule_task(_TASK, collect_if_needed, at=dt.datetime.now() + every, period=every)
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, _NEVER)
    return True
