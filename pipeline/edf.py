"""Read and write EDF, EDF+ and BDF recordings (what Holter recorders and polysomnographs export).

:func:`read_edf` gives :func:`pipeline.load.load_ecg` one ECG lead of an ``.edf`` or ``.bdf``
file (BDF: the same layout with 24-bit samples), in millivolts, with its sampling rate, its name
(the signal's label) and, from an EDF+ file's annotations, the reference beat labels: annotations
whose text is one MIT-BIH beat symbol (``N``, ``V``, ``A``, ``L``, ``R``, ``/`` …, the symbols a
WFDB ``.atr`` marks beats with), at the sample nearest their onset. :func:`write_edf` writes a
recording as EDF+ (or BDF+) with its beats as such annotations (``python -m pipeline synth x.edf``).

The leads are the signals that can be an ECG, at one sampling rate: the annotation signal is not a
signal, and a signal whose label names another kind (``EEG Fpz-Cz``, ``Resp chest``, ``SpO2`` …:
EDF+ labels begin with the signal's type) or whose unit is not an ECG's (``%``, ``bpm``, ``degC``
…) is left out, as are signals at another rate than most ECG signals of the file, unless
``--lead`` names one. A lead index counts these leads, in the file's order. Values are converted
to mV from the units the header gives (V, mV, uV/µV, nV); other or no units are taken as they are.

A discontinuous EDF+ (``EDF+D``: its data records are not back to back, e.g. lead-off stretches
cut out) is read on its time line: each data record where its time stamp puts it, from the first
record's, and the gaps between them as missing samples (NaN), which :mod:`pipeline.load` bridges
and keeps as signal lost. Beat annotations are placed on the same time line. Records that overlap,
or gaps that add up to more than :data:`MAX_GAPS_S`, are refused. A file shorter than
its header declares (truncated) is refused; bytes beyond the declared data records are ignored,
with a warning. The start date and time of the header are not read: a loaded recording has no
place for them.

The ISHNE Holter format is not read: its one Python reader, ishneholterlib, has not been
maintained since 2020, and ISHNE recorders and their analysis software also export EDF, which is
read here.

Every refusal is an :class:`EdfError` (a ValueError) whose message is one line naming the file;
:mod:`pipeline.load` hands it on as its ``InputError``.

See Also
--------
pipeline.load.load_ecg : reads any supported format; calls :func:`read_edf` for ``.edf``/``.bdf``.
pipeline.synth.synthesize : the synthetic recording :func:`write_edf` writes.
"""
from __future__ import annotations

import math
import os
import re
import tempfile
import warnings
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from pathlib import Path

import numpy as np

from pipeline import PipelineWarning, one_line
from pipeline.leads import can_be_ecg

HEADER_BYTES = 256  # the fixed part of the header; each signal adds as many
VERSIONS = {b"0       ": "EDF", b"\xffBIOSEMI": "BDF"}
SAMPLE_BYTES = {"EDF": 2, "BDF": 3}
TO_MV = {"v": 1000.0, "mv": 1.0, "uv": 1e-3, "nv": 1e-6}
CHUNK = 1 << 20  # samples converted to physical values at a time (in float64, for exactness)


class EdfError(ValueError):
    """A file this module refuses; the message is one line naming the file."""


