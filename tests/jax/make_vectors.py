"""Generates tests/jax/vectors/jax_vectors.json with real JAX (CPU, partitionable threefry).

Run: build/venv/bin/python tests/jax/make_vectors.py   (JAX 0.10.2 made the checked-in file)
     build/venv/bin/python tests/jax/make_vectors.py --jit   (writes jax_vectors_jit.json only)
The GoogleTest suite tests/jax/test_jax_vectors.cc replays these without Python.

jax_vectors.json holds op-by-op ("eager") references: its samples carry no "flavour". Its
float16 uniform/truncated_normal samples need a host with native float16 arithmetic (the
Intel Xeon that made it; docs/JAX-EXACTNESS.md), so regenerate it only on such a host.
jax_vectors_jit.json holds references compiled under jax.jit with Python-constant parameters
("flavour": "jit") and the erf values XLA's constant folder uses; it has no float16 sample
whose value depends on the host's float16 arithmetic, so any x86-64 host with FMA may make it.
"""
import sys
import json
import os

import numpy as np
import jax
import jax.numpy as jnp
from jax import lax

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "vectors", "jax_vectors.json")
OUT_JIT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "vectors", "jax_vectors_jit.json")


def kd(k):
    return [int(v) for v in np.asarray(jax.random.key_data(k)).astype(np.uint32).reshape(-1)]


