"""What the JAX cross-checks share: the seedstore CLI run for one tensor (or box), bit-level
comparison, and this host's float16 arithmetic (docs/JAX-EXACTNESS.md "JAX's float16 depends
on the host"). Import after `pytest.importorskip("jax")`."""
import json
import os
import subprocess

import numpy as np
import pytest
import jax
import jax.numpy as jnp
from jax import lax

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BIN = os.environ.get("SEEDSTORE_BIN", os.path.join(ROOT, "build", "tools", "seedstore"))

NP_DTYPE = {
    "float32": np.float32, "float64": np.float64, "float16": np.float16,
    "bfloat16": jnp.bfloat16, "uint8": np.uint8, "uint16": np.uint16,
    "uint32": np.uint32, "uint64": np.uint64,
}


def load_vectors(name):
    """A known-answer file of tests/kat/vectors/ (fields: its README.md)."""
    with open(os.path.join(ROOT, "tests", "kat", "vectors", name)) as f:
        return json.load(f)


def jax_sample(e, key):
    """The sample a vector of jax_published.json or jax_flavours.json describes, computed by
    JAX: under jax.jit (flavour "jit", Python-constant parameters) or op by op ("eager")."""
    init, shape = e["init"], tuple(e["shape"])
    dtype = NP_DTYPE[e["dtype"]]
    dist, scale = init["dist"], init.get("scale")
    assert set(init) <= {"dist", "scale", "lower", "upper"}, e
    if dist == "bits":
        f = lambda k: jax.random.bits(k, shape, dtype)  # noqa: E731
    elif dist == "uniform":
        f = lambda k: jax.random.uniform(k, shape, dtype)  # noqa: E731
    elif dist == "normal" and scale is None:
        f = lambda k: jax.random.normal(k, shape, dtype)  # noqa: E731
    elif dist == "normal":
        f = lambda k: jax.random.normal(k, shape, dtype) * scale  # noqa: E731
    else:
        assert dist == "truncated_normal" and scale is None, e
        f = lambda k: jax.random.truncated_normal(k, init["lower"], init["upper"], shape, dtype)  # noqa: E731
    return np.asarray(jax.jit(f)(key) if e["flavour"] == "jit" else f(key))


def need_binary():
    if not os.access(BIN, os.X_OK):
        pytest.skip(f"seedstore binary not found at {BIN} (set SEEDSTORE_BIN)")


def key_words(key):
    kd = np.asarray(jax.random.key_data(key)).astype(np.uint32).reshape(-1)
    return int(kd[0]), int(kd[1])


def run_gen(shape, dtype, init, key=None, seed=None, box=None, extra=(), flavour="eager"):
    """Elements of the box (default: whole tensor) as a numpy array of the box's shape."""
    if box is None:
        box = [(0, n) for n in shape]
    cmd = [BIN, "gen", "--shape", ",".join(map(str, shape)), "--dtype", dtype,
           "--init", json.dumps(init), "--format", "raw", "--generator", "threefry",
           "--flavour", flavour, "--box", ",".join(f"{a}:{b}" for a, b in box), *extra]
    if key is not None:
        cmd += ["--key", "%d,%d" % key_words(key)]
    else:
        cmd += ["--seed", str(seed)]
    out = subprocess.run(cmd, check=True, capture_output=True).stdout
    return np.frombuffer(out, dtype=NP_DTYPE[dtype]).reshape([b - a for a, b in box])


def bits_of(x):
    x = np.asarray(x)
    return x.view(f"u{x.dtype.itemsize}")


def assert_same_bits(ours, ref, what):
    ref = np.asarray(ref)
    assert ours.shape == ref.shape, what
    a = bits_of(ours).reshape(-1)
    b = bits_of(ref).reshape(-1)
    bad = np.flatnonzero(a != b)
    assert bad.size == 0, (
        f"{what}: {bad.size}/{a.size} elements differ, first at flat index {bad[0]}: "
        f"ours {ours.reshape(-1)[bad[0]]!r} jax {ref.reshape(-1)[bad[0]]!r}")


def sqrt2(dt):
    return np.asarray(np.sqrt(2), NP_DTYPE[dt])


