"""The accuracy of one annotated recording's run, for its archive row: detection against the
recording's reference beats (AAMI EC57's matching) and the outlier AUROC of abnormal versus
normal beats, as ``python -m pipeline evaluate`` measures them.

See Also
--------
pipeline.metrics : the matching, the counts and the AUROC used here.
pipeline.batch_task.run_row : puts these figures in the row.
pipeline.evaluate : the same measures over a folder of records, with the literature's summary.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

def evaluation_figures(input_path: str, run) -> dict:
    """Detection (TP/FN/FP, sensitivity and positive predictivity at 50 and 150 ms, AAMI EC57's
    matching, ventricular flutter/fibrillation left out) of the beats table against the
    recording's reference beats, and the outlier AUROC of abnormal versus normal beats, as in
    ``python -m pipeline evaluate``."""
    from pipeline.metrics import auroc, ec57_counts, flutter_episodes, sensitivity_ppv

    path = Path(input_path)
    reference = reference_beats(path)
    figures: dict = {}
    if reference is None:
        return figures
    figures["reference_beats"] = len(reference)
    flutter = flutter_episodes(path) if path.suffix.lower() == ".hea" else None
    counts = ec57_counts(reference, run.beats["fiducial"].to_numpy(), run.fs, flutter)
    figures.update(counts)
    for ms in sorted({int(name.split("_")[1]) for name in counts}):
        figures[f"se_{ms}"], figures[f"ppv_{ms}"] = sensitivity_ppv(counts[f"tp_{ms}"], counts[f"fn_{ms}"],
                                                                    counts[f"fp_{ms}"])
    beats = run.beats
    if "label" in beats:
        labelled = beats[beats["label"] != ""]
        figures["abnormal_beats"] = int(labelled["abnormal"].sum())
        figures["auroc"] = auroc(labelled["score"], labelled["abnormal"])
    return figures


def reference_beats(path: Path) -> np.ndarray | None:
    """Sample indices of the reference beats: a WFDB record's ``.atr`` (beat symbols only, as
    the loader keeps them) or a recording's ``<stem>.annotations.csv``; None without either."""
    if path.suffix.lower() == ".hea":
        if not path.with_suffix(".atr").exists():
            return None
        import wfdb

        from pipeline.readers import BEAT_SYMBOLS

        ann = wfdb.rdann(str(path.with_suffix("")), "atr")
        is_beat = np.isin(np.asarray(ann.symbol), list(BEAT_SYMBOLS))
        return np.asarray(ann.sample, dtype=np.int64)[is_beat]
    from pipeline.sidecar import read_annotations

    annotations = read_annotations(path)
    return None if annotations is None else annotations[0]

