"""The only GPU/CPU switch.

Everything that knows whether it runs on CuPy or NumPy asks this module: ``has_gpu`` decides,
``xp_of`` gives the array module of an input, ``to_host`` is the one explicit device → host copy.
GPU libraries are imported lazily so that importing the pipeline on a CPU machine loads none of them.

Hand-offs between libraries (cuDF → CuPy → Numba → PyTorch and back) go through the helpers
below, which record each one in the active :class:`HandoffLedger`: source, target, mechanism,
bytes, and whether the data pointer stayed the same (a zero-copy hand-off keeps it).
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import importlib.util
import resource
import sys
from dataclasses import asdict, dataclass, field

import numpy as np

DEVICES = ("auto", "gpu", "cpu")


@functools.cache
def has_gpu() -> bool:
    """True when a CUDA device is usable and CuPy and cuDF are installed.

    Asks CUDA's driver itself (``cuInit``, ``cuDeviceGetCount``) rather than CuPy: importing CuPy
    here would put its import into every start before anything needs it (a cached run reads its
    files and shows its first page on the host; CuPy loads in the background after).
    """
    if any(importlib.util.find_spec(m) is None for m in ("cupy", "cudf")):
        return False
    try:
        driver = ctypes.CDLL("libcuda.so.1")
    except OSError:    # no driver: a CPU machine with the GPU wheels installed
        return False
    count = ctypes.c_int(0)
    return driver.cuInit(0) == 0 and driver.cuDeviceGetCount(ctypes.byref(count)) == 0 and count.value > 0


def resolve_device(device: str) -> str:
    """Map ``auto|gpu|cpu`` to ``gpu`` or ``cpu``; asking for a missing GPU is an error."""
    if device not in DEVICES:
        raise ValueError(f"device must be one of {', '.join(DEVICES)}; got {device!r}")
    if device == "auto":
        return "gpu" if has_gpu() else "cpu"
    if device == "gpu" and not has_gpu():
        raise ValueError("device 'gpu' needs a CUDA GPU with CuPy and cuDF installed; none was found "
                         "(use --device cpu)")
    return device


def is_cupy_array(x) -> bool:
    """Cheap check that never imports CuPy. While another thread imports CuPy (the dashboard does
    after its first page), ``sys.modules`` holds it half-initialised, without ``ndarray`` yet: no
    array can be CuPy's then, and asking for ``cupy.ndarray`` failed a visitor's page."""
    ndarray = getattr(sys.modules.get("cupy"), "ndarray", None)
    return ndarray is not None and isinstance(x, ndarray)


def xp_of(x):
    """The array module (CuPy or NumPy) that owns ``x``."""
    return sys.modules["cupy"] if is_cupy_array(x) else np


def xp_for(device: str):
    """The array module for a resolved device name."""
    if device == "gpu":
        import cupy

        return cupy
    return np


def fft_module(xp):
    """scipy.fft-compatible module for ``xp`` (cupyx.scipy.fft on the GPU)."""
    if xp is np:
        import scipy.fft

        return scipy.fft
    import cupyx.scipy.fft

    return cupyx.scipy.fft


def ndimage_of(x):
    """scipy.ndimage for a NumPy array, cupyx.scipy.ndimage for a CuPy one."""
    if is_cupy_array(x):
        from cupyx.scipy import ndimage
    else:
        from scipy import ndimage
    return ndimage


def running_median(values, half: int):
    """For each i, the median of ``values[i - half : i + half + 1]``, the ends repeated (the
    median of a clipped gather of ``2 half + 1`` columns, in one filter pass instead of a gather
    and a sort)."""
    return ndimage_of(values).median_filter(values, size=2 * half + 1, mode="nearest")


def running_percentile(values, half: int, percent: float):
    """For each i, the ``percent`` percentile of ``values[i - half : i + half + 1]``, the ends
    repeated (one filter pass)."""
    return ndimage_of(values).percentile_filter(values, percent, size=2 * half + 1, mode="nearest")


def to_host(x) -> np.ndarray:
    """Copy a device array to host memory (a no-op for NumPy input). Synchronises the device."""
    return x.get() if is_cupy_array(x) else np.asarray(x)


def synchronize(device: str) -> None:
    """Wait for queued device work, so that a host clock read after it means something."""
    if device == "gpu":
        import cupy

        cupy.cuda.get_current_stream().synchronize()


# --------------------------------------------------------------------------- RMM pool
_POOL = None
_CUPY_BLOCKS = None  # CuPy's pool of blocks drawn from _POOL


def use_rmm_pool(initial_pool_bytes: int | None = None, sharers: int = 1):
    """Make one RMM pool (with statistics) the allocator of cuDF, CuPy and Numba. Idempotent.

    The pool starts at a quarter of the free memory, or of this process's share of the GPU where
    ``sharers`` processes use it (a batch's workers on one GPU), whichever is less, and grows on
    demand. CuPy keeps a pool of its own blocks over it: the segmentation makes hundreds of small
    temporary arrays, and CuPy's pool hands a freed block back without the Python call into RMM
    that each allocation would otherwise cost; the blocks still come from the RMM pool, and
    :func:`free_cached_blocks` gives them back.

    Must run before any of them allocates device memory. PyTorch keeps its own caching allocator:
    capturing the training step as a CUDA graph needs its graph-private memory pools (memory used
    inside a graph must not be handed to anyone else between replays), which an external
    allocator plugged into PyTorch does not provide. Tensors still share memory with CuPy and
    Numba arrays through DLPack, whichever allocator made them.
    """
    global _POOL, _CUPY_BLOCKS
    if _POOL is not None:
        return _POOL
    import cupy
    import numba.cuda
    import rmm
    import rmm.mr
    from rmm.allocators.cupy import rmm_cupy_allocator
    from rmm.allocators.numba import RMMNumbaManager

    free, total = cupy.cuda.runtime.memGetInfo()
    if initial_pool_bytes is None:
        initial_pool_bytes = (min(free, total // max(1, sharers)) // 4) // 256 * 256
    pool = rmm.mr.PoolMemoryResource(rmm.mr.CudaMemoryResource(), initial_pool_size=initial_pool_bytes)
    stats = rmm.mr.StatisticsResourceAdaptor(pool)
    rmm.mr.set_current_device_resource(stats)
    blocks = cupy.cuda.MemoryPool(rmm_cupy_allocator)
    cupy.cuda.set_allocator(blocks.malloc)
    numba.cuda.set_memory_manager(RMMNumbaManager)
    _POOL, _CUPY_BLOCKS = stats, blocks
    return stats


def import_cudf():
    """cuDF, imported without losing the CuPy block pool of :func:`use_rmm_pool`: importing cuDF
    makes RMM's allocator CuPy's, which would put a Python call into RMM behind every one of the
    segmentation's hundreds of small temporary arrays again."""
    import cudf

    if _CUPY_BLOCKS is not None:
        import cupy

        cupy.cuda.set_allocator(_CUPY_BLOCKS.malloc)
    return cudf


def free_cached_blocks() -> None:
    """Give the blocks CuPy's pool holds unused back to the RMM pool (see :func:`use_rmm_pool`)."""
    if _CUPY_BLOCKS is not None:
        _CUPY_BLOCKS.free_all_blocks()


class PeakMemory:
    """Peak memory of the work inside ``with PeakMemory(device) as peak:``; ``peak.read()`` any time.

    GPU: RMM's statistics in a counter frame pushed on entry and popped on exit, so a long-lived
    server measures each run alone, plus PyTorch's own allocator's peak (reset on entry):
    ``gpu_peak_bytes`` is their sum, an upper bound of the device memory the run held at once.
    Host: the resident high-water mark (``VmHWM``), reset on entry through
    ``/proc/self/clear_refs`` where Linux allows it; elsewhere the process's lifetime peak
    (``ru_maxrss``), and ``host_peak_scope`` says which.
    """

    def __init__(self, device: str):
        self.gpu = device == "gpu" and _POOL is not None
        self.host_scope = "process"

    def __enter__(self):
        if self.gpu:
            free_cached_blocks()  # a block cached before would hide its bytes from this run's counters
            _POOL.push_counters()
            if _torch_cuda_ready():
                import torch

                torch.cuda.reset_peak_memory_stats()
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            self.host_scope = "run"
        except OSError:
            pass
        return self

    def __exit__(self, *exc):
        if self.gpu:
            _POOL.pop_counters()
            free_cached_blocks()

    def read(self) -> dict:
        out = {"host_peak_rss_bytes": _host_peak_bytes(), "host_peak_scope": self.host_scope}
        if self.gpu:
            counts = _POOL.allocation_counts  # a dict in older RMM releases, an object in newer ones
            out["gpu_peak_rmm_bytes"] = int(counts["peak_bytes"] if isinstance(counts, dict) else counts.peak_bytes)
            out["gpu_peak_torch_bytes"] = 0
            if _torch_cuda_ready():
                import torch

                out["gpu_peak_torch_bytes"] = int(torch.cuda.max_memory_allocated())
            out["gpu_peak_bytes"] = out["gpu_peak_rmm_bytes"] + out["gpu_peak_torch_bytes"]
        return out


def _torch_cuda_ready() -> bool:
    """PyTorch is imported and has set up CUDA (asking does neither)."""
    torch = sys.modules.get("torch")
    return torch is not None and torch.cuda.is_initialized()


def _host_peak_bytes() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


# --------------------------------------------------------------------------- hand-off ledger
@dataclass
class Handoff:
    source: str
    target: str
    mechanism: str
    nbytes: int
    same_pointer: bool
    note: str = ""


@dataclass
class HandoffLedger:
    entries: list[Handoff] = field(default_factory=list)

    def record(self, source, target, mechanism, nbytes, same_pointer, note=""):
        self.entries.append(Handoff(source, target, mechanism, int(nbytes), bool(same_pointer), note))

    def as_dicts(self) -> list[dict]:
        return [asdict(e) for e in self.entries]

    @property
    def copies(self) -> list[Handoff]:
        return [e for e in self.entries if not e.same_pointer]


_LEDGER: HandoffLedger | None = None


@contextlib.contextmanager
def recording_handoffs():
    """Collect every hand-off made inside the ``with`` block into a fresh ledger."""
    global _LEDGER
    previous, _LEDGER = _LEDGER, HandoffLedger()
    try:
        yield _LEDGER
    finally:
        _LEDGER = previous


def _record(*args, **kwargs):
    if _LEDGER is not None:
        _LEDGER.record(*args, **kwargs)


def _data_pointer(x) -> int:
    """Address of the first element of a CuPy/NumPy/Numba/torch array or cuDF column."""
    if hasattr(x, "data_ptr"):  # torch.Tensor
        return x.data_ptr()
    if hasattr(x, "__cuda_array_interface__"):
        return x.__cuda_array_interface__["data"][0]
    return x.__array_interface__["data"][0]


def cudf_to_cupy(series):
    """cuDF column → CuPy array through ``__cuda_array_interface__`` (no copy for a null-free column)."""
    import cupy

    arr = cupy.asarray(series)
    _record("cudf", "cupy", "__cuda_array_interface__", arr.nbytes, _data_pointer(series) == arr.data.ptr)
    return arr


def host_to_device(x: np.ndarray):
    """NumPy → CuPy: a real copy over PCIe, recorded as one (formats cuDF cannot parse on the GPU)."""
    import cupy

    arr = cupy.asarray(x)
    _record("numpy", "cupy", "host-to-device copy", arr.nbytes, False)
    return arr


def as_kernel_array(x):
    """Array → Numba: ``cuda.as_cuda_array`` (CUDA array interface) on the GPU, the ndarray itself on the CPU."""
    if is_cupy_array(x):
        import numba.cuda

        # No stream synchronisation on import: CuPy queues its work on the legacy default stream
        # and Numba launches there too, so the stream itself orders them; the synchronisation
        # that the array interface asks for by default would stall the host at every launch.
        out = numba.cuda.as_cuda_array(x, sync=False)
        if _LEDGER is not None:
            _record("cupy", "numba.cuda", "__cuda_array_interface__", x.nbytes, _data_pointer(out) == x.data.ptr)
        return out
    _record("numpy", "numba", "ndarray buffer", x.nbytes, True)
    return x


def record_kernel_argument(x) -> None:
    """Record a CuPy array passed to a Numba kernel as its own device pointer
    (:mod:`pipeline._launch`): zero-copy by construction."""
    if _LEDGER is not None:
        _record("cupy", "numba.cuda", "device pointer", x.nbytes, True)


def to_torch(x):
    """Array → torch.Tensor through DLPack (zero-copy on both devices)."""
    import torch

    t = torch.from_dlpack(x)
    source = "cupy" if is_cupy_array(x) else "numpy"
    _record(source, "torch", "DLPack", x.nbytes, t.data_ptr() == _data_pointer(x))
    return t


def from_torch(t, xp):
    """torch.Tensor → CuPy/NumPy array through DLPack (zero-copy)."""
    t = t.detach().contiguous()
    arr = xp.from_dlpack(t)
    target = "cupy" if xp is not np else "numpy"
    _record("torch", target, "DLPack", arr.nbytes, t.data_ptr() == _data_pointer(arr))
    return arr
