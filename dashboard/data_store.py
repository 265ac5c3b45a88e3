"""One browser session's selections over the shared, read-only run (:mod:`dashboard.shared_run`).

:class:`DataStore` holds one session's selections (linked brush ranges, the visible time window,
the held-out filter, the outlier threshold, the focused beat) and publishes one immutable
:class:`Selection` per change, which the views only present. :func:`one_patch` and
:func:`in_session` hand what a change touches to the session's document.

See Also
--------
dashboard.shared_run.SharedRun : the run's data, shared by every session.
dashboard.views, dashboard.charts : the views that read a DataStore.
"""
from __future__ import annotations

import contextlib
import itertools
import threading
import weakref
from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable

import numpy as np
import pandas as pd
import panel as pn
import param

from dashboard.bokeh_checks import unchecked
from dashboard.shared_run import BRUSH_COLUMNS, SharedRun
# (names this module held before SharedRun moved: still importable from here)
from dashboard.shared_run import BACKGROUND_DELAY_S, GPU_COLUMNS_MIN_BEATS, rr_intervals  # noqa: F401
from pipeline import backend
from pipeline.calibrate import OUTLIER_SCORE

COLOUR_MODES = {"Score": "score", "Reference": "reference", "Review": "review", "Family": "family"}
SPLITS = {"All beats": "all", "Training 75%": "train", "Held-out 25%": "test"}
TABLE_LIMIT = 500           # rows the ranked outlier table holds at most


@contextlib.contextmanager
def one_patch():
    """Everything changed inside reaches the browser as one message (Panel's ``hold`` of the
    session's document), and Bokeh does not re-validate the arrays we hand it
    (:func:`dashboard.bokeh_checks.unchecked`)."""
    with pn.io.hold(), unchecked():
        yield


def in_session(doc) -> Callable[[Callable[[], None]], None]:
    """For callbacks that a background thread fires (the model loaded, Datashader compiled): a
    function that runs its argument on ``doc``'s next tick, handed over through the server's
    event loop, and drops it once the session has ended. Call it on the session's own thread.
    (``doc.add_next_tick_callback`` called from the background thread itself swaps Bokeh's
    current document for a moment; a session being built on the server's thread at that moment
    was refused: Panel's "replaced the output document", a page without the dashboard.)"""
    from tornado.ioloop import IOLoop

    loop = IOLoop.current()

    def schedule(callback: Callable[[], None]) -> None:
        def on_loop() -> None:
            if doc.session_context is not None:      # None once the session is destroyed
                doc.add_next_tick_callback(callback)
        loop.add_callback(on_loop)
    return schedule


# --------------------------------------------------------------------------- one session
@dataclass(frozen=True, eq=False)
class Centre:
    """Where the selected beats sit: the mean of their (z1, z2), its decoding, and the mean of the
    embedded beats themselves. All None when no beat is selected; ``decoded`` None while the
    model loads."""

    z: np.ndarray | None = None
    decoded: np.ndarray | None = None
    mean_beat: np.ndarray | None = None

    @classmethod
    def of(cls, shared: SharedRun, mask, count: int) -> Centre:
        if not count:
            return cls()
        z = np.array([float(shared.columns["z1"][mask].mean()), float(shared.columns["z2"][mask].mean())],
                     dtype=np.float32)
        rows = shared.embeddings if count == shared.n_beats else shared.embeddings[mask]
        mean_beat = backend.to_host(rows.mean(axis=0, dtype=np.float64)).astype(np.float32)
        decoded = shared.decode(z)[0] if shared.decoder_ready() else None
        return cls(z, decoded, mean_beat)


