"""The served app without a browser (a ``bokeh.client``-protocol session, as on the GPU machine):
a server's first visitor, arriving as soon as the server listens, gets the dashboard whether the
run is computed (the page shows progress and is woken when the run ends) or read from the cache
(the page waits for it), and the server logs no error."""
from __future__ import annotations

import asyncio
import time

import pytest

from tests.support.bokeh_session import DASHBOARD_MARKER, ProtocolSession
from tests.support.served import Server, register_panel_models

APP_ARGS = ["--samples", "300000", "--epochs", "3", "--device", "cpu"]
TIMEOUT_S = 240      # a tiny run on a busy 2-core machine, generously


def _first_visitor(server: Server) -> dict:
    """Open a session as soon as the server listens; return what it saw."""
    async def visit() -> dict:
        session = ProtocolSession(server.url)
        opened = await session.open(TIMEOUT_S)
        try:
            return {**opened, "dashboard": session.doc.get_model_by_name(DASHBOARD_MARKER) is not None}
        finally:
            await session.close()

    server.wait_listening(TIMEOUT_S)
    return asyncio.run(visit())


@pytest.fixture(scope="module", autouse=True)
def client_models():
    register_panel_models()


@pytest.mark.parametrize("start", ["computed", "cached"])
def test_a_starting_servers_first_visitor_gets_the_dashboard(start, tmp_path):
    runs = tmp_path / "runs"
    if start == "cached":               # the run the server will find, computed here
        from dashboard.startup import settings_from
        from pipeline.run import run_pipeline

        run_pipeline(settings_from([*APP_ARGS, "--out", str(runs)], {}).request)
    server = Server([*APP_ARGS, "--out", str(runs)], tmp_path / "server.log")
    try:
        seen = _first_visitor(server)
        server.wait_ready(TIMEOUT_S)
        time.sleep(0.5)                  # anything the server logs after the page was built
        log = server.log()
    finally:
        server.stop()
    assert seen["dashboard"], log[-3000:]
    assert ("cached run" in log) == (start == "cached"), log[-3000:]
    assert "Error" not in log and "Traceback" not in log, log[-3000:]
