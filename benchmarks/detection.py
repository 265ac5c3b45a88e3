"""Beat detection as the product shows it (the beats table: fiducials, flutter taken out), against
reference annotations, AAMI EC57 style, with NeuroKit2 on the same lead beside it.

    python -m benchmarks.detection [FOLDER ...] [--resample HZ] [--second-lead] [--unnamed] [--noise KIND:DB,...]
                                   [--stress] [--out FILE.md]

FOLDER: WFDB records with ``.atr`` (the development set is ../shared/data/mitdb-ds1). ``--resample``
also reads every folder's records resampled to HZ (both leads and the annotations; polyphase,
as a recorder at that rate would deliver them), the other rates the product meets.
``--second-lead`` also reads them on the lead the product would not choose (V1, V4, V5 on MIT-BIH):
a lead unlike lead II, as the clearest lead of a recording whose leads carry no names may be.
``--unnamed`` also reads them with their leads named ``ECG1`` and ``ECG2``, the second lead first,
on the lead the product then chooses (QRS clarity, then the beats' agreement): a recording
whose channels are numbered.
``--noise`` also reads them with noise added to both leads, in the noise stress test's layout, each
KIND (``ma`` muscle, ``em`` electrode motion, ``bw`` baseline wander; synthetic) at SNR DB
(:mod:`benchmarks.noise`). ``--stress`` adds the synthetic stress cases of :mod:`pipeline.stress`
(their true beats; flutter episodes left out as the reference's are). Detection only: no VAE is
trained, so a folder takes seconds a record.
"""
from __future__ import annotations

import sys
import tempfile
import zlib
from pathlib import Path

import numpy as np

from benchmarks import noise, report
from pipeline import load, stress, wavelet
from pipeline.lead_agreement import compare_leads, review_choice
from pipeline.leads import choose_lead
from pipeline.config import SignalConfig
from pipeline.evaluate import PROTOCOL, neurokit_peaks
from pipeline.metrics import ec57_counts, flutter_episodes, sensitivity_ppv
from pipeline.segmentation import heartbeats


def detect(signal, fs: float, cfg: SignalConfig = SignalConfig(), other=None) -> np.ndarray:
    """The fiducials the run's beats table holds (``other``: the second lead the run reads too)."""
    positions, _, _, _ = heartbeats(wavelet.ricker_response(signal, fs, cfg.ricker_width_s), signal, fs, cfg, other)
    return np.asarray(positions)


def score(name: str, signal, fs: float, reference, excluded, other=None) -> dict:
    row = {"record": name, "beats": len(reference)}
    row.update(ec57_counts(reference, detect(signal, fs, other=other), fs, excluded))
    row.update({f"nk_{k}": v for k, v in ec57_counts(reference, neurokit_peaks(signal, fs), fs, excluded).items()})
    return row


def records(folder: Path):
    for header in sorted(Path(folder).glob("*.hea")):
        if header.with_suffix(".atr").exists():
            recording = load.load_ecg(header)
            yield (header.stem, recording.signal, recording.fs, recording.annotations[0], flutter_episodes(header),
                   load.load_other_lead(recording).signal)


def on_second_lead(folder: Path):
    """:func:`records` read on each record's other lead (V1, V4 or V5 on MIT-BIH), the lead the
    product would choose as the other: how the detector fares on a lead that is not lead II, as on
    a database whose leads are named by number and the clearest one is no limb lead."""
    for header in sorted(Path(folder).glob("*.hea")):
        if header.with_suffix(".atr").exists():
            chosen = load.load_ecg(header)
            name = load.load_other_lead(chosen).name
            if name is not None:
                second = load.load_ecg(header, column=name)
                yield (f"{header.stem} ({name})", second.signal, second.fs, chosen.annotations[0],
                       flutter_episodes(header), chosen.signal)


def unnamed(folder: Path):
    """:func:`records` with their two leads named ``ECG1`` and ``ECG2``, the second lead first (V1
    before MLII on MIT-BIH), as a recorder that numbers its channels may deliver them: the lead the
    product chooses then (:func:`pipeline.leads.choose_lead` by QRS clarity, reviewed by the beats
    each lead finds: :func:`pipeline.lead_agreement.compare_leads`), the other beside it."""
    for name, signal, fs, reference, excluded, other in records(folder):
        if other is None:
            continue
        leads = [other, signal]
        chosen, _ = choose_lead(["ECG1", "ECG2"], leads.__getitem__, fs)
        if compare_leads(leads[chosen], leads[1 - chosen], fs, SignalConfig()).other_is_better:
            chosen = 1 - chosen
        yield (f"{name} ({'ECG1' if chosen == 0 else 'ECG2'})", leads[chosen], fs, reference, excluded,
               leads[1 - chosen])


