"""Tests of dashboard.reference_choice and the page's rescoring, server-side (the app's objects in
a Bokeh document, as tests/test_dashboard.py builds them): the header names the reference that
scored the run and offers the server's references; choosing another gives exactly the scores
``score_reference`` gives with it, in every view that shows them, and names it; the rescored run
is a cached run of its own that a reload finds; a page cannot make the server open a path; a
reference that cannot be read is said so and nothing shown changes; names are shown as text."""
from __future__ import annotations

import html
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from bokeh.document import Document
from panel.io.state import set_curdoc

from dashboard import startup
from dashboard.reference_choice import FOLDER, References, reference_id
from dashboard.shared_run import SharedRun
from pipeline import reference
from pipeline.calibrate import COLUMNS, explain_calibrated
from pipeline.quality import low_quality
from pipeline.results import load_run, run_problem

HOSTILE = "<img src=x onerror=alert(9)>"


# --------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def runs(cpu_run, tmp_path_factory) -> Path:
    """A runs folder holding a copy of the session's run and, in ``references/``, a tiny second
    reference trained on that run (``mine.npz``)."""
    out = tmp_path_factory.mktemp("runs")
    shutil.copytree(cpu_run.run.path, out / cpu_run.run.path.name)
    small = reference.ReferenceConfig(centroids=16, beats_per_record=200)
    run_dir = out / cpu_run.run.path.name
    (out / FOLDER).mkdir()
    reference.save_reference(reference.train_reference([run_dir, run_dir], cfg=small), out / FOLDER / "mine")
    return out


@pytest.fixture(scope="module")
def base(runs, cpu_run) -> SharedRun:
    return SharedRun.from_run(load_run(runs / cpu_run.run.path.name))


def another(path: Path, to: Path) -> Path:
    """A reference of other content than the one at ``path`` (its centroids moved a little), at ``to``."""
    from dataclasses import replace

    ref = reference.load_reference(path)
    return reference.save_reference(replace(ref, centroids=ref.centroids * 1.001), to)


def mine_id(runs: Path) -> str:
    return reference.reference_digest(runs / FOLDER / "mine.npz")[:16]


def expected_scores(run, path: Path):
    """What score_reference gives the run's beats against the reference at ``path``."""
    rows = np.asarray(run.embeddings)
    pre = int(round(run.report["config"]["signal"]["pre_fiducial"] * rows.shape[1]))
    return reference.score_reference(rows, run.beats["fiducial"].to_numpy(), run.fs, pre,
                                     reference.load_reference(path))


def page_of(shared: SharedRun, references: References | None, asked: str = ""):
    """One session's App over a ready run (as test_dashboard's page tests build it)."""
    from dashboard import app

    class Job:
        result = shared

        def snapshot(self):
            return startup.Progress(state="ready", overall=1.0)

    page = app.App(job=Job(), references=references, asked_reference=asked)
    assert page.state == "ready"
    return page


def pane_html(viewable) -> str:
    return "\n".join(obj.object for obj in viewable.select(lambda o: isinstance(getattr(o, "object", None), str)))


# --------------------------------------------------------------------------- what the server offers
def test_the_server_offers_the_shipped_its_own_and_its_folders_references(runs, tmp_path):
    started_with = tmp_path / "started"
    reference.save_reference(reference.load_reference(runs / FOLDER / "mine.npz"), started_with)   # the same content
    (runs / FOLDER / "notes.txt").write_text("not a reference")
    offered = References(runs / FOLDER, str(started_with)).available()
    assert [c.name for c in offered] == ["reference-v1.npz", "started.npz"]      # mine.npz: the same reference, once
    assert offered[0].id == reference.reference_digest()[:16] and offered[0].origin == "shipped with the package"
    assert offered[1].id == mine_id(runs) and "--reference" in offered[1].origin
    assert offered[0].description == reference.describe(reference.load_reference())
    assert [c.name for c in References(runs / FOLDER).available()] == ["reference-v1.npz", "mine.npz"]
    assert [c.name for c in References(tmp_path / "none").available()] == ["reference-v1.npz"]
    (runs / FOLDER / "notes.txt").unlink()