@dataclass(frozen=True, eq=False)
class Selection:
    """What one session currently selects; a new one replaces it on every change.

    ``mask`` (a device array, like the shared columns) is the intersection of ``base`` (the
    visible window and the split) and every brush; :meth:`others` gives a chart the beats that
    the *other* charts' brushes select (crossfilter semantics).
    """

    version: int
    mask: object                     # bool per beat: base ∩ every brush
    base: object                     # bool per beat: time window ∩ split
    brush_masks: dict                # column -> bool per beat
    count: int
    total: int
    threshold: float
    outliers: pd.DataFrame           # selected beats at or above the threshold, highest score first (≤ TABLE_LIMIT)
    n_outliers: int
    shared: SharedRun = field(repr=False)
    same_beats_as: Selection | None = field(default=None, repr=False)   # an earlier selection of these beats

    @cached_property
    def centre(self) -> Centre:
        """The selected beats' centre, computed when a view first asks for it: its view sits
        behind a tab, and decoding it cost ~15 % of a brush's server time when every brush paid
        for it. A selection of the same beats as an earlier one gives that one's centre (views
        compare it by identity to skip redrawing), unless that one lacks a decoding that the
        model, loaded since, can now give."""
        earlier = self.same_beats_as
        if earlier is not None:
            centre = earlier.centre
            if centre.decoded is not None or centre.z is None or not self.shared.decoder_ready():
                return centre
        return Centre.of(self.shared, self.mask, self.count)

    @property
    def ids(self) -> np.ndarray:
        return np.flatnonzero(backend.to_host(self.mask))

    def others(self, columns: tuple[str, ...]):
        """Beats in the base that every brush *not* on ``columns`` selects."""
        mask = self.base
        for column, brushed in self.brush_masks.items():
            if column not in columns:
                mask = mask & brushed
        return mask


