"""The recording as a raster, at any zoom: Datashader draws the samples in the visible window.

A 20M-sample line drawn whole costs hundreds of milliseconds on a CPU even in Datashader, and
most of it is wasted: a screen a few thousand pixels wide shows at most a minimum and a maximum
per pixel column. So the signal is kept at several levels of detail, each a min/max trace (per
block of ``4**k`` samples, the block's minimum and maximum in the order they occur, which draws
nearly the same pixels as the samples themselves once several blocks fit in a pixel column: only a
block that straddles two columns gives its extremes to one of them). A render picks
the coarsest level that still has a few points per pixel and draws only the visible slice; deep
zooms draw the raw samples, down to single samples. Levels are built once per run on the run's
device (CuPy on a GPU), and drawn from pandas or cuDF frames of the visible slice.

A page shows the whole recording first, and only its coarsest level is needed for that: it is built
on the host with the raster, and the other levels when a render first needs them (a server builds
them in the background after its first page, with Datashader's compilation). On a GPU that keeps
the device out of a cached start until the first page is up: uploading the recording and building
its levels there, CUDA's context included, had made the views' preparation several times longer.

See Also
--------
dashboard.recording_view.SignalChart : shows the raster and asks for new ones on zoom and pan.
"""
from __future__ import annotations

import functools
import threading
from dataclasses import dataclass
from typing import Callable

import numpy as np

from dashboard import server_gc
from dashboard.announcement import Announcement
from dashboard.shading import opacity
from pipeline import backend

POINTS_PER_PIXEL = 4       # the coarsest level used still has this many points per pixel column
BLOCK_GROWTH = 4           # each level's blocks are this many times the previous level's
MIN_LEVEL_POINTS = 8_000   # no level coarser than this: 4 points per pixel of a 2000-pixel-wide screen


@dataclass(frozen=True, eq=False)
class Level:
    """One level of detail: times ``t`` (s) and values ``y`` (device arrays, NumPy or CuPy);
    ``block`` samples per pair."""

    block: int
    t: object
    y: object

    def __len__(self) -> int:
        return int(self.t.shape[0])


