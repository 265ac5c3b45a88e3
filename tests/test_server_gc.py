"""The server's garbage-collector policy (dashboard/server_gc.py)."""
import asyncio
import gc
import weakref

import pytest

from dashboard import server_gc


class Node:
    """An object in a reference cycle, as a closed session's models are: only a full collection frees it."""

    def __init__(self):
        self.me = self


@pytest.fixture
def full_collections(monkeypatch):
    """Only the collections asked for run; returns the list of full collections' counts, as they run.
    No background loads are pending (another test's server may have left some)."""
    monkeypatch.setattr(server_gc, "_loading", 0)
    monkeypatch.setattr(server_gc, "_ended_while_loading", False)
    full = []

    def count(phase, info):
        if phase == "stop" and info["generation"] == 2:
            full.append(info["collected"])

    was_enabled = gc.isenabled()
    gc.disable()
    gc.callbacks.append(count)
    yield full
    gc.callbacks.remove(count)
    if was_enabled:
        gc.enable()


def test_sessions_ending_together_are_collected_once_shortly_after(full_collections):
    async def sessions_end() -> weakref.ref:
        ref = weakref.ref(Node())
        for _ in range(3):                     # three sessions discarded in one check of the server
            server_gc.collect_after_session_end(None)
        assert ref() is not None, "collected before the sessions' discard had finished"
        await asyncio.sleep(server_gc.COLLECT_AFTER_END_S + 0.5)
        return ref

    ref = asyncio.run(sessions_end())
    assert ref() is None, "the cycle outlived the sessions' end"
    assert len(full_collections) == 1, f"{len(full_collections)} full collections for one batch of ended sessions"


def test_outside_a_running_loop_the_collection_is_immediate(full_collections):
    ref = weakref.ref(Node())
    server_gc.collect_after_session_end(None)
    assert ref() is None


def test_sessions_ending_during_the_background_loads_are_collected_when_the_loads_are_frozen(full_collections):
    server_gc.loads_started()
    ref = weakref.ref(Node())
    server_gc.collect_after_session_end(None)
    server_gc.collect_after_session_end(None)
    assert ref() is not None and not full_collections, "collected while the loads were still running"
    try:
        server_gc.freeze_loads()
        assert ref() is None, "a session that ended during the loads was frozen with them"
        assert len(full_collections) == 1
        kept = Node()
        server_gc.loads_started()
        server_gc.freeze_loads()               # no session ended meanwhile: nothing to collect first
        assert len(full_collections) == 1 and gc.is_tracked(kept)
    finally:
        gc.unfreeze()


def test_the_server_entry_leaves_the_collector_running_and_the_imports_frozen():
    """`python -m dashboard.serve` runs Panel's command line (here its help) after the imports, with
    the collector enabled again and the imports' objects frozen."""
    import subprocess
    import sys
    from pathlib import Path

    code = ("import gc, sys\nfrom dashboard import serve\ntry:\n    serve.main(['--help'])\n"
            "except SystemExit as done:\n    print('exit', done.code, gc.isenabled(), gc.get_freeze_count() > 100_000)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).resolve().parent.parent)
    assert "usage: panel serve" in out.stdout, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "exit 0 True True"


def test_the_prepared_run_is_frozen_and_the_thresholds_set():
    thresholds, frozen = gc.get_threshold(), gc.get_freeze_count()
    kept = Node()   # noqa: F841 - alive at the freeze
    try:
        server_gc.freeze_run()
        assert gc.get_freeze_count() > frozen and gc.get_threshold() == server_gc.THRESHOLDS
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)
