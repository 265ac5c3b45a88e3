"""SHA-256 (FIPS 180-4) whose running state is a small picklable value, so that consecutive pieces
of one digest can be hashed in different processes: a process hashes its piece into the state the
previous one handed on, and hands the new state on (a few dozen bytes, whatever the piece's size).

``hashlib``'s objects cannot leave their process, and SHA-256 is sequential (each 64-byte block
is compressed into the state the blocks before it left), so this is the exact way to hash, on
Dask workers, a byte stream that used to be hashed in one process: the digest is the one
``hashlib.sha256`` gives over the concatenated pieces, bit for bit.

The blocks are compressed by OpenSSL's ``SHA256_Update`` (the library ``hashlib`` uses, through
``ctypes``, as fast as ``hashlib``) where the process finds ``libcrypto``, else by a Numba kernel
(several times slower). Both read and write the same state: OpenSSL's ``SHA256_CTX`` is a public C
struct (the 8 words, the bit count, the unfinished block), filled from this state for each update.

See Also
--------
pipeline.reference_training : chains the training data's digest through the workers with it.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import struct
import sys
from dataclasses import dataclass, field

import numpy as np
from numba import njit

BLOCK = 64
_CHUNK = 1 << 20      # bytes compressed per kernel call (a multiple of BLOCK)
_MASK = 0xFFFFFFFF
_INITIAL = (0x6A09E667, 0xBB67AE85, 0x3C6EF372, 0xA54FF53A, 0x510E527F, 0x9B05688C, 0x1F83D9AB, 0x5BE0CD19)
_K = np.array([
    0x428A2F98, 0x71374491, 0xB5C0FBCF, 0xE9B5DBA5, 0x3956C25B, 0x59F111F1, 0x923F82A4, 0xAB1C5ED5,
    0xD807AA98, 0x12835B01, 0x243185BE, 0x550C7DC3, 0x72BE5D74, 0x80DEB1FE, 0x9BDC06A7, 0xC19BF174,
    0xE49B69C1, 0xEFBE4786, 0x0FC19DC6, 0x240CA1CC, 0x2DE92C6F, 0x4A7484AA, 0x5CB0A9DC, 0x76F988DA,
    0x983E5152, 0xA831C66D, 0xB00327C8, 0xBF597FC7, 0xC6E00BF3, 0xD5A79147, 0x06CA6351, 0x14292967,
    0x27B70A85, 0x2E1B2138, 0x4D2C6DFC, 0x53380D13, 0x650A7354, 0x766A0ABB, 0x81C2C92E, 0x92722C85,
    0xA2BFE8A1, 0xA81A664B, 0xC24B8B70, 0xC76C51A3, 0xD192E819, 0xD6990624, 0xF40E3585, 0x106AA070,
    0x19A4C116, 0x1E376C08, 0x2748774C, 0x34B0BCB5, 0x391C0CB3, 0x4ED8AA4A, 0x5B9CCA4F, 0x682E6FF3,
    0x748F82EE, 0x78A5636F, 0x84C87814, 0x8CC70208, 0x90BEFFFA, 0xA4506CEB, 0xBEF9A3F7, 0xC67178F2,
], dtype=np.int64)


@njit(nogil=True, cache=True)
def _rotr(x, n):
    return ((x >> n) | (x << (32 - n))) & _MASK


@njit(nogil=True, cache=True)
def _compress(h, data, k):
    """Compress the whole 64-byte blocks of ``data`` (uint8) into ``h`` (8 words, int64 holding
    32-bit values). 64-bit signed words throughout: Numba widens 32-bit arithmetic anyway, and
    mixing unsigned with signed integers would make floats; every sum and left shift is masked back
    to 32 bits (a word shifted by at most 30 stays below 2**63)."""
    w = np.empty(64, np.int64)
    for start in range(0, data.shape[0] - BLOCK + 1, BLOCK):
        for t in range(16):
            o = start + 4 * t
            w[t] = (np.int64(data[o]) << 24) | (np.int64(data[o + 1]) << 16) | (np.int64(data[o + 2]) << 8) \
                | np.int64(data[o + 3])
        for t in range(16, 64):
            x, y = w[t - 15], w[t - 2]
            s0 = _rotr(x, 7) ^ _rotr(x, 18) ^ (x >> 3)
            s1 = _rotr(y, 17) ^ _rotr(y, 19) ^ (y >> 10)
            w[t] = (w[t - 16] + s0 + w[t - 7] + s1) & _MASK
        a, b, c, d, e, f, g, hh = h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]
        for t in range(64):
            choose = (e & f) ^ ((e ^ _MASK) & g)
            t1 = (hh + (_rotr(e, 6) ^ _rotr(e, 11) ^ _rotr(e, 25)) + choose + k[t] + w[t]) & _MASK
            t2 = ((_rotr(a, 2) ^ _rotr(a, 13) ^ _rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c))) & _MASK
            hh, g, f, e, d, c, b, a = g, f, e, (d + t1) & _MASK, c, b, a, (t1 + t2) & _MASK
        h[0] = (h[0] + a) & _MASK
        h[1] = (h[1] + b) & _MASK
        h[2] = (h[2] + c) & _MASK
        h[3] = (h[3] + d) & _MASK
        h[4] = (h[4] + e) & _MASK
        h[5] = (h[5] + f) & _MASK
        h[6] = (h[6] + g) & _MASK
        h[7] = (h[7] + hh) & _MASK


_CTX = struct.Struct("=8I2I64s2I")   # OpenSSL's SHA256_CTX: h[8], Nl, Nh, data[16 words], num, md_len


@functools.lru_cache(maxsize=1)
def _openssl():
    """libcrypto's ``SHA256_Update``, or None where this process cannot load it. Not on macOS,
    whose system libcrypto ends the process that loads it by name."""
    if sys.platform == "darwin":
        return None
    try:
        lib = ctypes.CDLL(ctypes.util.find_library("crypto") or "libcrypto.so")
        update = lib.SHA256_Update
    except (OSError, AttributeError, TypeError):
        return None
    update.argtypes = (ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t)
    update.restype = ctypes.c_int
    return update


def _update_openssl(update, state: PortableSha256, view: np.ndarray) -> None:
    bits = 8 * state.length
    ctx = ctypes.create_string_buffer(_CTX.pack(*state.h.tolist(), bits & _MASK, (bits >> 32) & _MASK,
                                                state.tail.ljust(BLOCK, b"\0"), len(state.tail), 32), _CTX.size)
    if len(view) and update(ctx, view.ctypes.data, len(view)) != 1:
        raise RuntimeError("OpenSSL's SHA256_Update failed")
    *h, _, _, tail, num, _ = _CTX.unpack(ctx.raw)
    state.h[:] = h
    state.tail = tail[:num]
    state.length += len(view)


def _update_numba(state: PortableSha256, view: np.ndarray) -> None:
    state.length += len(view)
    if state.tail:
        need = BLOCK - len(state.tail)
        if len(view) < need:
            state.tail += view.tobytes()
            return
        _compress(state.h, np.frombuffer(state.tail + view[:need].tobytes(), np.uint8), _K)
        view = view[need:]
        state.tail = b""
    whole = len(view) - len(view) % BLOCK
    for start in range(0, whole, _CHUNK):
        _compress(state.h, view[start:min(start + _CHUNK, whole)], _K)
    state.tail = view[whole:].tobytes()


def _as_bytes(data) -> np.ndarray:
    """The bytes of ``data`` (bytes, or a C-contiguous array of any dtype), as hashlib reads them,
    without a copy."""
    if isinstance(data, np.ndarray):
        if not data.flags.c_contiguous:
            raise ValueError(f"data must be C-contiguous, as hashlib requires; got an array of shape {data.shape} "
                             "that is not")
        return data.reshape(-1).view(np.uint8)
    return np.frombuffer(memoryview(data).cast("B"), np.uint8)


@dataclass
class PortableSha256:
    """A running SHA-256: ``h`` (the 8 state words after the whole blocks so far), ``tail`` (the
    bytes of an unfinished block, fewer than 64) and ``length`` (bytes hashed). Pickle it, or
    :meth:`copy` it, to hand it on; :meth:`update` and :meth:`hexdigest` as with ``hashlib``."""

    h: np.ndarray = field(default_factory=lambda: np.array(_INITIAL, dtype=np.int64))
    tail: bytes = b""
    length: int = 0

    def copy(self) -> PortableSha256:
        return PortableSha256(self.h.copy(), self.tail, self.length)

    def update(self, data, *, openssl: bool = True) -> None:
        """Hash ``data`` (bytes, or a C-contiguous array) next; ``openssl=False`` uses the Numba
        kernel even where OpenSSL is found (the tests compare the two)."""
        view = _as_bytes(data)
        update = _openssl() if openssl else None
        if update is not None:
            _update_openssl(update, self, view)
        else:
            _update_numba(self, view)

    def digest(self) -> bytes:
        final = self.copy()
        bits = (8 * self.length).to_bytes(8, "big")
        final.update(b"\x80" + b"\x00" * ((55 - self.length) % BLOCK) + bits)
        assert not final.tail, "padding ends on a block boundary"
        return final.h.astype(">u4").tobytes()

    def hexdigest(self) -> str:
        return self.digest().hex()
