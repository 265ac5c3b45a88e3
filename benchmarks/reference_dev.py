"""Development evaluation of the reference population (pipeline.reference): each recording's own
score against the calibrated score, on MIT-BIH DS1 only, leave-one-record-out.

    python -m pipeline evaluate /work/shared/data/mitdb-ds1 --device cpu --no-neurokit \\
        --out .scratch/ds1-runs --workers 1                     # the product's DS1 runs, once
    python -m benchmarks.reference_dev --runs .scratch/ds1-runs

Each record is scored by a reference trained on the other 21 records' normal (AAMI N) beats; a run
of any record outside DS1 is refused (DS2 and the other databases are where the product is
judged). Figures: pooled AUROC of abnormal against normal beats, per AAMI class, the median
per-record AUROC, the precision of each record's 10 top-ranked beats, and for the calibrated score
the normal beats at or above the outlier threshold, pooled and per record.
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict
from datetime import date
from pathlib import Path

import numpy as np

from benchmarks import report
from benchmarks.measure import clocked
from benchmarks.report import table
from pipeline import calibrate, reference
from pipeline.metrics import aami_class, auroc
from pipeline.reference import NORMAL_SYMBOLS

DS1 = ("101", "106", "108", "109", "112", "114", "115", "116", "118", "119", "122", "124", "201", "203", "205",
       "207", "208", "209", "215", "220", "223", "230")
TOP_K = 10


def ds1_runs(folder: Path) -> dict:
    """{record: RunResult} of the DS1 runs in ``folder``; refuses any other record."""
    from pipeline.results import load_run

    runs = {}
    for found in sorted(Path(folder).glob("*/report.json")):
        path = Path(json.loads(found.read_text())["input"]["path"])
        record = path.stem
        if record not in DS1 or path.parent.name != "mitdb-ds1":
            raise SystemExit(f"{found.parent}: {path} is not a DS1 record; only DS1 may be used in development")
        runs[record] = load_run(found.parent)
    missing = sorted(set(DS1) - set(runs))
    if missing:
        raise SystemExit(f"{folder}: no runs of DS1 record(s) {', '.join(missing)}; run pipeline evaluate first")
    return dict(sorted(runs.items()))


def loro_scores(runs: dict, cfg: reference.ReferenceConfig, progress: bool = True) -> tuple[dict, dict]:
    """({record: ReferenceScores}, {record: Reference}): each record scored by a reference trained
    without it."""
    prepared = {record: reference.reference_beats(run, None, cfg) for record, run in runs.items()}
    out, refs = {}, {}
    for i, record in enumerate(runs):
        started = time.perf_counter()
        ref = refs[record] = reference.fit_reference([prepared[other] for other in runs if other != record], cfg)
        run = runs[record]
        pre = int(round(run.report["config"]["signal"]["pre_fiducial"] * run.embeddings.shape[1]))
        out[record] = reference.score_reference(np.asarray(run.embeddings), run.beats["fiducial"].to_numpy(),
                                                run.fs, pre, ref)
        if progress:
            print(f"  fold {i + 1}/{len(runs)} ({record}) {time.perf_counter() - started:.1f} s", flush=True)
    return out, refs


MAJORITY_RECORDS = ("106", "119", "203", "208", "223")  # the DS1 records with the most ventricular beats


def majority_stress(runs: dict, refs: dict, keep_normal: float = 0.25, seed: int = 0) -> dict:
    """The recording's own majority: in each of :data:`MAJORITY_RECORDS`, only a seeded
    ``keep_normal`` of the normal beats are kept, so abnormal beats become half or more of the
    beats, and the held-out record is scored again by its fold's reference. Timing is lost with the
    dropped beats, so the figure is the AUROC of the shape statistic (``ref_shape``), abnormal vs
    normal: does the recording's majority become its "normal"?"""
    rng = np.random.default_rng(seed)
    out = {}
    for record in MAJORITY_RECORDS:
        run = runs[record]
        labels = run.beats["label"].to_numpy()
        normal = np.isin(labels, list(NORMAL_SYMBOLS))
        keep = (labels != "") & (~normal | (rng.random(len(labels)) < keep_normal))
        pre = int(round(run.report["config"]["signal"]["pre_fiducial"] * run.embeddings.shape[1]))
        scored = reference.score_reference(np.ascontiguousarray(run.embeddings[keep]),
                                           run.beats["fiducial"].to_numpy()[keep], run.fs, pre, refs[record])
        out[record] = {"abnormal_fraction": float((~normal[keep]).mean()),
                       "auroc_shape": auroc(scored.statistics["shape"], ~normal[keep])}
    return out


