"""Tests of pipeline.portable_sha256: the digest is hashlib's, however the bytes are cut into pieces
and whichever process (a pickled state) or kernel (OpenSSL, Numba) hashes each piece."""
from __future__ import annotations

import hashlib
import pickle

import numpy as np
import pytest

from pipeline.portable_sha256 import PortableSha256, _openssl


@pytest.mark.parametrize("n", [0, 1, 55, 56, 63, 64, 65, 127, 128, 1000, (1 << 20) + 4097])
@pytest.mark.parametrize("kernel", ["openssl", "numba", "mixed"])
def test_pieces_through_pickles_give_hashlibs_digest(n, kernel):
    if kernel != "numba" and _openssl() is None:
        pytest.skip("libcrypto not loadable here")
    rng = np.random.default_rng(n)
    data = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
    whole = PortableSha256()
    whole.update(data, openssl=kernel != "numba")
    assert whole.hexdigest() == hashlib.sha256(data).hexdigest()
    cuts = sorted(rng.integers(0, n + 1, 5).tolist())
    state = PortableSha256()
    for k, (lo, hi) in enumerate(zip([0, *cuts], [*cuts, n])):
        state = pickle.loads(pickle.dumps(state))          # handed on to another process
        state.update(data[lo:hi], openssl=kernel == "openssl" or (kernel == "mixed" and k % 2 == 0))
    assert state.hexdigest() == hashlib.sha256(data).hexdigest()
    assert state.length == n and len(state.tail) == n % 64


def test_arrays_hash_as_hashlib_reads_them():
    """Arrays of any dtype hash their bytes (as ``hashlib``'s ``update`` does, without a copy);
    a strided view, which hashlib refuses, is refused with the reason."""
    arrays = [np.arange(1000, dtype=np.float32).reshape(10, 100), np.arange(7, dtype=np.int64),
              np.array([True, False, True])]
    state, expected = PortableSha256(), hashlib.sha256()
    for array in arrays:
        state.update(array)
        expected.update(array)
    assert state.hexdigest() == expected.hexdigest()
    with pytest.raises(ValueError, match="C-contiguous"):
        state.update(arrays[0][:, ::2])


def test_the_standards_test_vectors():
    """FIPS 180-2's examples: "abc" and the 448-bit message, on both kernels."""
    for openssl in (True, False):
        for message, digest in ((b"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
                                (b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
                                 "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1")):
            state = PortableSha256()
            state.update(message, openssl=openssl)
            assert state.hexdigest() == digest
