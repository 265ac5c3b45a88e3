"""A real ``panel serve dashboard/app.py`` in a subprocess, for browser tests and benchmarks, and a
``bokeh.client`` pull of its page (for machines without a browser); the Chromium the benchmarks
drive.

See Also
--------
benchmarks.interaction : the interaction benchmark that drives it.
tests.test_browser : the browser tests that drive it.
"""
from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]       # the repository (tests/support/served.py)
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


# --------------------------------------------------------------------------- the server
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# How long a server keeps sessions nobody uses: Bokeh looks for them every 17 s and discards those
# unused for 15 s (its defaults, ``--check-unused-sessions`` / ``--unused-session-lifetime``); the
# server then runs a full garbage collection (0.25 s later, ``dashboard/server_gc.py``; Panel's own
# one once no session has ended for 5 s), a pause of the whole server.
BOKEH_CHECK_UNUSED_MS, BOKEH_UNUSED_LIFETIME_MS, PANEL_GC_DEBOUNCE_S = 17_000, 15_000, 5.0


def serve_option(serve_args: list[str], name: str, default: int) -> int:
    """The value of ``panel serve`` option ``name`` (``--name V`` or ``--name=V``) in ``serve_args``."""
    for i, arg in enumerate(serve_args):
        if arg == name and i + 1 < len(serve_args):
            return int(serve_args[i + 1])
        if arg.startswith(name + "="):
            return int(arg.split("=", 1)[1])
    return default


# Debian's Chromium, headless, as the browser tests launch it.
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def chromium_version() -> str | None:
    try:
        out = subprocess.run([CHROMIUM, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.strip() or None


def server_command(port: int, app_args: list[str], python: str = sys.executable,
                   serve_args: list[str] = ()) -> list[str]:
    """What ``./run.sh`` starts (``python -m dashboard.serve``: ``panel serve`` with the collector paused
    while it imports); ``serve_args`` are extra ``panel serve`` options (e.g. ``--unused-session-lifetime``)."""
    return [python, "-m", "dashboard.serve", "dashboard/app.py", "--address", "127.0.0.1", "--port", str(port),
            "--allow-websocket-origin", f"127.0.0.1:{port}", "--num-procs", "1", "--warm", *serve_args,
            "--args", *app_args]


class Server:
    """``panel serve dashboard/app.py`` in a subprocess, its output in a log file."""

    def __init__(self, app_args: list[str], log_path: Path, port: int | None = None, env: dict | None = None,
                 serve_args: list[str] = ()):
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}/app"
        self.log_path = Path(log_path)
        self._log = open(self.log_path, "w")
        self.started = time.perf_counter()
        env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
        self.serve_args = list(serve_args)
        self.command = server_command(self.port, app_args, serve_args=self.serve_args)
        self.proc = subprocess.Popen(self.command, cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT, env=env)

    def rss_bytes(self) -> int:
        """Resident memory of the server process now (VmRSS), in bytes."""
        return process_rss_bytes(self.proc.pid)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def discard_s(self) -> float:
        """Seconds from a session's close until this server has discarded it and collected its
        garbage: a load test waits that long, so that sessions closed before it do not pause the
        server while its sessions brush (that pause is a session's end, not a brush's cost)."""
        check = serve_option(self.serve_args, "--check-unused-sessions", BOKEH_CHECK_UNUSED_MS)
        lifetime = serve_option(self.serve_args, "--unused-session-lifetime", BOKEH_UNUSED_LIFETIME_MS)
        return (check + lifetime) / 1000 + PANEL_GC_DEBOUNCE_S + 1.0

    def wait_http(self, timeout: float) -> None:
        """Until the page answers HTTP 200 (the progress view, while the pipeline still runs)."""
        self._wait_answer(self.url, timeout)

    def wait_listening(self, timeout: float) -> None:
        """Until the server answers HTTP at all: a static file, so that asking builds no session
        (a page request is a visitor whose dashboard the server builds)."""
        self._wait_answer(self.url.rsplit("/", 1)[0] + "/static/js/bokeh.min.js", timeout)

    def _wait_answer(self, url: str, timeout: float) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"panel serve exited with {self.proc.returncode}:\n{self.log()[-3000:]}")
            try:
                with urllib.request.urlopen(url, timeout=5) as response:
                    if response.status == 200:
                        return
            except OSError:
                time.sleep(0.05)
        raise TimeoutError(f"no answer at {url} after {timeout} s:\n{self.log()[-3000:]}")

    def wait_ready(self, timeout: float) -> float:
        """Seconds from start until the log says the dashboard is ready; raises on failure/timeout."""
        deadline = self.started + timeout
        while time.perf_counter() < deadline:
            text = self.log()
            if "ECG dashboard ready" in text:
                return time.perf_counter() - self.started
            if "pipeline failed" in text:
                raise RuntimeError("the pipeline failed:\n" + text[-3000:])
            if self.proc.poll() is not None:
                raise RuntimeError(f"panel serve exited with {self.proc.returncode}:\n{text[-3000:]}")
            time.sleep(0.05)
        raise TimeoutError(f"not ready after {timeout:.0f} s:\n{self.log()[-3000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()


@contextlib.contextmanager
def serving(app_args: list[str], log_path: Path, timeout: float = 120.0):
    """A :class:`Server` of ``app_args`` that answers HTTP, stopped on leaving (a fixture's body)."""
    server = Server(app_args, log_path)
    try:
        server.wait_http(timeout)
        yield server
    finally:
        server.stop()


@contextlib.contextmanager
def checked_page(page):
    """A browser test's ``page`` for the test's body: closed after it, and the test fails where the page
    logged a console or page error (``page.errors``)."""
    try:
        yield page
        assert not page.errors, "\n".join(page.errors)
    finally:
        page.close()


def process_rss_bytes(pid: int) -> int:
    """Resident memory (VmRSS) of a process, in bytes."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def register_panel_models() -> None:
    """Import every Panel Bokeh model, so a bokeh.client session can decode the documents."""
    import importlib
    import pkgutil

    import panel.models

    import dashboard.charts  # noqa: F401  (the dashboard's own data model, Brush)

    for module in pkgutil.iter_modules(panel.models.__path__):
        with contextlib.suppress(Exception):
            importlib.import_module(f"panel.models.{module.name}")


def http_get(url: str, timeout: float = 60.0) -> tuple[int, int]:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.status, len(response.read())
