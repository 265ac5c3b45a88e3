"""The dashboard's server side in this process (``benchmarks.interaction``'s in-process part, and
``--scale``): the server's run and shared data, prepared as the server does (:func:`load_shared`), and
:class:`InProcessSession`, one session's dashboard in a Bokeh document, each interaction timed from the
property change to the PATCH-DOC serialized (:func:`server_side`: brushes, clears, family selections,
zoom/pan, session opens).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from benchmarks.measure import summaries
from benchmarks.sessions import ALL_BRUSHES, brush_bounds, zoom_plan
from dashboard.spec import LINKED, VIEWS


def load_shared(app_args: list[str]):
    """``(run, shared)``: the server's run (from its cache) and shared data, prepared as the server does."""
    from dashboard import app, startup

    settings = startup.settings_from(app_args, {})
    job = startup.PipelineJob(settings, prepare=app.prepare(settings), log=lambda m: None).start()
    progress = job.wait()
    if progress.state != "ready":
        raise RuntimeError(f"the pipeline failed: {progress.error}")
    return job.run, job.result


@dataclass
class Timed:
    """One interaction: seconds to update every view and serialize the patch, the patch's events and bytes."""

    seconds: float
    events: int
    nbytes: int


class InProcessSession:
    """One session's dashboard in a Bokeh document, its outgoing patches recorded."""

    def __init__(self, shared):
        from bokeh.core.json_encoder import serialize_json
        from bokeh.document import Document
        from panel.io.state import set_curdoc, state

        from dashboard.app import make_board
        from dashboard.data_store import DataStore
        from dashboard.page import layout

        self._curdoc, self.doc, self.shared = set_curdoc, Document(), shared
        started = time.perf_counter()
        with set_curdoc(self.doc):
            self.store = DataStore(shared)
            self.board = make_board(self.store)
            self.body, self.views = layout(self.store, self.board)
            self.root = self.body.get_root(self.doc)
            self.doc.add_root(self.root)
        self.models, self.doc_bytes = len(self.doc.models), len(serialize_json(self.doc.to_json()))
        self.open_s = time.perf_counter() - started    # the page built and the document a browser pulls
        state._loaded[self.doc] = True          # what the browser's 'document_ready' does
        self.events: list = []
        self.doc.on_change(self.events.append)

    def _timed(self, change, sent_by_browser: tuple) -> Timed:
        from bokeh.protocol import Protocol

        self.events.clear()
        with self._curdoc(self.doc):
            started = time.perf_counter()
            change()
            events = [e for e in self.events if getattr(e, "model", None) not in sent_by_browser]
            size = 0
            if events:
                message = Protocol().create("PATCH-DOC", events)
                size = len(message.header_json) + len(message.metadata_json) + len(message.content_json)
                size += sum(len(b.to_bytes()) for b in message.buffers)
            seconds = time.perf_counter() - started
        return Timed(seconds, len(events), size)

    def brush(self, view: str, bounds: list[float] | None) -> Timed:
        """A box selection, ``[x0, x1]`` or ``[x0, x1, y0, y1]`` (None: cleared); on cuxfilter's board its
        stream event, and a clear drops the chart's brush from the store (what a reset ends in)."""
        if self.board.name == "cuxfilter":
            return self._timed(lambda: self._cuxfilter_brush(view, bounds), ())
        brush = self.board.charts[view].brush
        return self._timed(lambda: setattr(brush, "bounds", bounds), (brush,))

    def select_family(self, family: int | None) -> Timed:
        """A click on a family's row in the families panel (None: the row unselected)."""
        selected = self.views["families"].source.selected
        return self._timed(lambda: setattr(selected, "indices", [] if family is None else [family]), (selected,))

    def _cuxfilter_brush(self, view: str, bounds) -> None:
        if bounds is None:
            self.store.update(brush={c: r for c, r in self.store.brush.items() if c not in VIEWS[view].brush})
            return
        chart = self.board.charts[view].chart   # the cuxfilter chart's HoloViews element (its box_stream)
        if len(bounds) == 2:
            chart.box_stream.event(bounds=(bounds[0], 0, bounds[1], 1), x_selection=tuple(bounds), y_selection=(0, 1))
        else:
            chart.box_stream.event(bounds=(bounds[0], bounds[2], bounds[1], bounds[3]),
                                   x_selection=tuple(bounds[:2]), y_selection=tuple(bounds[2:]))

    def zoom(self, start: float, end: float) -> Timed:
        """The recording's window moved to [start, end], start and end in one held change as BokehJS sends them."""
        import panel as pn

        x_range = self.views["signal"].figure.x_range

        def change():
            with pn.io.hold(self.doc):
                x_range.update(start=start, end=end)
        return self._timed(change, (x_range,))

    def close(self) -> None:
        with self._curdoc(self.doc):
            self.body._cleanup(self.root)
        self.doc.clear()


def server_side(shared, n_brushes: int, n_zooms: int, n_sessions: int = 5, seed: int = 0) -> dict:
    """Server-side ms of each kind after an untimed warm-up: ``n_brushes`` brushes a chart, clears, family
    selections, ``n_zooms`` zoom/pans, ``n_sessions`` opens: ``{"board", "kinds", "details"}``."""
    rng = np.random.default_rng(seed)
    opens = []
    for _ in range(n_sessions + 1):                     # the first one is the warm-up
        opens.append(InProcessSession(shared))
        opens[-1].close()
    opens = opens[1:]
    session, samples = InProcessSession(shared), {}
    for view in LINKED:                                  # untimed: first-use costs of each path
        session.brush(view, brush_bounds(shared.beats, view, rng))
        session.brush(view, None)
    session.zoom(0.0, shared.duration_s / 2)
    session.zoom(0.0, shared.duration_s)
    for i in range(n_brushes):
        for view in LINKED:
            samples.setdefault(f"brush {view}", []).append(session.brush(view, brush_bounds(shared.beats, view, rng)))
        if i % 5 == 4:
            samples.setdefault("clear", []).append(session.brush(LINKED[(i // 5) % len(LINKED)], None))
    families = int(shared.beats["family"].max()) + 1
    for i in range(max(n_brushes // 5, 1)):                # a family's row clicked, then unselected
        samples.setdefault("select family", []).append(session.select_family(i % families))
        samples.setdefault("clear", []).append(session.select_family(None))
    for kind, lo, hi in zoom_plan(shared.duration_s, n_zooms, rng):
        samples.setdefault(kind, []).append(session.zoom(lo, hi))
    session.close()
    ms = {kind: [1000 * t.seconds for t in timed] for kind, timed in samples.items()}
    ms["session open"] = [1000 * s.open_s for s in opens]
    kinds = summaries(ms, ALL_BRUSHES)
    details = {kind: {"events_median": float(np.median([t.events for t in timed])),
                      "patch_bytes_median": float(np.median([t.nbytes for t in timed]))}
               for kind, timed in samples.items()}
    details["session open"] = {"models": opens[0].models if opens else 0,
                               "document_bytes": opens[0].doc_bytes if opens else 0}
    return {"board": session.board.name, "kinds": kinds, "details": details}
