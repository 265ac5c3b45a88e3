"""Scores that mean the same in every recording: tail probabilities against the reference
population's normal beats, their combination, the one definition of an outlier, and a beat's
calibrated score in words.

A statistic of a beat (how far its shape is from its recording's normal beats, how early it
comes) is turned into the fraction of the reference population's normal beats whose statistic is
at least as high: a :class:`TailTable` holds that distribution as knots of its right tail, with an
exponential tail beyond the top percent, so that two very abnormal beats still differ (an
empirical fraction would tie them at 1/n). The components are combined by a weighted Fisher sum,
``X = Σ w_c (−ln p_c)``, and ``X`` itself is calibrated the same way, so the final score,
``−log10 P(X_normal ≥ X)``, reads "as unusual as 1 normal beat in 10^score of the population",
whatever the recording. No array here leaves its device: tables are tiny host arrays moved to the
input's array module (:func:`pipeline.backend.xp_of`) when used.

See Also
--------
pipeline.reference_score.reference_statistics : the statistics calibrated here (the previous step).
pipeline.reference_score.score_reference : applies these tables to a recording's beats.
pipeline.tables.beats_table : stores the calibrated score and its components (the next step).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pipeline import backend

# The one meaning of "outlier" that the CLI summary, the archive table and the dashboard share:
# a calibrated score of at least 2, i.e. as unusual as at most 1 in 100 of the reference
# population's normal beats, so the expected false-positive rate among normal beats is 1 %. A
# stricter line (3: 1 in 1,000) keeps too few abnormal beats: normal beats of other people vary
# (noise, intermittent bundle-branch block, a changing axis), and on MIT-BIH DS1 scored
# leave-one-record-out it keeps about a third of the abnormal beats where 2 keeps about two
# thirds (benchmarks/reference_dev.py measures both, per record and per AAMI class).
OUTLIER_SCORE = 2.0
TAIL_FRACTION = 0.01   # above this right-tail probability a table follows its fitted exponential tail
KNOTS = 256            # knots of the empirical part, log-spaced in tail probability from 1 to TAIL_FRACTION
TRANSFORMS = ("identity", "log1p")


# The beats-table columns that explain the calibrated score (pipeline.reference_score.ReferenceScores.columns),
# described for tables.SCORE_COMPONENTS and the views. The score itself is the table's ``score``.
COLUMNS = {
    "p_ref_shape": "fraction of the population's normal beats as far from their recording's normal template",
    "p_ref_rhythm": "fraction of the population's normal beats with a rhythm score at least this high",
    "p_ref_population": "fraction of the population's normal beats as far from the nearest population centroid",
    "ref_shape": "squared distance to the recording's normal template / its median among the normal beats",
}
SCORE_DESCRIPTION = ("calibrated outlier score: -log10 of the fraction of the reference population's normal beats "
                     f"at least as unusual (an outlier from {OUTLIER_SCORE:g})")


def expected_false_positive_rate(score: float = OUTLIER_SCORE) -> float:
    """Fraction of the reference population's normal beats that reach ``score`` (10^-score)."""
    return 10.0 ** (-score)


def is_outlier(score):
    """True where a calibrated score marks an outlier (:data:`OUTLIER_SCORE`). Array in, boolean
    array of the same type out."""
    return score >= OUTLIER_SCORE


# --------------------------------------------------------------------------- tail tables
@dataclass(frozen=True, repr=False)
class TailTable:
    """Right-tail distribution of a statistic among reference normal beats.

    ``u`` (ascending) and ``log_p`` (descending, natural log) are knots of ``u ↦ ln P(U ≥ u)``
    where ``U = transform(statistic)``; above ``u[-1]`` (the ``TAIL_FRACTION`` quantile) the tail
    is exponential with mean excess ``theta``: ``ln p = log_p[-1] − (u − u[-1]) / theta``.
    ``count``: how many normal beats it was fitted on.
    """

    u: np.ndarray
    log_p: np.ndarray
    theta: float
    transform: str
    count: int

    def __repr__(self) -> str:
        return (f"TailTable({self.transform}, {self.count:,} values, {len(self.u)} knots, "
                f"tail from {self.u[-1]:.3g} with mean excess {self.theta:.3g})")

    def as_arrays(self, prefix: str) -> dict:
        """The table as named host arrays (for an ``.npz``)."""
        return {f"{prefix}.u": self.u, f"{prefix}.log_p": self.log_p,
                f"{prefix}.tail": np.array([self.theta, self.count, TRANSFORMS.index(self.transform)], np.float64)}

    @classmethod
    def from_arrays(cls, arrays, prefix: str) -> "TailTable":
        theta, count, transform = arrays[f"{prefix}.tail"]
        return cls(np.asarray(arrays[f"{prefix}.u"], np.float64), np.asarray(arrays[f"{prefix}.log_p"], np.float64),
                   float(theta), TRANSFORMS[int(transform)], int(count))


