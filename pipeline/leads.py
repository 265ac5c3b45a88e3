"""Which lead of a recording is analysed, and why: the one the user names, else lead II by name,
else the lead whose QRS complexes stand out most clearly.

See Also
--------
pipeline.load.load_ecg : reads the chosen lead.
pipeline.read_csv, pipeline.read_binary : the readers that ask :meth:`LeadChoice.pick` for a lead.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from pipeline import backend
from pipeline.readers import InputError

# Header names of columns that index time rather than hold a lead.
TIME_COLUMNS = {"time", "t", "sec", "secs", "seconds", "time_s", "sample", "samples", "index", "elapsed time"}


# A signal's type is its label's first word (EDF+: "ECG II", "EEG Fpz-Cz", "Resp chest"; PhysioNet:
# "ABP", "PLETH", "RESP"); these name a kind that is no ECG lead, as do the units below. A lead's own
# name ("II", "V1", "MLII", "ECG2", "CH1") names none of them, so it stays a lead.
ECG_TYPES = {"ecg", "ekg"}
OTHER_TYPES = {"eeg", "eog", "emg", "erg", "meg", "mcg", "ep", "resp", "sao2", "spo2", "temp", "light", "sound",
               "event", "freq", "pleth", "pulse", "hr", "status", "marker", "trigger", "trig", "acc", "accel",
               "pos", "position", "snore", "flow", "thor", "abdo", "abd", "batt", "battery", "imp",
               "abp", "art", "bp", "nbp", "pap", "cvp", "icp", "co2", "ppg"}
OTHER_UNITS = {"%", "bpm", "/min", "1/min", "degc", "degf", "c", "°c", "mmhg", "cmh2o", "l/s", "l/min", "ml", "g",
               "m/s2", "m/s^2", "ohm", "kohm", "lux", "db", "hz", "s", "ms"}


def can_be_ecg(label: str, unit: str = "") -> bool:
    """Whether a signal so labelled, in that unit (lower case, micro as 'u'; '' if unknown), can be
    an ECG lead."""
    match = re.match(r"[a-z0-9]+", str(label).lower())
    word = match.group(0) if match else ""
    if word.rstrip("0123456789") in ECG_TYPES:
        return True
    return word not in OTHER_TYPES and word.rstrip("0123456789") not in OTHER_TYPES and unit not in OTHER_UNITS


def lead_indices(names) -> list[int]:
    """Indices of the columns among ``names`` that are leads (not time or sample indexes)."""
    return [i for i, name in enumerate(names) if str(name).strip().lower() not in TIME_COLUMNS]


def ecg_lead_indices(names) -> list[int]:
    """:func:`lead_indices` less the channels named as another signal (:func:`can_be_ecg`)."""
    return [i for i in lead_indices(names) if can_be_ecg(names[i])]


# Names of the limb lead II, where the QRS complex is usually tallest and annotators of MIT-BIH
# worked, compared without case, spaces or punctuation: "II", modified lead II ("MLII", "ML2" as the
# Long-Term ST database writes it) and the derivation II of European notation ("DII", "D2"), alone
# or after the signal's type (EDF+: "ECG MLII", "EKG II"). Only names that say lead II: "ECG2" or
# "ch2" number a recorder's channels (a Holter's second channel is often a precordial lead), so a
# channel number never counts as lead II.
LEAD_II_NAMES = {prefix + name for prefix in ("", "ecg", "ekg")
                 for name in ("ii", "leadii", "limbleadii", "mlii", "ml2", "dii", "d2")}
# Another lead replaces the first only when its QRS clarity is this much higher: a lead off or one
# buried in noise. The first lead is a recording's reference (annotations and reports mark the beats
# on it), and a merely clearer lead detects no better: read on a precordial lead (V1) that scores
# 1.55 × the clarity of its noisy MLII, an MIT-BIH record had 12 × the false beats, and a third of
# its beats lay over 50 ms from the annotations.
CLEARER_BY = 2.0


def _normalised(name: str) -> str:
    return "".join(ch for ch in str(name).lower() if ch.isalnum())


def qrs_clarity(values, fs: float | None, segment_s: float = 20.0, segments: int = 3) -> float:
    """How clearly QRS complexes stand out in one lead: the median over 1-s blocks of the largest
    |x[k+1] - x[k-1]|, divided by the median |x[k+1] - x[k-1]| of the lead.

    QRS complexes are the steepest part of an ECG, once a second; noise and slow waves are not.
    About 5 for white noise, 20–60 for a lead with clear QRS complexes. Reads ``segments``
    stretches of ``segment_s`` (start, middle, end), so it costs little on long recordings.
    """
    xp = backend.xp_of(values)
    rate = fs or 250.0
    n = int(values.shape[0])
    length = min(n, int(segment_s * rate))
    starts = sorted({0, max(0, (n - length) // 2), max(0, n - length)})[:segments]
    block = max(4, int(rate))
    ratios = []
    for start in starts:
        x = values[start:start + length].astype(xp.float32)
        with np.errstate(invalid="ignore"):  # gaps not yet repaired give non-finite slopes, dropped here
            slope = xp.abs(x[2:] - x[:-2])
        slope = slope[xp.isfinite(slope)]
        count = slope.shape[0] // block
        if count == 0:
            continue
        typical = float(xp.median(slope))  # sync point: one scalar per segment
        peaks = float(xp.median(slope[:count * block].reshape(count, block).max(axis=1)))
        ratios.append(peaks / typical if typical > 0 else (0.0 if peaks == 0 else float("inf")))
    return float(np.median(ratios)) if ratios else 0.0


class LeadChoice:
    """Which lead a reader returns, and why: the one asked for, else :func:`choose_lead`."""

    def __init__(self, column):
        self.column = column
        self.reason = "the only lead"
        self.names: list[str] = []  # the file's lead names, each made distinct (distinct_names)
        self.index = 0
        self.by_clarity = False  # chosen by QRS clarity, which the beats may overrule (pipeline.lead_agreement)

    @property
    def channel(self) -> str:
        """The chosen lead's name, distinct among the file's (what a reader returns as its name)."""
        return self.names[self.index]

    def pick(self, names: list[str], path: Path, read, fs: float | None = None) -> int:
        """Index among ``names``; ``read(index)`` gives a lead's values when they must be compared."""
        self.names = distinct_names(names)
        if self.column is not None:
            self.index = _pick_column(self.names, self.column, path)
            self.reason = f"chosen by the user ({self.column!r})"
            return self.index
        self.index, self.reason = choose_lead(self.names, read, fs)
        self.by_clarity = compares_clarity(self.names)
        return self.index


