"""The beats a reviewer reads first: how many of the top of each annotated record's ranking are no
heartbeat at all.

    python -m benchmarks.first_read [FOLDER ...] [--noise KIND:DB,...] [--top N,...] [--out FILE.md]

The ranking is the dashboard's default one: the beats by their calibrated outlier score, highest
first, low-quality beats left out (:func:`pipeline.quality.low_quality`). A beat of it is false when
no reference beat lies within 150 ms of it (the detection benchmark's matching). ``--noise`` adds
the detection benchmark's synthetic noise (:mod:`benchmarks.noise`) to both leads. On DS1 these are
development figures twice over: the detector was tuned there, and the shipped reference was
trained on its normal beats. Detection and scoring only (no VAE), seconds a record.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from benchmarks import detection, noise, report
from pipeline import backend, reference
from pipeline.config import SignalConfig
from pipeline.quality import low_quality
from pipeline.segmentation import segment

TOLERANCE_S = 0.15


def false_among_first(score, quality, positions, annotations, fs: float, tops) -> dict:
    """``{n: how many of the first n ranked beats lie over TOLERANCE_S from every annotation}``:
    the beats ranked by ``score`` (highest first, ties by position), low ``quality`` ones left out."""
    positions, annotations = np.asarray(positions), np.sort(np.asarray(annotations))
    ranked = np.flatnonzero(~low_quality(np.asarray(quality)))
    ranked = ranked[np.lexsort((ranked, -np.asarray(score)[ranked]))]
    at = np.searchsorted(annotations, positions[ranked])
    before = annotations[np.clip(at - 1, 0, annotations.shape[0] - 1)]
    after = annotations[np.clip(at, 0, annotations.shape[0] - 1)]
    false = np.minimum(np.abs(positions[ranked] - before), np.abs(positions[ranked] - after)) > TOLERANCE_S * fs
    return {n: int(false[:n].sum()) for n in tops}


def first_read(name: str, signal, fs: float, annotations, excluded, other, tops, reference_model) -> dict:
    """One record's row: its name and the false beats among its first ``tops``."""
    seg = segment(signal, fs, SignalConfig(), other=other)
    scores = reference.score_reference(seg.beats.rows, seg.positions, fs, seg.pre, reference_model)
    return {"record": name, **false_among_first(backend.to_host(scores.score), backend.to_host(seg.quality),
                                                backend.to_host(seg.positions), annotations, fs, tops)}


def table(rows: list[dict], tops) -> str:
    total = {"record": "all", **{n: sum(row[n] for row in rows) for n in tops}}
    cells = [[row["record"], *(f"{row[n]} of {n}" for n in tops)] for row in rows + [total]]
    cells[-1][1:] = [f"{total[n]} of {n * len(rows)}" for n in tops]
    return "\n".join(report.table(["record", *(f"false among the first {n}" for n in tops)], cells)).rstrip()


def main(argv=None) -> int:
    parser = report.parser("first_read", __doc__, out=False)
    parser.add_argument("folders", nargs="*", type=Path)
    parser.add_argument("--noise", metavar="KIND:DB,...", help="also read the folders' records with noise added")
    parser.add_argument("--top", default="10,20", metavar="N,...", help="how far down the ranking to look (default 10,20)")
    parser.add_argument("--out", type=Path, help="also write the tables as Markdown here")
    args = parser.parse_args(argv)
    try:
        noises = noise.parse(args.noise) if args.noise else []
        tops = [int(n) for n in args.top.split(",")]
    except ValueError as error:
        parser.error(str(error))
    if any(n <= 0 for n in tops):
        parser.error("--top: positive counts, e.g. 10,20")
    sections = [(str(folder), detection.records(folder)) for folder in args.folders]
    sections += [(f"{folder}, {kind} noise at {snr:g} dB", detection.with_noise(folder, kind, snr))
                 for kind, snr in noises for folder in args.folders]
    model = reference.load_reference()
    report.sections("The dashboard's default ranking (calibrated score, low-quality beats left out); a false beat "
                    f"lies over {TOLERANCE_S * 1000:.0f} ms from every reference beat.", sections,
                    lambda items: [first_read(*item, tops, model) for item in items],
                    lambda rows: table(rows, tops), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