def resampled(folder: Path, fs: float):
    """:func:`records`, every record resampled to ``fs`` on the way (both leads, the annotations
    and the flutter episodes scaled to the new rate)."""
    from fractions import Fraction

    from scipy.signal import resample_poly

    for name, signal, rate, reference, excluded, other in records(folder):
        ratio = Fraction(fs / rate).limit_denominator(1000)
        scale = lambda lead: resample_poly(lead, ratio.numerator, ratio.denominator).astype(np.float32)
        at = lambda samples: np.round(np.asarray(samples, dtype=np.float64) * fs / rate).astype(np.int64)
        yield (name, scale(signal), fs, at(reference), at(excluded).reshape(-1, 2),
               None if other is None else scale(other))


def with_noise(folder: Path, kind: str, snr_db: float):
    """:func:`records` with noise of ``kind`` at ``snr_db`` added to both leads
    (:func:`benchmarks.noise.add_noise`), seeded by the record, the kind and the SNR."""
    for name, signal, fs, reference, excluded, other in records(folder):
        rng = np.random.default_rng(zlib.crc32(f"{name}:{kind}:{snr_db:g}".encode()))
        add = lambda lead: noise.add_noise(lead, reference, fs, kind, snr_db, rng)
        yield name, add(signal), fs, reference, excluded, None if other is None else add(other)


def stress_cases():
    with tempfile.TemporaryDirectory() as folder:
        for name in stress.CASES:
            case = stress.make_case(name)
            path = stress.write_case(case, Path(folder) / f"{name}.csv")
            recording = load.load_ecg(path, fs=case.fs)      # read back as a user's file is: lead by name
            recording, other = review_choice(recording, load.load_other_lead(recording), SignalConfig())
            flutter = np.array([(s * case.fs, e * case.fs) for kind, s, e in case.episodes if kind == "flutter"],
                               dtype=np.int64).reshape(-1, 2)
            yield f"stress:{name}", recording.signal, recording.fs, case.beats, flutter, other.signal


def table(rows: list[dict]) -> str:
    cells = []
    for row in rows:
        cells.append([row["record"], f"{row['beats']:,}"])
        for prefix in ("", "nk_"):
            for ms in (150, 50):
                se, ppv = sensitivity_ppv(row[f"{prefix}tp_{ms}"], row[f"{prefix}fn_{ms}"], row[f"{prefix}fp_{ms}"])
                cells[-1] += [f"{se:.2f}", f"{ppv:.2f}"]
    return "\n".join(report.table(["record", "beats", "Se 150", "P+ 150", "Se 50", "P+ 50", "NK2 Se 150", "NK2 P+ 150",
                                   "NK2 Se 50", "NK2 P+ 50"], cells)).rstrip()


def gross(rows: list[dict], name: str) -> dict:
    total = {"record": name, "beats": sum(r["beats"] for r in rows)}
    for key in rows[0]:
        if key.startswith(("tp_", "fn_", "fp_", "nk_")):
            total[key] = sum(r[key] for r in rows)
    return total


def main(argv=None) -> int:
    parser = report.parser("detection", __doc__, out=False)
    parser.add_argument("folders", nargs="*", type=Path)
    parser.add_argument("--resample", type=float, metavar="HZ", help="also read the folders' records resampled to HZ")
    parser.add_argument("--second-lead", action="store_true",
                        help="also read the folders' records on their other lead (not the one the product chooses)")
    parser.add_argument("--noise", metavar="KIND:DB,...", help="also read the folders' records with noise added "
                        "(KIND ma, em or bw; synthetic, in the noise stress test's layout) at DB dB SNR")
    parser.add_argument("--unnamed", action="store_true",
                        help="also read the folders' records with their leads named ECG1 and ECG2, the second "
                             "lead first, on the lead the product then chooses")
    parser.add_argument("--stress", action="store_true", help="add the synthetic stress cases")
    parser.add_argument("--out", type=Path, help="also write the tables as Markdown here")
    args = parser.parse_args(argv)
    try:
        noises = noise.parse(args.noise) if args.noise else []
    except ValueError as error:
        parser.error(str(error))
    sections = [(str(folder), list(records(folder))) for folder in args.folders]
    if args.resample:
        sections += [(f"{folder}, resampled to {args.resample:g} Hz", list(resampled(folder, args.resample)))
                     for folder in args.folders]
    if args.second_lead:
        sections += [(f"{folder}, second lead", list(on_second_lead(folder))) for folder in args.folders]
    if args.unnamed:
        sections += [(f"{folder}, leads named ECG1 and ECG2, the second lead first", list(unnamed(folder)))
                     for folder in args.folders]
    sections += [(f"{folder}, {kind} noise at {snr:g} dB", list(with_noise(folder, kind, snr)))
                 for kind, snr in noises for folder in args.folders]
    if args.stress:
        sections.append(("synthetic stress cases", list(stress_cases())))
    report.sections(f"Protocol: {PROTOCOL}. NeuroKit2: ecg_clean + ecg_peaks on the same lead.", sections,
                    lambda items: [score(*item) for item in items],
                    lambda rows: table(rows + [gross(rows, "gross")]), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
