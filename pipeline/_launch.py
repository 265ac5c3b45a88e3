"""How the pipeline's Numba kernels are launched: each kernel's CPU or CUDA twin chosen from its
arrays (:func:`launch_from`), the CUDA twins compiled with Numba's disk cache
(:func:`cuda_jit_cached`) and launched on CuPy arrays for a few microseconds of host time
(:func:`launch`).

The segmentation on the GPU is bound by the host, and Numba's dispatcher spends several times
what the launch itself costs there: a launch configuration, typing every argument, choosing the
overload and packing the arguments, after wrapping each CuPy array as a Numba device array. Here
the first launch of a kernel with given argument types goes through the dispatcher, which
compiles the kernel or loads it from its cache, and leaves a plan: the compiled function and how
Numba passes each argument (an array as the fields of its data model, a scalar as its C type).
Later launches with the same types pack the arguments by that plan and launch through
``cuda.core``, as the dispatcher does in the end.

Anything a plan does not cover (a debug or cooperative kernel, an argument type it does not know,
a Numba release whose kernels look otherwise) keeps the dispatcher's path, so a kernel always runs.
"""
from __future__ import annotations

import ctypes
import functools
import math
from typing import Callable, NamedTuple

from pipeline import backend

THREADS_PER_BLOCK = 256


def launch_from(cpu: dict, cuda_kernels, name: str, n: int, *arrays_and_scalars):
    """Run kernel ``name`` over ``range(n)``: ``cpu[name]`` on NumPy arrays, ``cuda_kernels()[name]``
    (a table of CUDA twins, compiled on its first call) on CuPy arrays, one thread per index. The
    launcher of every kernel module's kernels (:mod:`pipeline._kernels` and its siblings)."""
    if n <= 0:
        return
    if any(backend.is_cupy_array(a) for a in arrays_and_scalars):
        launch(cuda_kernels()[name], math.ceil(n / THREADS_PER_BLOCK), THREADS_PER_BLOCK, (n, *arrays_and_scalars))
    else:
        cpu[name](n, *(backend.as_kernel_array(a) if hasattr(a, "shape") else a for a in arrays_and_scalars))


def cuda_jit_cached(kernel):
    """``cuda.jit(cache=True)``, or without the disk cache where no writable cache folder exists.
    Every kernel module's table of CUDA twins compiles with it, whichever is compiled first."""
    from numba import cuda

    try:
        return cuda.jit(cache=True)(kernel)
    except RuntimeError:  # numba: "cannot cache function ...: no locator available"
        return cuda.jit(kernel)


class _Plan(NamedTuple):
    function: object                 # the compiled kernel (cuda.core's Kernel)
    packers: tuple[Callable, ...]    # an argument → the values Numba passes for it


def launch(dispatcher, blocks: int, threads: int, args: tuple) -> None:
    """Launch Numba CUDA kernel ``dispatcher`` on ``blocks × threads`` threads with ``args``
    (CuPy arrays and Python or NumPy scalars), on the legacy default stream, where CuPy queues its
    work and Numba launches by default: the stream orders the kernel after the work that made its
    inputs."""
    key = (dispatcher, _current_device(), *map(_type_key, args))
    plan = _PLANS.get(key, _UNPLANNED)
    if plan is _UNPLANNED:
        _PLANS[key] = _launch_and_plan(dispatcher, blocks, threads, args)
        return
    if plan is None:
        dispatcher[blocks, threads](*_as_kernel_arrays(args))
        return
    packed = []
    for pack, arg in zip(plan.packers, args):
        if backend.is_cupy_array(arg):
            backend.record_kernel_argument(arg)
        packed.extend(pack(arg))
    core = _core()
    core.launch(_default_stream(), core.LaunchConfig(grid=(blocks,), block=(threads,)), plan.function, *packed)


_PLANS: dict[tuple, _Plan | None] = {}
_UNPLANNED = object()


def _type_key(arg):
    """What decides an argument's Numba type: an array's dtype, dimensions and layout (a stride of
    0 makes it 'A'), a scalar's Python type."""
    if backend.is_cupy_array(arg):
        flags = arg.flags
        return arg.dtype, arg.ndim, flags.c_contiguous, flags.f_contiguous, 0 in arg.strides
    return type(arg)


def _as_kernel_arrays(args: tuple) -> tuple:
    return tuple(backend.as_kernel_array(a) if backend.is_cupy_array(a) else a for a in args)


def _launch_and_plan(dispatcher, blocks: int, threads: int, args: tuple) -> _Plan | None:
    """Launch through the dispatcher and return the plan of later launches (None: keep the
    dispatcher's path for these argument types)."""
    converted = _as_kernel_arrays(args)
    dispatcher[blocks, threads](*converted)
    try:
        kernel = dispatcher.overloads[tuple(dispatcher.typeof_pyval(a) for a in converted)]
        if kernel.debug or kernel.cooperative or kernel.extensions:
            return None
        _default_stream()
        return _Plan(kernel._codelibrary.get_cufunc().kernel, tuple(map(_packer, kernel.argument_types)))
    except (AttributeError, KeyError, NotImplementedError):  # kernels unlike those this module knows
        return None


def _packer(numba_type) -> Callable:
    """How Numba's launcher passes an argument of ``numba_type``: an array as its data model's
    fields (meminfo, parent, size, itemsize, data, shape, strides in bytes), an integer or a float
    as its C type, a boolean as it is."""
    from numba.cuda import types

    if isinstance(numba_type, types.Array):
        return _array_fields
    if isinstance(numba_type, types.Integer):
        c_type = getattr(ctypes, f"c_{numba_type}")
        return lambda value: (c_type(value),)
    if numba_type == types.float64:
        return lambda value: (ctypes.c_double(value),)
    if numba_type == types.float32:
        return lambda value: (ctypes.c_float(value),)
    if numba_type == types.boolean:
        return lambda value: (value,)
    raise NotImplementedError(numba_type)


def _array_fields(array) -> tuple:
    return (0, 0, array.size, array.itemsize, array.data.ptr, *array.shape, *array.strides)


@functools.cache
def _core():
    import cuda.core

    return cuda.core


@functools.cache
def _default_stream():
    return _core().Stream.from_handle(0)


def _current_device() -> int:
    """CuPy's current device: a compiled kernel's function belongs to one device's context."""
    import cupy

    return cupy.cuda.runtime.getDevice()
