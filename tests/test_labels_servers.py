"""Two real servers (``python -m dashboard.serve``) on one runs folder, each labelling beats through
a session of its own (``bokeh.client``-protocol sessions: a row of the outlier table clicked, then
a label button) at the same time: every label either server confirmed is in the labels database
at the end, each server's page shows the other server's labels, and a damaged labels database
found at start is moved aside with a logged message while both dashboards still open."""
from __future__ import annotations

import asyncio
import html
import time
from pathlib import Path

import pytest

from tests.support.bokeh_session import DASHBOARD_MARKER, PlotEvent, ProtocolSession, SessionError
from tests.support.served import Server, register_panel_models

APP_ARGS = ["--samples", "300000", "--epochs", "3", "--device", "cpu"]
TIMEOUT_S = 240          # a tiny run's servers on a busy 2-core machine, generously
CLICK_S = 60             # one label's round trip, generously
SEEN_S = 30              # another server's labels on a page (its watcher looks every second)
LABELS_EACH = 10
GARBAGE = b"not a labels database\n" * 50


@pytest.fixture(scope="module", autouse=True)
def client_models():
    register_panel_models()


def _status(session):
    """The review panel's status line (the one model that counts the labels)."""
    for model in session.doc.models:
        if "labelled in all" in str(getattr(model, "text", "") or ""):
            return model
    raise AssertionError("no review status in the session's document")


def _button(session, label: str):
    for model in session.doc.models:
        if type(model).__name__ == "Button" and getattr(model, "label", None) == label:
            return model
    raise AssertionError(f"no {label!r} button in the session's document")


async def _label_rows(session, rows: list[int], label: str) -> list[int]:
    """Focus each row's beat (a click on the outlier table) and press ``label``; the beat ids whose
    label the panel confirmed ('saved')."""
    table = session.by_name("ecg-outliers").source
    button, status = _button(session, label), _status(session)
    confirmed = []
    for row in rows:
        beat = int(table.data["beat_id"][row])
        before = status.text
        async with session.change():
            table.selected.indices = [row]
        await session.send_event(PlotEvent("button_click", button))
        await session.wait_for(lambda: status.text != before and "saved" in status.text, time.perf_counter(),
                               CLICK_S, quiet=0.0)
        assert f"<b>{label}</b> given to 1 beat" in html.unescape(status.text), status.text
        confirmed.append(beat)
    return confirmed


async def _label_on_both(servers, rows_each: list[list[int]], texts: list[str]) -> dict:
    sessions = [ProtocolSession(server.url) for server in servers]
    try:
        for session in sessions:
            await session.open(TIMEOUT_S)
            assert session.doc.get_model_by_name(DASHBOARD_MARKER) is not None
        confirmed = await asyncio.gather(*(_label_rows(s, rows, text)
                                           for s, rows, text in zip(sessions, rows_each, texts)))
        # Each page shows the other server's labels: told by its labels watcher, without a reload.
        seen = []
        for k, session in enumerate(sessions):
            table = session.by_name("ecg-outliers").source
            other, other_text = rows_each[1 - k], texts[1 - k]
            try:
                await session.wait_for(lambda: all(table.data["review"][r] == other_text for r in other),
                                       time.perf_counter(), SEEN_S, quiet=0.0)
            except SessionError:
                raise AssertionError(f"server {k + 1}'s page never showed the other server's labels: "
                                     f"{list(table.data['review'][:2 * LABELS_EACH])}") from None
            seen.append([table.data["review"][r] for r in range(2 * LABELS_EACH)])
        return {"confirmed": confirmed, "seen": seen, "errors": [e for s in sessions for e in s.errors]}
    finally:
        for session in sessions:
            await session.close()


def test_two_servers_on_one_runs_folder_keep_every_label(tmp_path):
    from dashboard.labels import ReviewLabels
    from dashboard.startup import settings_from
    from pipeline.run import run_pipeline

    runs = tmp_path / "runs"
    # The run both servers find, computed here: the test is about the labels, not two runs at once.
    run = run_pipeline(settings_from([*APP_ARGS, "--out", str(runs)], {}).request)
    database = Path(run.path).parent / "labels" / f"{run.report['input']['sha256'][:24]}.sqlite"
    database.parent.mkdir(parents=True, exist_ok=True)
    database.write_bytes(GARBAGE)              # damaged: must not keep either dashboard from opening

    servers = [Server([*APP_ARGS, "--out", str(runs)], tmp_path / f"server-{k}.log") for k in (1, 2)]
    try:
        for server in servers:
            server.wait_ready(TIMEOUT_S)
        rows = [list(range(0, 2 * LABELS_EACH, 2)), list(range(1, 2 * LABELS_EACH, 2))]
        seen = asyncio.run(_label_on_both(servers, rows, ["V", "N"]))
        time.sleep(0.5)
        logs = [server.log() for server in servers]
    finally:
        for server in servers:
            server.stop()

    for log in logs:
        assert "Traceback" not in log and "Error" not in log, log[-3000:]
    assert not seen["errors"], seen["errors"]
    aside = sorted(p.name for p in database.parent.iterdir() if ".unreadable-" in p.name)
    assert len(aside) == 1 and (database.parent / aside[0]).read_bytes() == GARBAGE, aside
    assert sum(f"moved aside to {aside[0]}" in log for log in logs) == 1, "one server moved it, and said so"

    fiducial = run.beats["fiducial"].to_numpy()
    labels = ReviewLabels(database, run.fs)
    for text, beats in zip(["V", "N"], seen["confirmed"]):
        assert len(beats) == LABELS_EACH
        assert labels.labels_of(fiducial[beats]).tolist() == [text] * LABELS_EACH, labels.frame()
    assert len(labels) == 2 * LABELS_EACH
    assert seen["seen"][0] == seen["seen"][1] == ["V", "N"] * LABELS_EACH
