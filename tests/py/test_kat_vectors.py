"""The known-answer vectors of tests/kat/vectors/ checked outside C++ by independent means.

* random123.json: Threefry-2x32 (13, 20, 32 rounds) and Philox-4x32-10, written here in pure
  Python from their definitions (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
  SC11: Threefish's MIX and key schedule on 32-bit words with rotation constants R_32x2;
  Philox's multiply-hi/lo rounds with the Weyl key bump) -- not from seedstore's code.
* rounding.json: numpy's float16 and ml_dtypes' bfloat16 conversions (round to nearest even).

The C++ tests read the same files (Kat.Random123Vectors, Kat.HalfConversionsExhaustive), so a
vector wrong in the file fails here as well as there. jax_published.json and jax_flavours.json
are checked against the installed JAX (and the CLI) by test_jax_random.py and
test_jax_flavours.py.
"""
import json
import os
import pathlib

import numpy as np
import pytest

ROOT = pathlib.Path(os.environ.get("SEEDSTORE_SOURCE_DIR", pathlib.Path(__file__).parents[2]))
VECTORS = ROOT / "tests" / "kat" / "vectors"
M32 = 0xFFFFFFFF


def load(name):
    return json.loads((VECTORS / name).read_text())


def words(hexes):
    return [int(h, 16) for h in hexes]


def rotl32(x, r):
    return ((x << r) | (x >> (32 - r))) & M32


def threefry2x32(rounds, ctr, key):
    """Threefry-2x32-<rounds>: a MIX (add, rotate, xor) per round, a key injection every 4."""
    rot = (13, 15, 26, 6, 17, 29, 16, 24)
    ks = [key[0], key[1], 0x1BD11BDA ^ key[0] ^ key[1]]
    x0, x1 = (ctr[0] + ks[0]) & M32, (ctr[1] + ks[1]) & M32
    for r in range(rounds):
        x0 = (x0 + x1) & M32
        x1 = rotl32(x1, rot[r % 8]) ^ x0
        if r % 4 == 3:
            s = (r + 1) // 4
            x0 = (x0 + ks[s % 3]) & M32
            x1 = (x1 + ks[(s + 1) % 3] + s) & M32
    return [x0, x1]


def philox4x32(rounds, ctr, key):
    """Philox-4x32-<rounds>: two 32x32->64 multiplies per round, the key bumped by Weyl constants."""
    x, k = list(ctr), list(key)
    for r in range(rounds):
        if r:
            k = [(k[0] + 0x9E3779B9) & M32, (k[1] + 0xBB67AE85) & M32]
        p0, p1 = 0xD2511F53 * x[0], 0xCD9E8D57 * x[2]
        x = [(p1 >> 32) ^ x[1] ^ k[0], p1 & M32, (p0 >> 32) ^ x[3] ^ k[1], p0 & M32]
    return x


def test_random123_vectors_by_an_independent_implementation():
    v = load("random123.json")
    n = 0
    for e in v["threefry2x32"]:
        assert threefry2x32(e["rounds"], words(e["ctr"]), words(e["key"])) == words(e["out"]), e
        n += 1
    for e in v["philox4x32"]:
        assert philox4x32(e["rounds"], words(e["ctr"]), words(e["key"])) == words(e["out"]), e
        n += 1
    assert n == 12


def test_rounding_boundaries_by_numpy_and_ml_dtypes():
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes is not importable")
    v = load("rounding.json")
    for name, dt in (("f32_to_bf16", ml_dtypes.bfloat16), ("f32_to_f16", np.float16)):
        for e in v[name]:
            x = np.array([int(e["in"], 16)], dtype=np.uint32).view(np.float32)
            with np.errstate(over="ignore"):  # 65520 rounds to inf, as the vector says
                got = int(x.astype(dt).view(np.uint16)[0])
            assert got == int(e["out"], 16), (name, e)
