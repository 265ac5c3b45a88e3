"""The server's schedule of full garbage collections (:mod:`dashboard.collector`): Python's
automatic full collections stop, cyclic garbage in the old generation is still collected by the
scheduled task on the event loop, an idle process skips it, and the override is read strictly."""
from __future__ import annotations

import asyncio
import gc
import weakref

import panel as pn
import pytest

from dashboard import collector


class Cycle:
    """An object that only the cyclic collector can free (it refers to itself)."""

    def __init__(self):
        self.me = self


@pytest.fixture
def thresholds():
    saved = gc.get_threshold()
    yield
    gc.set_threshold(*saved)
    for key in [k for k in pn.state._scheduled if k.endswith(collector._TASK)]:
        del pn.state._scheduled[key]


def old_garbage() -> weakref.ref:
    """A cycle promoted to the old generation (it survives two young collections while referenced),
    then dropped: only a full collection frees it."""
    obj = Cycle()
    gc.collect(1)           # young and middle collected: `obj` survives into the oldest generation
    return weakref.ref(obj)


def test_take_over_stops_automatic_full_collections_and_collects_on_the_loop(thresholds):
    gc.collect()

    async def serve_briefly():
        assert collector.take_over(0.2)
        assert gc.get_threshold()[2] == collector._NEVER
        ref = old_garbage()
        assert ref() is not None, "nothing but a full collection frees an old cycle"
        junk = [[i] for i in range(200_000)]      # many young collections, no full one
        del junk
        assert ref() is not None
        await asyncio.sleep(0.7)                  # the task's period is 0.2 s
        return ref

    ref = asyncio.run(serve_briefly())
    assert ref() is None, "the scheduled collection freed the old cycle"


def test_an_idle_process_skips_the_collection():
    gc.collect()
    assert collector.collect_if_needed() is False
    ref = old_garbage()
    assert collector.collect_if_needed() is True
    assert ref() is None


def test_period_zero_leaves_python_its_schedule(thresholds, monkeypatch):
    before = gc.get_threshold()
    monkeypatch.setenv("ECG_GC_PERIOD_S", "0")
    assert collector.take_over() is False
    assert gc.get_threshold() == before


@pytest.mark.parametrize("value", ["soon", "-5"])
def test_a_bad_period_is_refused_in_one_line(monkeypatch, value):
    monkeypatch.setenv("ECG_GC_PERIOD_S", value)
    with pytest.raises(ValueError, match="ECG_GC_PERIOD_S") as err:
        collector.period_s()
    assert "\n" not in str(err.value)
