"""The data behind the views: one shared, read-only run and one :class:`DataStore` per browser session.

:class:`SharedRun` is built once per server process from the pipeline's ``RunResult`` (host
copies of the beats table, the signal and the embedded beats, the CPU model); every session
reads it and nobody writes it. :class:`DataStore` holds one session's selections (linked brush
ranges, the visible time window, the held-out filter, the outlier threshold, the focused beat)
and publishes one immutable :class:`Selection` per change, which the views only present.

See Also
--------
pipeline.results.RunResult : what a run holds.
dashboard.views : the views that read a DataStore.
"""
from __future__ import annotations

import contextlib
import itertools
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import panel as pn
import param

BRUSH_COLUMNS = ("length_s", "z1", "z2", "score", "time_s")
SPLITS = {"All beats": "all", "Training 75%": "train", "Held-out 25%": "test"}
OUTLIER_QUANTILE = 0.98     # default threshold: the top 2% of scores
TABLE_LIMIT = 2000          # rows the ranked outlier table holds at most


@contextlib.contextmanager
def frozen(doc=None):
    """Defer the Bokeh document's model-graph recomputation to the end of the block.

    Every HoloViews plot update freezes the document and, when it thaws, walks all of its
    models again; one selection updates several plots, so without an outer freeze the page pays
    that walk once per plot. Inside this block it pays it once. ``doc`` defaults to the current
    session's document; without one this does nothing.
    """
    doc = doc if doc is not None else pn.state.curdoc
    if doc is None or not hasattr(doc, "models"):
        yield
        return
    with doc.models.freeze():
        yield


# --------------------------------------------------------------------------- shared, read-only
@dataclass(eq=False)
class SharedRun:
    """Host data of one finished run, shared read-only by every session of the server.

    ``beats`` is the run's table plus ``peak`` (the signal at the fiducial, where view 1 puts
    its markers) and ``is_test`` (1 for the held-out 25%). ``signal_frame`` has one row per
    sample: ``t`` (seconds) and ``amplitude``.
    """

    run: object
    beats: pd.DataFrame
    signal_frame: pd.DataFrame
    embeddings: np.ndarray
    model: object
    fs: float
    columns: dict = field(default_factory=dict)      # column name -> numpy array (for fast masks)
    extras: dict = field(default_factory=dict)       # renderer-specific shared data (e.g. cuDF frames)

    @classmethod
    def from_run(cls, run) -> "SharedRun":
        signal = np.asarray(run.signal, dtype=np.float32)
        beats = run.beats.copy()
        beats["peak"] = signal[beats["fiducial"].to_numpy()]
        beats["is_test"] = (beats["split"] == "test").astype(np.int8)
        signal_frame = pd.DataFrame({"t": np.arange(signal.shape[0], dtype=np.float64) / run.fs,
                                     "amplitude": signal})
        # Brushable columns in float64: with NumPy 2 a float32 array compared with a Python float
        # compares in float32, so a brush edge within half a float32 step of a value would select
        # differently from pandas/cuDF queries, which compare in float64.
        columns = {c: beats[c].to_numpy(dtype=np.float64) for c in BRUSH_COLUMNS}
        columns.update({c: beats[c].to_numpy() for c in ("is_test", "beat_id")})
        return cls(run=run, beats=beats, signal_frame=signal_frame,
                   embeddings=np.array(run.embeddings, dtype=np.float32),  # in RAM, writable
                   model=run.model("cpu"), fs=float(run.fs), columns=columns)

    # ------------------------------------------------------------------ facts for the views
    @property
    def report(self) -> dict:
        return self.run.report

    @property
    def duration_s(self) -> float:
        return len(self.signal_frame) / self.fs

    @property
    def has_labels(self) -> bool:
        return "label" in self.beats

    def extent(self, column: str) -> tuple[float, float]:
        values = self.columns[column] if column in self.columns else self.beats[column].to_numpy()
        return float(np.min(values)), float(np.max(values))

    def default_threshold(self) -> float:
        return float(np.quantile(self.columns["score"], OUTLIER_QUANTILE))

    # ------------------------------------------------------------------ the model (CPU)
    def decode(self, z: np.ndarray) -> np.ndarray:
        """Decoder output at latent points ``z`` (n, 2) → (n, width)."""
        import torch

        with torch.no_grad():
            return self.model.decode(torch.as_tensor(np.atleast_2d(z), dtype=torch.float32)).numpy()

    def reconstruct(self, rows: np.ndarray) -> np.ndarray:
        """``decode(mu)`` of embedded beats (n, width): what the VAE makes of them."""
        import torch

        with torch.no_grad():
            mu, _ = self.model.encode(torch.as_tensor(np.atleast_2d(rows), dtype=torch.float32))
            return self.model.decode(mu).numpy()