def test_the_header_names_the_reference_and_offers_the_servers(base, runs):
    with set_curdoc(Document()):
        page = page_of(base, References(runs / FOLDER))
        details = page.views["header"].details
        assert details.collapsed
        text = pane_html(details)
        assert "calibrated against <b>reference-v1.npz</b>, the reference of 22 recordings" in text
        picker = page.views["reference"]
        assert picker.select in details.select(type(picker.select)) and picker.button in details.select(type(picker.button))
        assert list(picker.select.options.values()) == [reference_id(base.report), mine_id(runs)]
        assert picker.select.value == reference_id(base.report) and picker.button.disabled
        picker.select.value = mine_id(runs)
        assert not picker.button.disabled
    with set_curdoc(Document()):
        assert "reference" not in page_of(base, None).views           # a page without references: no choice


# --------------------------------------------------------------------------- rescoring
def test_choosing_another_reference_rescores_every_view_with_exactly_its_scores(base, runs):
    mine = runs / FOLDER / "mine.npz"
    expected = expected_scores(base.run, mine)
    source_files = {p.name: p.read_bytes() for p in base.run.path.iterdir()}
    with set_curdoc(Document()):
        page = page_of(base, References(runs / FOLDER))
        threshold = 1.5
        page.store.update(threshold=threshold, follow_window=False)   # the focus zooms: the table keeps every beat
        focus = int(np.argmax(expected.score))
        page.store.update(focus=focus)
        before_store = page.store
        page.rescore(mine_id(runs))                               # what the Rescore button sends

        store, shared = page.store, page.store.shared
        assert store is not before_store and shared is not base
        beats = shared.beats
        np.testing.assert_array_equal(beats["score"].to_numpy(), expected.score)
        for name, values in expected.columns().items():
            np.testing.assert_array_equal(beats[name].to_numpy(), values)
        np.testing.assert_array_equal(shared.columns["score"], expected.score.astype(np.float64))
        kept = [c for c in base.beats.columns if c not in ("score", *COLUMNS)]
        pd.testing.assert_frame_equal(beats[kept], base.beats[kept])
        assert store.threshold == threshold and store.focus == focus and not store.follow_window   # choices kept

        # the table, its count, the header and the score histogram read the new scores
        clean = ~low_quality(beats["quality"].to_numpy())
        flagged = np.flatnonzero(clean & (expected.score >= threshold))
        want = flagged[np.lexsort([flagged, -expected.score[flagged]])]
        table = page.views["outliers"]
        assert table.source.data["beat_id"].tolist() == want[:len(table.source.data["beat_id"])].tolist()
        np.testing.assert_array_equal(table.source.data["score"], expected.score[table.source.data["beat_id"]])
        assert store.selection.n_outliers == len(flagged)
        assert page.views["header"].outliers() == len(flagged)
        assert f"<b>{len(flagged):,}</b> outlier" in page.views["header"].text.object
        scores = page.views["scores"]
        edges = np.linspace(*shared.extent("score"), scores.spec.bins + 1)
        want_bars = np.histogram(np.clip(expected.score, edges[0], edges[-1]), bins=edges)[0].astype(float)
        want_bars[want_bars < 0.5] = np.nan                                  # empty bars on a log axis
        np.testing.assert_array_equal(scores.source.data["all"], want_bars)
        # the recording's outlier markers
        signal = page.board.charts["signal"]
        assert len(signal.outliers.data["score"]) > 0
        assert set(np.round(signal.outliers.data["score"], 5)) <= set(np.round(expected.score[flagged], 5))
        # the focused beat's "why"
        row = beats.iloc[focus]
        assert html.escape(explain_calibrated(row)) in page.views["beat"].info.object
        assert f"score <b>{expected.score[focus]:.2f}</b>" in page.views["beat"].info.object

        # the header names the new reference, and says what changed
        details = pane_html(page.views["header"].details)
        assert "calibrated against <b>mine.npz</b>, the reference of 2 recordings" in details
        assert "rescored from the run scored against <b>reference-v1.npz</b>" in details
        assert not page.views["header"].details.collapsed
        assert f"Rescored with <b>mine.npz</b>: <b>{len(flagged):,}</b> outliers" in page.views["reference"].status.object
        assert page.views["reference"].select.value == mine_id(runs) and page.views["reference"].button.disabled

    # a cached run of its own; the run shown before, and every other session's data, untouched
    assert shared.run.path.parent == runs and shared.run.path != base.run.path and run_problem(shared.run.path) is None
    assert shared.run.report["reference"]["file"]["name"] == "mine.npz"
    assert {p.name: p.read_bytes() for p in base.run.path.iterdir()} == source_files
    np.testing.assert_array_equal(base.beats["score"], base.run.beats["score"])

    with set_curdoc(Document()):                                  # and back to the reference the server used
        page.rescore(reference_id(base.report))
        assert page.store.shared is base


