"""Load an ECG recording into device memory, validated.

CSV (one value per line, optional header, optional several columns, a decimal point or a
decimal comma; :mod:`pipeline.read_csv`), WFDB (``.hea`` + signal files, PhysioNet), ``.npy``,
Parquet and EDF/EDF+/BDF (:mod:`pipeline.read_binary`, :mod:`pipeline.edf`). This module picks
the reader by the file's name, lets :mod:`pipeline.leads` choose the lead, and validates what
comes back: runs of NaN/inf are interpolated (with a warning), the long ones kept as stretches
where the signal is lost (:attr:`Recording.lost_s`: a run marks them noise), and a lead too
short, flat or coarse to be an ECG is refused.

Every malformed input ends in one :class:`~pipeline.readers.InputError` (a ValueError) whose
message is one line naming the file: the readers turn the libraries' errors (zlib, gzip, pyarrow,
NumPy, wfdb) into it at their boundary, and only regular files are opened (a FIFO would block for
ever).

See Also
--------
pipeline.readers : the readers' common ground (InputError, file and rate checks).
pipeline.leads : which lead is analysed.
pipeline.read_csv : the CSV reader.
pipeline.read_binary : the WFDB, NPY, Parquet and EDF readers.
pipeline.wavelet.ricker_response : the next step.
"""
from __future__ import annotations

import warnings
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np

from pipeline import PipelineWarning, backend
from pipeline.leads import LeadChoice, can_be_ecg, ecg_lead_indices, lead_indices
from pipeline.read_binary import read_edf, read_npy, read_parquet, read_wfdb
from pipeline.read_csv import read_csv
from pipeline.readers import InputError, check_regular_file, check_sampling_rate, first_line

# An ECG lead, even from a coarse 8-bit recorder, takes dozens of distinct values; fewer than this
# many is a status or marker channel, 1-bit noise, or a signal stored in too coarse a unit.
MIN_LEVELS = 8


@dataclass
class Recording:
    """One loaded lead: ``signal`` is a float32 CuPy or NumPy array."""

    signal: object
    fs: float
    source: str
    channel: str
    annotations: tuple[np.ndarray, np.ndarray] | None = None  # (sample indices, beat symbols)
    repaired_samples: int = 0
    lead_reason: str = "the only lead"  # why this lead was analysed (see choose_lead)
    lead_by_clarity: bool = False  # chosen among unnamed leads by QRS clarity (see pipeline.lead_agreement)
    leads: tuple[str, ...] = ()  # every lead of the input (time columns left out)
    other_lead: str = ""  # the lead read where the analysed one shows a pause (load_other_lead); "" none
    # (start, end) seconds of the gaps over max_gap_s: interpolated, so that the samples stay in
    # time, but no ECG; the run makes them noise episodes, where no beat is invented or missed
    lost_s: np.ndarray = field(default_factory=lambda: np.zeros((0, 2)))

    @property
    def n_samples(self) -> int:
        return int(self.signal.shape[0])


def load_ecg(path, *, fs: float | None = None, column: str | int | None = None,
             device: str = "cpu", default_fs: float = 250.0, max_gap_s: float = 1.0,
             min_duration_s: float = 2.5) -> Recording:
    """Read one ECG lead from ``path`` onto ``device`` ('gpu' or 'cpu') and validate it.

    Parameters
    ----------
    path : str or Path
        ``.csv``/``.txt`` (optionally ``.gz``), a WFDB record (``.hea``, ``.dat`` or the record
        name without suffix), ``.npy``, ``.parquet``, or ``.edf``/``.bdf`` (EDF, EDF+, BDF).
    fs : float, optional
        Sampling rate in Hz; overrides the file's own. Files without one use ``default_fs``.
    column : str or int, optional
        Column name or 0-based index (CSV, Parquet, NPY) or lead name/index (WFDB). Default: the
        lead named MLII / II when there is one, else the first lead unless another's QRS
        complexes are twice as clear (:func:`choose_lead`; a run then reviews that choice by the
        beats: :mod:`pipeline.lead_agreement`); columns that index time are never leads.
    max_gap_s : float
        Runs of NaN/inf are linearly interpolated (with a warning); those longer than this are
        the signal lost (a loose electrode, a recorder's dropout): kept in ``lost_s``, which a
        run lists as lost signal and reads as noise, since seconds of straight line between two
        ends are no ECG (a pause there would be one nobody saw).

    Raises
    ------
    InputError
        A ValueError with a one-line message naming the file for every kind of bad input: no
        regular file (a folder, FIFO, device), damaged compression or content, a sampling rate
        outside ``MIN_FS``–``MAX_FS`` Hz (given, from the file, or the default), too short (or
        too little signal outside the long gaps), flat, or fewer than ``MIN_LEVELS`` distinct
        values (no ECG is so coarse).
    """
    path = Path(path)
    if fs is not None:  # checked before anything is read
        rate = check_sampling_rate(fs, path.name, "the fs argument")
    reader = _reader_for(path)
    choice = LeadChoice(column)
    signal, file_fs, channel, annotations = _read(reader, path, choice, device)
    if fs is None:  # the file's own rate, else the default: each checked where it is used
        rate = (check_sampling_rate(file_fs, _rate_source(path), "the record's header") if file_fs is not None
                else check_sampling_rate(default_fs, path.name, "the default rate; the file carries none"))
    signal, repaired, lost = _repair_gaps(signal, rate, max_gap_s, path.name)
    _check_usable(signal, rate, min_duration_s, path.name, lost)
    leads = tuple(str(choice.names[i]) for i in lead_indices(choice.names))
    return Recording(signal, rate, str(path), channel, annotations, repaired, choice.reason, choice.by_clarity,
                     leads or (channel,), lost_s=lost / rate)


