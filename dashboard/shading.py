"""Counts per pixel → one byte of opacity each, and the palette that colours those bytes in the page.

A density image of one colour (the recording's raster, the tachogram, the planes' unselected
beats) goes to the browser as uint8 opacity through Bokeh's ``image`` glyph and a 256-step colour
mapper, not as RGBA: a quarter of the bytes to send and for the browser to take in, which on a
slow machine is much of a zoom's or pan's time.
"""
from __future__ import annotations

import numpy as np
from bokeh.models import LinearColorMapper


def opacity(counts: np.ndarray, lo: int = 70, hi: int = 255) -> np.ndarray:
    """uint8 opacity of each pixel: 0 where ``counts`` is 0, else from ``lo`` to ``hi`` with the log
    of the count, so that dense pixels read darker than a single stroke."""
    out = np.zeros(counts.shape, dtype=np.uint8)
    filled = counts > 0
    if filled.any():
        level = np.log1p(counts[filled])
        out[filled] = (lo + (hi - lo) * level / level.max()).astype(np.uint8)
    return out


def opacity_mapper(color: str) -> LinearColorMapper:
    """The colour mapper that draws :func:`opacity` bytes as ``color`` ('#rrggbb') at that opacity:
    256 colours from 0 to 256, one per byte value."""
    return LinearColorMapper(palette=[f"{color}{a:02x}" for a in range(256)], low=0, high=256)
