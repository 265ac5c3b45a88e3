"""The data of one finished run, shared read-only by every session of a server: the beats table on
the host, the columns the selections read as arrays on the run's device (CuPy on a GPU run of many
beats, NumPy otherwise), the VAE for decoding (loaded in the background), the reviewer's labels,
and a memo of derived data that every session shares (bin indexes, the signal's raster levels).
Nobody writes it.

See Also
--------
pipeline.results.RunResult : what a run holds.
dashboard.data_store : one session's selections over it.
"""
from __future__ import annotations

import threading
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd

from dashboard import server_gc
from pipeline import backend
from pipeline.calibrate import COLUMNS as CALIBRATED_COLUMNS
from pipeline.calibrate import OUTLIER_SCORE
from pipeline.quality import low_quality

BRUSH_COLUMNS = ("length_s", "z1", "z2", "score", "time_s", "rr_prev_s", "rr_next_s", "family")
# What a rescored run (another reference) changes in the beats table, and the shared derived data
# that does not depend on those columns, which its SharedRun takes over (SharedRun.rescored).
RESCORED_COLUMNS = ("score", *CALIBRATED_COLUMNS)
SCORE_FREE_DERIVED = ("leads", "review-labels", "signal-raster", "other-leads", "decoded-tiles", "heart-rate",
                      "home/rhythm")
BACKGROUND_DELAY_S = 10.0   # work for later starts this long after the run is ready, or when the first page is up
# A brush is ~150 small array operations (masks, bin counts, means). On the GPU each one is a kernel
# launch and an allocation, which for a day's recording (~100,000 beats) cost more than the
# arithmetic: the columns stay on the host below this many beats, where the GPU's bandwidth does
# not yet pay for its launches (measurements: docs/performance-history.md).
GPU_COLUMNS_MIN_BEATS = 300_000