def erf_of_bounds(bounds, dt, flavour):
    """erf(bound / sqrt2) in dtype `dt` for each bound, as jax.random.truncated_normal
    computes it, with its code: the bound enters as a float32 (a Python float) and is converted
    to `dt`. Eager -- runtime values: XLA rewrites `/ sqrt2` into a multiply and runs its erf
    kernel (on a scalar, as truncated_normal does). Jit -- constants folded by XLA's HLO
    constant folder (the C library's erff); each constant goes through an inner jit as in
    truncated_normal (a constant at the outer level is folded earlier, by another folder, to the
    correctly rounded erf), and the convert decides the order of XLA's passes (float16 folds
    `* round(1 / sqrt2)`). One compilation for all the bounds."""
    f = jax.jit(lambda x: lax.erf(lax.convert_element_type(x, NP_DTYPE[dt]) / sqrt2(dt)))
    if flavour == "eager":
        return [np.asarray(f(np.float32(b))) for b in bounds]
    return [np.asarray(v) for v in jax.jit(lambda: [f(float(b)) for b in bounds])()]


def erf_bounds(lower, upper, dt, flavour):
    """(erf(lower / sqrt2), erf(upper / sqrt2)): see erf_of_bounds."""
    return tuple(erf_of_bounds([lower, upper], dt, flavour))


def f16_fma(x, m, c):
    """x * m + c for float16 arrays, both ways XLA-CPU computes a float16 multiply-add (see
    host_f16_affine): fused -- an f32 FMA rounded once to f16, as seedstore always computes it --
    and unfused -- each op rounded to f16."""
    x = np.asarray(x, np.float16)
    m, c = np.float16(m), np.float16(c)
    fused = (x.astype(np.float64) * float(m) + float(c)).astype(np.float32).astype(np.float16)
    return fused, x * m + c  # numpy rounds each float16 op to float16


def f16_affine(key, shape, lo, hi):
    """jax.random.uniform(key, shape, float16, lo, hi) rebuilt from its bits, both ways XLA-CPU
    computes the last step `floats * (hi - lo) + lo` (docs/JAX-EXACTNESS.md, platform notes):
    fused -- one f32 FMA, rounded once to f16, as on hosts with native f16 arithmetic
    (AVX512-FP16) and as seedstore always computes it -- and unfused -- each op rounded to
    f16, as XLA does on hosts without (AMD Zen, Intel before Sapphire Rapids)."""
    bits = np.asarray(jax.random.bits(key, shape, jnp.uint16))
    f = ((bits >> 6) | np.uint16(0x3C00)).view(np.float16) - np.float16(1.0)  # exact
    # jax.random.uniform takes lo, hi as float32 arguments, then rounds them to float16.
    lo16, hi16 = np.float16(np.float32(lo)), np.float16(np.float32(hi))
    fused, unfused = f16_fma(f, hi16 - lo16, lo16)
    return np.maximum(fused, lo16), np.maximum(unfused, lo16)


def host_f16_affine():
    """Which way this host's JAX computes float16 uniform: "fused", "unfused" or None."""
    key, shape = jax.random.key(1701), (64, 64)
    ref = np.asarray(jax.random.uniform(key, shape, jnp.float16, 2.5, 7.25)).view(np.uint16)
    fused, unfused = f16_affine(key, shape, 2.5, 7.25)
    if np.array_equal(ref, fused.view(np.uint16)):
        return "fused"
    if np.array_equal(ref, unfused.view(np.uint16)):
        return "unfused"
    return None


HOST_F16 = host_f16_affine()


def ulp_stats(ours, ref):
    """(fraction of float64 elements equal bit for bit, largest distance in ulp)."""
    a = ours.view(np.int64).astype(np.float64).reshape(-1)
    b = np.asarray(ref).view(np.int64).astype(np.float64).reshape(-1)
    if a.size == 0:
        return 1.0, 0
    d = np.abs(a - b)
    return float(np.mean(d == 0)), int(d.max())


# float64 is measured, not bit-exact (docs/JAX-EXACTNESS.md "Not bit-exact"), on JAX 0.10.2,
# x86-64 with FMA, in both flavours:
# * normal: XLA-CPU calls the C library's `log` in f64 log1p; ours is a double-double log, so
#   a few elements in 10^4 differ by at most 2 ulp.
F64_NORMAL_MIN_EXACT = 0.9999
F64_NORMAL_MAX_ULP = 2
# * truncated_normal: XLA-CPU calls glibc's `erf` for the f64 bounds (at run time, and when it
#   folds them under jit); XlaErfF64 differs from it by a few ulp for some bounds, which shifts
#   the uniform's range and so many elements by an ulp; the large ulp counts are elements next
#   to zero. (-2,2), (-1,1), (0,2) are exact.
F64_TRUNC_MIN_EXACT = 0.99
F64_TRUNC_MAX_ULP = 1 << 17
