"""Server-side cost of each interaction, in this process: from the property change that the
browser would send to the document patch serialized for the websocket.

An :class:`InProcessSession` is one session's dashboard (DataStore, board, views) in a Bokeh
document, built as the served app builds it, and marked loaded the way Panel marks a served page
once the browser says it is ready (``state._loaded``): without that, Panel's ``hold`` drops the
held events instead of dispatching them, as it does for pages no browser shows. An interaction
sets what the browser sets (a ``Brush``'s bounds, or the recording's ``x_range`` start and end in
one held change, as BokehJS sends them in one message); the document's change events are
collected and serialized into one PATCH-DOC the way the server would send it. The changes the
"browser" made itself are left out of the patch, as the server leaves them out for the
connection that sent them.

For the cuxfilter board a brush is its chart's HoloViews selection stream event (what the
server-side handler of the browser's box selection calls); a clear drops the chart's brush from
the session's store, which then reloads every chart (what a reset of the chart ends in).

See Also
--------
benchmarks.interaction : the CPU benchmark that prints and records these numbers.
benchmarks.gpu_dashboard : the same on a GPU, with both boards.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass

import numpy as np

from dashboard.spec import LINKED  # every brushable chart: the benchmarks brush each


def run_beats(run_path):
    """A run's beats as the dashboard's charts see them, read from its directory: the saved table
    plus the RR intervals the DataStore derives (the Poincaré plot's axes), float64, so that the
    counts a session shows can be checked against an independent source."""
    import pandas as pd

    from dashboard.shared_run import rr_intervals

    beats = pd.read_parquet(run_path / "beats.parquet")
    report = json.loads((run_path / "report.json").read_text())
    beats["rr_prev_s"], beats["rr_next_s"] = rr_intervals(beats, np.load(run_path / "fiducials.npy"),
                                                          float(report["input"]["fs"]))
    return beats


def load_shared(app_args: list[str]):
    """The run the server shows (from the cache the server fills) and its shared data, prepared and
    warmed up as the server does it. Returns ``(run, shared)``."""
    from dashboard import app, startup

    settings = startup.settings_from(app_args, {})
    job = startup.PipelineJob(settings, prepare=app.prepare(settings), log=lambda m: None).start()
    progress = job.wait()
    if progress.state != "ready":
        raise RuntimeError(f"the pipeline failed: {progress.error}")
    return job.run, job.result


@dataclass
class Timed:
    """One interaction: seconds to update every view, to serialize the patch, and its size."""

    update_s: float
    serialize_s: float
    events: int
    nbytes: int
    version: int

    @property
    def total_s(self) -> float:
        return self.update_s + self.serialize_s


class InProcessSession:
    """One session's dashboard in a Bokeh document, its outgoing patches recorded."""

    def __init__(self, shared):
        from bokeh.document import Document
        from panel.io.state import set_curdoc, state

        from dashboard.app import make_board
        from dashboard.data_store import DataStore
        from dashboard.page import layout

        self._curdoc = set_curdoc
        self.doc = Document()
        started = time.perf_counter()
        with set_curdoc(self.doc):
            self.store = DataStore(shared)
            self.board = make_board(self.store)
            self.body, self.views = layout(self.store, self.board)
            self.root = self.body.get_root(self.doc)
            self.doc.add_root(self.root)
        built = time.perf_counter()
        self.models = len(self.doc.models)
        self.doc_bytes = len(self._document_json())
        self.build_s, self.serialize_doc_s = built - started, time.perf_counter() - built
        state._loaded[self.doc] = True          # what the browser's 'document_ready' does
        self.events: list = []
        self.doc.on_change(self.events.append)
        self.shared = shared

    @property
    def open_s(self) -> float:
        """Build the session's page and serialize the document a browser pulls."""
        return self.build_s + self.serialize_doc_s

    def _document_json(self) -> str:
        from bokeh.core.json_encoder import serialize_json

        return serialize_json(self.doc.to_json())

    # ------------------------------------------------------------------ interactions
    def _timed(self, change, sent_by_browser: tuple) -> Timed:
        from bokeh.protocol import Protocol

        self.events.clear()
        with self._curdoc(self.doc):
            started = time.perf_counter()
            change()
            updated = time.perf_counter()
            events = [e for e in self.events if getattr(e, "model", None) not in sent_by_browser]
            size = 0
            if events:
                message = Protocol().create("PATCH-DOC", events)
                size = len(message.header_json) + len(message.metadata_json) + len(message.content_json)
                size += sum(len(b.to_bytes()) for b in message.buffers)
            done = time.perf_counter()
        return Timed(updated - started, done - updated, len(events), size, self.store.selection.version)

    def brush(self, view: str, bounds: list[float] | None) -> Timed:
        """A finished box selection on a linked chart: ``[x0, x1]`` (histograms), ``[x0, x1, y0, y1]``
        (a plane), or None (a double-click clears it)."""
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
            # A reset on a cuxfilter chart ends in the same work: the board pulls the charts' brushes
            # into the store and reloads every chart; here the store drops the chart's brush itself.
            from dashboard.spec import VIEWS

            self.store.update(brush={c: r for c, r in self.store.brush.items() if c not in VIEWS[view].brush})
            return
        chart = self.board.charts[view].chart   # the cuxfilter chart's HoloViews element (its box_stream)
        if len(bounds) == 2:
            chart.box_stream.event(bounds=(bounds[0], 0, bounds[1], 1), x_selection=tuple(bounds), y_selection=(0, 1))
        else:
            chart.box_stream.event(bounds=(bounds[0], bounds[2], bounds[1], bounds[3]),
                                   x_selection=tuple(bounds[:2]), y_selection=tuple(bounds[2:]))

    def zoom(self, start: float, end: float) -> Timed:
        """The recording's visible window moved to [start, end] (a wheel zoom or a pan)."""
        import panel as pn

        x_range = self.views["signal"].figure.x_range

        def change():
            with pn.io.hold(self.doc):     # start and end arrive in one message from the browser
                x_range.update(start=start, end=end)
        return self._timed(change, (x_range,))

    def close(self) -> None:
        with self._curdoc(self.doc):
            self.body._cleanup(self.root)
        self.doc.clear()


# --------------------------------------------------------------------------- plans
def brush_bounds(beats, view: str, rng: np.random.Generator) -> list[float]:
    """A varied brush on ``view`` in data units: a range between the 2nd and 98th percentile of the
    chart's column(s) in ``beats`` (the run's table), 5–50 % of it wide."""
    from dashboard.spec import VIEWS

    bounds = []
    for column in VIEWS[view].brush:
        values = beats[column].to_numpy(dtype=np.float64)
        lo, hi = np.nanquantile(values, [0.02, 0.98])   # the first beat has no RR before it
        width = rng.uniform(0.05, 0.5) * (hi - lo)
        start = rng.uniform(lo, hi - width)
        bounds += [float(start), float(start + width)]
    return bounds


def zoom_plan(duration_s: float, n: int, rng: np.random.Generator) -> list[tuple[str, float, float]]:
    """``n`` windows the recording moves through: zooms in (down to a few seconds, where raw
    samples are drawn), pans and zooms out, each a change of the visible window."""
    plan, (lo, hi) = [], (0.0, duration_s)
    for i in range(n):
        span = hi - lo
        kind = ("zoom in", "pan", "zoom out")[i % 3] if span < 0.9 * duration_s else "zoom in"
        if kind == "zoom in":
            centre, span = rng.uniform(lo + 0.2 * span, hi - 0.2 * span), span * rng.uniform(0.05, 0.5)
        elif kind == "pan":
            centre = (lo + hi) / 2 + rng.choice([-1, 1]) * rng.uniform(0.2, 0.6) * span
        else:
            centre, span = (lo + hi) / 2, min(span * rng.uniform(2, 6), duration_s)
        span = max(span, 4.0)
        lo = float(np.clip(centre - span / 2, 0.0, duration_s - span))
        hi = lo + span
        plan.append((kind, lo, hi))
    return plan


def measure(shared, n_brushes: int, n_zooms: int, n_sessions: int = 5, seed: int = 0) -> dict:
    """Per interaction kind, the server-side seconds of ``n_brushes`` brushes on each linked chart,
    ``n_brushes // 5`` clears, as many family selections (and their clears), ``n_zooms`` zoom/pan
    changes and ``n_sessions`` session opens, on fresh sessions after one untimed warm-up of each
    kind. Returns ``{kind: [Timed, ...]}`` and the board's name."""
    rng = np.random.default_rng(seed)
    samples: dict[str, list] = {}
    for _ in range(n_sessions + 1):                     # the first one is the warm-up
        session = InProcessSession(shared)
        samples.setdefault("session open", []).append(session)
        session.close()
    opens = samples.pop("session open")[1:]
    session = InProcessSession(shared)
    for view in LINKED:                                  # untimed: first-use costs of each path
        session.brush(view, brush_bounds(shared.beats, view, rng))
        session.brush(view, None)
    session.zoom(0.0, shared.duration_s / 2)
    session.zoom(0.0, shared.duration_s)
    for i in range(n_brushes):
        for view in LINKED:
            samples.setdefault(f"brush {view}", []).append(session.brush(view, brush_bounds(shared.beats, view, rng)))
        if i % 5 == 4:
            view = LINKED[(i // 5) % len(LINKED)]
            samples.setdefault("clear", []).append(session.brush(view, None))
    families = int(shared.beats["family"].max()) + 1
    for i in range(max(n_brushes // 5, 1)):                # a family's row clicked, then unselected
        samples.setdefault("select family", []).append(session.select_family(i % families))
        samples.setdefault("clear", []).append(session.select_family(None))
    for kind, lo, hi in zoom_plan(shared.duration_s, n_zooms, rng):
        samples.setdefault(kind, []).append(session.zoom(lo, hi))
    session.close()
    out = {kind: [t.total_s for t in timed] for kind, timed in samples.items()}
    out["session open"] = [s.open_s for s in opens]
    details = {kind: {"events_median": float(np.median([t.events for t in timed])),
                      "patch_bytes_median": float(np.median([t.nbytes for t in timed])),
                      "update_ms_median": 1000 * float(np.median([t.update_s for t in timed])),
                      "serialize_ms_median": 1000 * float(np.median([t.serialize_s for t in timed]))}
               for kind, timed in samples.items()}
    details["session open"] = {"models": opens[0].models if opens else 0,
                               "document_bytes": opens[0].doc_bytes if opens else 0,
                               "build_ms_median": 1000 * float(np.median([s.build_s for s in opens])),
                               "serialize_ms_median": 1000 * float(np.median([s.serialize_doc_s for s in opens]))}
    return {"board": session.board.name, "seconds": out, "details": details}
