"""Tests of the installed command ``ecg`` (``dashboard/command.py``): the script that ``pip install``
put beside the interpreter, run in subprocesses from a folder outside the repository."""
from __future__ import annotations

import ast
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from dashboard.command import app_path, pipeline_commands

REPO = Path(__file__).resolve().parents[1]
ECG = Path(sys.executable).with_name("ecg")


def _ecg(*args, cwd, timeout=300):
    assert ECG.exists(), f"{ECG} not found: install the package (pip install -e .) to get the ecg command"
    return subprocess.run([str(ECG), *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=timeout)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop(process: subprocess.Popen) -> None:
    """The server and what it started (its pipeline's process): asked to end, then made to."""
    for sig, wait in ((signal.SIGTERM, 60), (signal.SIGKILL, 30)):
        try:
            os.killpg(process.pid, sig)
            process.wait(timeout=wait)
            return
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue


def test_help_lists_every_command_on_one_line(tmp_path):
    result = _ecg("--help", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    commands = [*pipeline_commands(), "serve"]
    assert {"run", "batch", "evaluate", "synth", "serve"} <= set(commands)
    for name in commands:
        lines = [line for line in result.stdout.splitlines() if line.split()[:1] == [name]]
        assert len(lines) == 1 and len(lines[0].split()) > 2, f"{name!r} has no one-line help:\n{result.stdout}"


def test_no_command_prints_the_help_and_exits_2(tmp_path):
    result = _ecg(cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith("usage: ecg COMMAND") and "serve" in result.stderr


def test_unknown_command_is_one_line(tmp_path):
    result = _ecg("frobnicate", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [result.stderr.strip()]
    assert result.stderr.startswith("error: unknown command 'frobnicate'; choose from run, ")


def test_subcommand_options_are_the_pipelines(tmp_path):
    result = _ecg("run", "--help", cwd=tmp_path)
    assert result.returncode == 0 and "--samples" in result.stdout and "--device" in result.stdout


def test_synth_and_run_from_another_folder(tmp_path):
    synth = _ecg("synth", "rec.csv", "--samples", 30_000, "--seed", 3, cwd=tmp_path)
    assert synth.returncode == 0, synth.stderr
    assert (tmp_path / "rec.csv").exists() and (tmp_path / "rec.annotations.csv").exists()

    run = _ecg("run", "--samples", 30_000, "--epochs", 1, "--device", "cpu", "--out", tmp_path / "runs", "--quiet",
               cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    lines = dict(line.split(None, 1) for line in run.stdout.splitlines() if line[:1].strip())
    run_dir = Path(lines["run"].split()[0])
    assert run_dir.parent == tmp_path / "runs"
    report = json.loads((run_dir / "report.json").read_text())
    assert report["input"]["n_samples"] == 30_000 and report["device"]["name"] == "cpu"


def test_missing_file_is_one_line_and_status_2(tmp_path):
    result = _ecg("run", "no-such.csv", "--device", "cpu", "--out", tmp_path / "runs", "--quiet", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [result.stderr.strip()]
    assert result.stderr.startswith("error: ") and "no-such.csv" in result.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_serve_help(tmp_path):
    result = _ecg("serve", "--help", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: ecg serve")
    for option in ("--input", "--device", "--archive", "--port", "--address", "--basic-auth"):
        assert option in result.stdout


def test_serve_answers_from_another_folder(tmp_path):
    """The app's file comes from the installed package: served from a folder without it."""
    assert app_path().is_file() and not (tmp_path / "dashboard").exists()
    port = free_port()
    log = open(tmp_path / "server.log", "w")
    server = subprocess.Popen([str(ECG), "serve", "--port", str(port), "--args", "--device", "cpu",
                               "--samples", "30000", "--epochs", "1", "--out", str(tmp_path / "runs")],
                              cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline, page = time.monotonic() + 240, None   # (a busy 2-core machine starts slowly)
        while time.monotonic() < deadline and server.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/app", timeout=10) as answer:
                    page = answer.read().decode()
                break
            except OSError:
                time.sleep(0.5)
        assert page is not None, (tmp_path / "server.log").read_text()
        assert "<html" in page and "ECG explorer" in page
    finally:
        stop(server)
        log.close()
    assert f"http://127.0.0.1:{port}/app" in (tmp_path / "server.log").read_text()   # loopback by default


@pytest.mark.slow   # builds the wheel
def test_the_wheel_holds_what_the_server_reads_and_no_benchmarks(tmp_path):
    """A non-editable install has only the wheel: the page's assets and the shipped reference must
    be in it (the server reads them at import), the benchmarks and tests must not."""
    import shutil
    import zipfile

    source = tmp_path / "source"   # a copy, so that the build leaves nothing in the checkout
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(".git", ".venv", "*.egg-info", "build", "runs",
                                                                "test-artifacts", ".scratch", ".gpu*", "__pycache__"))
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(tmp_path / "dist"), str(source)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    from dashboard.spec import ASSETS

    assert ASSETS.parent == app_path().parent   # read from the package, not from beside it
    for asset in sorted(ASSETS.iterdir()):
        assert f"dashboard/assets/{asset.name}" in names
    assert {"dashboard/app.py", "pipeline/reference_data/reference-v1.npz",
            "pipeline/reference_data/reference-v1.json"} <= names
    assert not [name for name in names if name.startswith(("benchmarks/", "tests/"))]


@pytest.mark.parametrize("path", sorted((REPO / "pipeline").rglob("*.py")), ids=lambda p: p.name)
def test_pipeline_never_imports_the_dashboard(path):
    """Layering: the dashboard (and its command) import the pipeline, never the reverse."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        assert not any(name.split(".")[0] == "dashboard" for name in names), f"{path} imports {names}"
