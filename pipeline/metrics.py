"""Accuracy measures against reference annotations: beat matching as AAMI EC57 asks (one to one
within a window, ventricular flutter/fibrillation episodes left out), AUROC, AAMI classes.

Only measures live here; :mod:`pipeline.evaluate` runs records and :mod:`pipeline.batch`
archives, and both take their figures from this module.

See Also
--------
pipeline.evaluate.evaluate_directory : scores annotated records with these measures.
pipeline.accuracy.evaluation_figures : the same figures for each recording of an archive.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

TOLERANCES_S = (0.05, 0.15)
# AAMI EC57 classes from MIT-BIH beat symbols; paced ('/') and paced fusion ('f') beats are Q.
AAMI_CLASSES = {"N": "NLRej", "S": "AaJS", "V": "VE", "F": "F", "Q": "/fQ?"}
AAMI_OF = {symbol: cls for cls, symbols in AAMI_CLASSES.items() for symbol in symbols}
# AAMI class N: the beats a reference learns from; a matched reference beat with another symbol is
# ``abnormal`` in a run's beats table.
NORMAL_SYMBOLS = frozenset(AAMI_CLASSES["N"])
PACED_SYMBOLS = frozenset("/f")
# WFDB marks a ventricular flutter/fibrillation episode by '[' at its onset and ']' at its end.
FLUTTER_START, FLUTTER_END = "[", "]"


def match_counts(reference: np.ndarray, detected: np.ndarray, tolerance: int) -> tuple[int, int, int]:
    """(true positives, false negatives, false positives), one-to-one within ``tolerance`` samples
    (a beat exactly that far matches), using WFDB's comparator (the PhysioNet reference
    implementation of beat matching)."""
    from wfdb import processing

    if len(detected) == 0:
        return 0, len(reference), 0
    if len(reference) == 0:
        return 0, 0, len(detected)
    # The comparator matches only differences strictly below its window.
    comparison = processing.compare_annotations(np.asarray(reference), np.asarray(detected), tolerance + 1)
    return int(comparison.tp), int(comparison.fn), int(comparison.fp)


def flutter_episodes(record: Path) -> np.ndarray:
    """(start, end) sample pairs of the ventricular flutter/fibrillation episodes a WFDB record's
    ``.atr`` marks; an episode still open at the end of the annotations runs to the end."""
    import wfdb

    annotation = wfdb.rdann(str(Path(record).with_suffix("")), "atr")
    episodes, start = [], None
    for sample, symbol in zip(annotation.sample, annotation.symbol):
        if symbol == FLUTTER_START:
            start = int(sample)
        elif symbol == FLUTTER_END and start is not None:
            episodes.append((start, int(sample)))
            start = None
    if start is not None:
        episodes.append((start, np.iinfo(np.int64).max))
    return np.array(episodes, dtype=np.int64).reshape(-1, 2)


def outside(samples: np.ndarray, episodes: np.ndarray) -> np.ndarray:
    """The samples that lie in none of the (start, end) ``episodes`` (ends included)."""
    samples = np.asarray(samples, dtype=np.int64)
    inside = np.zeros(len(samples), dtype=bool)
    for start, end in episodes:
        inside |= (samples >= start) & (samples <= end)
    return samples[~inside]


def ec57_counts(reference: np.ndarray, detected: np.ndarray, fs: float, excluded: np.ndarray | None = None,
                tolerances_s=TOLERANCES_S) -> dict:
    """``tp_<ms>``, ``fn_<ms>``, ``fp_<ms>`` for each tolerance: reference and detected beats
    matched one to one, as AAMI EC57 does, after both lose whatever falls in the ``excluded``
    (start, end) episodes (ventricular flutter/fibrillation, which EC57 leaves out of beat-by-beat
    comparison)."""
    if excluded is not None and len(excluded):
        reference, detected = outside(reference, excluded), outside(detected, excluded)
    counts = {}
    for tolerance in tolerances_s:
        ms = int(round(tolerance * 1000))
        # The whole samples within the tolerance (50 ms at 128 Hz: 6 samples, 46.9 ms; rounding
        # 6.4 up or down would not matter, but 12.5 at 250 Hz must not become 13).
        tp, fn, fp = match_counts(reference, detected, int(math.floor(tolerance * fs + 1e-9)))
        counts.update({f"tp_{ms}": tp, f"fn_{ms}": fn, f"fp_{ms}": fp})
    return counts


def sensitivity_ppv(tp: int, fn: int, fp: int) -> tuple[float, float]:
    """Se and P+ in %, NaN where undefined."""
    se = 100.0 * tp / (tp + fn) if tp + fn else float("nan")
    ppv = 100.0 * tp / (tp + fp) if tp + fp else float("nan")
    return se, ppv


def auroc(scores, is_positive) -> float:
    """Area under the ROC curve = Mann–Whitney U / (n_pos × n_neg); NaN without both classes."""
    from scipy.stats import mannwhitneyu

    scores, is_positive = np.asarray(scores, dtype=float), np.asarray(is_positive, dtype=bool)
    pos, neg = scores[is_positive], scores[~is_positive]
    if len(pos) == 0 or len(neg) == 0:
        return float("nan")
    return float(mannwhitneyu(pos, neg).statistic / (len(pos) * len(neg)))


def aami_class(symbols) -> np.ndarray:
    """AAMI class ('N', 'S', 'V', 'F', 'Q') of MIT-BIH beat symbols; '' for anything else."""
    return np.array([AAMI_OF.get(s, "") for s in np.asarray(symbols, dtype=object)], dtype=object)