class OtherLead(NamedTuple):
    """The lead read beside the analysed one (:func:`load_other_lead`): its name, its samples on
    the analysed lead's device, and where its signal is lost ((start, end) seconds, as
    :attr:`Recording.lost_s`). ``name`` and ``signal`` are None when there is none."""

    name: str | None = None
    signal: object = None
    lost_s: np.ndarray = np.zeros((0, 2))


def load_other_lead(recording: Recording, *, device: str = "cpu", max_gap_s: float = 1.0) -> OtherLead:
    """A second lead of ``recording`` for reading the analysed lead's long gaps on
    (:mod:`pipeline.other_lead`), judging its beats and their quality: the first of its other
    leads whose name can be an ECG lead's (not ``ABP``, ``PLETH``, ``RESP`` …:
    :func:`pipeline.leads.can_be_ecg`), gaps repaired, on ``device``; an empty :class:`OtherLead`
    when it has no such lead or that one cannot be used (no signal, another length, flat). Never
    an error: the analysed lead alone still makes a run."""
    others = [name for name in recording.leads if name != recording.channel and can_be_ecg(name)]
    if not others:
        return OtherLead()
    path = Path(recording.source)
    try:
        signal = _read(_reader_for(path), path, LeadChoice(others[0]), device)[0]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PipelineWarning)  # its repaired samples are not the run's
            signal, _, lost = _repair_gaps(signal, recording.fs, max_gap_s, path.name)
        if signal.shape[0] != recording.n_samples or float(signal.max() - signal.min()) <= 0:
            return OtherLead()
    except InputError:
        return OtherLead()
    return OtherLead(others[0], signal, lost / recording.fs)


def load_leads(path) -> tuple[list[str], np.ndarray]:
    """Every ECG lead of a recording, for display: their names and their samples as host float32
    columns (n_samples, n_leads), gaps left as NaN. Columns that index time are not leads, nor are
    channels named as another signal (``ABP``, ``PLETH``, ``RESP`` …:
    :func:`pipeline.leads.can_be_ecg`), whose scale would squeeze the ECG's bands.

    See Also
    --------
    load_ecg : the one lead the pipeline analyses (validated, gaps repaired, on the device).
    """
    path = Path(path)
    reader = _reader_for(path)
    first = LeadChoice(0)
    columns = {0: _host(_read(reader, path, first, "cpu")[0])}
    leads = ecg_lead_indices(first.names)
    for index in leads:
        if index not in columns:
            columns[index] = _host(_read(reader, path, LeadChoice(index), "cpu")[0])
    return [first.names[i] for i in leads], np.stack([columns[i] for i in leads], axis=1)


def _read(reader, path: Path, choice: "LeadChoice", device: str):
    """``reader(path, choice, device)``, with the errors a library raises on a malformed file
    (decompression, decoding, parsing, a short read) turned into one :class:`InputError` naming the
    file. The readers word the errors they expect; this catches what they did not foresee."""
    try:
        return reader(path, choice, device)
    except InputError:
        raise
    except (ValueError, OSError, EOFError, zlib.error) as err:  # UnicodeError, pyarrow's errors are among them
        raise InputError(f"{path.name}: cannot be read ({first_line(err)})") from None


def _rate_source(path: Path) -> str:
    """Name of the file a recording's own sampling rate was read from (a WFDB record's header)."""
    return path.with_suffix(".hea").name if path.suffix.lower() in ("", ".dat") else path.name


def _host(values) -> np.ndarray:
    return np.asarray(backend.to_host(values), dtype=np.float32)


