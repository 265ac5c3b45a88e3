"""Heartbeat pipeline: load → Ricker response → fiducials → beat embedding → VAE → outlier scores.

Runs on the GPU (cuDF, CuPy, Numba CUDA, PyTorch, one RMM pool) or on the CPU (pyarrow,
NumPy/SciPy, Numba, PyTorch) through the same code; ``pipeline.run.run_pipeline`` chains the steps.
"""

__version__ = "0.1.0"


class PipelineWarning(UserWarning):
    """Something was repaired or looks doubtful, but the run goes on (e.g. interpolated gaps)."""


def one_line(err: BaseException, bare: tuple[type, ...] = (ValueError,)) -> str:
    """``err`` as one line for a person: the first line of its message, after its type's name
    unless it is one of ``bare`` (the pipeline's refusals are ValueErrors whose message says it
    all); its type's name alone when it has no message."""
    text = str(err).strip().splitlines()[0] if str(err).strip() else ""
    if isinstance(err, bare) and text:
        return text
    return f"{type(err).__name__}: {text}" if text else type(err).__name__