def read_edf(path, column, pick, beat_symbols):
    """One lead of an EDF/EDF+/BDF file: ``(values, fs, label, annotations)``.

    Parameters
    ----------
    path : Path
        A regular, non-empty ``.edf`` or ``.bdf`` file (checked by the caller); its format is
        told by its first bytes.
    column : str, int or None
        The lead asked for: a signal's label (any signal of the file, whatever its kind or
        rate), an index among the leads, or None.
    pick : callable
        ``pick(names, path, read, fs)``: the index among ``names`` of the lead to analyse,
        given ``read(index)`` (a lead's values); :mod:`pipeline.load`'s lead choice, which takes
        ``column`` into account and prefers lead II by name.
    beat_symbols : set of str
        The annotation texts that mark a beat.

    Returns
    -------
    values : numpy.ndarray
        float32, writable, in mV where the header gives a voltage unit.
    fs : float
        The lead's sampling rate (samples per data record / record duration), unchecked.
    label : str
    annotations : (numpy.ndarray, numpy.ndarray) or None
        int64 sample indices and str beat symbols of the EDF+ beat annotations, None without any.

    Raises
    ------
    EdfError
        A ValueError with a one-line message naming the file: not an EDF or BDF, a malformed or truncated
        header or file, no signal, no ECG signal, an EDF+D whose records overlap or lie days apart.

    See Also
    --------
    pipeline.load.load_ecg : checks the rate and values, and moves them to the device.
    pipeline.wavelet.ricker_response : the next step.
    """
    path = Path(path)
    header = _read_header(path)
    recording = _open(path, header)
    signals = dict(zip(header.ordinary, recording.signals))  # edfio's signals, by their place in the header
    leads = _leads(signals, header, column, path.name)
    rate = header.rate(leads[0])
    onsets = _record_onsets(path, header)
    values = {}

    def read(index):  # a lead read to compare QRS clarity is not read again
        if index not in values:
            values[index] = _on_time_line(_physical(signals[leads[index]], header, leads[index], path.name),
                                          onsets, header.samples_per_record[leads[index]], rate)
        return values[index]

    index = pick([header.labels[i] for i in leads], path, read, rate)
    annotations = _beat_annotations(recording, header, rate, beat_symbols, onsets, path.name)
    return read(index), rate, header.labels[leads[index]], annotations


# --------------------------------------------------------------------------- header
class _Header:
    """What the header says, read and checked here before edfio reads the file: edfio trusts it
    (a record duration of 0 or a file cut short end in errors of its own, or in fewer samples)."""

    def __init__(self, fmt, labels, samples_per_record, record_text, n_records, reserved, data_offset, annotations):
        self.fmt, self.labels, self.samples_per_record = fmt, labels, samples_per_record
        self.record_text, self.n_records, self.reserved = record_text, n_records, reserved
        self.data_offset, self.annotations = data_offset, annotations  # annotation signals' places
        self.record_s = float(record_text)
        self.ordinary = [i for i in range(len(labels)) if i not in annotations]

    @property
    def record_bytes(self) -> int:
        return sum(self.samples_per_record) * SAMPLE_BYTES[self.fmt]

    def rate(self, index: int) -> float:
        return self.samples_per_record[index] / self.record_s


def _read_header(path: Path) -> _Header:
    name = path.name
    size = path.stat().st_size
    with open(path, "rb") as f:
        fixed = f.read(HEADER_BYTES)
        fmt = VERSIONS.get(fixed[:8])
        if fmt is None:
            raise EdfError(f"{name} is not an EDF or BDF file: it begins with {fixed[:8]!r}, where an EDF begins "
                           "with '0' and 7 spaces and a BDF with byte 255 and 'BIOSEMI'")
        if len(fixed) < HEADER_BYTES:
            raise EdfError(f"{name} is truncated: {size} bytes, fewer than the {HEADER_BYTES} of an {fmt} header")
        n_signals = _number(fixed[252:256], int, "number of signals", name)
        if n_signals <= 0:
            raise EdfError(f"{name} holds no signals: its header lists {n_signals}")
        header_bytes = HEADER_BYTES * (n_signals + 1)
        declared = _number(fixed[184:192], int, "header size", name)
        if declared != header_bytes:
            raise EdfError(f"{name}: its header says it is {declared} bytes long; with {n_signals} signals an {fmt} "
                           f"header is {header_bytes}")
        signal_headers = f.read(header_bytes - HEADER_BYTES)
    if len(signal_headers) < header_bytes - HEADER_BYTES:
        raise EdfError(f"{name} is truncated: {size} bytes, fewer than the {header_bytes} of its header")

    def field(offset, width):  # one header field of every signal
        start = n_signals * offset
        return [signal_headers[start + i * width:start + (i + 1) * width] for i in range(n_signals)]

    raw_labels = [raw.decode("latin-1").rstrip() for raw in field(0, 16)]
    annotations = [i for i, label in enumerate(raw_labels) if label == f"{fmt} Annotations"]  # as edfio tells them
    samples = [_number(raw, int, f"samples per data record of signal {i}", name)
               for i, raw in enumerate(field(16 + 80 + 8 * 5 + 80, 8))]
    if any(n < 0 for n in samples):
        raise EdfError(f"{name}: its header gives a negative number of samples per data record ({min(samples)})")
    record_text = fixed[244:252].decode("latin-1").strip()
    record_s = _number(fixed[244:252], float, "data record duration", name)
    n_records = _number(fixed[236:244], int, "number of data records", name)
    header = _Header(fmt, [label.strip() for label in raw_labels], samples, record_text, n_records,
                     fixed[192:236].decode("latin-1"), header_bytes, annotations)
    if not header.ordinary:
        raise EdfError(f"{name} holds no signal, only annotations")
    if not record_s > 0:
        raise EdfError(f"{name}: sampling rate undefined: its header gives a data record duration of "
                       f"{record_text!r} s (samples per record / duration is the rate)")
    if header.record_bytes == 0:
        raise EdfError(f"{name}: sampling rate 0 Hz: its header gives every signal 0 samples per data record")
    _check_size(header, size, name)
    return header


