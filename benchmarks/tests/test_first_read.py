"""benchmarks.first_read: the false beats among the first of the default ranking, counted by hand
on a small case, and the command on a WFDB record written here."""
from __future__ import annotations

import numpy as np
import pytest

from benchmarks import first_read

FS = 250.0


def test_the_ranking_leaves_low_quality_beats_out_and_counts_those_far_from_every_annotation():
    annotations = np.array([100, 300, 500, 700])
    positions = np.array([100, 200, 300, 500, 640, 700])        # 200 and 640 match no annotation
    score = np.array([1.0, 9.0, 2.0, 5.0, 8.0, 5.0])            # 200 first, 640 second
    quality = np.array([1.0, 0.2, 1.0, 1.0, 1.0, 1.0])          # ...but 200 is low quality
    # Ranked: 640 (false; 60 samples = 240 ms off), 500 and 700 (score 5, by position), 300, 100.
    assert first_read.false_among_first(score, quality, positions, annotations, FS, (1, 2, 5)) == {1: 1, 2: 1, 5: 1}
    quality[1] = 1.0
    assert first_read.false_among_first(score, quality, positions, annotations, FS, (1, 2, 6)) == {1: 1, 2: 2, 6: 2}
    near = positions.copy()
    near[4] = 700 - int(0.15 * FS)                              # 150 ms off: a match
    assert first_read.false_among_first(score, quality, near, annotations, FS, (6,)) == {6: 1}


def test_the_command_writes_a_table_per_section(tmp_path, capsys):
    wfdb = pytest.importorskip("wfdb")
    from pipeline.synth import SynthConfig, synthesize

    ecg = synthesize(SynthConfig(n_samples=int(8 * 60 * 360), fs=360.0, seed=3))
    folder = tmp_path / "db"
    folder.mkdir()
    wfdb.wrsamp("r1", fs=360.0, units=["mV"], sig_name=["MLII"], p_signal=ecg.signal[:, None].astype(np.float64),
                fmt=["16"], write_dir=str(folder))
    wfdb.wrann("r1", "atr", np.asarray(ecg.r_peaks), np.array(["N"] * len(ecg.r_peaks)), write_dir=str(folder))
    out = tmp_path / "first.md"
    assert first_read.main([str(folder), "--noise", "em:6", "--top", "5", "--out", str(out)]) == 0
    text = out.read_text()
    assert text.count("### ") == 2 and "| r1 |" in text and "false among the first 5" in text
    with pytest.raises(SystemExit):
        first_read.main([str(folder), "--top", "0"])