def min_max_trace(signal, block: int, fs: float):
    """(t, y) of each block's minimum and maximum, in the order they occur (device arrays; the
    first of equal extremes, as ``argmin``/``argmax``; the signal is finite, the loader sees to it).

    A trailing partial block is dropped from the trace; the caller keeps the raw level for it.
    """
    if backend.is_cupy_array(signal):
        return _min_max_trace_gpu(signal, block, fs)
    n = (signal.shape[0] // block) * block
    blocks = signal[:n].reshape(-1, block)
    lo, hi = blocks.argmin(axis=1), blocks.argmax(axis=1)
    first, second = np.minimum(lo, hi), np.maximum(lo, hi)
    starts = np.arange(blocks.shape[0]) * block
    index = np.stack([starts + first, starts + second], axis=1).ravel()
    return index / fs, signal[index]


_MIN_MAX_CODE = """
const long long start = (i / 2) * block;
long long lo = start, hi = start;
for (long long k = start + 1; k < start + block; ++k) {
    if (signal[k] < signal[lo]) lo = k;
    if (signal[k] > signal[hi]) hi = k;
}
const long long first = lo < hi ? lo : hi, second = lo < hi ? hi : lo;
const long long at = i % 2 == 0 ? first : second;
t = at / fs;
y = signal[at];
"""


def _min_max_trace_gpu(signal, block: int, fs: float):
    """:func:`min_max_trace` in one CuPy kernel: a thread per point of the trace scans its block.

    Built from CuPy's ``argmin(axis=1)``, ``argmax`` and friends, the levels took 13 kernels, six
    of them CUB reductions compiled once per level's shape (seconds each), which a machine's first
    server and its first zoom out waited for. This is one kernel; like those, CuPy keeps it
    compiled on disk."""
    import cupy

    points = 2 * (signal.shape[0] // block)
    t, y = cupy.empty(points, dtype=cupy.float64), cupy.empty(points, dtype=signal.dtype)
    _min_max_kernel()(signal, block, fs, t, y)
    return t, y


@functools.cache
def _min_max_kernel():
    import cupy

    return cupy.ElementwiseKernel("raw T signal, int64 block, float64 fs", "float64 t, T y", _MIN_MAX_CODE,
                                  "ecg_min_max_trace")


class SignalRaster:
    """Levels of detail of one recording, and a Datashader render of any window of it."""

    def __init__(self, signal, fs: float, device: str = "cpu"):
        """``signal``: a 1-D float32 host array; ``device``: where the levels are built and drawn
        (``gpu``: CuPy and cuDF)."""
        self.fs = float(fs)
        self.n = int(signal.shape[0])
        self.device = device
        self._signal = signal
        self.blocks = [1]
        while 2 * self.n / (self.blocks[-1] * BLOCK_GROWTH) >= MIN_LEVEL_POINTS:
            self.blocks.append(self.blocks[-1] * BLOCK_GROWTH)
        self.overview = self._build_level(np, self.blocks[-1])       # on the host, for the first page
        # The y axis spans the signal but for its rarest extremes (a lead-off spike would squash it).
        lo, hi = (float(v) for v in np.quantile(self.overview.y, [0.0005, 0.9995]))
        pad = 0.08 * ((hi - lo) or 1.0)
        self.y_range = (lo - pad, hi + pad)
        self._levels: list[Level] | None = None
        self._levels_lock = threading.Lock()
        self.compiled = Announcement()

    @property
    def levels(self) -> list[Level]:
        """Every level, finest first, on the raster's device (built at the first call)."""
        with self._levels_lock:
            if self._levels is None:
                xp = backend.xp_for(self.device)
                signal = xp.asarray(self._signal)
                levels = [self._build_level(xp, block, signal) for block in self.blocks[:-1]]
                # On the host the coarsest level is the overview, built already.
                levels.append(self.overview if xp is np else self._build_level(xp, self.blocks[-1], signal))
                self._levels = levels
            return self._levels

    def _build_level(self, xp, block: int, signal=None) -> Level:
        signal = self._signal if signal is None else signal
        if block == 1:
            return Level(1, xp.arange(self.n) / self.fs, signal.astype(np.float32))
        t, y = min_max_trace(signal, block, self.fs)
        return Level(block, t, y.astype(np.float32))

    def compile(self) -> None:
        """Compile Datashader's line drawing with a tiny render: seconds of Numba JIT, once per
        process. Until it is done, :meth:`trace` gives what the browser can draw instead."""
        self.levels       # built here, in the background, rather than at a session's first zoom
        x1 = float(min(1.0, self.duration_s))
        self.render(0.0, x1, 8, 8)        # float bounds: Numba compiles for the argument types real renders use
        self.compiled.set()

    def when_compiled(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` once :meth:`compile` is done (from its thread; at once if it is)."""
        self.compiled.then(callback)

    def compile_in_background(self, after: threading.Event | None = None, delay_s: float = 10.0) -> None:
        """:meth:`compile` in a thread of its own, once ``after`` is set (or ``delay_s`` passed)."""
        def work():
            if after is not None:
                after.wait(timeout=delay_s)
            with server_gc.paused():   # Datashader's and Numba's imports (see dashboard.server_gc)
                self.compile()
        threading.Thread(target=work, name="ecg-datashader-jit", daemon=True).start()

    @property
    def duration_s(self) -> float:
        return self.n / self.fs

    def level_for(self, x0: float, x1: float, width: int) -> Level:
        """The coarsest level that still has ``POINTS_PER_PIXEL`` points per pixel in [x0, x1]
        (the host's overview while it is the one, and the levels are not built yet)."""
        samples = max(x1 - x0, 1.0 / self.fs) * self.fs
        k = 0
        while k + 1 < len(self.blocks) and 2 * samples / self.blocks[k + 1] >= POINTS_PER_PIXEL * width:
            k += 1
        if self._levels is None and k == len(self.blocks) - 1:
            return self.overview
        return self.levels[k]

    @staticmethod
    def visible(level: Level, x0: float, x1: float) -> tuple:
        """(t, y) of ``level`` in [x0, x1] (device arrays), with one neighbour on each side so that
        lines reach the edges."""
        xp = backend.xp_of(level.t)
        edges = xp.asarray([x0, x1], dtype=level.t.dtype)
        lo = max(int(xp.searchsorted(level.t, edges[:1], side="left")[0]) - 1, 0)
        hi = min(int(xp.searchsorted(level.t, edges[1:], side="right")[0]) + 1, len(level))
        return level.t[lo:hi], level.y[lo:hi]

    def trace(self, x0: float, x1: float, width: int):
        """(t, y) host arrays of the level :meth:`render` would draw in [x0, x1]: a line through them
        draws nearly the same pixels (without the density shading)."""
        t, y = self.visible(self.level_for(x0, x1, width), x0, x1)
        return backend.to_host(t), backend.to_host(y)

    def raw_samples(self, x0: float, x1: float, width: int):
        """(t, y) host arrays of the samples in [x0, x1] when there are few enough to draw one by
        one (at most two per pixel: zoomed in to single samples), else None."""
        if (x1 - x0) * self.fs > 2 * width:
            return None
        return self.trace(x0, x1, width)

    def render(self, x0: float, x1: float, width: int, height: int,
               y_range: tuple[float, float] | None = None) -> np.ndarray:
        """Opacity bytes (:func:`shade`: uint8, ``height`` × ``width``, row 0 at the bottom) of the line
        in the window."""
        import datashader as ds

        t, y = self.visible(self.level_for(x0, x1, width), x0, x1)
        canvas = ds.Canvas(plot_width=int(width), plot_height=int(height), x_range=(x0, x1),
                           y_range=y_range or self.y_range)
        agg = canvas.line(_frame({"t": t, "y": y}), "t", "y", agg=ds.count())
        return shade(backend.to_host(agg.data))


def _frame(columns: dict):
    """The columns as the frame Datashader draws from: cuDF for CuPy arrays (imported here, at the
    first render, which the page's first drawing does not wait for), else pandas."""
    if backend.is_cupy_array(next(iter(columns.values()))):
        import cudf

        return cudf.DataFrame(columns)
    import pandas as pd

    return pd.DataFrame(columns)


def shade(counts: np.ndarray) -> np.ndarray:
    """Line counts per pixel (Datashader's aggregate: row 0 at the top) → opacity bytes
    (:func:`dashboard.shading.opacity`, row 0 at the bottom, as Bokeh's ``image`` draws).
    Datashader's own ``shade`` costs 20–75 ms per screen through xarray; this costs a few."""
    return opacity(np.nan_to_num(counts[::-1], nan=0.0))
