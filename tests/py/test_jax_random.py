"""seedstore's `threefry` generator against real jax.random (CPU, partitionable threefry).

Every test runs the shipped CLI ($SEEDSTORE_BIN) and compares its raw little-endian bytes
with what jax.random returns for the same key. Exactness numbers are in docs/JAX-EXACTNESS.md.
"""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="jax is not importable: JAX cross-checks skipped")
import jax.numpy as jnp  # noqa: E402

from jax_testlib import (BIN, F64_NORMAL_MAX_ULP, F64_NORMAL_MIN_EXACT,  # noqa: E402
                         F64_TRUNC_MAX_ULP, F64_TRUNC_MIN_EXACT, HOST_F16, NP_DTYPE,
                         assert_same_bits, bits_of, erf_bounds, f16_affine, jax_sample,
                         key_words, load_vectors, need_binary, run_gen, ulp_stats)


@pytest.fixture(scope="module", autouse=True)
def _need_binary():
    need_binary()


@pytest.fixture
def x64():
    jax.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", False)


def keys():
    """Keys from seeds, split and fold_in chains (raw key words are passed to the CLI)."""
    k0 = jax.random.key(0)
    k = jax.random.key(1701)
    a, b = jax.random.split(k)
    return {
        "key0": k0,
        "key43": jax.random.PRNGKey(43),
        "seed_neg": jax.random.key(-7),
        "split1": b,
        "split_chain": jax.random.split(jax.random.split(a, 5)[3], (2, 3))[1, 2],
        "fold_in": jax.random.fold_in(k0, 4),
        "fold_chain": jax.random.fold_in(jax.random.fold_in(b, 123456789), 2**32 - 1),
    }


KEYS = list(keys().keys())


# ---- key ops and bits ------------------------------------------------------------------

def test_published_values():
    """The values of tests/kat/vectors/jax_published.json (which the C++ test
    JaxPublished.Values reads): the installed JAX gives them, and so does the shipped CLI."""
    published = load_vectors("jax_published.json")
    for e in published["key_ops"]:
        k = jax.random.key(e["seed"])
        out = jax.random.fold_in(k, e["data"]) if e["op"] == "fold_in" \
            else jax.random.split(k, e["num"])[e["index"]]
        assert key_words(out) == tuple(int(w, 16) for w in e["out"]), e
    for e in published["samples"]:
        want = [int(b, 16) for b in e["bits"]]
        got = bits_of(jax_sample(e, jax.random.key(e["seed"]))).reshape(-1)
        assert [int(b) for b in got] == want, ("jax", e["name"])
        cli = run_gen(tuple(e["shape"]), e["dtype"], e["init"], seed=e["seed"], flavour=e["flavour"])
        assert [int(b) for b in bits_of(cli).reshape(-1)] == want, ("cli", e["name"])
    for e in published["printed"]:
        key = jax.random.key(e["seed"])
        if "split_index" in e:
            key = jax.random.split(key)[e["split_index"]]
        if e["dtype"] == "float64":
            jax.config.update("jax_enable_x64", True)  # float64 samples need it; seeds < 2^31
        try:
            ref = float(jax_sample(e, key).reshape(-1)[0])
        finally:
            jax.config.update("jax_enable_x64", False)
        cli = float(run_gen(tuple(e["shape"]), e["dtype"], e["init"], key=key,
                            flavour=e["flavour"]).reshape(-1)[0])
        for who, v in (("jax", ref), ("cli", cli)):
            assert abs(v - e["value"]) <= e["abs_tol"], (who, e["name"], v)


@pytest.mark.parametrize("seed", [0, 1, 43, 1701, 2**31 - 1, -1, -2**31])
def test_seed_matches_key(seed):
    shape = (7, 3)
    ref = jax.random.bits(jax.random.key(seed), shape, jnp.uint32)
    assert_same_bits(run_gen(shape, "uint32", {"dist": "bits"}, seed=seed), ref, f"seed {seed}")


@pytest.mark.parametrize("name", KEYS)
@pytest.mark.parametrize("dtype", ["uint8", "uint16", "uint32"])
def test_bits(name, dtype):
    key = keys()[name]
    shape = (5, 37, 3)
    ref = jax.random.bits(key, shape, NP_DTYPE[dtype])
    assert_same_bits(run_gen(shape, dtype, {"dist": "bits"}, key=key), ref, f"{name} {dtype}")


def test_bits_u64(x64):
    for name, key in keys().items():
        shape = (129, 5)
        ref = jax.random.bits(key, shape, jnp.uint64)
        assert_same_bits(run_gen(shape, "uint64", {"dist": "bits"}, key=key), ref, name)


# ---- uniform ---------------------------------------------------------------------------

