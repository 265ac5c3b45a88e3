"""The contenders of ``benchmarks.run``: each ``<stage>/<name>`` has a ``prepare(context)`` that does
the untimed set-up for one size and returns a :class:`~benchmarks.measure.Prepared` whose ``run()``
is the timed work; GPU libraries are imported inside the GPU contenders only.

load/cudf|pyarrow|pandas   the CSV parsed to a float32 array (cuDF → CuPy without a copy)
segmentation/gpu|cpu       ``pipeline.segmentation.segment``, the run's chain: beats, episodes, rows, quality
segmentation/neurokit2     ``nk.ecg_peaks`` on the raw signal: R-peak detection only
vae/gpu|cpu                ``train.fit_vae`` for fixed epochs + ``score.score_beats`` (CPU capped in beats)
end-to-end/gpu|cpu         ``run_pipeline`` from the CSV to a written run directory, ``use_cache=False``
"""
from __future__ import annotations

import fnmatch
import shutil
import time
import warnings
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Callable

import numpy as np

from benchmarks.measure import Prepared, synchronize
from benchmarks.recordings import Recording, size_label
from pipeline import backend
from pipeline.config import SignalConfig, VAEConfig
from pipeline.segmentation import segment

STAGES = ("load", "segmentation", "vae", "end-to-end")


@dataclass(frozen=True)
class Settings:
    """What every contender shares in one benchmark run."""

    epochs: int = 3
    cpu_vae_beats: int = 8192
    signal: SignalConfig = field(default_factory=SignalConfig)
    work_dir: Path = Path("runs")
    gpu: bool = False                 # a GPU is in use: VAE beats are cut on it


@dataclass(frozen=True)
class Contender:
    """``baseline``: a host-side contender, capped by ``--cap-s`` and dropped first when time runs short."""

    id: str
    device: str
    baseline: bool
    label: str
    prepare: Callable[["SizeContext"], Prepared]

    @property
    def stage(self) -> str:
        return self.id.split("/")[0]


class SizeContext:
    """One recording and what the contenders derive from it untimed, made once and shared."""

    def __init__(self, recording: Recording, settings: Settings):
        self.recording, self.settings = recording, settings
        self._signals: dict[str, object] = {}
        self._beats = None

    def signal(self, device: str):
        if device not in self._signals:
            from pipeline import load

            self._signals[device] = load.load_ecg(self.recording.path, device=device,
                                                  default_fs=self.recording.fs).signal
        return self._signals[device]

    def beats(self):
        """The recording's embedded beats (on the GPU when one is in use)."""
        if self._beats is None:
            device = "gpu" if self.settings.gpu else "cpu"
            self._beats = segment(self.signal(device), self.recording.fs, self.settings.signal).beats
        return self._beats


def _clear_fft_plans(device: str) -> None:
    """Empty CuPy's cuFFT plan cache: the next first run makes (and counts) its plan."""
    if device == "gpu":
        import cupy

        cupy.fft.config.get_plan_cache().clear()


def _reader(library: str, path: Path) -> Callable[[], object]:
    """A function that parses the one-value-per-line CSV at ``path`` to a float32 array with ``library``."""
    if library == "cudf":
        import cudf

        def read():
            frame = cudf.read_csv(path, header=None, dtype=["float32"])
            return backend.cudf_to_cupy(frame[frame.columns[0]])
    elif library == "pyarrow":
        import pyarrow as pa
        import pyarrow.csv as pacsv

        options = dict(read_options=pacsv.ReadOptions(autogenerate_column_names=True, block_size=1 << 24),
                       convert_options=pacsv.ConvertOptions(column_types={"f0": pa.float32()}))

        def read():
            return pacsv.read_csv(path, **options).column(0).to_numpy()
    else:
        import pandas as pd

        def read():
            return pd.read_csv(path, header=None, dtype=np.float32, engine="c")[0].to_numpy()
    return read


def _load(library: str, ctx: SizeContext) -> Prepared:
    read, recording = _reader(library, ctx.recording.path), ctx.recording

    def run():
        n = int(read().shape[0])
        if n != recording.samples:
            raise RuntimeError(f"{library} read {n} values from {recording.path.name}; expected {recording.samples}")
        return {}

    return Prepared(run)


def _segmentation(device: str, ctx: SizeContext) -> Prepared:
    signal, fs, cfg = ctx.signal(device), ctx.recording.fs, ctx.settings.signal
    _clear_fft_plans(device)

    def run():
        found = segment(signal, fs, cfg)
        return {"fiducials": int(found.positions.shape[0]), "beats": int(found.beats.rows.shape[0])}

    return Prepared(run)


