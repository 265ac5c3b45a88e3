"""Tests of pipeline.threads: where the thread budget comes from, that PyTorch and Numba get it, and
that a run reports and uses it (in a fresh process, where nothing was set before)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline import threads

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def clean(monkeypatch):
    """No budget chosen yet, no environment override; whatever a test applies is undone."""
    import numba
    import torch

    monkeypatch.setattr(threads, "_explicit", None)
    for name in (threads.ENV, *threads.LIBRARY_ENV, *threads.WAIT_ENV):
        monkeypatch.delenv(name, raising=False)
    before = torch.get_num_threads(), numba.get_num_threads()
    yield monkeypatch
    torch.set_num_threads(before[0])
    numba.set_num_threads(before[1])


def test_default_is_one_thread_per_available_cpu(clean):
    assert threads.available_cpus() == len(os.sched_getaffinity(0))
    assert threads.resolve_threads() == threads.default_threads() == len(os.sched_getaffinity(0))


def test_openmp_waits_passively_unless_told_otherwise(clean):
    threads.limit_threads()
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE" and os.environ["KMP_BLOCKTIME"] == "0"
    clean.setenv("OMP_WAIT_POLICY", "ACTIVE")
    threads.limit_threads()
    assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"  # a user's own setting is kept


def test_budget_order_explicit_then_environment(clean):
    clean.setenv("OMP_NUM_THREADS", "3")
    assert threads.resolve_threads() == 3
    clean.setenv(threads.ENV, "2")
    assert threads.resolve_threads() == 2          # ECG_THREADS before OMP_NUM_THREADS
    assert threads.resolve_threads(5) == 5         # an explicit budget before both


def test_explicit_budget_stays_in_force(clean):
    import numba
    import torch

    assert threads.limit_threads(1) == 1
    clean.setenv(threads.ENV, "2")
    assert threads.limit_threads() == 1            # e.g. run_pipeline inside a worker given 1 thread
    assert torch.get_num_threads() == 1 and numba.get_num_threads() == 1
    assert all(os.environ[name] == "1" for name in threads.LIBRARY_ENV)


def test_limit_threads_sets_torch_after_numba(clean):
    """Starting Numba's OpenMP pool resets the shared OpenMP thread count; PyTorch must still
    end up with the budget."""
    import numba
    import torch

    clean.setenv(threads.ENV, "1")
    assert threads.limit_threads() == 1
    assert torch.get_num_threads() == 1 and numba.get_num_threads() == 1


@pytest.mark.parametrize("value", ["0", "-2", "two", "1.5"])
def test_bad_budget_is_an_error(clean, value):
    clean.setenv(threads.ENV, value)
    with pytest.raises(ValueError, match=rf"^\$ECG_THREADS must be a positive whole number of threads; got '{value}'$"):
        threads.resolve_threads()
    with pytest.raises(ValueError, match="^threads must be a positive whole number of threads; got 0$"):
        threads.resolve_threads(0)


def _run_cli(tmp_path, small_csv, **env):
    environment = {k: v for k, v in os.environ.items() if k not in (threads.ENV, *threads.LIBRARY_ENV, *threads.WAIT_ENV)}
    return subprocess.run([sys.executable, "-m", "pipeline", "run", str(small_csv), "--device", "cpu", "--epochs", "1",
                           "--out", str(tmp_path / "runs"), "--quiet"], cwd=REPO, capture_output=True, text=True,
                          timeout=300, env={**environment, **env})


def test_a_run_uses_and_reports_the_budget(small_csv, tmp_path):
    result = _run_cli(tmp_path, small_csv, ECG_THREADS="1")
    assert result.returncode == 0, result.stderr
    run_dir = Path(result.stdout.splitlines()[0].split()[1])
    used = json.loads((run_dir / "report.json").read_text())["device"]["cpu_threads"]
    assert used == {"torch": 1, "numba": 1, "available": len(os.sched_getaffinity(0))}


def test_a_bad_budget_stops_the_cli_with_one_line(small_csv, tmp_path):
    result = _run_cli(tmp_path, small_csv, ECG_THREADS="lots")
    assert result.returncode == 2
    assert result.stderr == "error: $ECG_THREADS must be a positive whole number of threads; got 'lots'\n"


OPENMP_SCRIPT = """
import ctypes, sys
from pipeline import threads
threads.limit_threads()
import torch
torch.ones(1000).sum()
try:
    display = ctypes.CDLL("libgomp.so.1").omp_display_env  # the OpenMP runtime PyTorch and Numba share
except (OSError, AttributeError):
    sys.exit(3)
display(0)
"""


def test_openmp_runtime_is_passive_in_a_fresh_process():
    """What GNU OpenMP itself reports after limit_threads and import torch, in that order (as in a run)."""
    environment = {k: v for k, v in os.environ.items() if k not in (threads.ENV, *threads.LIBRARY_ENV, *threads.WAIT_ENV)}
    result = subprocess.run([sys.executable, "-c", OPENMP_SCRIPT], cwd=REPO, capture_output=True, text=True,
                            timeout=120, env=environment)
    if result.returncode == 3:
        pytest.skip("this OpenMP runtime cannot display its settings (omp_display_env)")
    assert result.returncode == 0, result.stderr
    assert "OMP_WAIT_POLICY = 'PASSIVE'" in result.stderr
    assert f"OMP_NUM_THREADS = '{threads.default_threads()}'" in result.stderr
