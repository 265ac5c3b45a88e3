"""Accuracy on annotated recordings: R-peak sensitivity / positive predictivity at 50 ms and
150 ms, and outlier AUROC of abnormal versus normal beats, per record and in total.

NeuroKit2's ``ecg_clean`` + ``ecg_peaks`` on the same lead is scored beside ours when installed.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

TOLERANCES_S = (0.05, 0.15)


def match_counts(reference: np.ndarray, detected: np.ndarray, tolerance: int) -> tuple[int, int, int]:
    """(true positives, false negatives, false positives), one-to-one within ``tolerance`` samples,
    using WFDB's comparator (the PhysioNet reference implementation of beat matching)."""
    from wfdb import processing

    if len(detected) == 0:
        return 0, len(reference), 0
    comparison = processing.compare_annotations(np.asarray(reference), np.asarray(detected), tolerance)
    return int(comparison.tp), int(comparison.fn), int(comparison.fp)


def auroc(scores, is_positive) -> float:
    """Area under the ROC curve = Mann–Whitney U / (n_pos × n_neg); NaN without both classes."""
    from scipy.stats import mannwhitneyu

    scores, is_positive = np.asarray(scores, dtype=float), np.asarray(is_positive, dtype=bool)
    pos, neg = scores[is_positive], scores[~is_positive]
    if len(pos) == 0 or len(neg) == 0:
        return float("nan")
    return float(mannwhitneyu(pos, neg).statistic / (len(pos) * len(neg)))


def neurokit_peaks(signal: np.ndarray, fs: float) -> np.ndarray:
    """R peaks by NeuroKit2's default method (clean, then detect)."""
    import neurokit2 as nk

    cleaned = nk.ecg_clean(np.asarray(signal, dtype=float), sampling_rate=int(round(fs)))
    _, info = nk.ecg_peaks(cleaned, sampling_rate=int(round(fs)))
    return np.asarray(info["ECG_R_Peaks"], dtype=np.int64)


def evaluate_directory(directory: Path, request_for: Callable, neurokit: bool = True, *, cluster="auto",
                       workers: int | None = None, threads: int | None = None, progress: bool = True) -> pd.DataFrame:
    """Run the pipeline on every annotated WFDB record in ``directory`` and score it.

    The records run as one batch (:func:`pipeline.batch.run_batch`: parallel on a Dask cluster,
    a progress bar, ``<out>/archive.parquet``); each is scored on its worker right after its run.
    A record that fails does not stop the others: the table holds the ones that finished, and
    ``table.attrs["failed"]`` maps each failed record to its one-line error.
    """
    import functools

    from pipeline.batch import Job, run_batch

    records = sorted(p.with_suffix("") for p in Path(directory).glob("*.hea") if p.with_suffix(".atr").exists())
    if not records:
        raise ValueError(f"{directory}: no WFDB records with .atr reference annotations")
    if neurokit:
        try:
            import neurokit2  # noqa: F401
        except ImportError:
            neurokit = False
    jobs = [Job(request_for(record.with_suffix(".hea")),
                then=functools.partial(_score_record, record, neurokit=neurokit)) for record in records]
    result = run_batch(jobs, cluster=cluster, workers=workers, threads=threads, progress=progress)
    rows = [scored for scored, row in zip(result.outputs, result.rows) if row["status"] != "failed"]
    failed = {record.name: row["error"] for record, row in zip(records, result.rows) if row["status"] == "failed"}
    if not rows:
        name, error = next(iter(failed.items()))
        raise ValueError(f"{directory}: no record could be evaluated; {name}: {error}")
    table = pd.DataFrame(rows)
    table = pd.concat([table, _total(table)], ignore_index=True)
    table.attrs["failed"] = failed
    return table


def _score_record(record: Path, run, neurokit: bool) -> dict:
    from pipeline.load import load_ecg

    fs = run.fs
    recording = load_ecg(record.with_suffix(".hea"), column=run.report["input"]["channel"])
    reference = recording.annotations[0]
    row = {"record": record.name, "fs": fs, "reference_beats": len(reference), "detected": len(run.fiducials)}
    contenders = {"": run.fiducials}
    if neurokit:
        contenders["nk_"] = neurokit_peaks(recording.signal, fs)
    for prefix, detected in contenders.items():
        for tol in TOLERANCES_S:
            tp, fn, fp = match_counts(reference, detected, int(round(tol * fs)))
            ms = int(tol * 1000)
            row.update({f"{prefix}tp_{ms}": tp, f"{prefix}fn_{ms}": fn, f"{prefix}fp_{ms}": fp})
    beats = run.beats
    labelled = beats[beats["label"] != ""]
    row["abnormal_beats"] = int(labelled["abnormal"].sum())
    row["auroc"] = auroc(labelled["score"], labelled["abnormal"])
    # Scores of different recordings share no scale: the total pools each beat's rank within its record.
    row["_scores"] = labelled["score"].rank(pct=True).to_numpy()
    row["_abnormal"] = labelled["abnormal"].to_numpy()
    return row


def _total(table: pd.DataFrame) -> pd.DataFrame:
    total = {"record": "total", "fs": np.nan}
    for column in table.columns:
        if column.startswith(("tp_", "fn_", "fp_", "nk_")) or column in ("reference_beats", "detected", "abnormal_beats"):
            total[column] = table[column].sum()
    total["auroc"] = auroc(np.concatenate(table["_scores"].to_list()), np.concatenate(table["_abnormal"].to_list()))
    return pd.DataFrame([total])


def format_table(table: pd.DataFrame) -> str:
    """Se (sensitivity) and P+ (positive predictivity) in %, per tolerance; NeuroKit2 beside ours."""
    has_nk = "nk_tp_150" in table
    header = (f"{'record':<8}{'beats':>7}{'found':>7}  {'Se50':>6}{'P+50':>7}  {'Se150':>6}{'P+150':>7}"
              + (f"  │ NK2 {'Se50':>6}{'P+50':>7}  {'Se150':>6}{'P+150':>7}" if has_nk else "")
              + f"  {'abnormal':>8}{'AUROC':>7}")
    lines = [header, "─" * len(header)]
    for row in table.to_dict("records"):
        line = f"{row['record']:<8}{int(row['reference_beats']):>7}{int(row['detected']):>7}  {_se_pp(row, '', 50)}  {_se_pp(row, '', 150)}"
        if has_nk:
            line += f"  │     {_se_pp(row, 'nk_', 50)}  {_se_pp(row, 'nk_', 150)}"
        line += f"  {int(row['abnormal_beats']):>8}{row['auroc']:>7.3f}"
        lines.append(line)
    return "\n".join(lines)


def _se_pp(row: dict, prefix: str, ms: int) -> str:
    tp, fn, fp = row[f"{prefix}tp_{ms}"], row[f"{prefix}fn_{ms}"], row[f"{prefix}fp_{ms}"]
    se = 100 * tp / (tp + fn) if tp + fn else float("nan")
    pp = 100 * tp / (tp + fp) if tp + fp else float("nan")
    return f"{se:>6.2f}{pp:>7.2f}"

