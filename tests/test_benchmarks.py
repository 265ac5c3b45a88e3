"""benchmarks: the script end to end on tiny recordings (CPU, one repeat), and its input checks."""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks import contenders, recordings, run
from pipeline import synth

CPU_CONTENDERS = {"load/pyarrow", "load/pandas", "segmentation/cpu", "segmentation/neurokit2", "vae/cpu",
                  "end-to-end/cpu"}


def test_quick_run_writes_json_markdown_and_plot(tmp_path):
    out = tmp_path / "results"
    returned = run.main(["--quick", "--device", "cpu", "--out", str(out), "--data-dir", str(tmp_path / "data")])

    data = json.loads(Path(returned["paths"]["json"]).read_text())
    assert data["options"]["sizes"] == run.QUICK_SIZES and data["options"]["repeats"] == 1
    measured = [r for r in data["results"] if r["status"] == "ok"]
    assert {r["contender"] for r in measured} == CPU_CONTENDERS
    assert {r["samples"] for r in measured} == set(run.QUICK_SIZES)
    for r in measured:
        for key in ("median_s", "min_s", "max_s", "first_s"):
            assert math.isfinite(r[key]) and r[key] > 0, (r["contender"], key, r[key])
        assert r["repeats"] == 1 and len(r["times_s"]) == 1
    seg = {r["contender"]: r for r in measured if r["stage"] == "segmentation" and r["samples"] == 100_000}
    beats, peaks = seg["segmentation/cpu"]["metrics"]["beats"], seg["segmentation/neurokit2"]["metrics"]["r_peaks"]
    assert abs(beats - peaks) <= 0.05 * peaks  # both find about every beat of the same recording
    assert {s["contender"] for s in data["slopes"]} == CPU_CONTENDERS
    assert [t["status"] for t in data["targets"]] == ["not measured"] * 4  # GPU targets, no GPU here
    assert data["machine"]["cpu_cores"] >= 1 and "numpy" in data["machine"]["versions"]

    markdown = Path(returned["paths"]["md"]).read_text()
    assert "## Targets" in markdown and "NeuroKit2 ecg_peaks (detection only)" in markdown
    assert Path(returned["paths"]["png"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_large_recordings_tile_the_chunk_and_its_annotations(tmp_path):
    made = recordings.recording_csv(25_000, tmp_path, seed=3, chunk=10_000)
    assert made.method.startswith("tiled")
    values = np.loadtxt(made.path, dtype=np.float32)
    base = np.loadtxt(recordings.recording_csv(10_000, tmp_path, seed=3, chunk=10_000).path, dtype=np.float32)
    np.testing.assert_array_equal(values, np.concatenate([base, base, base[:5_000]]))
    samples, symbols = synth.read_annotations(made.path)
    assert np.all(np.diff(samples) > 0) and samples.max() < 25_000 and len(samples) == len(symbols)
    assert recordings.recording_csv(25_000, tmp_path, seed=3, chunk=10_000).seconds == 0.0  # reused


@pytest.mark.parametrize("text, samples", [("50k", 50_000), ("1M", 1_000_000), ("2.5M", 2_500_000),
                                           ("200_000_000", 200_000_000)])
def test_sizes_read_with_suffixes(text, samples):
    assert run.parse_size(text) == samples


def test_bad_size_is_refused_with_the_value():
    with pytest.raises(SystemExit):
        run.main(["--sizes", "lots"])


def test_unknown_contender_lists_the_valid_ones():
    with pytest.raises(ValueError, match=r"'segmentaton' matches none of load/cudf, .*segmentation/neurokit2"):
        contenders.select(["segmentaton"], gpu=False)


def test_gpu_contender_without_gpu_is_refused():
    with pytest.raises(ValueError, match=r"load/cudf need a GPU"):
        contenders.select(["load"], gpu=False)
    assert [c.id for c in contenders.select(["*/cpu", "load/pandas"], gpu=False)] == [
        "load/pandas", "segmentation/cpu", "vae/cpu", "end-to-end/cpu"]


def test_importing_the_benchmarks_loads_no_gpu_library():
    code = ("import sys, benchmarks.run, benchmarks.contenders, benchmarks.measure, benchmarks.report, "
            "benchmarks.recordings; print(sorted({'cupy', 'cudf', 'rmm', 'numba.cuda'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1])
    assert out.stdout.strip() == "[]"