def _number(raw: bytes, kind, what: str, name: str):
    text = raw.decode("latin-1").strip()
    try:
        value = kind(text)
    except ValueError:
        raise EdfError(f"{name}: the header's {what} {text!r} is not a number") from None
    if kind is float and not math.isfinite(value):
        raise EdfError(f"{name}: the header's {what} {text!r} is not a finite number")
    return value


def _check_size(header: _Header, size: int, name: str) -> None:
    """The data records the header declares are all in the file (-1 records, 'not known yet' while
    recording, counts the whole records there are)."""
    data = size - header.data_offset
    whole, rest = divmod(data, header.record_bytes)
    if header.n_records == -1:
        if rest:
            raise EdfError(f"{name} is truncated: its last data record holds {rest} of {header.record_bytes} bytes")
        header.n_records = whole
    elif header.n_records < 0:
        raise EdfError(f"{name}: the header's number of data records {header.n_records} is negative")
    expected = header.n_records * header.record_bytes
    if data < expected:
        raise EdfError(f"{name} is truncated: its header declares {header.n_records:,} data records "
                       f"({expected:,} bytes after the header), the file holds {max(data, 0):,}")
    if header.n_records == 0:
        raise EdfError(f"{name} holds no samples: its header declares 0 data records")
    if data > expected:
        warnings.warn(f"{name}: {data - expected:,} bytes after its {header.n_records:,} data records are ignored",
                      PipelineWarning, stacklevel=4)


def _open(path: Path, header: _Header):
    """The file read by edfio (the EDF's samples mapped, not read, until a lead is asked for)."""
    import edfio

    reader = edfio.read_edf if header.fmt == "EDF" else edfio.read_bdf
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # edfio's notes on extra bytes: told above, in one line
            return reader(path, header_encoding="latin-1")
    except Exception as err:  # edfio raises ValueError, IndexError, UnboundLocalError … on a malformed header
        raise EdfError(f"{path.name}: not a readable {header.fmt} file ({one_line(err, bare=())})") from None


# --------------------------------------------------------------------------- leads
def _unit(signal) -> str:
    """The signal's unit, lower case, with micro written 'u' (µ in Latin-1 or UTF-8, Greek mu)."""
    unit = signal.physical_dimension.strip().lower()
    for micro in ("âµ", "î¼", "µ", "μ"):
        unit = unit.replace(micro, "u")
    return unit


def _leads(signals: dict, header: _Header, column, name: str) -> list[int]:
    """The leads to choose from (places in the header): the ECG signals at the rate most of them
    share (the first's on a tie), or at the rate of the signal ``column`` names, which is then
    among them."""
    labels, per_record = header.labels, header.samples_per_record
    named = next((i for i in signals if isinstance(column, str) and not column.isdigit() and labels[i] == column),
                 None)
    ecg = [i for i, s in signals.items() if can_be_ecg(labels[i], _unit(s)) or i == named]
    if not ecg:
        listed = ", ".join(f"{labels[i]!r} ({s.physical_dimension or 'no unit'})" for i, s in list(signals.items())[:6])
        more = f" and {len(signals) - 6} more" if len(signals) > 6 else ""
        raise EdfError(f"{name} holds no ECG signal: its signals are {listed}{more}; name one with --lead")
    counts = [sum(per_record[j] == per_record[i] for j in ecg) for i in ecg]
    rate_of = per_record[named if named is not None else ecg[counts.index(max(counts))]]
    return [i for i in ecg if per_record[i] == rate_of]