def main():
    v = {"jax_version": jax.__version__, "keys": [], "samples": [], "erfinv_f32": [],
         "log1p_f32": [], "erf_f32": [], "erfinv_f64": []}
    for s in [0, 1, 42, 43, 1701, 2**31 - 1, -1, -2**31]:
        v["keys"].append({"op": "seed", "seed": s, "out": kd(jax.random.key(s))})
    base = [jax.random.key(0), jax.random.key(1701), jax.random.fold_in(jax.random.key(7), 9)]
    for k in base:
        for i, sk in enumerate(jax.random.split(k, 5)):
            v["keys"].append({"op": "split", "key": kd(k), "index": i, "out": kd(sk)})
        for d in [0, 1, 4, 123456789, 2**32 - 1]:
            v["keys"].append({"op": "fold_in", "key": kd(k), "data": d,
                              "out": kd(jax.random.fold_in(k, d))})

    def add(name, key, shape, dtype, init, arr):
        a = np.asarray(arr)
        v["samples"].append({"name": name, "key": kd(key), "shape": list(shape), "dtype": dtype,
                             "init": init, "hex": a.tobytes().hex()})

    keys = {"key0": jax.random.key(0), "key43": jax.random.PRNGKey(43),
            "split": jax.random.split(jax.random.key(1701))[1],
            "fold": jax.random.fold_in(jax.random.fold_in(jax.random.key(0), 4), 2**32 - 1)}
    for kn, k in keys.items():
        for dt in ["uint8", "uint16", "uint32"]:
            add(f"{kn} bits {dt}", k, (3, 7), dt, {"dist": "bits"},
                jax.random.bits(k, (3, 7), np.dtype(dt)))
        for dt, jdt in [("float32", jnp.float32), ("float16", jnp.float16),
                        ("bfloat16", jnp.bfloat16)]:
            add(f"{kn} uniform {dt}", k, (37,), dt, {"dist": "uniform", "minval": -0.3,
                "maxval": 0.7}, jax.random.uniform(k, (37,), jdt, -0.3, 0.7))
            add(f"{kn} normal {dt}", k, (5, 13), dt, {"dist": "normal"},
                jax.random.normal(k, (5, 13), jdt))
            add(f"{kn} normal*0.05 {dt}", k, (41,), dt, {"dist": "normal", "scale": 0.05},
                jax.random.normal(k, (41,), jdt) * jnp.asarray(0.05, jdt))
            add(f"{kn} truncated_normal {dt}", k, (29,), dt,
                {"dist": "truncated_normal", "lower": -2.0, "upper": 2.0},
                jax.random.truncated_normal(k, -2.0, 2.0, (29,), jdt))
    # f32 erf_inv / log1p on a stride of the 2^23 normal inputs u = k 2^-22 - (1 - 2^-24),
    # plus both ends (the exhaustive check lives in tests/py/test_jax_erfinv.py).
    ks = np.unique(np.concatenate([np.arange(0, 2**23, 2**23 // 2048), np.arange(0, 64),
                                   np.arange(2**23 - 64, 2**23)])).astype(np.uint32)
    u = (ks.astype(np.float32) * np.float32(2**-22) - np.float32(1 - 2**-24)).astype(np.float32)
    ei = np.asarray(jax.jit(lax.erf_inv)(u))
    l1 = np.asarray(jax.jit(lambda x: lax.log1p(x * -x))(u))
    v["erfinv_f32"] = [[int(a), int(b)] for a, b in zip(u.view(np.uint32), ei.view(np.uint32))]
    v["log1p_f32"] = [[int(a), int(b)] for a, b in zip(u.view(np.uint32), l1.view(np.uint32))]
    xs = np.concatenate([np.linspace(-4.5, 4.5, 1001, dtype=np.float32),
                         (np.arange(-8, 9, dtype=np.float32) / np.float32(np.sqrt(2)))])
    er = np.asarray(jax.jit(lax.erf)(xs))
    v["erf_f32"] = [[int(a), int(b)] for a, b in zip(xs.view(np.uint32), er.view(np.uint32))]
    jax.config.update("jax_enable_x64", True)
    add("key0 normal float64", jax.random.key(0), (1,), "float64", {"dist": "normal"},
        jax.random.normal(jax.random.key(0), (1,), jnp.float64))
    add("key43 uniform float64", keys["key43"], (17,), "float64",
        {"dist": "uniform", "minval": -0.3, "maxval": 0.7},
        jax.random.uniform(keys["key43"], (17,), jnp.float64, -0.3, 0.7))
    add("key43 bits uint64", keys["key43"], (9,), "uint64", {"dist": "bits"},
        jax.random.bits(keys["key43"], (9,), jnp.uint64))
    rng = np.random.default_rng(0)
    k64 = rng.integers(0, 2**52, size=512, dtype=np.uint64)
    u64 = k64.astype(np.float64) * 2.0**-51 - (1 - 2.0**-53)
    e64 = np.asarray(jax.jit(lax.erf_inv)(u64))
    v["erfinv_f64"] = [[f"{int(a):016x}", f"{int(b):016x}"]
                       for a, b in zip(u64.view(np.uint64), e64.view(np.uint64))]
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(v, f, indent=0)
    print("wrote", OUT, os.path.getsize(OUT), "bytes")


def main_jit():
    v = {"jax_version": jax.__version__, "samples": [], "erf_f32_folded": []}
    keys = {"key0": jax.random.key(0), "key43": jax.random.PRNGKey(43),
            "fold": jax.random.fold_in(jax.random.fold_in(jax.random.key(0), 4), 2**32 - 1)}
    cases = [  # (name, dtypes, init, jitted expression)
        ("normal*0.05", ["float32", "float16", "bfloat16"], {"dist": "normal", "scale": 0.05},
         lambda k, s, d: jax.random.normal(k, s, d) * 0.05),
        ("normal*0.02+0.3", ["float32", "bfloat16"], {"dist": "normal", "scale": 0.02, "mean": 0.3},
         lambda k, s, d: jax.random.normal(k, s, d) * 0.02 + 0.3),
        ("normal+1.5", ["float32", "bfloat16"], {"dist": "normal", "mean": 1.5},
         lambda k, s, d: jax.random.normal(k, s, d) + 1.5),
        ("truncated_normal(-1.5,1.7)", ["float32", "bfloat16"],
         {"dist": "truncated_normal", "lower": -1.5, "upper": 1.7},
         lambda k, s, d: jax.random.truncated_normal(k, -1.5, 1.7, s, d)),
        ("truncated_normal(-2,2)*0.02+0.1", ["float32", "bfloat16"],
         {"dist": "truncated_normal", "scale": 0.02, "mean": 0.1},
         lambda k, s, d: jax.random.truncated_normal(k, -2.0, 2.0, s, d) * 0.02 + 0.1),
    ]
    for kn, k in keys.items():
        for name, dtypes, init, f in cases:
            for dt in dtypes:
                a = np.asarray(jax.jit(lambda k, f=f, dt=dt: f(k, (37,), np.dtype(dt) if dt != "bfloat16" else jnp.bfloat16))(k))
                v["samples"].append({"name": f"{kn} {name} {dt} jit", "key": kd(k), "shape": [37],
                                     "dtype": dt, "init": init, "flavour": "jit",
                                     "hex": a.tobytes().hex()})
    # erf as XLA's HLO constant folder computes it (the C library's erff): an array constant
    # reaching lax.erf through an inner jit, as truncated_normal's bounds do.
    rng = np.random.default_rng(1)
    xs = np.concatenate([rng.uniform(-7, 7, 3000), rng.uniform(-1.3, 1.3, 1000),
                         np.arange(-12, 13) / 4.0]).astype(np.float32)
    inner = jax.jit(lax.erf)
    er = np.asarray(jax.jit(lambda: inner(jnp.asarray(xs)))())
    v["erf_f32_folded"] = [[int(a), int(b)] for a, b in zip(xs.view(np.uint32), er.view(np.uint32))]
    with open(OUT_JIT, "w") as f:
        json.dump(v, f, indent=0)
    print("wrote", OUT_JIT, os.path.getsize(OUT_JIT), "bytes")


if __name__ == "__main__":
    main_jit() if "--jit" in sys.argv[1:] else main()
