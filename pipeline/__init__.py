"""Heartbeat pipeline: load → Ricker response → fiducials → beat embedding → VAE → outlier scores.

Runs on the GPU (cuDF, CuPy, Numba CUDA, PyTorch, one RMM pool) or on the CPU (pyarrow,
NumPy/SciPy, Numba, PyTorch) through the same code; ``pipeline.run.run_pipeline`` chains the steps.
"""

__version__ = "0.1.0"


class PipelineWarning(UserWarning):
    """Something was repaired or looks doubtful, but the run goes on (e.g. interpolated gaps)."""