def _physical(signal, header: _Header, index: int, name: str) -> np.ndarray:
    """A signal's samples in mV (as they are without a voltage unit), float32, computed in float64
    a chunk at a time: as exact as WFDB's, without a float64 copy of a day-long lead."""
    label = header.labels[index]
    try:
        digital = signal.digital
        low, high = signal.digital_min, signal.digital_max
        physical_low, physical_high = signal.physical_min, signal.physical_max
    except Exception as err:  # a header field that is no number, read by edfio
        raise EdfError(f"{name}: signal {label!r} cannot be read ({one_line(err, bare=())})") from None
    if high == low:
        raise EdfError(f"{name}: signal {label!r} has digital minimum = maximum ({low}): its values cannot be "
                       "converted to physical ones")
    unit = _unit(signal)
    scale = TO_MV.get(unit, 1.0)
    if unit and unit not in TO_MV and can_be_ecg(label, unit):
        warnings.warn(f"{name}: signal {label!r} is in {signal.physical_dimension!r}, not a voltage; its values are "
                      "used as they are", PipelineWarning, stacklevel=2)
    gain = (physical_high - physical_low) / (high - low) * scale
    n = header.n_records * header.samples_per_record[index]  # bytes beyond the declared records are not read
    out = np.empty(n, np.float32)
    for start in range(0, n, CHUNK):
        part = np.asarray(digital[start:min(start + CHUNK, n)], dtype=np.float64)
        out[start:start + CHUNK] = (part - low) * gain + physical_low * scale
    return out


# --------------------------------------------------------------------------- annotations
def _beat_annotations(recording, header: _Header, fs: float, beat_symbols, onsets, name: str):
    """The EDF+ annotations that mark beats (text: one beat symbol), as (samples, symbols), on the
    time line of the records' ``onsets`` (None: back to back); None when there are none."""
    if not header.annotations:
        return None
    duration = header.n_records * header.record_s if onsets is None else onsets[-1] - onsets[0] + header.record_s
    try:  # every data record's; edfio gives their times from the first record's start, as the time line
        found = [a for a in recording.get_annotations() if a.onset < duration]
    except Exception as err:  # damaged annotations: a bad TAL, bytes that are not UTF-8
        raise EdfError(f"{name}: its EDF+ annotations cannot be read ({one_line(err, bare=())})") from None
    beats = [(a.onset, a.text.strip()) for a in found if a.text.strip() in beat_symbols]
    if not beats:
        return None
    times = np.array([onset for onset, _ in beats], dtype=np.float64)
    return np.rint(times * fs).astype(np.int64), np.array([text for _, text in beats], dtype=str)


# Each data record's annotations begin with its time-keeping stamp: '+<onset>' 0x14 0x14.
_STAMP = re.compile(rb"([+-]\d+(?:\.\d*)?)\x14\x14")


# An EDF+D's gaps may add up to this much: a recorder paused overnight, not parts days apart,
# whose time line would be mostly samples that are not there.
MAX_GAPS_S = 24 * 3600.0


def _record_onsets(path: Path, header: _Header) -> np.ndarray | None:
    """The start (s) of each data record of an EDF+D whose records are not back to back; None for
    a continuous file (EDF, EDF+C, or an EDF+D without gaps). Records that overlap or come out
    of order, and gaps that add up to over :data:`MAX_GAPS_S`, are refused."""
    if not header.reserved.startswith(("EDF+D", "BDF+D")) or not header.annotations:
        return None
    stamps = _time_stamps(path, header)
    step = Decimal(header.record_text)
    ends = [onset + step for onset in stamps[:-1]]
    if all(onset == end for onset, end in zip(stamps[1:], ends)):
        return None
    for index, (onset, end) in enumerate(zip(stamps[1:], ends), start=1):
        if onset < end:
            raise EdfError(f"{path.name}: data record {index} of its EDF+D starts at {onset} s, before the one "
                           f"before ends ({end} s)")
    gaps = float(stamps[-1] + step - stamps[0]) - header.n_records * header.record_s
    if gaps > MAX_GAPS_S:
        raise EdfError(f"{path.name}: the data records of its EDF+D lie {gaps / 3600:.1f} h apart in all, over "
                       f"{MAX_GAPS_S / 3600:g} h; analyse each continuous part as a file of its own")
    return np.array([float(onset) for onset in stamps])


