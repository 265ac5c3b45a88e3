"""Tests of pipeline.collector: the pause nests, spans threads and restores what it found."""
from __future__ import annotations

import gc
import threading

from pipeline import collector


def test_the_collector_runs_again_when_the_last_pause_ends():
    assert gc.isenabled()
    with collector.paused():
        assert not gc.isenabled()
        with collector.paused():
            assert not gc.isenabled()
        assert not gc.isenabled()          # the outer pause still holds
    assert gc.isenabled()


def test_pauses_from_two_threads_overlap():
    inside, leave = threading.Event(), threading.Event()

    def other():
        with collector.paused():
            inside.set()
            leave.wait(10)

    thread = threading.Thread(target=other)
    with collector.paused():
        thread.start()
        inside.wait(10)
    assert not gc.isenabled()              # this thread left first; the other's pause holds
    leave.set()
    thread.join(10)
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off():
    gc.disable()
    try:
        with collector.paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_run_pauses_the_collector_and_leaves_it_running(tmp_path):
    from pipeline.run import RunRequest, run_pipeline

    seen = []
    run_pipeline(RunRequest(samples=20_000, out=str(tmp_path), device="cpu"),
                 progress=lambda stage, fraction, message: seen.append(gc.isenabled()))
    assert seen and not any(seen) and gc.isenabled()
