"""The reviewer's beat labels: saved on disk for each recording, shared by every session of the
server, exported as a WFDB annotation file, CSV or Parquet.

Labels are kept by the fiducial sample of the beat they name, in ``<runs>/labels/<input>.parquet``
beside the run directories (which are rebuilt when damaged and must never hold the only copy of
someone's work); a run of the same recording with other parameters finds them again by matching
its beats to those samples within 50 ms. Every change is written at once, atomically (a temporary
file, flushed to disk, then renamed over the old one), so a crash or a restart loses nothing that
was acknowledged. Reference labels of an annotated input are never touched: they live in the run.

See Also
--------
dashboard.review : the review panel that sets labels, undoes, exports.
pipeline.results.match_labels : beats ↔ labelled samples within a tolerance.
"""
from __future__ import annotations

import io
import os
import tempfile
import threading
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from pipeline.results import match_labels

REVIEW_LABELS = ("N", "S", "V", "F", "Q", "artefact")    # the buttons; any short text is allowed too
WFDB_SYMBOLS = {"N": "N", "S": "S", "V": "V", "F": "F", "Q": "Q", "artefact": "|"}  # '|': isolated QRS-like artefact
FREE_TEXT_SYMBOL = '"'        # WFDB comment annotation; the text goes into its aux note
MAX_LABEL_LENGTH = 40
MATCH_TOLERANCE_S = 0.05


def check_label(label: str) -> str:
    """A label as it will be stored; raises ValueError with one line for anything else."""
    if not isinstance(label, str) or not label.strip():
        raise ValueError("a label must be a non-empty text (N, S, V, F, Q, artefact or your own)")
    label = label.strip()
    if len(label) > MAX_LABEL_LENGTH or any(c in label for c in "\r\n\t"):
        raise ValueError(f"a label must be one line of at most {MAX_LABEL_LENGTH} characters; got {label[:60]!r}")
    return label


class ReviewLabels:
    """The labels of one recording: ``{fiducial sample: label}``, on disk at ``path``."""

    def __init__(self, path: Path, fs: float):
        self.path, self.fs = Path(path), float(fs)
        self.version = 0
        self._lock = threading.RLock()
        self._labels: dict[int, str] = {}
        self._listeners: dict[int, Callable[[int], None]] = {}
        if self.path.exists():
            saved = pd.read_parquet(self.path)
            self._labels = dict(zip(saved["sample"].astype(int).tolist(), saved["label"].astype(str).tolist()))

    @classmethod
    def for_run(cls, run) -> "ReviewLabels":
        """The labels of the recording a run analysed, in its runs folder."""
        name = run.report["input"]["sha256"][:24]
        return cls(Path(run.path).parent / "labels" / f"{name}.parquet", run.fs)

    # ------------------------------------------------------------------ reading
    def __len__(self) -> int:
        return len(self._labels)

    def frame(self) -> pd.DataFrame:
        """Sample, time (s) and label of every labelled beat, in time order."""
        with self._lock:
            samples = np.array(sorted(self._labels), dtype=np.int64)
            labels = [self._labels[s] for s in samples.tolist()]
        return pd.DataFrame({"sample": samples, "time_s": samples / self.fs, "label": pd.Series(labels, dtype=object)})

    def labels_of(self, fiducials: np.ndarray) -> np.ndarray:
        """The label of each beat (by its fiducial sample, within 50 ms), '' where there is none."""
        frame = self.frame()
        return match_labels(np.asarray(fiducials), frame["sample"].to_numpy(), frame["label"].to_numpy(dtype=object),
                            int(round(MATCH_TOLERANCE_S * self.fs)))

    # ------------------------------------------------------------------ writing
    def set(self, samples, label: str | None) -> dict[int, str | None]:
        """Label the beats at ``samples`` (None removes their labels), save, tell every listener.
        Returns what they were before, for :meth:`restore` (undo)."""
        label = None if label is None else check_label(label)
        samples = [int(s) for s in np.atleast_1d(np.asarray(samples, dtype=np.int64))]
        with self._lock:
            previous = {s: self._labels.get(s) for s in samples}
            self._apply({s: label for s in samples})
        return previous

    def restore(self, previous: dict[int, str | None]) -> None:
        """Put labels back as :meth:`set` found them (undo)."""
        with self._lock:
            self._apply(previous)

    def _apply(self, changes: dict[int, str | None]) -> None:
        for sample, label in changes.items():
            if label is None:
                self._labels.pop(sample, None)
            else:
                self._labels[sample] = label
        self._save()
        self.version += 1
        version = self.version
        for listener in list(self._listeners.values()):
            listener(version)

    def _save(self) -> None:
        """Write the whole set atomically: a temporary file in the same folder, synced, renamed."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".tmp")
        try:
            with os.fdopen(handle, "wb") as f:
                f.write(self.parquet_bytes())
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    # ------------------------------------------------------------------ sessions
    def subscribe(self, listener: Callable[[int], None]) -> int:
        """Call ``listener(version)`` after every change (from the thread that made it); returns a
        token for :meth:`unsubscribe`."""
        token = id(listener)
        self._listeners[token] = listener
        return token

    def unsubscribe(self, token: int) -> None:
        self._listeners.pop(token, None)

    # ------------------------------------------------------------------ exports
    def parquet_bytes(self) -> bytes:
        buffer = io.BytesIO()
        self.frame().to_parquet(buffer, index=False)
        return buffer.getvalue()

    def csv_bytes(self) -> bytes:
        return self.frame().to_csv(index=False).encode()

    def wfdb_bytes(self, record: str, extension: str = "rev") -> bytes:
        """A WFDB annotation file (what ``wfdb.rdann(record, extension)`` reads): beat labels as their
        WFDB symbols ('|' for an artefact), your own labels as comments with the text as aux note."""
        import wfdb

        frame = self.frame()
        if frame.empty:
            raise ValueError("no beats are labelled yet: nothing to export")
        symbols = [WFDB_SYMBOLS.get(label, FREE_TEXT_SYMBOL) for label in frame["label"]]
        notes = ["" if label in WFDB_SYMBOLS else label for label in frame["label"]]
        with tempfile.TemporaryDirectory() as folder:
            wfdb.wrann(record, extension, sample=frame["sample"].to_numpy(), symbol=symbols, aux_note=notes,
                       fs=self.fs, write_dir=folder)
            return (Path(folder) / f"{record}.{extension}").read_bytes()