@dataclass(eq=False)
class SharedRun:
    """Data of one finished run, shared read-only by every session of the server.

    ``beats`` is the run's table plus ``peak`` (the signal at the fiducial, where the recording
    view puts its markers), ``is_test`` (1 for the held-out 25%) and the RR intervals before and
    after the beat in seconds (``rr_prev_s``, NaN for the first fiducial; ``rr_next_s``, which is
    the beat's length: the Poincaré plot's RRₙ and RRₙ₊₁). ``columns`` holds the
    brushable columns in float64 and ``is_test`` as arrays of ``xp``, where a brush's masks, counts
    and means run (CuPy only for GPU runs of many beats: ``GPU_COLUMNS_MIN_BEATS``);
    ``embeddings`` likewise. ``device`` is where the recording's raster is drawn (the run's).
    """

    run: object
    beats: pd.DataFrame
    signal: np.ndarray
    fs: float
    device: str
    xp: object
    columns: dict
    embeddings: object
    extras: dict = field(default_factory=dict)       # renderer-specific shared data (e.g. cuDF frames)
    _derived: dict = field(default_factory=dict, repr=False)
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False)   # derived data may derive from derived data
    _model: Future | None = field(default=None, repr=False)
    _review_cache: tuple = field(default=(None, None), repr=False)

    @classmethod
    def from_run(cls, run, device: str | None = None, columns_device: str | None = None) -> "SharedRun":
        """``device``: where the recording is drawn (default: the run's own device);
        ``columns_device``: where the beat columns live (default: ``device`` for runs of at least
        ``GPU_COLUMNS_MIN_BEATS`` beats, else the host)."""
        device = device or run.report["device"]["name"]
        if columns_device is None:
            columns_device = device if len(run.beats) >= GPU_COLUMNS_MIN_BEATS else "cpu"
        xp = backend.xp_for(columns_device)
        signal = np.asarray(run.signal, dtype=np.float32)
        beats = run.beats.copy()
        beats["peak"] = signal[beats["fiducial"].to_numpy()]
        beats["is_test"] = (beats["split"] == "test").astype(np.int8)
        beats["rr_prev_s"], beats["rr_next_s"] = rr_intervals(beats, np.asarray(run.fiducials), float(run.fs))
        # Brushable columns in float64: with NumPy 2 a float32 array compared with a Python float
        # compares in float32, so a brush edge within half a float32 step of a value would select
        # differently from pandas/cuDF queries, which compare in float64.
        if "family" not in beats:    # a run made before families existed: one family
            beats["family"] = np.zeros(len(beats), dtype=np.int16)
        columns = {c: xp.asarray(beats[c].to_numpy(dtype=np.float64)) for c in BRUSH_COLUMNS}
        columns["is_test"] = xp.asarray(beats["is_test"].to_numpy())
        # Beats the ranking leaves out unless asked: artefacts are no findings (a run made before
        # beat quality existed has every beat clean).
        clean = ~low_quality(beats["quality"].to_numpy()) if "quality" in beats else np.ones(len(beats), bool)
        columns["clean"] = xp.asarray(clean)
        return cls(run=run, beats=beats, signal=signal, fs=float(run.fs), device=device, xp=xp, columns=columns,
                   embeddings=xp.asarray(np.asarray(run.embeddings, dtype=np.float32)))

    def rescored(self, run) -> "SharedRun":
        """This recording as ``run`` scores it: the same recording, beats and VAE scored against
        another reference (:func:`pipeline.rescore.rescore_run`). Its own object, for the sessions that
        ask for it, never a change to this one, which other sessions read: the beats table with
        ``run``'s score and score components, the score column anew; the signal, embedded beats,
        other columns, the model and what was derived without the score are this one's.
        Raises ValueError when ``run`` holds other beats."""
        fiducial = run.beats["fiducial"].to_numpy()
        if len(fiducial) != self.n_beats or not np.array_equal(fiducial, self.beats["fiducial"].to_numpy()):
            raise ValueError(f"the rescored run holds other beats ({len(fiducial):,}) than the recording shown "
                             f"({self.n_beats:,}); it was not rescored from this run")
        beats = self.beats.copy()
        for column in RESCORED_COLUMNS:
            if column in run.beats:
                beats[column] = run.beats[column].to_numpy()
        columns = dict(self.columns, score=self.xp.asarray(beats["score"].to_numpy(dtype=np.float64)))
        extras = {k: v for k, v in self.extras.items() if k in ("board", "first_page")}
        shared = SharedRun(run=run, beats=beats, signal=self.signal, fs=self.fs, device=self.device, xp=self.xp,
                           columns=columns, embeddings=self.embeddings, extras=extras)
        with self._lock:
            shared._derived = {k: v for k, v in self._derived.items() if k in SCORE_FREE_DERIVED}
            shared._model = self._model
        return shared

    def derived(self, name: str, build: Callable[[], object]):
        """``build()``'s result, computed once per run and shared by every session (thread-safe)."""
        with self._lock:
            if name not in self._derived:
                self._derived[name] = build()
            return self._derived[name]

    # ------------------------------------------------------------------ facts for the views
    @property
    def report(self) -> dict:
        return self.run.report

    @property
    def n_beats(self) -> int:
        return len(self.beats)

    @property
    def duration_s(self) -> float:
        return len(self.signal) / self.fs

    @property
    def has_labels(self) -> bool:
        return "label" in self.beats

    def extent(self, column: str) -> tuple[float, float]:
        values = self.beats[column].to_numpy()
        return float(np.nanmin(values)), float(np.nanmax(values))

    def default_threshold(self) -> float:
        """The one line between outliers and the rest that the command line and the archive also
        draw (:data:`pipeline.calibrate.OUTLIER_SCORE`): scores mean the same in every recording."""
        return OUTLIER_SCORE

    def host(self, column: str) -> np.ndarray:
        """A selection column as a host array."""
        return backend.to_host(self.columns[column])

    def leads(self) -> tuple[list[str], np.ndarray, int]:
        """Every lead of the recording for display (names, samples × leads, index of the analysed
        one), read once from the input; only the analysed lead when the input cannot be read now."""
        def build():
            from pipeline.load import load_leads

            channel = self.report["input"]["channel"]
            if len(self.report["input"].get("leads") or ()) == 1:   # a one-lead input: nothing more to read
                return [channel], self.signal[:, None], 0
            try:
                names, values = load_leads(self.report["input"]["path"])
            except (ValueError, OSError):
                names, values = [], np.zeros((0, 0), np.float32)
            if channel not in names or values.shape[0] != len(self.signal):
                return [channel], self.signal[:, None], 0
            return names, values, names.index(channel)
        return self.derived("leads", build)

    # ------------------------------------------------------------------ the reviewer's labels
    def review_labels(self):
        """The reviewer's labels of this recording (one object per process: every session sees
        every saved change)."""
        from dashboard.labels import ReviewLabels

        return self.derived("review-labels", lambda: ReviewLabels.for_run(self.run))

    def review_of_beats(self) -> np.ndarray:
        """Each beat's review label ('' for none), for the labels' current version."""
        labels = self.review_labels()
        # The version is read before the labels: another server's change committed while they are
        # read then gives a newer version at the next call, which reads them again. (Read after
        # them, a newer version would be kept with older labels, and every later call take those.)
        version = labels.version
        kept, values = self._review_cache
        if kept != version or values is None:
            values = labels.labels_of(self.beats["fiducial"].to_numpy())
            self._review_cache = (version, values)
        return values

    # ------------------------------------------------------------------ the model (CPU)
    def load_model(self, background: bool = False, after: threading.Event | None = None) -> None:
        """Load the VAE for decoding (once). ``background``: in a thread of its own, once ``after``
        is set (or 10 s have passed), so that a start from a cached run does not wait for PyTorch's
        import; :meth:`decoder_ready` tells when it is there and :meth:`when_decoder_ready` calls
        back then."""
        with self._lock:
            if self._model is not None:
                return
            self._model = Future()
        if background:
            threading.Thread(target=self._load_model, args=(after,), name="ecg-model", daemon=True).start()
        else:
            self._load_model()

    def _load_model(self, after: threading.Event | None = None) -> None:
        if after is not None:
            after.wait(timeout=BACKGROUND_DELAY_S)
        try:
            with server_gc.paused():   # PyTorch's import (see dashboard.server_gc)
                self._model.set_result(self.run.model("cpu"))
        except Exception as err:   # surfaces where the model is used
            self._model.set_exception(err)

    def decoder_ready(self) -> bool:
        """True when decoding will not wait: the model is loaded (or loads now, unless somebody
        started loading it in the background)."""
        if self._model is None:
            self.load_model()
        return self._model.done()

    def when_decoder_ready(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` (from the loading thread) once the model is loaded."""
        self.load_model(background=True)
        self._model.add_done_callback(lambda future: callback())

    @property
    def model(self):
        self.load_model()
        return self._model.result()

    def decode(self, z: np.ndarray) -> np.ndarray:
        """Decoder output at latent points ``z`` (n, 2) → (n, width)."""
        import torch

        with torch.no_grad():
            return self.model.decode(torch.as_tensor(np.atleast_2d(z), dtype=torch.float32)).numpy()

    def reconstruct(self, rows: np.ndarray) -> np.ndarray:
        """``decode(mu)`` of embedded beats (n, width): what the VAE makes of them."""
        import torch

        with torch.no_grad():
            mu, _ = self.model.encode(torch.as_tensor(np.atleast_2d(rows), dtype=torch.float32))
            return self.model.decode(mu).numpy()


def rr_intervals(beats: pd.DataFrame, fiducials: np.ndarray, fs: float) -> tuple[np.ndarray, np.ndarray]:
    """Seconds from the previous fiducial to each beat's (NaN for the first) and from it to the next
    (the beat's length), float32. ``fiducials`` are all detected ones, kept beats or not."""
    fiducial = beats["fiducial"].to_numpy()
    before = np.searchsorted(fiducials, fiducial) - 1
    previous = np.where(before >= 0, fiducials[np.maximum(before, 0)], -1)
    rr_prev = np.where(before >= 0, (fiducial - previous) / fs, np.nan).astype(np.float32)
    return rr_prev, beats["length_s"].to_numpy(dtype=np.float32)

