"""The benchmark recordings: one seeded synthetic ECG per size, written once as a one-value-per-line
CSV with its annotation sidecar and reused. Sizes above ``chunk`` samples repeat the ``chunk``-sized
recording's lines and annotations (synthesising 200M samples at once costs minutes and tens of GiB;
each seam cuts at most one beat, which the pipeline prunes).
"""
from __future__ import annotations

import argparse
import hashlib
import inspect
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline import synth
from pipeline.sidecar import annotation_bytes

FS = 250.0
CHUNK = 20_000_000   # synthesise at most this many samples at once; tile beyond


@dataclass(frozen=True)
class Recording:
    path: Path
    samples: int
    fs: float
    nbytes: int
    method: str
    seconds: float      # spent making it in this run (0 when an earlier run's file was reused)


def recording_csv(samples: int, data_dir: Path, *, seed: int = 0, chunk: int = CHUNK) -> Recording:
    """The CSV of ``samples`` samples (seeded), made on first use and reused; its name carries a hash
    of the synthesiser's code, so a changed generator never reuses stale files."""
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
    keep = [slice(None) if k < repeats else ref_samples < rest for k in range(repeats + 1)]
    side = annotation_bytes(np.concatenate([ref_samples[m] + k * base_samples for k, m in enumerate(keep)]),
                            np.concatenate([ref_symbols[m] for m in keep]))
    for target, chunks in ((synth.annotations_path(path), [side]), (path, [data] * repeats + [head])):
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        try:
            with open(tmp, "wb") as f:
                for c in chunks:
                    f.write(c)
            os.replace(tmp, target)  # sidecar first: a recording never appears without it
        finally:
            tmp.unlink(missing_ok=True)


def _generator_hash() -> str:
    """A digest of every module of the synthesiser's code."""
    from pipeline import synth_config, synth_files, synth_rhythm, synth_waves

    digest = hashlib.sha256()
    for module in (synth, synth_config, synth_rhythm, synth_waves, synth_files):
        digest.update(inspect.getsource(module).encode())
    return digest.hexdigest()[:8]


def parse_size(text: str) -> int:
    """``'20M'`` → 20000000; also ``k`` and ``G`` suffixes, ``_`` separators and plain integers."""
    raw = text.strip().replace("_", "")
    scale = {"k": 10**3, "K": 10**3, "m": 10**6, "M": 10**6, "g": 10**9, "G": 10**9}.get(raw[-1:], 1)
    try:
        value = float(raw[:-1] if scale > 1 else raw) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"size must be a number of samples such as 50k, 1M or 20000000; "
                                         f"got {text!r}") from None
    if value < 1 or value != int(value):
        raise argparse.ArgumentTypeError(f"size must be a whole positive number of samples; got {text!r}")
    return int(value)


def size_label(samples: int) -> str:
    """``1000000`` → ``'1M'``, ``50000`` → ``'50k'``; other numbers as they are."""
    for unit, scale in (("G", 10**9), ("M", 10**6), ("k", 10**3)):
        if samples >= scale and samples % (scale // 10) == 0:
            return f"{samples / scale:g}{unit}"
    return str(samples)
