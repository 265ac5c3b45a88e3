"""The benchmark recordings: one seeded synthetic ECG per size, written once as a one-value-per-line
CSV (with its annotation sidecar) and reused by every contender and repeat, and by later runs.

Sizes up to ``chunk`` samples are synthesised whole (:func:`pipeline.synth.synthesize`). Larger
ones repeat the ``chunk``-sized recording's CSV lines (and annotations, shifted) until the size is
reached: synthesising 200M samples at once costs minutes and tens of GiB of host memory, while the
tiled file is written at disk speed. Each seam cuts at most one beat, which the pipeline prunes.

See Also
--------
benchmarks.contenders : what is timed on these files.
"""
from __future__ import annotations

import hashlib
import inspect
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline import synth

FS = 250.0
CHUNK = 20_000_000   # synthesise at most this many samples at once; tile beyond


@dataclass(frozen=True)
class Recording:
    """A recording CSV on disk: ``samples`` values at ``fs``; ``method`` says how it was made."""

    path: Path
    samples: int
    fs: float
    nbytes: int
    method: str
    seconds: float      # spent making it in this run (0 when an earlier run's file was reused)


def recording_csv(samples: int, data_dir: Path, *, seed: int = 0, chunk: int = CHUNK) -> Recording:
    """The CSV of ``samples`` samples (seeded), made on first use and reused afterwards.

    The file name carries the size, the seed and a hash of ``pipeline/synth.py``, so that a
    changed generator never reuses stale files. Files are written beside their final name and
    renamed into place, so an interrupted run leaves no partial file behind.
    """
    if samples < 1:
        raise ValueError(f"samples must be a positive number of samples; got {samples}")
    if chunk < 1:
        raise ValueError(f"chunk must be a positive number of samples; got {chunk}")
    path = csv_path(samples, data_dir, seed=seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    method = "synthesised" if samples <= chunk else f"tiled from the {size_label(chunk)} recording"
    if path.exists() and synth.annotations_path(path).exists():
        return Recording(path, samples, FS, path.stat().st_size, method + " (reused file)", 0.0)
    started = time.perf_counter()
    if samples <= chunk:
        synth.write_csv(synth.synthesize(synth.SynthConfig(n_samples=samples, fs=FS, seed=seed)), path)
    else:
        _write_tiled(recording_csv(chunk, data_dir, seed=seed, chunk=chunk).path, chunk, samples, path)
    return Recording(path, samples, FS, path.stat().st_size, method, time.perf_counter() - started)


def csv_path(samples: int, data_dir: Path, *, seed: int = 0) -> Path:
    """Where the recording of ``samples`` samples lives (made or not)."""
    return Path(data_dir) / f"synthetic-{samples}-seed{seed}-{_generator_hash()}.csv"


def _write_tiled(base: Path, base_samples: int, samples: int, path: Path) -> None:
    """Repeat ``base``'s lines (one sample each) to ``samples`` lines; annotations likewise."""
    data = base.read_bytes()
    repeats, rest = divmod(samples, base_samples)
    ends = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == ord("\n"))
    if ends.shape[0] != base_samples:
        raise ValueError(f"{base.name} should hold {base_samples} lines; found {ends.shape[0]}")
    head = data[: int(ends[rest - 1]) + 1] if rest else b""

    ref_samples, ref_symbols = synth.read_annotations(base)
    lines = []
    for k in range(repeats + 1):
        keep = slice(None) if k < repeats else ref_samples < rest
        shifted = ref_samples[keep] + k * base_samples
        lines.append("".join(f"{s},{c}\n" for s, c in zip(shifted.tolist(), ref_symbols[keep].tolist())))

    side = synth.annotations_path(path)
    for target, chunks in ((side, [b"sample,symbol\n", "".join(lines).encode()]),
                           (path, [data] * repeats + [head])):
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        try:
            with open(tmp, "wb") as f:
                for c in chunks:
                    f.write(c)
            os.replace(tmp, target)  # sidecar first: a recording never appears without it
        finally:
            tmp.unlink(missing_ok=True)


def _generator_hash() -> str:
    """A digest of the synthesiser's code, every module of it, so that a change anywhere in it
    makes new recordings."""
    from pipeline import synth_config, synth_files, synth_rhythm, synth_waves

    digest = hashlib.sha256()
    for module in (synth, synth_config, synth_rhythm, synth_waves, synth_files):
        digest.update(inspect.getsource(module).encode())
    return digest.hexdigest()[:8]


def size_label(samples: int) -> str:
    """``1000000`` → ``'1M'``, ``50000`` → ``'50k'``; other numbers as they are."""
    for unit, scale in (("G", 10**9), ("M", 10**6), ("k", 10**3)):
        if samples >= scale and samples % (scale // 10) == 0:
            return f"{samples / scale:g}{unit}"
    return str(samples)