def _on_time_line(values: np.ndarray, onsets: np.ndarray | None, per_record: int, rate: float) -> np.ndarray:
    """A signal's samples (its data records back to back) where the records' ``onsets`` put them,
    from the first record's, NaN between them; the samples as they are when ``onsets`` is None."""
    if onsets is None:
        return values
    starts = np.rint((onsets - onsets[0]) * rate).astype(np.int64)
    placed = np.full(int(starts[-1]) + per_record, np.nan, dtype=values.dtype)
    placed[(starts[:, None] + np.arange(per_record)).ravel()] = values[:starts.shape[0] * per_record]
    return placed


def _time_stamps(path: Path, header: _Header) -> list[Decimal]:
    """Each data record's time stamp (its annotations' first TAL, seconds), as written."""
    first = header.annotations[0]  # the time-keeping signal
    size = SAMPLE_BYTES[header.fmt]
    start = sum(header.samples_per_record[:first]) * size
    records = np.memmap(path, np.uint8, "r", header.data_offset, (header.n_records, header.record_bytes))
    stamps = records[:, start:start + header.samples_per_record[first] * size]
    onsets = []
    for index, record in enumerate(stamps):
        match = _STAMP.match(record.tobytes())
        try:
            onset = Decimal(match.group(1).decode("ascii")) if match else None
        except InvalidOperation:
            onset = None
        if onset is None:
            raise EdfError(f"{path.name}: data record {index} of its EDF+D has no time stamp")
        onsets.append(onset)
    return onsets


# --------------------------------------------------------------------------- writing
def write_edf(path, signal, fs: float, *, labels=("ECG",), annotations=None, unit: str = "mV") -> Path:
    """Write a recording as EDF+ (``.edf``) or BDF+ (``.bdf``, 24-bit), with beat annotations.

    Parameters
    ----------
    path : str or Path
        Ends in ``.edf`` or ``.bdf``; written atomically (a temporary file beside it, then moved).
    signal : numpy.ndarray
        ``(n_samples,)`` or ``(n_samples, n_leads)``, finite, in ``unit``.
    fs : float
        Sampling rate in Hz; a ratio of small integers (250, 360, 128.5 …), since EDF stores it as
        samples per data record and the record's duration.
    labels : sequence of str
        One label per lead (at most 16 ASCII characters each), e.g. ``("ECG II",)``.
    annotations : (samples, symbols), optional
        Beats as EDF+ annotations: text ``symbol`` at onset ``sample / fs`` s.
    unit : str
        The physical unit written in the header.

    Returns
    -------
    Path
        ``path``. When ``n_samples`` is not a whole number of data records, the last is filled
        with each lead's last value (with a warning).

    See Also
    --------
    pipeline.synth.synthesize : makes a recording to write.
    read_edf : reads it back.
    """
    import edfio

    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".edf", ".bdf"):
        raise ValueError(f"path must end in .edf or .bdf; got {str(path)!r}")
    values = np.asarray(signal, dtype=np.float64)
    values = values[:, None] if values.ndim == 1 else values
    if values.ndim != 2 or values.shape[0] == 0 or values.shape[1] != len(labels):
        raise ValueError(f"signal must be (n_samples,) or (n_samples, {len(labels)}) for {len(labels)} label(s); "
                         f"got shape {np.shape(signal)}")
    rate = Fraction(float(fs)).limit_denominator(1000)
    if not (fs > 0 and float(rate) == float(fs)):
        raise ValueError(f"fs must be a positive ratio of small integers to be stored in EDF; got {fs!r}")
    record_s, per_record = rate.denominator, rate.numerator  # samples per data record of record_s seconds
    missing = -values.shape[0] % per_record
    if missing:
        warnings.warn(f"{path.name}: the last data record is filled with {missing} copies of the last sample",
                      PipelineWarning, stacklevel=2)
        values = np.concatenate([values, np.repeat(values[-1:], missing, axis=0)])
    bdf = suffix == ".bdf"
    kind = edfio.BdfSignal if bdf else edfio.EdfSignal
    leads = [kind(values[:, i], float(fs), label=label, physical_dimension=unit) for i, label in enumerate(labels)]
    notes = []
    if annotations is not None:
        samples, symbols = annotations
        notes = [edfio.EdfAnnotation(int(s) / float(fs), None, str(c)) for s, c in zip(samples, symbols)]
    recording = (edfio.Bdf if bdf else edfio.Edf)(leads, data_record_duration=record_s, annotations=notes)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(handle)
    try:
        recording.write(Path(temporary))
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path