# --------------------------------------------------------------------------- format dispatch
def _reader_for(path: Path):
    name = path.name.lower()
    if name.endswith((".hea", ".dat")) or (not path.suffix and path.with_suffix(".hea").exists()):
        return read_wfdb
    check_regular_file(path)
    if path.stat().st_size == 0:
        raise InputError(f"{path} is empty")
    if name.endswith((".csv", ".txt", ".csv.gz", ".txt.gz", ".tsv")):
        return read_csv
    if name.endswith(".npy"):
        return read_npy
    if name.endswith((".parquet", ".pq")):
        return read_parquet
    if name.endswith((".edf", ".bdf")):
        return read_edf
    raise InputError(f"{path.name}: unknown format; expected .csv, .txt, .npy, .parquet or a WFDB .hea record, or "
                     ".edf/.bdf (EDF, EDF+, BDF)")


# --------------------------------------------------------------------------- validation
def _repair_gaps(signal, fs: float, max_gap_s: float, name: str):
    """Interpolate runs of NaN/inf linearly. Returns (signal, n_repaired, lost): ``lost`` the
    (start, end) samples (host float64, end exclusive) of the runs longer than ``max_gap_s``."""
    xp = backend.xp_of(signal)
    bad = ~xp.isfinite(signal)
    n_bad = int(bad.sum())  # sync point: one scalar
    if n_bad == 0:
        return signal, 0, np.zeros((0, 2))
    n = signal.shape[0]
    if n_bad == n:
        raise InputError(f"{name}: every value is NaN or infinite")
    edges = xp.diff(bad.astype(xp.int8), prepend=xp.int8(0), append=xp.int8(0))
    spans = backend.to_host(xp.stack([xp.flatnonzero(edges == 1), xp.flatnonzero(edges == -1)], axis=1))
    runs = spans[:, 1] - spans[:, 0]
    long = runs > max_gap_s * fs
    lost = spans[long].astype(np.float64)
    good = xp.flatnonzero(~bad)
    repaired = signal.copy()
    repaired[bad] = xp.interp(xp.flatnonzero(bad).astype(xp.float64), good.astype(xp.float64),
                              signal[good].astype(xp.float64)).astype(xp.float32)
    message = (f"{name}: interpolated {n_bad} NaN/inf samples in {runs.shape[0]} gap(s), "
               f"longest {runs.max() / fs * 1000:.0f} ms")
    if lost.shape[0]:
        message += (f"; {lost.shape[0]} gap(s) over {max_gap_s:g} s ({runs[long].sum() / fs:.1f} s) "
                    "are signal lost")
    warnings.warn(message, PipelineWarning, stacklevel=3)
    return repaired, n_bad, lost


def _check_usable(signal, fs: float, min_duration_s: float, name: str, lost: np.ndarray) -> None:
    n = int(signal.shape[0])
    if n < min_duration_s * fs:
        raise InputError(f"{name}: recording too short: {n} samples ({n / fs:.2f} s at {fs:g} Hz); "
                         f"at least {min_duration_s:g} s are needed to find a beat")
    kept = n - int((lost[:, 1] - lost[:, 0]).sum())
    if kept < min_duration_s * fs:
        raise InputError(f"{name}: {kept / fs:.2f} s of signal outside its gaps of NaN/inf; at least "
                         f"{min_duration_s:g} s are needed to find a beat")
    lo, hi = float(signal.min()), float(signal.max())  # sync point: two scalars
    if hi - lo <= 1e-6 * max(1.0, abs(hi), abs(lo)):
        raise InputError(f"{name}: the signal is flat (all values ≈ {lo:g}): there are no heartbeats to find")
    levels = _distinct_values(signal, MIN_LEVELS)
    if levels.shape[0] < MIN_LEVELS:
        shown = ", ".join(f"{v:g}" for v in backend.to_host(levels).tolist())  # sync point: a few scalars
        raise InputError(f"{name}: the signal takes only {levels.shape[0]} distinct values ({shown}); an ECG takes "
                         f"at least {MIN_LEVELS} (is this a binary or status channel, or a unit too coarse?)")


def _distinct_values(signal, enough: int):
    """The distinct values of ``signal`` (sorted), looked for in its first 65,536 samples and, when
    those hold fewer than ``enough``, in about a million samples spread over the whole recording:
    cheap on a long recording, and a few distinct values in that many samples is not an ECG."""
    xp = backend.xp_of(signal)
    found = xp.unique(signal[:1 << 16])
    if found.shape[0] >= enough or signal.shape[0] <= 1 << 16:
        return found
    return xp.unique(signal[::max(1, signal.shape[0] >> 20)])
