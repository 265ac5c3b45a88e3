"""The server's pipeline run, in a child process of its own.

A server that computes its run at start used to compute it in a thread: the run's imports and
Python work (PyTorch, cuDF, Numba and RMM; the training loop) took turns with Panel's and Bokeh's
on one interpreter lock, and the run could only begin once Panel had been imported (1.1-2 s on
the H200 machines). In a child process the two overlap for real, and ``python -m dashboard.serve``
starts the child before it imports anything heavy (:func:`start_early`).

The child runs the pipeline as ``python -m pipeline run`` would, writing the run directory (or
finding it in the cache, which it then does not read: :func:`pipeline.run.run_to_directory`),
and reports each progress call as one JSON line on a pipe; its stdout and stderr go to the
server's log. The server then reads the finished run from its directory, as it reads a cached
run. The child ends itself when its stdin closes: when the server stops, even if killed.

``python -m dashboard.pipeline_process FD`` is the child: FD is the pipe's write end, and its
:class:`~pipeline.requests.RunRequest` arrives pickled on stdin (the server parsed its arguments,
:func:`dashboard.settings.server_settings`; the child does not parse them again).
"""
from __future__ import annotations

import atexit
import json
import os
import pickle
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

from pipeline import one_line

_ROOT = str(Path(__file__).resolve().parent.parent)   # so that the child finds this package, installed or not
_EARLY: "PipelineProcess | None" = None


class PipelineFailed(Exception):
    """The child's run failed with something other than bad input; the message is one line,
    ``Kind: message``, and the child's traceback is in the server's log."""


class PipelineProcess:
    """One child process running one request; :meth:`result` follows it to the end."""

    def __init__(self, request):
        """Start the child for ``request`` (a :class:`~pipeline.requests.RunRequest`)."""
        self.request = request
        read_end, write_end = os.pipe()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (_ROOT, os.environ.get("PYTHONPATH"))))}
        self.started_at = time.monotonic()
        self._process = subprocess.Popen(
            [sys.executable, "-m", "dashboard.pipeline_process", str(write_end)],
            stdin=subprocess.PIPE, stdout=2, pass_fds=(write_end,), env=env)  # stdout: the server's log
        os.close(write_end)
        self._process.stdin.write(pickle.dumps(request))
        self._process.stdin.flush()     # and stdin stays open while the child is needed
        # Drained from the start, so that the child never blocks on a full pipe while the server
        # is still importing Panel and nobody follows it yet.
        self._events: queue.Queue = queue.Queue()
        threading.Thread(target=self._drain, args=(read_end,), name="ecg-pipeline-events", daemon=True).start()
        atexit.register(self.stop)

    @property
    def pid(self) -> int:
        return self._process.pid

    def _drain(self, read_end: int) -> None:
        with open(read_end, encoding="utf-8") as events:
            for line in events:
                self._events.put(json.loads(line))
        self._events.put(None)

    def result(self, progress: Callable | None = None):
        """Forward the child's progress to ``progress(stage, fraction, message, at=...)`` until it
        ends; return the run read from its directory. Raises ValueError for bad input (the
        child's own one-line message) and :class:`PipelineFailed` for any other failure."""
        from dataclasses import replace

        from pipeline.results import load_run

        while (event := self._events.get()) is not None:
            if "stage" in event:
                if progress is not None:
                    progress(event["stage"], event["fraction"], event["message"], at=event["at"])
            elif "run" in event:
                self._let_go()
                return replace(load_run(Path(event["run"])), cached=event["cached"])
            elif "error" in event:
                self._process.stdin.close()
                self._process.wait()
                raise (ValueError if event["kind"] == "ValueError" else PipelineFailed)(event["error"])
        code = self._process.wait()
        raise PipelineFailed(f"the pipeline's process ended (exit code {code}) before its run was written; "
                             "see the server's log")

    def _let_go(self) -> None:
        """Let the child exit (it waits for its stdin to close) and reap it in the background: a
        child nobody waits for stays in the process table, as a zombie, as long as the server."""
        self._process.stdin.close()
        threading.Thread(target=self._process.wait, name="pipeline-child-reaper", daemon=True).start()

    def stop(self) -> None:
        """End the child if it still runs (the server is exiting, or no longer needs it)."""
        if self._process.poll() is None:
            self._process.terminate()
        self._process.stdin.close()


def start_early(app_args: list[str]) -> None:
    """Start the run for the server's ``--args`` now, before the server imports Panel; the
    server's job adopts it if it asks for the same request (:func:`for_request`). Nothing starts
    for an archive (its server runs nothing at start) or for arguments that do not parse (the
    page shows their error)."""
    global _EARLY
    from dashboard.settings import server_settings

    try:
        settings = server_settings(list(app_args))
    except ValueError:
        return
    if not settings.archive:
        _EARLY = PipelineProcess(request=settings.request)


def for_request(request) -> PipelineProcess:
    """The child computing ``request``: the one :func:`start_early` started, if it was started
    for this request, or a new one."""
    global _EARLY
    child, _EARLY = _EARLY, None
    if child is not None and child.request != request:
        child.stop()
        child = None
    return child or PipelineProcess(request=request)


# --------------------------------------------------------------------------- the child
def _child(write_end: int) -> int:
    from pipeline.run import run_to_directory

    events = open(write_end, "w", encoding="utf-8", buffering=1)

    def send(**event) -> None:
        events.write(json.dumps(event) + "\n")

    try:
        request = pickle.load(sys.stdin.buffer)
        threading.Thread(target=_end_with_the_server, name="server-watch", daemon=True).start()
        path, cached = run_to_directory(request, progress=lambda stage, fraction, message="":
                                        send(stage=stage, fraction=fraction, message=message, at=time.monotonic()))
        send(run=str(path), cached=cached)
    except BrokenPipeError:
        return 1              # the server is gone
    except Exception as err:  # noqa: BLE001 - reported to the server, which shows it on the page
        if not isinstance(err, ValueError):
            import traceback

            traceback.print_exc()
        try:
            send(error=one_line(err), kind="ValueError" if isinstance(err, ValueError) else type(err).__name__)
        except BrokenPipeError:
            return 1
    return 0


def _end_with_the_server() -> None:
    """Exit at once when stdin closes: the server has stopped (even if killed) or no longer needs
    this run, and the device and cores are not to be held for a run nobody will read."""
    sys.stdin.buffer.read()
    os._exit(1)


if __name__ == "__main__":
    code = _child(int(sys.argv[1]))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)   # the run is written: skip the interpreter's and CUDA's teardown
