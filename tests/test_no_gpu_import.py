"""Importing the pipeline and running it on the CPU loads no GPU library (checked in a fresh process,
since this one may have imported them for other tests)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GPU_MODULES = ("cupy", "cupyx", "cudf", "rmm", "numba.cuda", "dask_cudf", "cuxfilter")

SCRIPT = """
import json, sys, warnings
import pipeline, pipeline.__main__
from pipeline import backend, embed, evaluate, load, model, peaks, results, run, score, synth, train, wavelet
from pipeline.config import VAEConfig
ecg = synth.synthesize(synth.SynthConfig(n_samples=30_000, seed=2))
path = synth.write_csv(ecg, sys.argv[1] + "/tiny.csv")
finished = run.run_pipeline(run.RunRequest(input=str(path), device="cpu", out=sys.argv[1] + "/runs",
                                           vae=VAEConfig(epochs=1)))
gpu_modules = json.loads(sys.argv[2])
loaded = sorted(m for m in sys.modules if any(m == g or m.startswith(g + ".") for g in gpu_modules))
print(json.dumps({"loaded": loaded, "beats": len(finished.beats), "device": finished.report["device"]["name"]}))
"""


def test_cpu_pipeline_imports_no_gpu_library(tmp_path):
    result = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path), json.dumps(GPU_MODULES)], cwd=REPO, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["device"] == "cpu" and report["beats"] > 100  # the pipeline really ran
    assert report["loaded"] == [], f"GPU modules imported on the CPU path: {report['loaded']}"


def test_a_half_imported_cupy_is_not_asked_for_its_arrays(monkeypatch):
    """While one thread imports CuPy, Python's ``sys.modules`` holds the module before its names
    exist; another thread asking whether an array is CuPy's must get "no", not an AttributeError
    (a dashboard session built during that import failed). The GPU case: tests/test_gpu.py."""
    import types

    import numpy as np

    from pipeline import backend

    monkeypatch.setitem(sys.modules, "cupy", types.ModuleType("cupy"))   # what a half-done import leaves
    assert not backend.is_cupy_array(np.zeros(3))
    assert backend.xp_of(np.zeros(3)) is np and backend.to_host(np.arange(3)).tolist() == [0, 1, 2]