THRESHOLDS = (calibrate.OUTLIER_SCORE, 3.0)


def figures(scores: dict, runs: dict, thresholds: tuple = ()) -> dict:
    """The figures of one score ({record: per-beat scores}) against the runs' labels; for each of
    ``thresholds`` (calibrated scores), the fraction of normal beats at or above it (pooled and per
    record) and of each AAMI class's beats."""
    pooled_scores, pooled_classes, per_record, top, ceiling, top_rich, rich = [], [], [], 0, 0, 0, 0
    fpr_per_record = {t: {} for t in thresholds}
    for record, run in runs.items():
        labels = run.beats["label"].to_numpy()
        known = labels != ""
        score, classes = np.asarray(scores[record], dtype=float)[known], aami_class(labels[known])
        abnormal = ~np.isin(labels[known], list(NORMAL_SYMBOLS))
        pooled_scores.append(score)
        pooled_classes.append(classes)
        per_record.append(auroc(score, abnormal))
        hits = int(abnormal[np.argsort(-score, kind="stable")[:TOP_K]].sum())
        top += hits
        ceiling += min(TOP_K, int(abnormal.sum()))
        if abnormal.sum() >= TOP_K:
            top_rich += hits
            rich += 1
        for t in thresholds:
            fpr_per_record[t][record] = float((score[classes == "N"] >= t).mean())
    score, classes = np.concatenate(pooled_scores), np.concatenate(pooled_classes)
    normal = classes == "N"
    out = {"auroc_pooled_raw": auroc(score, ~normal),
           "auroc_median_per_record": float(np.nanmedian(per_record)),
           f"precision_top{TOP_K}": top / (TOP_K * len(runs)),
           f"precision_top{TOP_K}_ceiling": ceiling / (TOP_K * len(runs)),
           f"precision_top{TOP_K}_records_with_{TOP_K}_abnormal": top_rich / (TOP_K * rich) if rich else float("nan"),
           "records_with_10_abnormal": rich}
    for cls in "SVFQ":
        keep = normal | (classes == cls)
        out[f"auroc_{cls}_vs_N"] = auroc(score[keep], (classes == cls)[keep])
    for t in thresholds:
        at = {"false_positive_rate_N": float((score[normal] >= t).mean()),
              "false_positive_rate_N_per_record": fpr_per_record[t],
              "false_positive_rate_N_worst_record": max(fpr_per_record[t].items(), key=lambda kv: kv[1]),
              "sensitivity": {cls: float((score[classes == cls] >= t).mean())
                              for cls in "SVFQ" if (classes == cls).any()}}
        at["sensitivity"]["all_abnormal"] = float((score[~normal] >= t).mean())
        out[f"at_{t:g}"] = at
    return out


def scoring_speed(ref: reference.Reference, n: int = 100_000, fs: float = 360.0) -> dict:
    """Seconds to score ``n`` beats (368-sample rows at ``fs``: resampling, statistics, calibration)
    on the CPU and, where CuPy finds a GPU, on the GPU (data already there, as in a run), with the
    largest difference between the two backends' scores."""
    rng = np.random.default_rng(0)
    t = (np.arange(368) - 92) / fs
    beat = np.exp(-(t / 0.012) ** 2) + 0.3 * np.exp(-((t - 0.25) / 0.05) ** 2)
    rows = (beat[None, :] * rng.uniform(0.8, 1.2, (n, 1)) + 0.02 * rng.standard_normal((n, 368))).astype(np.float32)
    rows[::50] = np.roll(rows[::50], 20, axis=1) * 1.5     # 2 % of the beats another shape
    positions = np.cumsum(rng.integers(250, 330, n)).astype(np.int64)
    reference.score_reference(rows[:2000], positions[:2000], fs, 92, ref)  # first-call costs
    (cpu_s,), expected = clocked(lambda: reference.score_reference(rows, positions, fs, 92, ref).score, "cpu", 1)
    out = {"beats": n, "cpu_s": cpu_s}
    try:
        import cupy
        cupy.cuda.runtime.getDeviceCount()
    except Exception:  # no CuPy or no GPU here
        return out
    device_rows, device_positions = cupy.asarray(rows), cupy.asarray(positions)
    reference.score_reference(device_rows[:2000], device_positions[:2000], fs, 92, ref)
    times, got = clocked(lambda: reference.score_reference(device_rows, device_positions, fs, 92, ref).score, "gpu", 5)
    out.update(gpu=cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(), gpu_s=float(np.median(times)),
               max_abs_difference=float(np.abs(cupy.asnumpy(got) - expected).max()))
    return out


