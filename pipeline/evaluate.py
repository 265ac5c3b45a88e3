"""Accuracy on annotated recordings, each record run as a user would run it.

Detection follows AAMI EC57: the beats the product shows (its beats table) matched one to one
with the reference beats within 150 ms (and, stricter, 50 ms), ventricular flutter/fibrillation
episodes left out of the comparison, sensitivity (Se) and positive predictivity (P+) per record
and gross (all records' beats summed). NeuroKit2's ``ecg_clean`` + ``ecg_peaks`` on the same lead
is scored beside ours when installed.

Outlier scores: AUROC of abnormal versus normal beats per record and pooled over records (raw
scores, and each beat's rank within its record), per AAMI class (N, S, V, F, Q) against N, with
and without paced records, and the precision of each record's top-ranked beats. The score is the
beats table's: calibrated against the reference population of normal beats shipped with the
package (:mod:`pipeline.reference`), which learnt from the MIT-BIH DS1 records; the summary names
the evaluated records it learnt from, whose figures are not held-out figures.

See Also
--------
pipeline.batch.run_batch : runs the records, one Dask task each.
pipeline.metrics : the matching, the counts and the AUROC.
pipeline.accuracy.evaluation_figures : the same detection figures and AUROC for each row of an archive.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from pipeline.metrics import (AAMI_CLASSES, PACED_SYMBOLS, aami_class, auroc, ec57_counts, flutter_episodes,
                              sensitivity_ppv)

PROTOCOL = ("AAMI EC57: the beats table matched one to one with the reference beats within 150 ms (and 50 ms), "
            "ventricular flutter/fibrillation episodes excluded; gross = all records' beats summed")
TOP_K = (10, 50, 100)


def neurokit_peaks(signal: np.ndarray, fs: float) -> np.ndarray:
    """R peaks by NeuroKit2's default method (clean, then detect)."""
    import neurokit2 as nk

    cleaned = nk.ecg_clean(np.asarray(signal, dtype=float), sampling_rate=int(round(fs)))
    _, info = nk.ecg_peaks(cleaned, sampling_rate=int(round(fs)))
    return np.asarray(info["ECG_R_Peaks"], dtype=np.int64)


def evaluate_directory(directory: Path, request_for: Callable, neurokit: bool = True, *, cluster="auto",
                       workers: int | None = None, threads: int | None = None, per_gpu: int | None = None,
                       progress: bool = True) -> pd.DataFrame:
    """Run the pipeline on every annotated WFDB record in ``directory`` and score it.

    The records run as one batch (:func:`pipeline.batch.run_batch`: parallel on a Dask cluster,
    a progress bar, ``<out>/archive.parquet``); each is scored on its worker right after its run.
    A record that fails does not stop the others: the table holds the ones that finished, and
    ``table.attrs["failed"]`` maps each failed record to its one-line error.
    """
    import functools

    from pipeline.batch import run_batch
    from pipeline.batch_task import Job

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
    result = run_batch(jobs, cluster=cluster, workers=workers, threads=threads, per_gpu=per_gpu, progress=progress)
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
    flutter = flutter_episodes(record)
    detected = run.beats["fiducial"].to_numpy()
    row = {"record": record.name, "fs": fs, "reference_beats": len(reference), "detected": len(detected),
           "flutter_s": float((np.minimum(flutter[:, 1], recording.n_samples) - flutter[:, 0]).sum() / fs)}
    row.update(ec57_counts(reference, detected, fs, flutter))
    if neurokit:
        nk = ec57_counts(reference, neurokit_peaks(recording.signal, fs), fs, flutter)
        row.update({f"nk_{name}": value for name, value in nk.items()})
    row.update(_outlier_measures(run.beats, paced=bool(np.isin(recording.annotations[1], list(PACED_SYMBOLS)).any())))
    return row