UNIFORM_RANGES = [(0.0, 1.0), (-1.0, 1.0), (-0.3, 0.7), (2.5, 7.25), (-1e-3, 3e-3)]


def test_host_f16_arithmetic_is_understood():
    # If neither formula reproduces this host's JAX exactly, the float16 gap is unexplained.
    assert HOST_F16 in ("fused", "unfused"), "JAX's float16 uniform matches neither formula"
    print(f"\nthis host's JAX computes float16 uniform {HOST_F16}")


@pytest.mark.parametrize("name", KEYS)
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("lo,hi", UNIFORM_RANGES)
def test_uniform(name, dtype, lo, hi):
    key = keys()[name]
    shape = (33, 31)
    ref = jax.random.uniform(key, shape, NP_DTYPE[dtype], lo, hi)
    ours = run_gen(shape, dtype, {"dist": "uniform", "minval": lo, "maxval": hi}, key=key)
    what = f"{name} {dtype} [{lo},{hi})"
    if dtype == "float16" and HOST_F16 == "unfused":
        # Measured gap, fully explained: JAX here is exactly the unfused formula, ours exactly
        # the fused one (what JAX computes on hosts with native float16).
        fused, unfused = f16_affine(key, shape, lo, hi)
        assert_same_bits(unfused, ref, what + " (JAX == unfused formula)")
        assert_same_bits(ours, fused, what + " (ours == fused formula)")
        return
    assert_same_bits(ours, ref, what)


def test_uniform_f64(x64):
    for name, key in keys().items():
        for lo, hi in UNIFORM_RANGES:
            shape = (1000,)
            ref = jax.random.uniform(key, shape, jnp.float64, lo, hi)
            ours = run_gen(shape, "float64", {"dist": "uniform", "minval": lo, "maxval": hi},
                           key=key)
            assert_same_bits(ours, ref, f"{name} f64 [{lo},{hi})")


# ---- normal ----------------------------------------------------------------------------

@pytest.mark.parametrize("name", KEYS)
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_normal(name, dtype):
    key = keys()[name]
    shape = (64, 257)  # odd inner size: vector body and scalar tail of XLA's loop
    ref = jax.random.normal(key, shape, NP_DTYPE[dtype])
    assert_same_bits(run_gen(shape, dtype, {"dist": "normal"}, key=key), ref, f"{name} {dtype}")


def test_normal_f32_large():
    key = jax.random.key(0)
    shape = (1 << 20,)
    ref = jax.random.normal(key, shape, jnp.float32)
    assert_same_bits(run_gen(shape, "float32", {"dist": "normal"}, key=key), ref, "2^20")


@pytest.mark.parametrize("scale,mean", [(0.05, 0.0), (0.02, 1.0)])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_normal_scale_mean(dtype, scale, mean):
    key = jax.random.PRNGKey(43)
    shape = (17, 129)
    dt = NP_DTYPE[dtype]
    ref = jax.random.normal(key, shape, dt) * jnp.asarray(scale, dt)
    if mean:
        ref = ref + jnp.asarray(mean, dt)
    init = {"dist": "normal", "scale": scale}
    if mean:
        init["mean"] = mean
    assert_same_bits(run_gen(shape, dtype, init, key=key), ref, f"{dtype} {scale} {mean}")


def test_normal_f64(x64):
    total, exact, worst = 0, 0.0, 0
    for name, key in keys().items():
        shape = (1 << 17,)
        ref = jax.random.normal(key, shape, jnp.float64)
        ours = run_gen(shape, "float64", {"dist": "normal"}, key=key)
        frac, mx = ulp_stats(ours, ref)
        exact += frac * ours.size
        total += ours.size
        worst = max(worst, mx)
    print(f"\nf64 normal: {exact / total:.6f} of {total} exact, max {worst} ulp")
    assert exact / total >= F64_NORMAL_MIN_EXACT and worst <= F64_NORMAL_MAX_ULP


# ---- truncated_normal ------------------------------------------------------------------

TRUNC_BOUNDS = [(-2.0, 2.0), (-1.0, 1.0), (0.0, 2.0), (-3.0, 0.5), (-0.5, 0.25)]