def test_a_reloaded_page_asking_for_the_reference_shows_the_rescored_run(base, runs):
    mine = runs / FOLDER / "mine.npz"
    References(runs / FOLDER).rescored(base, References(runs / FOLDER).choose(mine_id(runs)))   # written once
    with set_curdoc(Document()):
        page = page_of(base, References(runs / FOLDER), asked=mine_id(runs))      # a fresh server's memory
        shared = page.store.shared
        assert shared.run.cached, "read from the runs folder, not computed again"
        np.testing.assert_array_equal(shared.beats["score"].to_numpy(), expected_scores(base.run, mine).score)
        assert "calibrated against <b>mine.npz</b>" in pane_html(page.views["header"].details)
        assert "as this page's address asks" in page.views["reference"].status.object
    with set_curdoc(Document()):
        page = page_of(base, References(runs / FOLDER), asked=HOSTILE)             # an address made up
        assert page.store.shared is base
        status = page.views["reference"].status.object
        assert "Could not rescore" in status and html.escape(HOSTILE) in status and HOSTILE not in status


def test_a_page_cannot_make_the_server_open_a_path(base, runs, tmp_path, monkeypatch):
    """Whatever a page sends as its choice (a path to a reference outside the server's list, the
    path of one inside it, a made-up id, not a string), the server opens no file: only ids of its
    own list are taken, and a reference outside its folder is not in that list."""
    import pipeline.reference_store as store_module
    import pipeline.rescore as run_module

    outside = another(runs / FOLDER / "mine.npz", tmp_path / "outside")
    opened = []
    real_rescore, real_load = run_module.rescore_run, store_module._load_reference
    monkeypatch.setattr(run_module, "rescore_run", lambda *args: opened.append(args) or real_rescore(*args))
    monkeypatch.setattr(store_module, "_load_reference", lambda path, sig: opened.append(path) or real_load(path, sig))
    references = References(runs / FOLDER)
    assert str(outside) not in {str(c.path) for c in references.available()}
    with set_curdoc(Document()):
        page = page_of(base, references)
        for sent in (str(outside), str(runs / FOLDER / "mine.npz"), "mine.npz", "../references/mine.npz",
                     "/etc/passwd", reference.reference_digest(outside), "x-" + "0" * 14, None, 3, ["mine"]):
            page.rescore(sent)
            status = page.views["reference"].status.object
            assert "among the 2 this server offers" in status, (sent, status)
            assert page.store.shared is base
        assert opened == []
        with pytest.raises(ValueError, match="among the 2 this server offers"):
            references.choose(str(outside))


def test_a_reference_that_cannot_be_read_is_said_so_and_nothing_changes(base, runs, tmp_path):
    folder = tmp_path / FOLDER
    folder.mkdir()
    for suffix in (".npz", ".json"):
        shutil.copy((runs / FOLDER / "mine").with_suffix(suffix), folder / f"damaged{suffix}")
    payload = bytearray((folder / "damaged.npz").read_bytes())
    payload[-100] ^= 0xFF
    (folder / "damaged.npz").write_bytes(bytes(payload))
    shutil.copy(runs / FOLDER / "mine.npz", folder / "alone.npz")             # its .json missing
    references = References(folder)
    offered = {c.name: c for c in references.available()}
    assert set(offered) == {"reference-v1.npz", "damaged.npz", "alone.npz"}
    assert offered["alone.npz"].problem and "cannot be read" in offered["alone.npz"].label
    with set_curdoc(Document()):
        page = page_of(base, references)
        written = sorted(p.name for p in runs.iterdir())
        page.store.update(focus=3)
        store, table = page.store, dict(page.views["outliers"].source.data)
        for name, says in (("damaged", "damaged.npz does not match the SHA-256 recorded in damaged.json"),
                           ("alone", "alone.json is missing")):
            page.rescore(offered[f"{name}.npz"].id)
            status = page.views["reference"].status.object
            assert "Could not rescore with" in status and says in status and "unchanged" in status, status
            assert page.store is store and store.focus == 3                  # nothing lost
            assert page.views["outliers"].source.data["beat_id"].tolist() == table["beat_id"].tolist()
            assert not page.views["reference"].select.disabled
    assert sorted(p.name for p in runs.iterdir()) == written                  # no run written


