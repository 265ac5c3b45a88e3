"""benchmarks.archive end to end on a tiny synthetic archive (CPU, two worker counts, one pass):
the recordings it writes are the seeded ones, and its results hold every layout, stage time and
target."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks import archive
from pipeline.load import load_ecg
from pipeline.sidecar import read_annotations
from pipeline.synth import SynthConfig, synthesize


@pytest.mark.slow   # a Dask cluster or several pipeline runs: test-all and CI
def test_archive_benchmark_writes_results(tmp_path):
    data = tmp_path / "data"
    returned = archive.main(["--recordings", "2", "--samples", "20000", "--workers", "1,2", "--repeats", "1",
                             "--epochs", "1", "--device", "cpu", "--threads", "1", "--data-dir", str(data),
                             "--out", str(tmp_path / "results"), "--quiet"])
    files = sorted(data.glob("*.parquet"))
    assert len(files) == 2
    for seed, path in enumerate(files, start=1000):  # what the pipeline reads is the seeded recording
        expected = synthesize(SynthConfig(n_samples=20_000, fs=archive.FS, seed=seed))
        np.testing.assert_array_equal(load_ecg(path).signal, expected.signal)
        np.testing.assert_array_equal(read_annotations(path)[0], expected.r_peaks)
    report = json.loads(Path(returned["paths"]["json"]).read_text())
    rows = {row["workers"]: row for row in report["summary"]["rows"]}
    assert sorted(rows) == [1, 2] and all(row["recordings"] == 2 and row["per_minute"] > 0 for row in rows.values())
    assert report["summary"]["speedup"] == pytest.approx(rows[2]["per_minute"] / rows[1]["per_minute"])
    markdown = Path(returned["paths"]["md"]).read_text()
    assert "| GPUs | workers (per GPU) | threads each | recordings |" in markdown
    assert "| 2 workers vs 1 | " in markdown and " | ≥ 1.8× | " in markdown
    assert all(p["stage_s"][0]["train"] > 0 and p["gpu_utilization"] == {} for c in report["configs"]
               for p in c["passes"])   # per-recording stage times; no GPU to sample here
    assert not any(p.name.startswith("archive-runs-") for p in data.iterdir())  # the passes' runs are removed
