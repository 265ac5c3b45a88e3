"""Summaries of repeated timings: median, p95, max (and the values), as every benchmark reports them."""
from __future__ import annotations

import math

import numpy as np


def percentile(values, q: float) -> float:
    """The ``q``-th percentile with linear interpolation between order statistics (NumPy's default)."""
    return float(np.percentile(np.asarray(values, dtype=float), q))


def summary(values, digits: int = 1) -> dict:
    """``{n, median, p95, max, min, values}`` of ``values`` (any unit; NaN where there are none)."""
    values = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not values:
        return {"n": 0, "median": math.nan, "p95": math.nan, "max": math.nan, "min": math.nan, "values": []}
    return {"n": len(values), "median": round(float(np.median(values)), digits),
            "p95": round(percentile(values, 95), digits), "max": round(max(values), digits),
            "min": round(min(values), digits), "values": [round(v, digits) for v in values]}


def p95_ratio(loaded: dict, reference: dict | None) -> float | None:
    """``loaded``'s p95 over ``reference``'s (two :func:`summary` results); None where either is empty."""
    if not reference or not reference["n"] or not loaded["n"]:
        return None
    return loaded["p95"] / reference["p95"]