def _transform(values, transform: str, xp):
    values = xp.nan_to_num(values.astype(xp.float64), nan=0.0)
    if transform == "log1p":
        return xp.log1p(xp.maximum(values, 0.0))
    if transform == "identity":
        return values
    raise ValueError(f"transform must be one of {', '.join(TRANSFORMS)}; got {transform!r}")


def fit_tail(values, transform: str = "log1p", *, knots: int = KNOTS,
             tail_fraction: float = TAIL_FRACTION) -> TailTable:
    """The :class:`TailTable` of ``values`` (host array; NaN counts as 0, i.e. unremarkable).

    Knots sit at right-tail probabilities log-spaced from 1 to ``tail_fraction``; the exponential
    tail's mean excess is the maximum-likelihood one of the values above the last knot (an
    exponential is the generalized Pareto law of shape 0, the usual model of a tail above a high
    threshold). Ties (a rhythm score of 0 for every on-time beat) keep the largest probability,
    so a tied value gets the fraction of beats at least as high.
    """
    values = np.asarray(values)
    if values.ndim != 1 or len(values) < 2 / tail_fraction:
        raise ValueError(f"values must be 1-D with at least {int(2 / tail_fraction)} entries to fit a tail at "
                         f"{tail_fraction:g}; got shape {values.shape}")
    u = np.sort(_transform(values, transform, np))
    n = len(u)
    probability = np.geomspace(1.0, tail_fraction, knots)
    # P(U ≥ u[k]) = (n − k) / n for the k-th smallest: the knot of probability q is u[n − q n]
    index = np.clip(np.round(n - probability * n).astype(np.int64), 0, n - 1)
    knot_u, knot_p = u[index], (n - index) / n
    keep = np.concatenate([[True], np.diff(knot_u) > 0])  # first of each run of ties: the largest probability
    knot_u, knot_p = knot_u[keep], knot_p[keep]
    # Just above a value many beats share, the probability drops to the fraction strictly above it:
    # a knot there keeps interpolation from spreading the tie over the gap to the next knot.
    above = (n - np.searchsorted(u, knot_u, side="right")) / n
    step = (above < 0.99 * knot_p) & (above > 0)
    knot_u = np.concatenate([knot_u, np.nextafter(knot_u[step], np.inf)])
    knot_p = np.concatenate([knot_p, above[step]])
    order = np.argsort(knot_u, kind="stable")
    knot_u, knot_p = knot_u[order], knot_p[order]
    keep = np.concatenate([[True], np.diff(knot_u) > 0])
    knot_u, knot_p = knot_u[keep], knot_p[keep]
    excess = u[u > knot_u[-1]] - knot_u[-1]
    theta = float(excess.mean()) if len(excess) else 1.0
    return TailTable(knot_u, np.log(knot_p), max(theta, 1e-6), transform, n)


def tail_p(values, table: TailTable):
    """Right-tail probability of each value under ``table``: the fraction of the reference
    population's normal beats whose statistic is at least as high, extrapolated above the top
    ``TAIL_FRACTION`` by the table's exponential tail. Array in, float64 array of its type out."""
    return backend.xp_of(values).exp(log_tail_p(values, table))


def log_tail_p(values, table: TailTable):
    """Natural log of :func:`tail_p` (no underflow far in the tail)."""
    xp = backend.xp_of(values)
    u = _transform(values, table.transform, xp)
    knots_u, knots_log_p = xp.asarray(table.u), xp.asarray(table.log_p)
    inside = xp.interp(u, knots_u, knots_log_p, left=0.0, right=float(table.log_p[-1]))
    beyond = float(table.log_p[-1]) - (u - float(table.u[-1])) / table.theta
    return xp.where(u > float(table.u[-1]), beyond, inside)


