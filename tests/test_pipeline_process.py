"""The server's run in a child process: its progress reaches the server with the child's times,
the run is read back from its directory, failures arrive as one line, an early child is adopted
only for its own request, and a child never outlives its server."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from dashboard import pipeline_process
from dashboard.startup import settings_from
from pipeline.run import run_pipeline

ARGS = ["--samples", "60000", "--epochs", "2", "--device", "cpu"]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:   # a zombie (ended, not yet reaped by its parent) counts as ended
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _within(seconds: float, done) -> bool:
    """Whether ``done()`` holds within ``seconds`` (polled)."""
    deadline = time.monotonic() + seconds
    while not done() and time.monotonic() < deadline:
        time.sleep(0.05)
    return done()


def _gone_within(pid: int, seconds: float) -> bool:
    return _within(seconds, lambda: not _alive(pid))


def _reaped_within(pid: int, seconds: float) -> bool:
    """Whether our child ``pid`` ended and was reaped (no zombie left) within ``seconds``."""
    return _within(seconds, lambda: not Path(f"/proc/{pid}").exists())


def test_a_run_is_computed_in_a_child_and_read_from_its_directory(tmp_path):
    request = replace(settings_from([*ARGS, "--out", str(tmp_path)], {}).request, use_cache=False)
    child = pipeline_process.PipelineProcess(request=request)
    events = []
    run = child.result(lambda stage, fraction, message, at: events.append((stage, fraction, at)))

    assert child.pid != os.getpid() and _reaped_within(child.pid, 10)
    stages = list(dict.fromkeys(stage for stage, _, _ in events))
    assert stages[stages.index("load"):] == ["load", "wavelet", "peaks", "lengths", "embed", "train", "score",
                                             "families", "results"]
    times = [at for _, _, at in events]
    assert times == sorted(times) and child.started_at < times[0] < time.monotonic()
    assert not run.cached and run.path.parent == tmp_path
    in_process = run_pipeline(replace(request, out=str(tmp_path / "in-process")))   # the same run, here
    assert len(run.beats) == len(in_process.beats) > 100
    np.testing.assert_array_equal(run.beats.columns, in_process.beats.columns)
    np.testing.assert_array_equal(run.fiducials, in_process.fiducials)
    assert np.corrcoef(run.beats["score"], in_process.beats["score"])[0, 1] > 0.99

    again = pipeline_process.PipelineProcess(request=replace(request, use_cache=True))
    seen = []
    cached = again.result(lambda stage, fraction, message, at: seen.append(stage))
    assert cached.cached and cached.path == run.path and "train" not in seen


def test_bad_input_arrives_as_its_one_line_and_a_dead_child_as_an_error(tmp_path):
    request = replace(settings_from([*ARGS, "--out", str(tmp_path)], {}).request, input=str(tmp_path / "no.csv"))
    with pytest.raises(ValueError, match=r"^no such file: .*no\.csv$"):
        pipeline_process.PipelineProcess(request=request).result()

    long = settings_from(["--samples", "300000", "--epochs", "50", "--device", "cpu",
                          "--out", str(tmp_path), "--no-cache"], {}).request
    child = pipeline_process.PipelineProcess(request=long)
    child._process.send_signal(signal.SIGKILL)
    with pytest.raises(pipeline_process.PipelineFailed, match=r"ended \(exit code -9\) before its run was written"):
        child.result()


def test_an_early_child_is_adopted_only_for_its_own_request(tmp_path):
    args = [*ARGS, "--out", str(tmp_path)]
    pipeline_process.start_early(args)
    early = pipeline_process._EARLY
    assert pipeline_process.for_request(settings_from(args, {}).request) is early
    assert pipeline_process._EARLY is None
    early.stop()

    pipeline_process.start_early(args)
    early = pipeline_process._EARLY
    other = pipeline_process.for_request(settings_from([*args, "--epochs", "3"], {}).request)
    assert other is not early and _gone_within(early.pid, 10)
    other.stop()
    assert _gone_within(other.pid, 10)


def test_the_servers_arguments_are_parsed_once_and_no_child_starts_for_an_archive_or_bad_ones(tmp_path, monkeypatch):
    from dashboard import settings

    parsed = []
    monkeypatch.setattr(settings, "settings_from", lambda argv: parsed.append(argv) or settings.Settings(
        archive=str(tmp_path) if "--archive" in argv else None))
    monkeypatch.setattr(settings, "_PARSED", {})
    monkeypatch.setattr(pipeline_process, "_EARLY", None)
    args = ["--archive", str(tmp_path)]
    pipeline_process.start_early(args)            # (python -m dashboard.serve, before Panel's import)
    assert settings.server_settings(args) is settings.server_settings(list(args))   # (each page)
    assert parsed == [args] and pipeline_process._EARLY is None

    monkeypatch.setattr(settings, "settings_from", lambda argv: parsed.append(argv) or int("zero"))
    pipeline_process.start_early(["--epochs", "zero"])
    assert pipeline_process._EARLY is None
    for _ in range(2):
        with pytest.raises(ValueError, match="invalid literal"):
            settings.server_settings(["--epochs", "zero"])
    assert parsed == [args, ["--epochs", "zero"]]


def test_the_child_ends_when_its_server_is_killed(tmp_path):
    """The server killed outright (no atexit): the child sees its stdin close and exits at once,
    without waiting for its next progress report."""
    server = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from dashboard import pipeline_process as p; "
         "p.start_early(sys.argv[1:]); print(p._EARLY.pid, flush=True); time.sleep(600)",
         "--samples", "2000000", "--epochs", "50", "--device", "cpu", "--out", str(tmp_path), "--no-cache"],
        stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parent.parent)
    child_pid = int(server.stdout.readline())
    time.sleep(1.0)
    assert _alive(child_pid)
    server.kill()
    server.wait()
    assert _gone_within(child_pid, 5)