def _outlier_measures(beats: pd.DataFrame, paced: bool) -> dict:
    """AUROC of the combined and the shape-only score, per-class counts and AUROC against N,
    and the precision of the record's top-k beats; the hidden ``_`` columns carry what the total
    pools (each beat's score rank within its record, its class, its place in the ranking)."""
    labelled = beats[beats["label"] != ""]
    classes = aami_class(labelled["label"])
    abnormal = labelled["abnormal"].to_numpy()
    score = labelled["score"]
    row = {"paced": paced, "abnormal_beats": int(abnormal.sum()), "auroc": auroc(score, abnormal)}
    if "score_shape" in labelled:
        row["auroc_shape"] = auroc(labelled["score_shape"], abnormal)
        row["_shape"] = labelled["score_shape"].rank(pct=True).to_numpy()
    normal = classes == "N"
    for cls in AAMI_CLASSES:
        row[f"n_{cls}"] = int((classes == cls).sum())
        if cls != "N":
            keep = normal | (classes == cls)
            row[f"auroc_{cls}"] = auroc(score[keep], (classes == cls)[keep])
    place = score.rank(ascending=False, method="first").to_numpy()  # 1 = the top-ranked beat
    for k in TOP_K:
        top = place <= k
        row[f"top{k}_abnormal"] = int(abnormal[top].sum())
        row[f"top{k}_shown"] = int(top.sum())
    # The total pools both the raw scores (what a reviewer of an archive compares) and each beat's
    # rank within its record (what the per-record ranking alone is worth).
    row["_raw"] = score.to_numpy(dtype=float)
    row["_scores"] = score.rank(pct=True).to_numpy()
    row["_abnormal"] = abnormal
    row["_classes"] = classes
    row["_place"] = place
    return row


def _total(table: pd.DataFrame) -> pd.DataFrame:
    total = {"record": "total", "fs": np.nan}
    for column in table.columns:
        if (column.startswith(("tp_", "fn_", "fp_", "nk_", "n_", "top")) or
                column in ("reference_beats", "detected", "abnormal_beats", "flutter_s")):
            total[column] = table[column].sum()
    pooled = {name: np.concatenate(table[name].to_list())
              for name in ("_raw", "_scores", "_abnormal", "_classes", "_place")}
    total["auroc"] = auroc(pooled["_scores"], pooled["_abnormal"])
    total["auroc_raw"] = auroc(pooled["_raw"], pooled["_abnormal"])
    paced = np.concatenate([np.full(len(s), p) for s, p in zip(table["_scores"], table["paced"])])
    total["auroc_non_paced"] = auroc(pooled["_scores"][~paced], pooled["_abnormal"][~paced])
    total["median_auroc_non_paced"] = float(np.nanmedian(table.loc[~table["paced"], "auroc"])) if (~table["paced"]).any() else float("nan")
    total["paced"] = int(table["paced"].sum())
    if "_shape" in table:
        total["auroc_shape"] = auroc(np.concatenate(table["_shape"].to_list()), pooled["_abnormal"])
    normal = pooled["_classes"] == "N"
    for cls in AAMI_CLASSES:
        if cls == "N":
            continue
        mine = pooled["_classes"] == cls
        keep = normal | mine
        total[f"auroc_{cls}"] = auroc(pooled["_scores"][keep], mine[keep])
        total[f"auroc_raw_{cls}"] = auroc(pooled["_raw"][keep], mine[keep])
        for k in TOP_K:
            total[f"recall{k}_{cls}"] = float((mine & (pooled["_place"] <= k)).sum() / mine.sum()) if mine.any() else float("nan")
    return pd.DataFrame([total])


def summary_measures(table: pd.DataFrame) -> dict:
    """The literature's figures from an evaluated table's total row: pooled AUROC (all records and
    non-paced ones), per-record median AUROC (non-paced), precision of the top-k per record, and
    per AAMI class: beats, AUROC against N, recall in each record's top k."""
    total = table[table["record"] == "total"].iloc[0]
    out = {"auroc_pooled": total["auroc"], "auroc_pooled_raw": total["auroc_raw"],
           "auroc_pooled_non_paced": total["auroc_non_paced"],
           "auroc_median_non_paced": total["median_auroc_non_paced"], "paced_records": int(total["paced"])}
    for k in TOP_K:
        shown = total[f"top{k}_shown"]
        out[f"precision_top{k}"] = float(total[f"top{k}_abnormal"] / shown) if shown else float("nan")
    for cls in AAMI_CLASSES:
        out[f"{cls}_beats"] = int(total[f"n_{cls}"])
        if cls != "N":
            out[f"{cls}_auroc"] = total[f"auroc_{cls}"]
            out[f"{cls}_auroc_raw"] = total[f"auroc_raw_{cls}"]
            for k in TOP_K:
                out[f"{cls}_recall_top{k}"] = total[f"recall{k}_{cls}"]
    return out