@pytest.mark.parametrize("name", ["key0", "key43", "fold_chain"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("lower,upper", TRUNC_BOUNDS)
def test_truncated_normal(name, dtype, lower, upper):
    key = keys()[name]
    shape = (41, 67)
    ref = jax.random.truncated_normal(key, lower, upper, shape, NP_DTYPE[dtype])
    ours = run_gen(shape, dtype, {"dist": "truncated_normal", "lower": lower, "upper": upper},
                   key=key)
    what = f"{name} {dtype} ({lower},{upper})"
    if dtype == "float16" and HOST_F16 == "unfused":
        # truncated_normal draws uniform(erf(lower / sqrt2), erf(upper / sqrt2)) first: every
        # element whose uniform agrees must agree bit for bit; the others are the float16
        # uniform gap above, carried through erf_inv.
        a, b = erf_bounds(lower, upper, "float16", "eager")
        fused, unfused = f16_affine(key, shape, a, b)
        same = fused.view(np.uint16) == unfused.view(np.uint16)
        assert same.mean() > 0.2, what  # enough elements to check (measured: 0.48 or more)
        assert_same_bits(ours[same], np.asarray(ref)[same], what + " (where the uniforms agree)")
        print(f"\n{what}: {int(same.sum())}/{same.size} elements have the same uniform and match")
        return
    assert_same_bits(ours, ref, what)


def test_truncated_normal_f64(x64):
    total, exact, worst = 0, 0.0, 0
    for lower, upper in TRUNC_BOUNDS:
        key = jax.random.key(7)
        shape = (20000,)
        ref = jax.random.truncated_normal(key, lower, upper, shape, jnp.float64)
        ours = run_gen(shape, "float64",
                       {"dist": "truncated_normal", "lower": lower, "upper": upper}, key=key)
        frac, mx = ulp_stats(ours, ref)
        print(f"\nf64 truncated_normal({lower},{upper}): {frac:.6f} exact, max {mx} ulp")
        exact += frac * ours.size
        total += ours.size
        worst = max(worst, mx)
    assert exact / total >= F64_TRUNC_MIN_EXACT and worst <= F64_TRUNC_MAX_ULP


# ---- the users' scenario: sharded bf16 init on 8 emulated CPU devices -------------------

SHARDED_SCRIPT = textwrap.dedent(r"""
    import os, sys, json
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    import numpy as np, jax, jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    seq = int(sys.argv[1])
    key = jax.random.PRNGKey(43)
    shapes = {"act": (32, seq, 4096), "w": (4096, 32, 128)}
    specs = {"act": P(("data", "pipeline"), None, "tensor"), "w": P("pipeline", "tensor", None)}
    out = {"key": [int(v) for v in np.asarray(jax.random.key_data(key))], "cases": []}
    devs = np.array(jax.devices())
    assert devs.size == 8
    for mesh_shape in [(2, 4, 1), (1, 4, 2), (2, 2, 2)]:
        mesh = Mesh(devs.reshape(mesh_shape), ("data", "pipeline", "tensor"))
        for name in ["act", "w"]:
            sh = NamedSharding(mesh, specs[name])
            f = jax.jit(lambda k, s=shapes[name]: 0.05 * jax.random.normal(k, s, jnp.bfloat16),
                        out_shardings=sh)
            x = f(key)
            idx = sh.devices_indices_map(shapes[name])
            for shard in x.addressable_shards:
                box = [(sl.start or 0, sl.stop if sl.stop is not None else n)
                       for sl, n in zip(idx[shard.device], shapes[name])]
                path = os.path.join(sys.argv[2], f"{name}_{'x'.join(map(str, mesh_shape))}_{shard.device.id}.npy")
                np.save(path, np.asarray(shard.data).view(np.uint16))
                out["cases"].append({"name": name, "mesh": mesh_shape, "device": shard.device.id,
                                     "shape": shapes[name], "box": box, "file": path})
    print(json.dumps(out))
""")


def test_sharded_bf16_users_scenario(tmp_path):
    seq = 64
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8",
               JAX_PLATFORMS="cpu")
    res = subprocess.run([sys.executable, "-c", SHARDED_SCRIPT, str(seq), str(tmp_path)],
                         check=True, capture_output=True, text=True, env=env)
    info = json.loads(res.stdout.strip().splitlines()[-1])
    key = tuple(info["key"])
    assert len(info["cases"]) == 3 * 2 * 8
    for c in info["cases"]:
        cmd = [BIN, "gen", "--shape", ",".join(map(str, c["shape"])), "--dtype", "bfloat16",
               "--init", json.dumps({"dist": "normal", "scale": 0.05}), "--format", "raw",
               "--key", "%d,%d" % key, "--box", ",".join(f"{a}:{b}" for a, b in c["box"])]
        ours = np.frombuffer(subprocess.run(cmd, check=True, capture_output=True).stdout,
                             dtype=np.uint16)
        ref = np.load(c["file"]).reshape(-1)
        bad = np.count_nonzero(ours != ref)
        assert ours.size == ref.size and bad == 0, (
            f"{c['name']} mesh {c['mesh']} device {c['device']} box {c['box']}: "
            f"{bad}/{ref.size} elements differ")
