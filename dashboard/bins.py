"""Bin indexes of the linked charts, computed once per run: each beat's bin in every chart.

A brush then costs a mask and one ``bincount`` per chart — work proportional to the beats and
the bins, never to HoloViews pipelines or Bokeh glyphs per beat. The arrays live where the beats
live (CuPy on a GPU run, NumPy otherwise); what a chart draws comes back as small host arrays.

See Also
--------
dashboard.shared_run.SharedRun : builds the indexes of a run.
dashboard.charts : draws the counts.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline import backend


@dataclass(frozen=True, eq=False)
class BinIndex:
    """Each beat's bin on a regular 1-D or 2-D grid.

    ``index`` is int32 per beat (device array), ``shape`` is ``(n,)`` for a histogram and
    ``(ny, nx)`` for a 2-D grid (row 0 at the bottom, as Bokeh images are drawn), ``edges`` the
    host bin edges of each axis. A beat outside the grid has index ``size`` and is counted nowhere.
    """

    index: object
    shape: tuple[int, ...]
    edges: tuple[np.ndarray, ...]

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

    def counts(self, mask=None, weights=None) -> np.ndarray:
        """Beats (or the sum of ``weights``) per bin among ``mask`` (all beats when None), as a
        host float64 array of ``shape``."""
        xp = backend.xp_of(self.index)
        index = self.index if mask is None else self.index[mask]
        if weights is not None and mask is not None:
            weights = weights[mask]
        counts = xp.bincount(index, weights=weights, minlength=self.size + 1)[:self.size]
        return backend.to_host(counts).astype(np.float64).reshape(self.shape)


def _axis(values, lo: float, hi: float, n: int):
    """Bin number (int32, 0..n-1) of each value on [lo, hi]; values outside (and NaN, which callers
    leave out) fall into the end bins."""
    xp = backend.xp_of(values)
    span = (hi - lo) or 1.0
    position = xp.nan_to_num(xp.floor((values - lo) * (n / span)), nan=0.0)
    return xp.clip(position, 0, n - 1).astype(xp.int32)


def histogram_index(values, lo: float, hi: float, n: int) -> BinIndex:
    """``n`` equal bins over [lo, hi] (the values' extent, so that no beat falls outside); a NaN
    value (the last beat's interval after it) is counted nowhere."""
    if n < 1:
        raise ValueError(f"a histogram needs at least 1 bin; got {n}")
    xp = backend.xp_of(values)
    index = xp.where(xp.isnan(values), n, _axis(values, lo, hi, n)).astype(xp.int32)
    return BinIndex(index, (n,), (np.linspace(lo, hi, n + 1),))


def grid_index(x, y, x_range: tuple[float, float], y_range: tuple[float, float], shape: tuple[int, int]) -> BinIndex:
    """A ``shape = (ny, nx)`` grid over ``x_range`` × ``y_range``: flat index ``iy * nx + ix``;
    beats outside the ranges are counted nowhere (what a zoomed-in plot does not show)."""
    ny, nx = shape
    if nx < 1 or ny < 1:
        raise ValueError(f"a grid needs at least 1 × 1 cells; got shape {shape}")
    xp = backend.xp_of(x)
    ix, iy = _axis(x, *x_range, nx), _axis(y, *y_range, ny)
    inside = (x >= x_range[0]) & (x <= x_range[1]) & (y >= y_range[0]) & (y <= y_range[1])
    index = xp.where(inside, iy * nx + ix, nx * ny).astype(xp.int32)
    edges = (np.linspace(*x_range, nx + 1), np.linspace(*y_range, ny + 1))
    return BinIndex(index, (ny, nx), edges)
