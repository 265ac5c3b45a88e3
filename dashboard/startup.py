"""Once per server process: read the server's arguments, have the pipeline run (in a child
process, :mod:`dashboard.pipeline_process`) and follow it from a background thread, and publish
its progress for every browser session to poll.

The input path, device and sizes come only from the server's command line
(``panel serve dashboard/app.py --args --input X --device cpu --samples N --epochs E``) or from
environment variables (``ECG_INPUT``, ``ECG_DEVICE``, ``ECG_SAMPLES``, ``ECG_EPOCHS``, ``ECG_OUT``,
``ECG_BOARD``); command-line values win. Nothing a page sends can change them.

See Also
--------
pipeline.run.run_pipeline : what the job runs.
dashboard.app.App : polls :meth:`PipelineJob.snapshot` and swaps the progress view for the dashboard.
"""
from __future__ import annotations

import sys
import threading
import time
import traceback
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from dashboard import pipeline_process, server_gc
from dashboard.announcement import Announcement
from dashboard.settings import BOARDS, ENV, Settings, server_settings, settings_from  # noqa: F401 - the server's settings, named here too
from pipeline import one_line
from pipeline.requests import RunRequest
from pipeline.stages import CACHED, STAGES

OPEN_RUNS = 4              # runs of an archive kept ready in memory (the most recently opened)
CACHED_WAIT_S = 5.0        # the longest a new page waits while the job looks for a cached run: reading one
                           # takes ~0.5 s; hashing a large new input can take seconds

# Rough share of a first (uncached) run's time spent in each stage (pipeline.stages.STAGES, all of
# them), for one overall progress bar.
STAGE_WEIGHTS = {"synth": 8, "hash": 1, "setup": 2, "warmup": 4, "load": 3, "wavelet": 2, "peaks": 1, "lengths": 0.5,
                 "embed": 2, "train": 70, "score": 4, "families": 2, "results": 3}


# --------------------------------------------------------------------------- progress
@dataclass(frozen=True)
class Progress:
    """One reading of the job, safe to hand to any session.

    ``state`` is ``waiting`` → ``running`` → ``ready`` | ``error``.
    """

    state: str = "waiting"
    stage: str = ""
    label: str = "Waiting to start"
    message: str = ""
    stage_fraction: float = 0.0
    overall: float = 0.0
    elapsed_s: float = 0.0
    done: tuple = ()            # ((label, seconds), ...) of finished stages
    error: str = ""

    @property
    def percent(self) -> int:
        return int(round(100 * self.overall))


