"""seedstore.jax.load on 8 emulated CPU devices (XLA_FLAGS=--xla_force_host_platform_device_count=8):
the mesh scenario of jax#21232 -- DP x FSDP x TP = 2x4x1, 1x4x2, 2x2x2 -- gives, on every mesh,
arrays whose every device shard equals the slice of jax.random's whole tensor under the same key,
bit for bit."""
import os

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

import seedstore  # noqa: E402
import seedstore.jax as ssj  # noqa: E402

SPEC = {"seedstore": 1, "seed": 0, "tensors": [
    {"name": "act", "shape": [16, 24, 40], "dtype": "bfloat16", "init": {"dist": "normal", "scale": 0.05},
     "key": {"seed": 43}},
    {"name": "w", "shape": [40, 24], "dtype": "float32", "init": {"dist": "uniform", "minval": -1, "maxval": 1},
     "key": {"seed": 7}},
    {"name": "norm", "shape": [40], "dtype": "float32", "init": {"dist": "truncated_normal"}, "key": {"seed": 9}},
    {"name": "s", "shape": [], "dtype": "float32", "init": {"dist": "normal"}, "key": {"seed": 1}}]}


def reference():
    return {
        "act": jax.random.normal(jax.random.key(43), (16, 24, 40), jnp.bfloat16) * jnp.asarray(0.05, jnp.bfloat16),
        "w": jax.random.uniform(jax.random.key(7), (40, 24), jnp.float32, -1, 1),
        "norm": jax.random.truncated_normal(jax.random.key(9), -2.0, 2.0, (40,), jnp.float32),
        "s": jax.random.normal(jax.random.key(1), (), jnp.float32)}


@pytest.mark.parametrize("mesh_shape", [(2, 4, 1), (1, 4, 2), (2, 2, 2)])
def test_every_mesh_gives_jax_random_bit_for_bit(mesh_shape):
    assert len(jax.devices()) == 8, jax.devices()
    mesh = Mesh(np.array(jax.devices()).reshape(mesh_shape), ("data", "fsdp", "tensor"))
    shardings = {"act": NamedSharding(mesh, P(("data", "fsdp"), None, "tensor")),
                 "w": NamedSharding(mesh, P("fsdp", "tensor")),
                 "norm": NamedSharding(mesh, P()),
                 "s": NamedSharding(mesh, P())}
    got = ssj.load(SPEC, shardings)
    ref = reference()
    for name, arr in got.items():
        assert arr.sharding == shardings[name]
        whole = np.asarray(ref[name])
        assert np.asarray(arr).tobytes() == whole.tobytes(), (mesh_shape, name)
        for shard in arr.addressable_shards:  # each device holds exactly its slice
            assert np.asarray(shard.data).tobytes() == np.ascontiguousarray(whole[shard.index]).tobytes()
        assert seedstore.fingerprint(np.asarray(arr), name) == seedstore.open(SPEC).fingerprint(name)


def test_one_sharding_for_all_and_missing_tensors_named():
    mesh = Mesh(np.array(jax.devices()).reshape(8), ("d",))
    got = ssj.load(SPEC, NamedSharding(mesh, P()), names=["w", "s"])
    assert sorted(got) == ["s", "w"]
    with pytest.raises(seedstore.NotFoundError, match="'nope'"):
        ssj.load(SPEC, {"nope": NamedSharding(mesh, P())})



def test_shardings_that_cannot_place_a_tensor_are_named_before_anything_is_read():
    mesh = Mesh(np.array(jax.devices()).reshape(2, 4), ("a", "b"))

    def spec(shape):
        return {"seedstore": 1, "tensors": [{"name": "blk.w", "shape": shape, "dtype": "float32",
                                             "init": {"dist": "normal"}, "key": {"seed": 5}}]}
    for shape, sharding in [([], NamedSharding(mesh, P("a"))),          # more dims than the tensor
                            ([8], NamedSharding(mesh, P("a", "b"))),
                            ([5, 12], NamedSharding(mesh, P("b"))),     # 5 over 4: uneven
                            ([8], None), ([8], P("a"))]:                # not a Sharding
        with pytest.raises(seedstore.InvalidArgumentError, match=r"tensor 'blk.w' of shape"):
            ssj.load(spec(shape), {"blk.w": sharding})
    with pytest.raises(seedstore.NotFoundError, match="shardings has no entry for 'blk.w'"):
        ssj.load(spec([8]), {}, names=["blk.w"])
    # verify_replicas against a source: a leaf the source lacks (a typo) is named, not passed.
    w = ssj.load(spec([8, 12]), {"blk.w": NamedSharding(mesh, P("a", "b"))})["blk.w"]
    assert ssj.verify_replicas({"blk": {"w": w}}, spec([8, 12])).ok
    with pytest.raises(seedstore.NotFoundError, match="no tensor 'blk.W_typo'"):
        ssj.verify_replicas({"blk": {"W_typo": w}}, spec([8, 12]))

def test_verify_replicas_in_one_process_names_a_flipped_device():
    mesh = Mesh(np.array(jax.devices()).reshape(2, 4), ("data", "model"))
    shardings = {"act": NamedSharding(mesh, P("data", None, "model")), "w": NamedSharding(mesh, P("model")),
                 "norm": NamedSharding(mesh, P()), "s": NamedSharding(mesh, P())}
    got = ssj.load(SPEC, shardings)
    rep = ssj.verify_replicas(got, SPEC)
    assert rep.ok, rep.table()
    assert all(t["composition"] == "ok" for t in rep.tensors)
    # flip one bit of 'norm' (8 replicas) on the device at rank 3
    devs = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
    pieces = []
    for s in got["norm"].addressable_shards:
        a = np.array(s.data)
        if s.device == devs[3]:
            a.view(np.uint32)[5] ^= 1
        pieces.append(jax.device_put(a, s.device))
    bad = dict(got, norm=jax.make_array_from_single_device_arrays((40,), shardings["norm"], pieces))
    rep = ssj.verify_replicas(bad)
    assert rep.disagreeing == {"norm": [3]} and rep.disagreeing_devices == {"norm": [devs[3]]}
    assert rep.disagreeing_processes == {"norm": [0]}
    with pytest.raises(seedstore.MismatchError, match="norm"):
        ssj.verify_replicas(bad, SPEC, raise_on_failure=True)