# --------------------------------------------------------------------------- one session
@dataclass(frozen=True, eq=False)
class Selection:
    """What one session currently selects; a new one replaces it on every change."""

    version: int
    mask: np.ndarray                 # bool per beat: brush ∩ time window ∩ split
    count: int
    total: int
    threshold: float
    outliers: pd.DataFrame           # selected beats above the threshold, highest score first (≤ TABLE_LIMIT)
    n_outliers: int
    centre_z: np.ndarray | None      # mean (z1, z2) of the selected beats
    centre_decoded: np.ndarray | None  # decode(centre_z)
    mean_beat: np.ndarray | None     # mean of the selected embedded beats

    @property
    def ids(self) -> np.ndarray:
        return np.flatnonzero(self.mask)


class DataStore(pn.viewable.Viewer):
    """One browser session's selections over a :class:`SharedRun`.

    Set ``brush`` (``{column: (lo, hi)}``, intersected), ``time_range``, ``split``,
    ``threshold`` or ``focus``; read ``selection``. Renderers mirror ``brush`` to and from their
    linked charts; everything else only reads.
    """

    shared = param.ClassSelector(class_=SharedRun, constant=True, doc="the run, read-only")
    brush = param.Dict(default={}, doc="linked brush ranges {column: (lo, hi)}; beats inside all of them")
    time_range = param.Range(default=None, allow_None=True, doc="visible window of the recording (s)")
    follow_window = param.Boolean(default=True, label="Filter beats to the visible window",
                                  doc="whether the recording view's window filters the beat views")
    split = param.Selector(default="all", objects=SPLITS, label="Beats")
    threshold = param.Number(default=0.0, label="Outlier threshold (score)")
    focus = param.Integer(default=None, allow_None=True, doc="beat_id shown in detail (from the table)")
    selection = param.ClassSelector(class_=Selection, doc="the current selection (output)")

    _versions = itertools.count(1)

    def __init__(self, shared: SharedRun, **params):
        lo, hi = shared.extent("score")
        params.setdefault("threshold", shared.default_threshold())
        super().__init__(shared=shared, **params)
        self.param.threshold.bounds = (lo, hi)
        self.param.threshold.softbounds = (lo, hi)
        self._window_cache: tuple | None = None
        self._refresh()

    # ------------------------------------------------------------------ actions
    def update(self, **changes) -> None:
        """Set several parameters at once; the views update once, in one document freeze."""
        with frozen():
            self.param.update(**changes)

    def select_range(self, column: str, lo: float | None, hi: float | None = None) -> None:
        """Brush ``column`` to [lo, hi]; ``lo=None`` clears that column's brush."""
        brush = dict(self.brush)
        if lo is None:
            brush.pop(column, None)
        else:
            brush[column] = (lo, hi)
        self.update(brush=brush)

    def clear(self) -> None:
        """Forget the brushes (the time window and filters stay)."""
        self.update(brush={})

    # ------------------------------------------------------------------ masks
    def window_mask(self) -> np.ndarray:
        """Beats in the visible window and split (what the linked charts are drawn from)."""
        key = (self.time_range if self.follow_window else None, self.split)
        if self._window_cache is not None and self._window_cache[0] == key:
            return self._window_cache[1]
        cols = self.shared.columns
        mask = np.ones(len(cols["beat_id"]), dtype=bool)
        if key[0] is not None:
            t = cols["time_s"]
            mask &= (t >= key[0][0]) & (t <= key[0][1])
        if self.split != "all":
            mask &= cols["is_test"] == (1 if self.split == "test" else 0)
        self._window_cache = (key, mask)
        return mask

    def brush_mask(self, brush: dict | None = None) -> np.ndarray:
        cols = self.shared.columns
        mask = np.ones(len(cols["beat_id"]), dtype=bool)
        for column, (lo, hi) in (self.brush if brush is None else brush).items():
            values = cols[column]
            mask &= (values >= lo) & (values <= hi)
        return mask

    def window_frame(self) -> pd.DataFrame:
        mask = self.window_mask()
        return self.shared.beats if mask.all() else self.shared.beats[mask]

    # ------------------------------------------------------------------ refresh
    @param.depends("brush", "time_range", "follow_window", "split", "threshold", watch=True)
    def _refresh(self) -> None:
        for column, bounds in self.brush.items():
            if column not in BRUSH_COLUMNS:
                raise ValueError(f"brush column must be one of {', '.join(BRUSH_COLUMNS)}; got {column!r}")
            if len(bounds) != 2 or not bounds[0] <= bounds[1]:
                raise ValueError(f"brush on {column} must be (lo, hi) with lo <= hi; got {bounds!r}")
        shared = self.shared
        mask = self.brush_mask() & self.window_mask()
        count = int(mask.sum())
        scores = shared.columns["score"]
        above = mask & (scores > self.threshold)
        n_out = int(above.sum())
        index = np.flatnonzero(above)
        order = index[np.argsort(-scores[index], kind="stable")][:TABLE_LIMIT]
        outliers = shared.beats.iloc[order]
        centre, decoded, mean_beat = self._centre(mask, count)
        self.selection = Selection(version=next(self._versions), mask=mask, count=count, total=len(mask),
                                   threshold=float(self.threshold), outliers=outliers, n_outliers=n_out,
                                   centre_z=centre, centre_decoded=decoded, mean_beat=mean_beat)

    def _centre(self, mask: np.ndarray, count: int) -> tuple:
        """(centre_z, centre_decoded, mean_beat) of the selected beats.

        When the selected beats did not change (e.g. only the threshold moved), the previous
        selection's arrays are returned as they are: views compare them by identity to skip
        redrawing what did not change."""
        previous = self.selection
        if previous is not None and np.array_equal(previous.mask, mask):
            return previous.centre_z, previous.centre_decoded, previous.mean_beat
        if not count:
            return None, None, None
        shared = self.shared
        selected = np.flatnonzero(mask)
        centre = np.array([shared.columns["z1"][selected].mean(), shared.columns["z2"][selected].mean()],
                          dtype=np.float32)
        return centre, shared.decode(centre)[0], shared.embeddings[selected].mean(axis=0)

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
        row = self.shared.embeddings[self.focus]
        return self.shared.beats.iloc[self.focus], row, self.shared.reconstruct(row)[0]

    # ------------------------------------------------------------------ controls
    def _link(self, widget, name: str):
        """Widget <-> parameter, each widget change applied through :meth:`update` (one freeze)."""
        widget.param.watch(lambda event: self.update(**{name: event.new}), "value")
        self.param.watch(lambda event: setattr(widget, "value", event.new), name)
        return widget

    def widget(self, name: str, **params):
        """A new widget for ``threshold``, ``split`` or ``follow_window``, linked both ways."""
        if name == "threshold":
            lo, hi = self.param.threshold.bounds
            widget = pn.widgets.EditableFloatSlider(name=self.param.threshold.label, value=self.threshold, start=lo,
                                                    end=hi, step=0.01, format="0.00", **params)
        elif name == "split":
            widget = pn.widgets.RadioButtonGroup(options=SPLITS, value=self.split, button_type="primary",
                                                 button_style="outline", **params)
        elif name == "follow_window":
            widget = pn.widgets.Checkbox(name=self.param.follow_window.label, value=self.follow_window, **params)
        else:
            raise ValueError(f"widget name must be one of threshold, split, follow_window; got {name!r}")
        return self._link(widget, name)

    def __panel__(self):
        clear = pn.widgets.Button(name="Clear selection", button_type="default", sizing_mode="stretch_width")
        clear.on_click(lambda _: self.clear())
        label = pn.pane.HTML("<span style='font-size:13px;font-weight:600;color:#3d4b5c'>Beats shown</span>",
                             margin=(8, 10, 0, 10))
        return pn.Column(self.widget("threshold", sizing_mode="stretch_width"), label,
                         self.widget("split", sizing_mode="stretch_width"), self.widget("follow_window"), clear,
                         sizing_mode="stretch_width", css_classes=["ecg-controls"])