class DataStore(pn.viewable.Viewer):
    """One browser session's selections over a :class:`SharedRun`.

    Set ``brush`` (``{column: (lo, hi)}``, intersected), ``time_range``, ``split``,
    ``threshold`` or ``focus``; read ``selection``. Charts set ``brush``; everything else only
    reads.
    """

    shared = param.ClassSelector(class_=SharedRun, constant=True, doc="the run, read-only")
    brush = param.Dict(default={}, doc="linked brush ranges {column: (lo, hi)}; beats inside all of them")
    time_range = param.Range(default=None, allow_None=True, doc="visible window of the recording (s)")
    follow_window = param.Boolean(default=True, label="Filter beats to the visible window",
                                  doc="whether the recording view's window filters the beat views")
    split = param.Selector(default="all", objects=SPLITS, label="Beats")
    threshold = param.Number(default=OUTLIER_SCORE, label="Outlier threshold (score; 2 = as unusual as 1 in 100 "
                             "normal beats)")
    rank_low_quality = param.Boolean(default=False, label="Rank low-quality beats (noise, artefacts) too")
    focus = param.Integer(default=None, allow_None=True, doc="beat_id shown in detail (from the table)")
    zoom_to = param.Range(default=None, allow_None=True, doc="a window (s) the recording view is asked to show")
    episodes = param.DataFrame(default=None, allow_None=True,
                               doc="the run's episodes with the reviewer's verdicts, as the episode list holds them "
                                   "(None: the detector's, unreviewed); the recording's bands follow it")
    colour_by = param.Selector(default="score", objects=COLOUR_MODES, label="Colour the planes by")
    labels_version = param.Integer(default=0, doc="version of the reviewer's labels this session shows")
    selection = param.ClassSelector(class_=Selection, doc="the current selection (output)")

    _versions = itertools.count(1)

    def __init__(self, shared: SharedRun, **params):
        lo, hi = shared.extent("score")
        hi = max(hi, shared.default_threshold())   # a recording without outliers still shows the line
        params.setdefault("threshold", shared.default_threshold())
        super().__init__(shared=shared, **params)
        self.param.threshold.bounds = (lo, hi)
        self.param.threshold.softbounds = (lo, hi)
        self._base_cache: tuple | None = None
        self._brush_cache: dict = {}
        self._refresh()
        doc = pn.state.curdoc
        live = doc is not None and doc.session_context is not None
        if not shared.decoder_ready() and live:   # loading in the background: the centre's decoding follows it
            schedule = in_session(doc)
            shared.when_decoder_ready(lambda: schedule(self._decoder_arrived))
        self._follow_labels(doc if live else None)

    def _follow_labels(self, doc) -> None:
        """Show every saved change of the reviewer's labels: this session's own at once, another
        session's or another server's on this session's next tick (their selections stay theirs).

        Another server's change is told on the labels' watcher thread, where ``pn.state.curdoc``
        is the document of whichever callback the server's thread is running (Bokeh's current
        document is one for the whole process): this session's, whenever it is busy. So only the
        server's thread, inside this session's callback, updates the store at once; every other
        call is handed over through the server's event loop (:func:`in_session`). A store updated
        from two threads at once can stop calling its watchers for good (param's batch flag,
        saved and restored by each thread, is left set): its page no longer follows the labels."""
        labels = self.shared.review_labels()
        self.labels_version = labels.version
        # Weak references: the shared labels outlive every session, and must not keep a closed
        # session's store or document alive when no session-destroyed hook ran (close() below).
        store_ref, doc_ref = weakref.ref(self), (weakref.ref(doc) if doc is not None else None)
        schedule = in_session(doc) if doc is not None else None
        server_thread = threading.get_ident()       # the one that builds sessions and runs their callbacks

        def changed(version: int) -> None:
            store, session_doc = store_ref(), (doc_ref() if doc_ref else None)
            if store is None or (doc_ref is not None and session_doc is None):
                labels.unsubscribe(token)
            elif session_doc is None or (threading.get_ident() == server_thread and pn.state.curdoc is session_doc):
                store.param.update(labels_version=version)
            else:
                schedule(lambda: store.update(labels_version=version))

        token = self._labels_token = labels.subscribe(changed)
        if doc is not None:
            pn.state.on_session_destroyed(lambda context: self.close())

    def close(self) -> None:
        """Stop following the shared labels (the session ended, or it opened another recording)."""
        self.shared.review_labels().unsubscribe(self._labels_token)

    def _decoder_arrived(self) -> None:
        with one_patch():
            self._refresh()

    # ------------------------------------------------------------------ actions
    def update(self, **changes) -> None:
        """Set several parameters at once: one new selection, one document patch for the browser."""
        with one_patch():
            self.param.update(**changes)

    def select_range(self, column: str, lo: float | None, hi: float | None = None) -> None:
        """Brush ``column`` to [lo, hi]; ``lo=None`` clears that column's brush."""
        brush = dict(self.brush)
        if lo is None:
            brush.pop(column, None)
        else:
            brush[column] = (float(lo), float(hi))
        self.update(brush=brush)

    def clear(self) -> None:
        """Forget the brushes (the time window and filters stay)."""
        self.update(brush={})

    # ------------------------------------------------------------------ masks
    def window_mask(self):
        """Beats in the visible window and split (what the charts draw as their background)."""
        key = (self.time_range if self.follow_window else None, self.split)
        if self._base_cache is not None and self._base_cache[0] == key:
            return self._base_cache[1]
        cols, xp = self.shared.columns, self.shared.xp
        mask = xp.ones(self.shared.n_beats, dtype=bool)
        if key[0] is not None:
            t = cols["time_s"]
            mask &= (t >= key[0][0]) & (t <= key[0][1])
        if self.split != "all":
            mask &= cols["is_test"] == (1 if self.split == "test" else 0)
        self._base_cache = (key, mask)
        return mask

    def _column_mask(self, column: str, bounds: tuple[float, float]):
        cached = self._brush_cache.get(column)
        if cached is not None and cached[0] == bounds:
            return cached[1]
        values = self.shared.columns[column]
        mask = (values >= bounds[0]) & (values <= bounds[1])
        self._brush_cache[column] = (bounds, mask)
        return mask

    def brush_mask(self, brush: dict | None = None):
        mask = self.shared.xp.ones(self.shared.n_beats, dtype=bool)
        for column, bounds in (self.brush if brush is None else brush).items():
            mask &= self._column_mask(column, tuple(bounds))
        return mask

    # ------------------------------------------------------------------ refresh
    @param.depends("brush", "time_range", "follow_window", "split", "threshold", "rank_low_quality", watch=True)
    def _refresh(self) -> None:
        for column, bounds in self.brush.items():
            if column not in BRUSH_COLUMNS:
                raise ValueError(f"brush column must be one of {', '.join(BRUSH_COLUMNS)}; got {column!r}")
            if len(bounds) != 2 or not bounds[0] <= bounds[1]:
                raise ValueError(f"brush on {column} must be (lo, hi) with lo <= hi; got {bounds!r}")
        base = self.window_mask()
        brush_masks = {c: self._column_mask(c, tuple(b)) for c, b in self.brush.items()}
        mask = base
        for brushed in brush_masks.values():
            mask = mask & brushed
        count = int(mask.sum())                                     # sync point (GPU): one scalar
        top, n_out = self._ranked_outliers(mask)
        previous = self.selection
        same = previous is not None and (previous.mask is mask or bool(self.shared.xp.array_equal(previous.mask, mask)))
        self.selection = Selection(version=next(self._versions), mask=mask, base=base, brush_masks=brush_masks,
                                   count=count, total=self.shared.n_beats, threshold=float(self.threshold),
                                   outliers=self.shared.beats.iloc[top], n_outliers=n_out, shared=self.shared,
                                   same_beats_as=(previous.same_beats_as or previous) if same else None)

    def _ranked_outliers(self, mask) -> tuple[np.ndarray, int]:
        """Host indices of the selected beats at or above the threshold, highest score first (ties by
        beat order), at most TABLE_LIMIT of them; and how many there are in all. Low-quality beats
        are left out unless ``rank_low_quality``."""
        xp, scores = self.shared.xp, self.shared.columns["score"]
        ranked = mask if self.rank_low_quality else mask & self.shared.columns["clean"]
        index = xp.flatnonzero(ranked & (scores >= self.threshold))
        n_out = int(index.shape[0])
        if n_out > TABLE_LIMIT:  # keep the top scores (ties at the cut included) before sorting
            cut = xp.partition(scores[index], n_out - TABLE_LIMIT)[n_out - TABLE_LIMIT]
            index = index[scores[index] >= cut]
        order = xp.lexsort(xp.stack([index, -scores[index]]))
        return backend.to_host(index[order][:TABLE_LIMIT]), n_out

    # ------------------------------------------------------------------ the focused beat
    def focus_window(self, beat_id: int | None = None, seconds: float = 4.0) -> tuple[float, float]:
        """Time window (s) centred on a beat, for zooming the recording view."""
        beat = self.shared.beats.iloc[int(self.focus if beat_id is None else beat_id)]
        centre = float(beat["time_s"])
        return centre - seconds / 2, centre + seconds / 2

    def focused(self) -> tuple[pd.Series, np.ndarray, np.ndarray] | None:
        """(beat row, embedded beat, its reconstruction decode(mu)) of the focused beat, or None."""
        if self.focus is None:
            return None
        row = np.array(backend.to_host(self.shared.embeddings[self.focus]))  # a copy torch may write
        return self.shared.beats.iloc[self.focus], row, self.shared.reconstruct(row)[0]

    # ------------------------------------------------------------------ controls
    def _link(self, widget, name: str):
        """Widget <-> parameter, each widget change applied through :meth:`update` (one patch)."""
        widget.param.watch(lambda event: self.update(**{name: event.new}), "value")
        self.param.watch(lambda event: setattr(widget, "value", event.new), name)
        return widget

    def widget(self, name: str, **params):
        """A new widget for ``threshold``, ``split``, ``colour_by`` or ``follow_window``, linked both ways."""
        if name == "threshold":
            lo, hi = self.param.threshold.bounds
            # A plain slider: Panel's editable one links its parts in the browser through a registry
            # that keeps every closed session's widgets (and this store) alive.
            widget = pn.widgets.FloatSlider(name=self.param.threshold.label, value=self.threshold, start=lo, end=hi,
                                            step=0.01, format="0.00", **params)
        elif name == "split":
            widget = pn.widgets.RadioButtonGroup(options=SPLITS, value=self.split, button_type="primary",
                                                 button_style="outline", **params)
        elif name == "colour_by":
            widget = pn.widgets.RadioButtonGroup(options=COLOUR_MODES, value=self.colour_by, button_type="primary",
                                                 button_style="outline", **params)
        elif name in ("follow_window", "rank_low_quality"):
            widget = pn.widgets.Checkbox(name=self.param[name].label, value=getattr(self, name), **params)
        else:
            raise ValueError("widget name must be one of threshold, split, colour_by, follow_window, "
                             f"rank_low_quality; got {name!r}")
        return self._link(widget, name)

    def __panel__(self):
        clear = pn.widgets.Button(name="Clear selection", button_type="default", sizing_mode="stretch_width")
        clear.on_click(lambda _: self.clear())
        label = pn.pane.HTML("<span style='font-size:13px;font-weight:600;color:#3d4b5c'>Beats shown</span>",
                             margin=(8, 10, 0, 10))
        colour = pn.pane.HTML("<span style='font-size:13px;font-weight:600;color:#3d4b5c'>Colour the planes by</span>",
                              margin=(8, 10, 0, 10))
        return pn.Column(self.widget("threshold", sizing_mode="stretch_width"), label,
                         self.widget("split", sizing_mode="stretch_width"), self.widget("follow_window"),
                         self.widget("rank_low_quality"), colour,
                         self.widget("colour_by", sizing_mode="stretch_width"), clear,
                         sizing_mode="stretch_width", css_classes=["ecg-controls"])
