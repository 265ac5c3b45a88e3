"""The server's side of the dashboard's security, without a browser: text from outside the code is
escaped in every pane (a page built in-process from a run whose labels, file name and header
fields are markup); an archive's click opens only a run directory of the server's own table, inside
the archive, whatever a page sends (in-process, and over the Bokeh protocol against a served
archive); ``python -m dashboard.serve`` listens on the loopback address unless told otherwise, lets
pages at that address connect, and warns when told to listen beyond this machine.

The browser's side (no script runs, the text shows as typed, no foreign script host): see
``tests/test_security_browser.py``.
"""
from __future__ import annotations

import asyncio
import html
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from bokeh.document import Document
from panel.io.state import set_curdoc

from tests.support import bokeh_session, served
from tests.support.bokeh_session import ProtocolSession, websocket_url
from tests.support.served import Server, register_panel_models

TIMEOUT_S = 240      # a tiny batch and a server on a busy 2-core machine, generously
HOSTILE = "<img src=x onerror=alert(1)>"
HOSTILE_NAME = "<img src=x onerror=alert(5)>.csv"


# --------------------------------------------------------------------------- helpers
def hostile_archive(folder: Path) -> Path:
    """A batch of one small recording whose file name is markup (``HOSTILE_NAME``), as
    ``python -m pipeline batch`` writes it: returns the archive folder (``folder/runs``)."""
    from pipeline.synth import SynthConfig, synthesize, write_csv

    inputs, out = folder / "in", folder / "runs"
    inputs.mkdir(parents=True)
    write_csv(synthesize(SynthConfig(n_samples=100_000, seed=2, pvc_fraction=0.06)), inputs / HOSTILE_NAME)
    done = subprocess.run([sys.executable, "-m", "pipeline", "batch", str(inputs), "--out", str(out), "--device", "cpu",
                           "--epochs", "2", "--workers", "1", "--quiet"], capture_output=True, text=True, timeout=600,
                          cwd=served.ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    return out


def archive_table(rows: list[dict]):
    """An archive table (``pipeline.batch``'s columns) of ``rows``."""
    from pipeline.archive import archive_frame

    defaults = {"status": "ok", "error": "", "beats": 100, "outliers": 5, "heart_rate_bpm": 70.0, "duration_s": 60.0}
    return archive_frame([{**defaults, **row} for row in rows])


def pane_html(viewable) -> list[str]:
    """The HTML of every pane of a Panel tree (what the browser puts in the page as markup)."""
    return [obj.object for obj in viewable.select(lambda o: isinstance(getattr(o, "object", None), str))]


def assert_shown_literally(texts: list[str], *values: str) -> None:
    """No pane holds markup from ``values``; each value is there, escaped."""
    joined = "\n".join(texts)
    assert "<img" not in joined, [t for t in texts if "<img" in t]
    for value in values:
        assert html.escape(value) in joined, (value, joined[:3000])


def serve_command_without_address(port: int, app_args: list[str], python: str = sys.executable,
                                  serve_args: list[str] = ()) -> list[str]:
    """``tests.support.served.server_command`` with no ``--address`` and no ``--allow-websocket-origin``:
    what ``python -m dashboard.serve`` does on its own."""
    return [python, "-m", "dashboard.serve", "dashboard/app.py", "--port", str(port), "--num-procs", "1",
            *serve_args, "--args", *app_args]


def listening_addresses(port: int) -> set[str]:
    """The local addresses of this machine's TCP sockets listening on ``port`` (/proc/net/tcp, tcp6)."""
    found = set()
    for table, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            address, hex_port = fields[1].split(":")
            if fields[3] != "0A" or int(hex_port, 16) != port:      # 0A: LISTEN
                continue
            raw = bytes.fromhex(address)
            # The kernel prints each 32-bit word in host order (little-endian here).
            raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
            found.add(socket.inet_ntop(family, raw))
    return found


async def websocket_accepted(page_url: str, origin: str) -> bool:
    """Whether the server opens a session's websocket for a page at ``origin`` (not refused, 403)."""
    from tornado.httpclient import HTTPClientError, HTTPRequest
    from tornado.websocket import websocket_connect

    from bokeh.util.token import generate_jwt_token, generate_session_id

    request = HTTPRequest(websocket_url(page_url), headers={"Origin": origin}, connect_timeout=30, request_timeout=30)
    try:
        connection = await websocket_connect(request, subprotocols=["bokeh", generate_jwt_token(generate_session_id())])
    except HTTPClientError as err:
        if err.code == 403:
            return False
        raise
    connection.close()
    return True


# --------------------------------------------------------------------------- escaping (in-process)
@pytest.fixture(scope="module")
def hostile_run(cpu_run, tmp_path_factory):
    """A copy of the session's run whose reviewer labels, reference labels, input file name, lead
    name and reason, and GPU name are markup (the labels saved through ReviewLabels' public API, as the review panel does)."""
    from dashboard.labels import ReviewLabels
    from pipeline.results import load_run

    folder = tmp_path_factory.mktemp("hostile-runs")
    copy = folder / Path(cpu_run.run.path).name
    shutil.copytree(cpu_run.run.path, copy)
    run = load_run(copy)
    ReviewLabels.for_run(run).set(run.beats["fiducial"].to_numpy(), HOSTILE)
    run.report["input"]["path"] = f"/recordings/{HOSTILE_NAME}"
    run.report["device"]["gpu"] = "<img src=x onerror=alert(3)>"
    run.report["input"]["channel"] = "<img src=x onerror=alert(9)>"      # a lead's name, from the file
    run.report["input"]["lead_reason"] = "clarity <img src=x onerror=alert(10)>"
    run.beats["label"] = "<img src=x onerror=alert(4)>"
    return run


def test_every_pane_shows_outside_text_literally(hostile_run):
    from dashboard import app, startup
    from dashboard.shared_run import SharedRun

    shared = SharedRun.from_run(hostile_run)

    class Job:              # the run is ready (as test_dashboard's page tests do)
        result = shared

        def snapshot(self):
            return startup.Progress(state="ready", overall=1.0)

    with set_curdoc(Document()):
        page = app.App(job=Job())
        assert page.state == "ready"
        beat = int(page.store.selection.outliers["beat_id"].iloc[0])
        page.store.update(focus=beat)                       # what a click on the outlier table does
        stored = page.views["beat"].info.object
        page.review.apply("<img src=x onerror=alert(6)>")  # a free-text label, typed
        applied = page.review.status.object
        page.review.apply("<script>alert(7)</script>" * 2)  # too long: refused with the text it got
        refused = page.review.status.object
        texts = pane_html(page.page())
    assert_shown_literally(texts, HOSTILE_NAME, "<img src=x onerror=alert(3)>", "<img src=x onerror=alert(4)>",
                           "<img src=x onerror=alert(6)>", "<img src=x onerror=alert(9)>",
                           "<img src=x onerror=alert(10)>")
    assert_shown_literally([applied], "<img src=x onerror=alert(6)>")
    assert "#9b1c1c" in refused and "<script" not in refused, refused
    assert "your label <b>" + html.escape(HOSTILE) + "</b>" in stored, stored
    assert "reference label <b>" + html.escape("<img src=x onerror=alert(4)>") + "</b>" in stored, stored
    assert "your label <b>" + html.escape("<img src=x onerror=alert(6)>") in page.views["beat"].info.object


def test_progress_errors_and_an_archives_messages_show_outside_text_literally(tmp_path):
    from dashboard import app, startup, waiting

    progress = waiting.ProgressView()
    progress.show(startup.Progress(state="running", label=HOSTILE, message="reading <b>x</b>.csv",
                                   done=(("<i>stage</i>", 1.0),)))
    assert_shown_literally(pane_html(progress.panel), HOSTILE, "reading <b>x</b>.csv", "<i>stage</i>")
    assert "<b>x</b>" not in progress.stage.object and "<i>" not in progress.done.object

    failed = app.App(error=f"no such file: /data/{HOSTILE_NAME}")
    assert_shown_literally(pane_html(failed.main), HOSTILE_NAME)

    def broken(run_dir):
        raise ValueError(f"{run_dir} is not a finished run <img src=x onerror=alert(8)>")

    archive = archive_table([{"input": "/in/a.csv", "name": HOSTILE_NAME, "run_dir": str(tmp_path / "a")}])
    page = app.App(archive=archive, open_run=broken)
    page.open(str(tmp_path / "a"), HOSTILE_NAME)           # no session: opens at once, and fails
    assert_shown_literally(pane_html(page.main), HOSTILE_NAME, "<img src=x onerror=alert(8)>")


# --------------------------------------------------------------------------- archive paths (in-process)
def test_run_directories_outside_the_archive_are_refused(tmp_path):
    from dashboard.archive import run_inside

    archive = tmp_path / "runs"
    (archive / "abc").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (archive / "link").symlink_to(tmp_path / "elsewhere")
    assert run_inside(archive, archive / "abc") == str((archive / "abc").resolve())
    for outside in (tmp_path / "elsewhere", archive / ".." / "elsewhere", archive / "link", archive, Path("/etc")):
        with pytest.raises(ValueError, match="not inside the archive"):
            run_inside(archive, outside)


def test_an_archive_click_opens_the_servers_row_whatever_the_page_sends(tmp_path):
    from dashboard.archive import ArchiveView

    archive = archive_table([
        {"input": "/in/a.csv", "name": "a.csv", "run_dir": str(tmp_path / "runs" / "a"), "outliers": 9},
        {"input": "/in/b.csv", "name": "b.csv", "run_dir": str(tmp_path / "runs" / "b"), "outliers": 1},
        {"input": "/in/c.csv", "name": "c.csv", "status": "failed", "error": "unreadable", "run_dir": None}])
    opened = []
    view = ArchiveView(archive, lambda run_dir, name: opened.append((run_dir, name)))
    assert "run_dir" not in view.source.data and "run_dir" not in view.points.data      # no path goes to the page
    canary = str(tmp_path / "canary")
    for source in (view.source, view.points):
        n = len(source.data["name"])
        source.data = {**source.data, "run_dir": [canary] * n, "name": ["canary"] * n}   # a page's rewrite
        source.selected.indices = [0]
    assert opened == [(str(tmp_path / "runs" / "a"), "a.csv")] * 2
    opened.clear()
    view.source.selected.indices = [2]                  # the failed recording: nothing to open
    view.source.selected.indices = [3]                  # no such row
    view.source.selected.indices = [-1]
    view.points.selected.indices = [2]
    assert opened == []
    view.search.value_input = "b."
    view.source.selected.indices = [0]                  # the only row listed now
    assert opened == [(str(tmp_path / "runs" / "b"), "b.csv")]


# --------------------------------------------------------------------------- archive paths (served)
@pytest.fixture(scope="module")
def client_models():
    register_panel_models()


def test_a_client_that_rewrites_the_archive_table_opens_no_folder_of_its_choosing(client_models, tmp_path,
                                                                                    monkeypatch):
    """A protocol client (what a page's script can do) replaces the archive table's data with a
    run directory outside the archive and selects a row: the server opens its own row's run and
    never looks at that folder (the old page sent run_dir and the server opened what came back)."""
    archive = hostile_archive(tmp_path)
    canary = tmp_path / "canary-run"        # not a run: a server that tried it would say so on the page
    srv = Server(["--device", "cpu", "--archive", str(archive)], tmp_path / "server.log")
    # the archive page holds no dashboard until a recording is opened: wait for its table instead
    monkeypatch.setattr(bokeh_session, "DASHBOARD_MARKER", "ecg-archive-table")

    def status(session) -> str:
        bars = [m for m in session.doc.models if "ecg-status" in (getattr(m, "css_classes", None) or [])]
        return html.unescape(getattr(bars[0], "text", "")) if bars else ""

    def texts(session) -> str:
        return "\n".join(html.unescape(str(value)) for model in session.doc.models
                         for name in ("text", "object") if isinstance(value := getattr(model, name, None), str))

    async def attack() -> dict:
        session = ProtocolSession(srv.url)
        await session.open(TIMEOUT_S)
        try:
            source = session.by_name("ecg-archive-table").source
            sent = sorted(source.data)
            n = len(source.data["name"])
            since = time.perf_counter()
            async with session.change():
                source.data = {**source.data, "run_dir": [str(canary)] * n, "name": ["canary"] * n}
                source.selected.indices = [0]
            await session.wait_for(lambda: session.doc.get_model_by_name("ecg-version") is not None
                                   or "#9b1c1c" in status(session), since, TIMEOUT_S)
            return {"sent": sent, "status": status(session), "texts": texts(session),
                    "dashboard": session.doc.get_model_by_name("ecg-version") is not None}
        finally:
            await session.close()

    try:
        srv.wait_http(120)
        seen = asyncio.run(attack())
        log = srv.log()
    finally:
        srv.stop()
    assert str(canary) not in seen["texts"] and str(canary) not in log, seen["status"]
    assert "run_dir" not in seen["sent"], seen["sent"]
    assert seen["dashboard"], (seen["status"], log[-3000:])       # the server's own row 0 opened
    assert f"input {html.escape(HOSTILE_NAME)}" in seen["texts"]      # the page's markup, escaped


# --------------------------------------------------------------------------- the address (process)
def test_dashboard_serve_listens_on_loopback_only_unless_told(tmp_path, monkeypatch):
    """Without --address, ``python -m dashboard.serve`` listens on 127.0.0.1 only (``panel serve``'s
    default is every interface), and pages at http://127.0.0.1:PORT and http://localhost:PORT may
    open sessions (Bokeh's own default allows localhost only) while other origins may not."""
    monkeypatch.setattr(served, "server_command", serve_command_without_address)
    srv = Server(["--archive", str(tmp_path / "no-archive")], tmp_path / "server.log")   # no run to start
    try:
        srv.wait_listening(120)
        addresses = listening_addresses(srv.port)

        async def origins() -> dict:
            return {origin: await websocket_accepted(srv.url, origin)
                    for origin in (f"http://127.0.0.1:{srv.port}", f"http://localhost:{srv.port}",
                                   "http://evil.example")}
        accepted = asyncio.run(origins())
        log = srv.log()
    finally:
        srv.stop()
    assert addresses and addresses <= {"127.0.0.1", "::1"}, (addresses, log[-2000:])
    assert accepted == {f"http://127.0.0.1:{srv.port}": True, f"http://localhost:{srv.port}": True,
                        "http://evil.example": False}, log[-2000:]
    assert "no authentication" not in log


def test_dashboard_serve_warns_when_told_to_listen_beyond_this_machine(tmp_path, monkeypatch):
    monkeypatch.setattr(served, "server_command", serve_command_without_address)
    srv = Server(["--archive", str(tmp_path / "no-archive")], tmp_path / "server.log",
                 serve_args=["--address", "0.0.0.0"])
    try:
        deadline = time.time() + 120
        while "no authentication" not in srv.log() and "Bokeh app running" not in srv.log() and time.time() < deadline:
            assert srv.proc.poll() is None, srv.log()[-2000:]
            time.sleep(0.05)
        log = srv.log()
    finally:
        srv.stop()       # as soon as it has said it: it listens on every interface
    warning = log[log.find("dashboard.serve: listening on"):].split("\n")[0]
    assert "no authentication of its own" in warning and "--basic-auth" in warning and "--oauth-provider" in warning, \
        log[-2000:]
    assert "reverse proxy" in warning