def distinct_names(names) -> list[str]:
    """``names`` with each repeat of a name numbered by its place among them: ``ECG``, ``ECG`` →
    ``ECG``, ``ECG #2``. Recorders and databases name every channel alike ("ECG", "ECG"); a lead
    is chosen, reported, read again and drawn by its name, so two leads must not share one."""
    taken = {str(name) for name in names}
    seen: dict[str, int] = {}
    distinct = []
    for name in map(str, names):
        seen[name] = seen.get(name, 0) + 1
        if seen[name] > 1:
            number = seen[name]
            while f"{name} #{number}" in taken:
                number += 1
            name = f"{name} #{number}"
            taken.add(name)
        distinct.append(name)
    return distinct


def compares_clarity(names: list[str]) -> bool:
    """Whether :func:`choose_lead` picks among ``names`` by QRS clarity: two ECG leads or more,
    none named lead II."""
    leads = _candidates(names)
    return len(leads) > 1 and _named_lead_ii(names, leads) is None


def choose_lead(names: list[str], read, fs: float | None = None) -> tuple[int, str]:
    """The lead to analyse among ``names`` and why.

    Lead II (named MLII, II, lead II …) when there is one; otherwise the lead whose
    :func:`qrs_clarity` is highest, when it beats the first lead's by ``CLEARER_BY``; otherwise the
    first lead. Columns that index time (``time``, ``sample`` …) are never leads, and channels
    whose names say they are no ECG lead (``ABP``, ``PLETH``, ``RESP`` …: :func:`can_be_ecg`) are
    passed over unless nothing else is left.
    """
    channels = lead_indices(names) or [0]
    leads = _candidates(names)
    named = _named_lead_ii(names, leads)
    if named is not None:
        return named, f"lead II by name ({names[named]})" + (f" among {len(leads)} leads" if len(leads) > 1 else "")
    if len(leads) == 1:
        return leads[0], "the only lead" if len(channels) == 1 else f"the only ECG lead of {len(channels)} signals"
    clarity = {i: qrs_clarity(read(i), fs) for i in leads}
    best = max(leads, key=lambda i: clarity[i])
    listed = ", ".join(f"{names[i]} {clarity[i]:.1f}" for i in leads)
    if best != leads[0] and clarity[best] > CLEARER_BY * clarity[leads[0]]:
        return best, f"clearest QRS of {len(leads)} leads (clarity {listed})"
    return leads[0], f"first lead; no other has a clearly clearer QRS (clarity {listed})"


def _candidates(names: list[str]) -> list[int]:
    """The channels :func:`choose_lead` picks among: the ECG leads, else every lead, else the first."""
    return ecg_lead_indices(names) or lead_indices(names) or [0]


def _named_lead_ii(names: list[str], leads: list[int]) -> int | None:
    """The first of ``leads`` whose name says lead II, or None."""
    return next((i for i in leads if _normalised(names[i]) in LEAD_II_NAMES), None)


def _pick_column(names: list[str], column, path: Path) -> int:
    """Index of ``column`` (name, index or None) among the file's column names.
    None picks the first column that is not a time index."""
    if column is None:
        return next(iter(lead_indices(names)), 0)
    if isinstance(column, int) or (isinstance(column, str) and column.isdigit()):
        index = int(column)
        if not 0 <= index < len(names):
            raise InputError(f"{path.name} has {len(names)} column(s); column index {index} does not exist")
        return index
    if column not in names:
        listed = ", ".join(map(repr, names[:12])) + (f" and {len(names) - 12} more" if len(names) > 12 else "")
        raise InputError(f"{path.name} has no column {column!r}; columns are {listed}")
    return names.index(column)