def markdown(result: dict) -> str:
    names = [("auroc_pooled_raw", "pooled AUROC (raw scores), abnormal vs N", "≥ 0.95"),
             ("auroc_S_vs_N", "S vs N (pooled)", "≥ 0.90"),
             ("auroc_V_vs_N", "V vs N (pooled)", "≥ 0.98"),
             ("auroc_F_vs_N", "F vs N (pooled)", ""),
             ("precision_top10", "precision of each record's top 10", "≥ 0.90"),
             ("precision_top10_ceiling", "  ceiling (records with < 10 abnormal beats)", ""),
             ("precision_top10_records_with_10_abnormal", "  over records with ≥ 10 abnormal beats", ""),
             ("auroc_median_per_record", "median per-record AUROC", "≥ 0.97")]
    variants = list(result["scores"])
    lines = [f"# Reference population, development figures ({result['date']})", "", result["protocol"], "",
             *table(["figure", "target", *variants], [[title, target, *(f"{result['scores'][v][key]:.3f}"
                                                                          for v in variants)]
                                                       for key, title, target in names])]
    calibrated, speed, rows = result["scores"][variants[1]], result["speed"], []
    for t in THRESHOLDS:
        at = calibrated[f"at_{t:g}"]
        worst, sens = at["false_positive_rate_N_worst_record"], at["sensitivity"]
        rows.append([f"{t:g}{' (OUTLIER_SCORE)' if t == calibrate.OUTLIER_SCORE else ''}",
                     f"{calibrate.expected_false_positive_rate(t):.2%}", f"{at['false_positive_rate_N']:.2%}",
                     f"{worst[0]} {worst[1]:.2%}", f"{sens['all_abnormal']:.1%}",
                     *(f"{sens.get(c, float('nan')):.1%}" for c in "SVF")])
    lines += table(["calibrated score at least", "expected FP rate", "measured FP rate (N, pooled)", "worst record",
                    "sensitivity: all abnormal", "S", "V", "F"], rows)
    majority = result["majority"]
    first = majority[next(iter(majority))]
    lines += ["The recording's own majority (only a quarter of the normal beats kept; AUROC of the shape "
              "statistic, abnormal vs normal; see majority_stress):", "",
              *table(["record", "abnormal fraction", *majority],
                     [[r, f"{first[r]['abnormal_fraction']:.0%}", *(f"{majority[v][r]['auroc_shape']:.3f}" for v in majority)]
                      for r in MAJORITY_RECORDS])]
    at = calibrated[f"at_{calibrate.OUTLIER_SCORE:g}"]
    lines += [f"Normal beats at or above {calibrate.OUTLIER_SCORE:g}, per record: "
              + ", ".join(f"{r} {v:.2%}" for r, v in at["false_positive_rate_N_per_record"].items()) + ".", "",
              f"Scoring speed (resampling, statistics, calibration) of {speed['beats']:,} beats: "
              f"CPU {speed['cpu_s']:.2f} s"
              + (f", GPU ({speed['gpu']}) {speed['gpu_s']:.3f} s" if "gpu_s" in speed else ""),
              ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    p = report.parser("reference_dev", __doc__)
    p.add_argument("--runs", default=".scratch/ds1-runs", help="folder of the product's DS1 runs")
    args = p.parse_args(argv)
    runs = ds1_runs(Path(args.runs))
    cfg = reference.ReferenceConfig()
    result = {"date": date.today().isoformat(), "config": asdict(cfg),
              "protocol": ("MIT-BIH DS1 (22 records), the product's runs (360 Hz, MLII); today = each record's "
                           "VAE + rhythm score (the beats table's `score_recording`); calibrated = pipeline.reference, "
                           "leave-one-record-out (each record scored by a reference trained on the other 21 "
                           "records' AAMI-N beats). Beats without a reference label are left out."),
              "scores": {}}
    # A run's `score` is calibrated by the shipped reference, which saw every DS1 record; the
    # recording's own ranking (`score_recording`) is what a run gave before the reference.
    result["scores"]["today"] = figures({r: run.beats["score_recording"].to_numpy() for r, run in runs.items()}, runs)
    print("LORO, default config", flush=True)
    scored, refs = loro_scores(runs, cfg)
    result["scores"]["calibrated"] = figures({r: s.score for r, s in scored.items()}, runs, THRESHOLDS)
    result["majority"] = {"calibrated": majority_stress(runs, refs)}
    full = reference.fit_reference([reference.reference_beats(run, None, cfg) for run in runs.values()], cfg)
    result["speed"] = scoring_speed(full)
    report.write(result, report.paths(args.out, "reference-dev", ""), markdown(result))
    print(markdown(result))
    return result


if __name__ == "__main__":
    main()