def format_table(table: pd.DataFrame) -> str:
    """Per record and gross: Se (sensitivity) and P+ (positive predictivity) in %, at 50 and 150 ms,
    NeuroKit2 beside ours; outlier AUROC of the combined score (and of the VAE's shape score
    alone); then the pooled, per-class and top-k figures (:func:`summary_measures`)."""
    has_nk = "nk_tp_150" in table
    has_shape = "auroc_shape" in table
    width = max(8, *(len(str(name)) + 2 for name in table["record"]))
    header = (f"{'record':<{width}}{'beats':>7}{'found':>7}  {'Se50':>6}{'P+50':>7}  {'Se150':>6}{'P+150':>7}"
              + (f"  │ NK2 {'Se50':>6}{'P+50':>7}  {'Se150':>6}{'P+150':>7}" if has_nk else "")
              + f"  {'abnormal':>8}{'AUROC':>7}" + (f"{'shape':>7}" if has_shape else ""))
    lines = [f"detection, {PROTOCOL}", "", header, "─" * len(header)]
    for row in table.to_dict("records"):
        name = "gross" if row["record"] == "total" else row["record"]
        line = (f"{name:<{width}}{int(row['reference_beats']):>7}{int(row['detected']):>7}  "
                f"{_se_pp(row, '', 50)}  {_se_pp(row, '', 150)}")
        if has_nk:
            line += f"  │     {_se_pp(row, 'nk_', 50)}  {_se_pp(row, 'nk_', 150)}"
        line += f"  {int(row['abnormal_beats']):>8}{row['auroc']:>7.3f}"
        if has_shape:
            line += f"{row['auroc_shape']:>7.3f}"
        lines.append(line)
    return ("\n".join(lines) + "\n\n" + format_summary(summary_measures(table))
            + _seen_by_reference([str(r) for r in table["record"] if r != "total"]))


def _seen_by_reference(records: list[str]) -> str:
    """A line naming the evaluated records (by name) that the shipped reference learnt from."""
    from pipeline.reference import DEFAULT_REFERENCE

    sidecar = json.loads(DEFAULT_REFERENCE.with_suffix(".json").read_text())
    learnt = {Path(record.get("name", "")).stem for record in sidecar.get("records", [])}
    seen = [r for r in records if r in learnt]
    if not seen:
        return ""
    return (f"\nnote: the shipped reference learnt from {len(seen)} of these {len(records)} records "
            f"({', '.join(seen[:6])}{', …' if len(seen) > 6 else ''}); their outlier figures are not held-out figures")


def format_summary(m: dict) -> str:
    """The figures of :func:`summary_measures` as a few lines of text."""
    ks = [int(key.removeprefix("precision_top")) for key in m if key.startswith("precision_top")]
    lines = [
        "outlier score (the beats table's, calibrated against the shipped reference population):",
        f"  AUROC pooled over records: raw scores {m['auroc_pooled_raw']:.3f}, ranks within records "
        f"{m['auroc_pooled']:.3f}; without the {m['paced_records']} paced record(s) "
        f"{m['auroc_pooled_non_paced']:.3f}; per-record median (non-paced) {m['auroc_median_non_paced']:.3f}",
        "  precision of each record's top k: " + "  ".join(f"k={k} {m[f'precision_top{k}']:.3f}" for k in ks),
        f"  {'AAMI class':<11}{'beats':>7}{'AUROC vs N':>12}{'(raw)':>8}" + "".join(f"{f'recall@{k}':>11}" for k in ks),
    ]
    for cls in AAMI_CLASSES:
        line = f"  {cls:<11}{m[f'{cls}_beats']:>7}"
        if cls != "N":
            line += (f"{m[f'{cls}_auroc']:>12.3f}{m[f'{cls}_auroc_raw']:>8.3f}"
                     + "".join(f"{m[f'{cls}_recall_top{k}']:>11.3f}" for k in ks))
        lines.append(line)
    return "\n".join(lines)


def _se_pp(row: dict, prefix: str, ms: int) -> str:
    se, ppv = sensitivity_ppv(row[f"{prefix}tp_{ms}"], row[f"{prefix}fn_{ms}"], row[f"{prefix}fp_{ms}"])
    return f"{se:>6.2f}{ppv:>7.2f}"
