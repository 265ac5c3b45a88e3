"""The warm-up before a computed run: every reader and kernel of the run once on a small synthetic
recording, so that the run's stage times measure the work, not one-off set-up (compiling kernels,
creating CUDA's libraries' handles). A server start pays it once; the report shows it as 'warmup'.

See Also
--------
pipeline.run : calls :func:`warm_up` before the run's stages.
pipeline.segmentation.segment : the chain warmed up.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from pipeline import backend
from pipeline.config import VAEConfig
from pipeline.requests import RunRequest
from pipeline.segmentation import segment


def warm_up(device: str, request: RunRequest, input_path: Path) -> None:
    """Run every reader and kernel of the run once on a small synthetic recording, so that stage
    times measure the work, not one-off set-up (a server start pays this once; the report shows it
    as 'warmup'): the input format's reader on a 20-s file of that format, the segmentation
    kernels and, on the GPU, CuPy's and Numba's kernels at a realistic size (library routines such
    as sorts pick other kernels for large arrays), cuFFT, and PyTorch's cuDNN/cuBLAS set-up and
    the CUDA graph capture of a training step. Numba's CPU kernels come from its on-disk cache
    after the first run; nothing here touches the real input."""
    import tempfile

    from pipeline import load

    with tempfile.TemporaryDirectory(prefix="ecg-warmup-") as folder:
        tiny = _tiny_file(Path(folder), input_path)
        recording = load.load_ecg(tiny, device=device, default_fs=250.0)
        _segment_and_score(recording.signal, recording.fs, request)
    if device == "gpu":
        xp = backend.xp_for(device)
        fs = 250.0
        rows = _segment_and_score(_stress_signal(xp, fs), fs, request)
        _train_briefly(rows, request.vae)


def _stress_signal(xp, fs: float):
    """2.3 h of pulses (~10,000 beats; 2^21 samples, more than one block of the Ricker response's
    overlap-save, so that the run's cuFFT plans are made here) with what takes the segmentation's
    every path, so that none loads a kernel inside the run (CuPy compiles a kernel for each array
    layout, and a path that finds nothing to do uses other layouts than one that does): small
    pulses between the large ones (the second look), 10 s of a 4.5 Hz sine (flutter), 2 s of noise, three
    stretches of 3 s of pulses at a tenth of their size (the search inside long RR gaps), 20 s of
    tall, broad T waves (the T-wave filter and its early-beat test), 30 s of wide beats whose tall
    T wave hides the narrow QRS 360 ms after them from the suppression (the rescue of the peaks it
    suppressed), 35 s of small wide beats whose tall T wave outgrows them (a beat moved off its own
    T wave), three sharp P waves taller than their QRS (a beat moved to its rival deflection),
    a 2-s pause (a pause to list) and 30 s of bigeminy whose small beats only the second look
    finds."""
    t = xp.arange(1 << 21, dtype=xp.float64) / fs
    phase = t % 0.8
    signal = xp.exp(-(phase - 0.4) ** 2 / 2e-4) + 0.2 * xp.exp(-(phase - 0.8) ** 2 / 2e-4)
    flutter = (t > 600) & (t < 610)
    signal[flutter] = xp.sin(2 * xp.pi * 4.5 * t[flutter])
    noisy = (t > 1200) & (t < 1202)
    signal[noisy] += xp.random.RandomState(0).standard_normal(int(noisy.sum()))
    for start in (1800, 3000, 4200):
        signal[(t > start) & (t < start + 3)] *= 0.1
    tall_t = (t > 2400) & (t < 2420)
    signal[tall_t] = xp.exp(-(phase[tall_t] - 0.4) ** 2 / 2e-4) + xp.exp(-(phase[tall_t] - 0.68) ** 2 / 4e-3)
    hidden = (t > 2600) & (t < 2630)
    cycle = t[hidden] % 1.6                         # a wide beat, its T wave, two narrow beats
    signal[hidden] = (1.5 * xp.exp(-(cycle - 0.4) ** 2 / 1.8e-3) - 1.5 * xp.exp(-(cycle - 0.6) ** 2 / 2.45e-3)
                      + xp.exp(-(cycle - 0.76) ** 2 / 2e-4) + xp.exp(-(cycle - 1.56) ** 2 / 2e-4))
    on_t = (t > 3300) & (t < 3335)
    cycle = t[on_t] % 3.5                           # three narrow beats, a small wide one, its tall T wave
    signal[on_t] = (xp.exp(-(cycle - 0.4) ** 2 / 1.28e-4) + xp.exp(-(cycle - 1.2) ** 2 / 1.28e-4)
                    + xp.exp(-(cycle - 2.0) ** 2 / 1.28e-4) + 0.4 * xp.exp(-(cycle - 2.5) ** 2 / 2.88e-4)
                    + xp.exp(-(cycle - 2.69) ** 2 / 4.05e-3))
    signal[(t > 4800) & (t < 4802)] = 0.0
    bigeminy = (t > 5100) & (t < 5130)
    cycle = t[bigeminy] % 1.6                       # a large beat, then a small one under the threshold
    signal[bigeminy] = 4.0 * xp.exp(-(cycle - 0.4) ** 2 / 2e-4) + 0.8 * xp.exp(-(cycle - 1.2) ** 2 / 2e-4)
    for r_wave in (5000.4, 5004.4, 5008.4):
        signal += 1.15 * xp.exp(-(t - (r_wave - 0.2)) ** 2 / 2e-4)
    return signal.astype(xp.float32)


def _tiny_file(folder: Path, input_path: Path) -> Path:
    """A 20-s pulse train written in the input's format where that format has a reader of its
    own on the GPU (CSV, gzipped CSV, Parquet), else as CSV."""
    fs = 250.0
    t = np.arange(int(20 * fs)) / fs
    values = np.exp(-((t % 0.8) - 0.4) ** 2 / 2e-4).astype(np.float32)
    name = input_path.name.lower()
    if name.endswith((".parquet", ".pq")):
        import pyarrow as pa
        import pyarrow.parquet as pq

        path = folder / "warmup.parquet"
        pq.write_table(pa.table({"ecg": values}), path)
        return path
    path = folder / ("warmup.csv.gz" if name.endswith(".gz") else "warmup.csv")
    text = "\n".join(f"{v:.4f}" for v in values) + "\n"
    if path.suffix == ".gz":
        import gzip

        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


def _segment_and_score(signal, fs: float, request: RunRequest):
    """:func:`segment` on ``signal`` with a second lead (the lead inverted and halved: the paths
    that read another lead), the run's check that the beats look alike, the rhythm's
    description, its score combined with a shape score and the reference's scoring (which also
    reads the reference); returns the embedded rows."""
    from pipeline import embed, reference, rhythm, score

    cfg = request.signal
    seg = segment(signal, fs, cfg, other=signal * signal.dtype.type(-0.5))
    embed.beat_coherence(seg.beats.rows, cfg.pre_fiducial, cfg.window_s)
    rhythm_score = rhythm.describe_rhythm(seg.positions, fs).score
    # The run's shape scores come from PyTorch as float32; the rhythm score in their place takes
    # the same kernels.
    score.combine_scores(backend.xp_of(rhythm_score).asarray(rhythm_score, dtype="float32"), rhythm_score)
    reference.score_reference(seg.beats.rows, seg.positions, fs, seg.pre, reference.load_reference(request.reference))
    return seg.beats.rows


def _train_briefly(rows, cfg: VAEConfig) -> None:
    """One short epoch and a scoring pass on the GPU: CUDA context for PyTorch, cuDNN, cuBLAS,
    fused Adam and the CUDA graph capture (shapes differ from the run's, the libraries do not)."""
    from dataclasses import replace

    from pipeline import score, train

    tensor = backend.to_torch(rows)
    # Enough rows for full-size batches, so that cuDNN times its algorithms for the run's own
    # batch shape here rather than in the run's training.
    enough = math.ceil(cfg.batch_size * cfg.min_steps_per_epoch / cfg.train_fraction)
    tensor = tensor.repeat(math.ceil(enough / tensor.shape[0]), 1)
    model, _ = train.fit_vae(tensor, train.split_train(int(tensor.shape[0]), cfg.train_fraction, cfg.seed),
                             replace(cfg, epochs=1))
    score.score_beats(model, tensor)
