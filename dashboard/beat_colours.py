"""The colour each beat takes in an image: the score palette (percentiles 50–100), the reviewer's or
reference labels as classes of ``CLASS_COLORS``, beat families, and RGBA pixels of a density.

See Also
--------
dashboard.spec : the colours themselves.
dashboard.charts.PlaneChart : the planes coloured by these.
"""
from __future__ import annotations

import numpy as np

from dashboard.shading import opacity
from dashboard.spec import CLASS_COLORS, FAMILY_COLORS, SCORE_CMAP
from pipeline import backend


def rgba(rgb_hex: str) -> np.uint32:
    """'#rrggbb' → the RGB part of a little-endian RGBA uint32 pixel (alpha 0)."""
    r, g, b = (int(rgb_hex[i:i + 2], 16) for i in (1, 3, 5))
    return np.uint32(r | g << 8 | b << 16)


def palette_rgba(colors: list[str], n: int = 256) -> np.ndarray:
    """``n`` RGB pixels interpolated along ``colors`` (alpha 0), for colouring images."""
    stops = np.array([[int(c[i:i + 2], 16) for i in (1, 3, 5)] for c in colors], dtype=float)
    at = np.linspace(0, len(colors) - 1, n)
    rgb = np.stack([np.interp(at, np.arange(len(colors)), stops[:, k]) for k in range(3)], axis=1).round()
    rgb = rgb.astype(np.uint32)
    return rgb[:, 0] | rgb[:, 1] << 8 | rgb[:, 2] << 16


SCORE_PALETTE = palette_rgba(SCORE_CMAP)


def percentile_rank(scores):
    """Each beat's score as its rank in the recording, 0..1 (device array of the scores' type)."""
    xp = backend.xp_of(scores)
    order = xp.argsort(scores)
    rank = xp.empty(scores.shape[0], dtype=xp.float64)
    rank[order] = xp.arange(scores.shape[0]) / max(scores.shape[0] - 1, 1)
    return rank


def density_image(counts: np.ndarray, rgb: np.ndarray, alpha: tuple[int, int]) -> np.ndarray:
    """RGBA pixels (uint32): ``rgb`` where there are beats, at the :func:`opacity` of their count
    from ``alpha[0]`` to ``alpha[1]``; transparent elsewhere. (For images of many colours: one
    colour's density goes to the page as opacity bytes.)"""
    a = opacity(counts, *alpha).astype(np.uint32)
    return np.where(a > 0, (a << 24) | rgb, np.uint32(0))


def beat_categories(shared, mode: str) -> tuple:
    """(code per beat as a device array, colour per code) for colouring by ``mode``: 'reference'
    or 'review' (classes of CLASS_COLORS) or 'family' (the ten largest, then the rest)."""
    if mode == "family":
        codes = np.minimum(shared.beats["family"].to_numpy(), len(FAMILY_COLORS) - 1).astype(np.int8)
        return shared.xp.asarray(codes), FAMILY_COLORS
    if mode == "reference":
        labels = shared.beats["label"].to_numpy() if shared.has_labels else np.full(shared.n_beats, "", object)
        codes = shared.derived("classes/reference", lambda: shared.xp.asarray(label_classes(labels)))
    elif mode == "review":
        codes = shared.xp.asarray(label_classes(shared.review_of_beats()))
    else:
        raise ValueError(f"colour mode must be one of score, reference, review, family; got {mode!r}")
    return codes, list(CLASS_COLORS.values())


def label_classes(labels: np.ndarray) -> np.ndarray:
    """Code into CLASS_COLORS of each label: its AAMI class for a MIT-BIH symbol, 'artefact', any
    other text as 'other', '' as no label."""
    from pipeline.metrics import aami_class

    names = list(CLASS_COLORS)
    classes = aami_class(labels)
    labels = np.asarray(labels, dtype=object)
    classes = np.where(classes != "", classes, np.where(labels == "artefact", "artefact",
                                                         np.where(labels == "", "", "other")))
    return np.array([names.index(c) for c in classes], dtype=np.int8)
