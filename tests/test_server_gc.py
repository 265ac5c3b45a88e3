"""The server's garbage-collector policy (dashboard/server_gc.py)."""
import asyncio
import gc
import weakref

from dashboard import server_gc


class Node:
    """An object in a reference cycle, as a closed session's models are: only a full collection frees it."""

    def __init__(self):
        self.me = self


def test_sessions_ending_together_are_collected_once_shortly_after():
    full = []

    def count(phase, info):
        if phase == "stop" and info["generation"] == 2:
            full.append(info["collected"])

    async def sessions_end() -> weakref.ref:
        ref = weakref.ref(Node())
        for _ in range(3):                     # three sessions discarded in one check of the server
            server_gc.collect_after_session_end(None)
        assert ref() is not None, "collected before the sessions' discard had finished"
        await asyncio.sleep(server_gc.COLLECT_AFTER_END_S + 0.5)
        return ref

    was_enabled = gc.isenabled()
    gc.disable()                               # only the collections asked for run
    gc.callbacks.append(count)
    try:
        ref = asyncio.run(sessions_end())
    finally:
        gc.callbacks.remove(count)
        if was_enabled:
            gc.enable()
    assert ref() is None, "the cycle outlived the sessions' end"
    assert len(full) == 1, f"{len(full)} full collections for one batch of ended sessions"


def test_outside_a_running_loop_the_collection_is_immediate():
    ref = weakref.ref(Node())
    server_gc.collect_after_session_end(None)
    assert ref() is None