# --------------------------------------------------------------------------- combination
def fisher_statistic(log_ps: dict, weights: dict):
    """``X = Σ w_c (−ln p_c)`` over the components named in ``weights`` (the log tail
    probabilities in ``log_ps``). Weighted Fisher: a beat extreme in any component ranks high,
    one extreme in several ranks highest."""
    names = [name for name, weight in weights.items() if weight]
    if not names:
        raise ValueError(f"weights must give at least one component a non-zero weight; got {weights}")
    missing = [name for name in names if name not in log_ps]
    if missing:
        raise ValueError(f"no tail probabilities for component(s) {', '.join(missing)}; have {', '.join(log_ps)}")
    total = -weights[names[0]] * log_ps[names[0]]
    for name in names[1:]:
        total = total - weights[name] * log_ps[name]
    return total


def calibrated_score(statistic, table: TailTable):
    """``−log10`` of the tail probability of the combined ``statistic`` among the reference
    population's normal beats: the score the views rank by. float32, on the input's device."""
    xp = backend.xp_of(statistic)
    return (-log_tail_p(statistic, table) / math.log(10.0)).astype(xp.float32)


# --------------------------------------------------------------------------- in words
# explain_calibrated(): when a component is worth a word (tail probabilities among the population's normal beats)
COMPONENT_RARE = 1e-3     # rarer than 1 normal beat in 1,000
COMPONENT_UNUSUAL = 1e-2  # 1 in 100
EARLY = 0.08              # "premature" from 8 % early...
PAUSE = 0.12              # ..."pause after it" from 12 % longer than the local RR


def explain_calibrated(row) -> str:
    """Why a beat has its calibrated score, in words, from a mapping (or pandas row) holding
    ``score`` (calibrated), ``p_ref_shape``, ``p_ref_rhythm`` (and optionally ``p_ref_population``,
    ``rr_pre``, ``rr_post``: the beats table's columns): the score, what it means among the
    population's normal beats, then the components that made it, rarest first.

    >>> explain_calibrated({"score": 4.2, "p_ref_shape": 0.3, "p_ref_rhythm": 2e-5,
    ...                     "p_ref_population": 0.2, "rr_pre": 0.72, "rr_post": 1.05})
    'outlier (score 4.2, 1 in 16,000 normal beats): premature by 28 %; shape typical of this recording'
    """
    score = float(row["score"])
    head = (f"{'outlier' if score >= OUTLIER_SCORE else 'not an outlier'} "
            f"(score {score:.1f}, 1 in {_one_in(10.0 ** -score)} normal beats)")
    parts = []
    p_rhythm = float(row["p_ref_rhythm"])
    if p_rhythm <= COMPONENT_UNUSUAL:
        timing = []
        rr_pre, rr_post = float(row.get("rr_pre", math.nan)), float(row.get("rr_post", math.nan))
        if math.isfinite(rr_pre) and rr_pre <= 1 - EARLY:
            timing.append(f"premature by {round(100 * (1 - rr_pre))} %")
        if math.isfinite(rr_post) and rr_post >= 1 + PAUSE:
            timing.append(f"pause after it ({rr_post:.2f} × the local RR)")
        parts.append((p_rhythm, ", ".join(timing) or f"timing irregular for this recording (1 in {_one_in(p_rhythm)})"))
    p_shape = float(row["p_ref_shape"])
    # How unlike anyone's normal beat it is qualifies a shape already unusual for its recording; alone it
    # would name every beat of a person whose normal beats are uncommon.
    p_population = float(row.get("p_ref_population", 1.0))
    population = (f" and unlike the population's normal beats (1 in {_one_in(p_population)})"
                  if p_population <= COMPONENT_RARE else "")
    if p_shape <= COMPONENT_RARE:
        parts.append((p_shape, f"shape unlike this recording's normal beats (1 in {_one_in(p_shape)}){population}"))
    elif p_shape <= COMPONENT_UNUSUAL:
        parts.append((p_shape, f"shape unusual for this recording (1 in {_one_in(p_shape)}){population}"))
    words = [text for _, text in sorted(parts, key=lambda part: part[0])]
    if p_shape > COMPONENT_UNUSUAL:
        words.append("shape typical of this recording")
    if p_rhythm > COMPONENT_UNUSUAL:
        words.append("timing regular")
    return head + ": " + "; ".join(words)


def _one_in(p: float) -> str:
    count = 1.0 / max(p, 1e-12)
    if count < 1e4:
        return f"{count:,.0f}"
    if count < 1e6:
        return f"{float(f'{count:.2g}'):,.0f}"
    return f"{count:.0e}"