def _neurokit2(ctx: SizeContext) -> Prepared:
    import neurokit2 as nk

    signal, fs = ctx.signal("cpu"), ctx.recording.fs

    def run():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _, info = nk.ecg_peaks(signal, sampling_rate=fs)
        return {"r_peaks": int(len(info["ECG_R_Peaks"]))}

    return Prepared(run)


def _vae(device: str, ctx: SizeContext) -> Prepared:
    import torch

    from pipeline import score, train

    rows = ctx.beats().rows
    n_all = int(rows.shape[0])
    workload = None
    if device == "cpu":
        n = min(n_all, ctx.settings.cpu_vae_beats)
        tensor = torch.from_numpy(np.ascontiguousarray(backend.to_host(rows[:n])))
        if n < n_all:
            workload = f"{n} beats (capped)"
    else:
        tensor = backend.to_torch(rows)
    n = int(tensor.shape[0])
    cfg = VAEConfig(epochs=ctx.settings.epochs)
    is_train = train.split_train(n, cfg.train_fraction, cfg.seed)
    n_train = int(is_train.sum())

    def run():
        started = time.perf_counter()
        model, history = train.fit_vae(tensor, is_train, cfg)
        synchronize(device)
        trained = time.perf_counter()
        score.score_beats(model, tensor)
        synchronize(device)
        train_s, score_s = trained - started, time.perf_counter() - trained
        epochs = len(history)  # cfg.epochs at most: training may stop once the loss levels off
        return {"beats": n, "beats_available": n_all, "train_beats": n_train, "epochs": epochs,
                "train_s": train_s, "score_s": score_s, "epoch_s": train_s / epochs,
                "train_beats_per_s": n_train * epochs / train_s, "score_beats_per_s": n / score_s,
                "final_loss": history[-1]}

    return Prepared(run, workload=workload, info={"beats": n, "beats_available": n_all})


def _end_to_end(device: str, ctx: SizeContext) -> Prepared:
    from pipeline.run import RunRequest, run_pipeline

    settings = ctx.settings
    out = Path(settings.work_dir) / f"end-to-end-{device}-{size_label(ctx.recording.samples)}"
    request = RunRequest(input=str(ctx.recording.path), device=device, out=str(out),
                         signal=settings.signal, vae=VAEConfig(epochs=settings.epochs), use_cache=False)
    _clear_fft_plans(device)

    def run():
        report = run_pipeline(request).report
        return {"beats": int(report["counts"]["beats"]), "stages_s": dict(report["stages_s"]),
                "segmentation_s": report.get("segmentation_s")}

    return Prepared(run, after=lambda: shutil.rmtree(out, ignore_errors=True))


CONTENDERS = (
    Contender("load/cudf", "gpu", False, "cuDF read_csv (GPU)", partial(_load, "cudf")),
    Contender("load/pyarrow", "cpu", True, "pyarrow.csv (CPU)", partial(_load, "pyarrow")),
    Contender("load/pandas", "cpu", True, "pandas.read_csv (CPU)", partial(_load, "pandas")),
    Contender("segmentation/gpu", "gpu", False, "pipeline GPU", partial(_segmentation, "gpu")),
    Contender("segmentation/cpu", "cpu", True, "pipeline CPU", partial(_segmentation, "cpu")),
    Contender("segmentation/neurokit2", "cpu", True, "NeuroKit2 ecg_peaks (detection only)", _neurokit2),
    Contender("vae/gpu", "gpu", False, "pipeline GPU", partial(_vae, "gpu")),
    Contender("vae/cpu", "cpu", True, "pipeline CPU", partial(_vae, "cpu")),
    Contender("end-to-end/gpu", "gpu", False, "run_pipeline GPU", partial(_end_to_end, "gpu")),
    Contender("end-to-end/cpu", "cpu", True, "run_pipeline CPU", partial(_end_to_end, "cpu")),
)


def select(patterns: list[str] | None, gpu: bool) -> list[Contender]:
    """Contenders matching any of ``patterns`` (ids, stages, globs such as ``*/cpu``; None: all this
    machine can run), in the registry's order."""
    available = [c for c in CONTENDERS if gpu or c.device == "cpu"]
    if not patterns:
        return available
    chosen = set()
    for pattern in patterns:
        matched = [c.id for c in CONTENDERS if c.stage == pattern or fnmatch.fnmatchcase(c.id, pattern)]
        if not matched:
            raise ValueError(f"contender {pattern!r} matches none of {', '.join(c.id for c in CONTENDERS)} "
                             f"(or the stages {', '.join(STAGES)})")
        chosen.update(matched)
    missing = [i for i in sorted(chosen) if not any(c.id == i for c in available)]
    if missing:
        raise ValueError(f"contender(s) {', '.join(missing)} need a GPU (CuPy and cuDF), and none is in use "
                         "here; leave them out or run with --device gpu on a GPU machine")
    return [c for c in available if c.id in chosen]
