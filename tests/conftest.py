"""Shared fixtures: the array backend (``xp``) and device, a synthetic ECG, the MIT-BIH records.

One test body runs on NumPy/CPU and, where a CUDA GPU with CuPy and cuDF is usable, on CuPy/GPU;
the GPU variants carry the ``gpu`` marker (registered in pyproject.toml) and are skipped elsewhere.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from pipeline import backend

REPO = Path(__file__).resolve().parents[1]
MITDB_RECORDS = ("100", "119", "208", "233")


def pytest_sessionstart(session):
    """On a GPU machine, make one RMM pool the allocator of cuDF, CuPy and Numba before any test
    allocates device memory (as ``run_pipeline`` does)."""
    if backend.has_gpu():
        backend.use_rmm_pool()


def pytest_runtest_setup(item):
    if item.get_closest_marker("gpu") is not None and not backend.has_gpu():
        pytest.skip("needs a CUDA GPU with CuPy and cuDF")


# --------------------------------------------------------------------------- backends
@pytest.fixture(params=["numpy", pytest.param("cupy", marks=pytest.mark.gpu)])
def xp(request):
    """The array module under test: NumPy always, CuPy on a GPU machine."""
    if request.param == "cupy":
        import cupy

        return cupy
    return np


@pytest.fixture(params=["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
def device(request) -> str:
    """The pipeline device under test: 'cpu' always, 'gpu' on a GPU machine."""
    return request.param


# --------------------------------------------------------------------------- data
@pytest.fixture(scope="session")
def synthetic_ecg():
    """About 27 minutes at 250 Hz (~1900 beats) with labelled V, A and Q beats. Do not modify it."""
    from pipeline.synth import SynthConfig, synthesize

    ecg = synthesize(SynthConfig(n_samples=400_000, seed=7, pvc_fraction=0.02, aberrant_fraction=0.015,
                                 noise_bursts_per_hour=4.0))
    return ecg


@pytest.fixture(scope="session")
def small_ecg():
    """About 10 minutes at 250 Hz (~700 beats): small enough to train a VAE in seconds."""
    from pipeline.synth import SynthConfig, synthesize

    return synthesize(SynthConfig(n_samples=150_000, seed=11, pvc_fraction=0.03, aberrant_fraction=0.02))


@pytest.fixture(scope="session")
def small_csv(small_ecg, tmp_path_factory) -> Path:
    """``small_ecg`` written by :func:`pipeline.synth_files.write_csv` (CSV + annotation sidecar)."""
    from pipeline.synth_files import write_csv

    return write_csv(small_ecg, tmp_path_factory.mktemp("small") / "small.csv")


@pytest.fixture(scope="session")
def mitdb() -> Path:
    """Folder of the four MIT-BIH records: $ECG_MITDB, else ../shared/data/mitdb beside the repository."""
    path = Path(os.environ.get("ECG_MITDB") or REPO.parent / "shared" / "data" / "mitdb")
    if not all((path / f"{r}.{ext}").is_file() for r in MITDB_RECORDS for ext in ("hea", "dat", "atr")):
        pytest.skip(f"MIT-BIH records not found in {path} (set ECG_MITDB)")
    return path


@pytest.fixture
def mitdb_copy(mitdb, tmp_path) -> Path:
    """A temporary folder holding one MIT-BIH record (100), for tests that may write beside it."""
    folder = tmp_path / "mitdb"
    folder.mkdir()
    for ext in ("hea", "dat", "atr"):
        shutil.copy(mitdb / f"100.{ext}", folder)
    return folder


# --------------------------------------------------------------------------- one finished run
@pytest.fixture(scope="session")
def cpu_run(small_csv, tmp_path_factory):
    """``run_pipeline`` on ``small_csv`` (CPU, 3 epochs), once per session: the run, its request, and
    the seconds it took. Tests read it; to damage or extend it, copy ``run.path`` elsewhere first."""
    import time
    from types import SimpleNamespace

    from pipeline.config import VAEConfig
    from pipeline.run import RunRequest, run_pipeline

    request = RunRequest(input=str(small_csv), device="cpu", out=str(tmp_path_factory.mktemp("runs")),
                         vae=VAEConfig(epochs=3))
    progress = []
    started = time.perf_counter()
    run = run_pipeline(request, progress=lambda stage, fraction, message: progress.append((stage, fraction, message)))
    return SimpleNamespace(run=run, request=request, seconds=time.perf_counter() - started, progress=progress)