def test_names_of_references_are_shown_as_text(base, runs, tmp_path):
    folder = tmp_path / FOLDER
    folder.mkdir()
    hostile = another(runs / FOLDER / "mine.npz", folder / HOSTILE)
    references = References(folder)
    with set_curdoc(Document()):
        page = page_of(base, references)
        choice = next(c for c in references.available() if c.path == hostile)
        assert choice.label.startswith(HOSTILE)           # plain text in the select (the browser shows it as text)
        page.rescore(choice.id)
        shown = pane_html(page.page())
    assert HOSTILE not in shown and html.escape(HOSTILE) in shown


# --------------------------------------------------------------------------- a served page
def test_a_served_page_rescores_in_the_background_and_its_address_keeps_the_choice(cpu_run, runs, tmp_path,
                                                                                     monkeypatch):
    """Over the Bokeh protocol, against ``python -m dashboard.serve`` on the cached run: a choice
    that is no entry of the list (a path, as a page's script could send it) is dropped and opens
    nothing; choosing ``mine.npz`` and Rescore swap in the rescored recording from a background
    thread, name it in the header and put ``?reference=<id>`` in the page's address; a new session
    with that address shows it rescored at once."""
    import asyncio
    import time

    from tests.support import bokeh_session
    from tests.support.bokeh_session import ProtocolSession
    from tests.support.served import Server, register_panel_models

    register_panel_models()
    canary = tmp_path / "canary.npz"
    wanted = mine_id(runs)
    srv = Server(["--input", str(cpu_run.request.input), "--device", "cpu", "--epochs", "3", "--out", str(runs)],
                 tmp_path / "server.log")

    def texts(session) -> str:
        return "\n".join(html.unescape(str(value)) for model in session.doc.models
                         for name in ("text", "object") if isinstance(value := getattr(model, name, None), str))

    def widget(session, kind: str, **props):
        found = [m for m in session.doc.models if type(m).__name__.endswith(kind)      # Panel's CustomSelect too
                 and all(getattr(m, k, None) == v for k, v in props.items())]
        assert len(found) == 1, (kind, props, len(found))
        return found[0]

    async def click(session, button) -> None:
        from tests.support.bokeh_session import PlotEvent

        await session.send_event(PlotEvent("button_click", button))

    async def visit() -> dict:
        session = ProtocolSession(srv.url)
        await session.open(240)
        try:
            select = widget(session, "Select", title="Score against the reference")
            assert [value for value, _ in select.options][1] == wanted
            since = time.perf_counter()
            async with session.change():
                select.value = str(canary)                       # no entry of the list: Panel drops it
            await click(session, widget(session, "Button", label="Rescore"))
            await session.wait_for(lambda: "already" in texts(session), since, 60)
            refused = texts(session)
            since = time.perf_counter()
            button = widget(session, "Button", label="Rescore")
            async with session.change():
                select.value = wanted
            await session.wait_for(lambda: not button.disabled, since, 60)    # the server has the choice
            await click(session, button)
            await session.wait_for(lambda: "Rescored with <b>mine.npz</b>" in texts(session), since, 120)
            location = widget(session, "Location")
            await session.wait_for(lambda: "reference=" in location.search, since, 30)
            return {"refused": refused, "shown": texts(session), "search": location.search}
        finally:
            await session.close()

    async def reload() -> str:
        monkeypatch.setattr(bokeh_session, "websocket_url",
                            lambda url: url.replace("http://", "ws://") + f"/ws?reference={wanted}")
        session = ProtocolSession(srv.url)
        await session.open(240)
        try:
            return texts(session)
        finally:
            await session.close()

    try:
        srv.wait_ready(240)
        seen = asyncio.run(visit())
        again = asyncio.run(reload())
        log = srv.log()
    finally:
        srv.stop()
    assert str(canary) not in seen["refused"] and "calibrated against <b>reference-v1.npz</b>" in seen["refused"]
    assert "The scores shown are those of <b>reference-v1.npz</b> already" in seen["refused"]
    assert "calibrated against <b>mine.npz</b>" in seen["shown"], seen["shown"][-2000:]
    assert f"reference={wanted}" in seen["search"], seen["search"]
    assert "calibrated against <b>mine.npz</b>" in again and "as this page's address asks" in again
    # the only errors: Panel refusing the value that is no entry of the list
    assert all(f"{canary} not in list" in block for block in log.split("Traceback")[1:]), log[-3000:]
    assert "rescoring failed" not in log