class PipelineJob:
    """Follows the run once, from a daemon thread: the pipeline computed in a child process
    (:mod:`dashboard.pipeline_process`), or ``runner(request, progress)`` in that thread if one is
    given; ``prepare(run)`` then builds the shared, read-only data for the views (still in that
    thread, so 'ready' means ready to draw).

    Sessions call :meth:`snapshot` (cheap, thread-safe) from a periodic callback.
    """

    def __init__(self, settings: Settings, runner: Callable | None = None,
                 prepare: Callable | None = None, log: Callable[[str], None] | None = None):
        self.settings = settings
        self._runner, self._prepare = runner, prepare
        self._log = log or _log
        self._lock = threading.Lock()
        self._progress = Progress()
        self._started_at: float | None = None
        self._stage_started: dict[str, float] = {}
        self._done: dict[str, float] = {}
        self._thread: threading.Thread | None = None
        self._finished = Announcement()
        self._computing = threading.Event()   # the run is being computed (or the job has ended)
        self.result = None          # what prepare returned (or the RunResult without prepare)
        self.run = None

    # ------------------------------------------------------------------ control
    def start(self) -> "PipelineJob":
        """Start the run once; later calls do nothing."""
        with self._lock:
            if self._thread is not None:
                return self
            self._started_at = time.monotonic()
            self._progress = replace(self._progress, state="running", label="Starting")
            self._thread = threading.Thread(target=self._work, name="ecg-pipeline", daemon=True)
            self._thread.start()
        return self

    def wait(self, timeout: float | None = None) -> Progress:
        """Block until the job is ready or failed (or ``timeout`` passes); return the last reading."""
        self._finished.wait(timeout)
        return self.snapshot()

    def wait_unless_computing(self, timeout: float) -> Progress:
        """Block until the job has ended or has started computing the run (not merely finding
        it in the cache), or ``timeout`` passes; return the last reading."""
        self._computing.wait(timeout)
        return self.snapshot()

    def when_done(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` once the job is ready or has failed: from the job's thread when it
        ends, or at once if it has. A page that waits for the run swaps in the dashboard then,
        rather than at its next poll (up to ``dashboard.app.POLL_MS`` later)."""
        self._finished.then(callback)

    def snapshot(self) -> Progress:
        with self._lock:
            progress = self._progress
            if progress.state == "running" and self._started_at is not None:
                progress = replace(progress, elapsed_s=time.monotonic() - self._started_at)
            return progress

    # ------------------------------------------------------------------ worker
    def _work(self) -> None:
        request = self.settings.request
        self._log(f"ECG dashboard: running the pipeline (input={request.input or 'synthetic'}, "
                  f"device={request.device}, samples={request.samples}, epochs={request.vae.epochs})")
        try:
            with server_gc.paused():   # through the views' preparation too (see dashboard.server_gc)
                run = self._compute(request)
                self.run = run
                self._on_progress("results", 1.0, "Preparing the views")
                preparing = time.monotonic()
                self.result = self._prepare(run) if self._prepare else run
                self._done["views"] = time.monotonic() - preparing
        except Exception as err:  # the page shows it; the server stays up
            # Bad input says it all in one line; a failed child has logged its own traceback.
            explained = (ValueError, pipeline_process.PipelineFailed)
            message = one_line(err, bare=explained)
            if not isinstance(err, explained):
                self._log(traceback.format_exc())
            self._finish("error", error=message)
            self._log(f"ECG dashboard: pipeline failed: {message}")
            return
        self._finish("ready")
        stages = ", ".join(f"{stage} {seconds:.2f}" for stage, seconds in self._done.items())
        self._log(f"ECG dashboard ready in {self.snapshot().elapsed_s:.1f} s "
                  f"({'cached run ' if getattr(run, 'cached', False) else ''}{getattr(run, 'path', '')}; "
                  f"seconds per stage: {stages})")

    def _compute(self, request: RunRequest):
        if self._runner is not None:
            return self._runner(request, progress=self._on_progress)
        child = pipeline_process.for_request(request)
        with self._lock:   # a child started early began the run before this job did
            self._started_at = min(self._started_at, child.started_at)
        return child.result(self._on_progress)

    def _finish(self, state: str, error: str = "") -> None:
        with self._lock:
            elapsed = time.monotonic() - (self._started_at or time.monotonic())
            self._progress = replace(self._progress, state=state, error=error, elapsed_s=elapsed,
                                     overall=1.0 if state == "ready" else self._progress.overall,
                                     label="Ready" if state == "ready" else "Failed",
                                     done=self._done_tuple())
        self._finished.set()
        self._computing.set()

    def _on_progress(self, stage: str, fraction: float, message: str = "", at: float | None = None) -> None:
        """The pipeline's progress callback (runs in the job's thread); ``at``: when the child
        process reported it (``time.monotonic``, which every process of the machine shares)."""
        now = time.monotonic() if at is None else at
        if stage not in CACHED:
            self._computing.set()
        with self._lock:
            if stage not in self._stage_started:
                self._stage_started[stage] = now
            if fraction >= 1.0 and stage not in self._done:
                self._done[stage] = now - self._stage_started[stage]
            label = STAGES.get(stage, stage)
            self._progress = replace(
                self._progress, stage=stage, label=label,
                message=message if message and message != label else "",
                stage_fraction=min(max(float(fraction), 0.0), 1.0),
                overall=self._overall(stage, fraction), done=self._done_tuple())

    def _overall(self, stage: str, fraction: float) -> float:
        order = list(STAGES)
        if stage not in STAGE_WEIGHTS:
            return self._progress.overall
        total = sum(STAGE_WEIGHTS.values())
        before = sum(STAGE_WEIGHTS[s] for s in order[:order.index(stage)])
        value = (before + STAGE_WEIGHTS[stage] * min(max(fraction, 0.0), 1.0)) / total
        return max(self._progress.overall, min(value, 1.0))

    def _done_tuple(self) -> tuple:
        return tuple((STAGES.get(s, s), round(t, 3)) for s, t in self._done.items())


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- the process's job
_JOB: PipelineJob | None = None
_JOB_LOCK = threading.Lock()


_OPEN: dict = {}
_OPEN_LOCK = threading.Lock()


def archived_run(run_dir: str, prepare: Callable):
    """The prepared data of a run directory of an archive, shared by every session that opens it;
    the OPEN_RUNS most recently opened stay in memory."""
    from pipeline.results import find_cached, load_run

    with _OPEN_LOCK:
        if run_dir in _OPEN:
            _OPEN[run_dir] = _OPEN.pop(run_dir)           # most recent last
            return _OPEN[run_dir]
        path = Path(run_dir)
        if find_cached(path.parent, path.name) is None:
            raise ValueError(f"{run_dir} is not a finished run (missing or damaged); run the batch again")
        _OPEN[run_dir] = prepare(load_run(path))
        while len(_OPEN) > OPEN_RUNS:
            _OPEN.pop(next(iter(_OPEN)))
        return _OPEN[run_dir]


def process_job(settings: Settings, prepare: Callable | None = None) -> PipelineJob:
    """The one job of this server process, started on first use (every session shares it)."""
    global _JOB
    with _JOB_LOCK:
        if _JOB is None:
            _JOB = PipelineJob(settings, prepare=prepare).start()
        elif _JOB.settings != settings:
            _log("ECG dashboard: sessions asked for different settings; keeping the first run's")
        return _JOB
