"""One process of a 2-process JAX job on CPU, started by test_py_jax_multiprocess.py:
    python jax_worker.py <coordinator host:port> <process id> <out dir>
Each process drives 4 emulated CPU devices (8 in the job); cross-process collectives go through
gloo (jax_cpu_collectives_implementation). Results go to <out>/p<id>.json, asserted by the test.
"""
import json
import os
import sys
import time

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4").strip()
os.environ["JAX_PLATFORMS"] = "cpu"

import jax  # noqa: E402

jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize(coordinator_address=sys.argv[1], num_processes=2, process_id=int(sys.argv[2]),
                           initialization_timeout=60)

import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

import seedstore  # noqa: E402
import seedstore.jax as ssj  # noqa: E402

ME = jax.process_index()
OUT = sys.argv[3]

# A Llama-ish handful: 2-D weights sharded both ways, bf16, a replicated norm, a bias sharded
# over the cross-process axis only (4 replicas per region, all in one process), a scalar.
SPEC = {"seedstore": 1, "seed": 5, "tensors": [
    {"name": "layers.0.w", "shape": [16, 24], "dtype": "float32", "init": {"dist": "normal", "scale": 0.02}},
    {"name": "emb", "shape": [40, 12], "dtype": "bfloat16", "init": {"dist": "normal"}},
    {"name": "norm", "shape": [24], "dtype": "float32", "init": {"dist": "ones"}},
    {"name": "bias", "shape": [8], "dtype": "float32", "init": {"dist": "uniform", "minval": -1, "maxval": 1}},
    {"name": "scale", "shape": [], "dtype": "float32", "init": {"dist": "normal"}}]}

devices = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
mesh = Mesh(np.array(devices).reshape(2, 4), ("data", "model"))  # row p = process p's devices
SHARDINGS = {"layers.0.w": NamedSharding(mesh, P("data", "model")),
             "emb": NamedSharding(mesh, P("model", None)),
             "norm": NamedSharding(mesh, P()),
             "bias": NamedSharding(mesh, P("data")),
             "scale": NamedSharding(mesh, P())}
cat = seedstore.open(SPEC)
res = {"process": ME, "rank_of": {str(d): r for r, d in enumerate(devices)}}


def summary(rep):
    return {"ok": rep.ok, "disagreeing": rep.disagreeing, "processes": rep.disagreeing_processes,
            "devices": {n: [str(d) for d in ds] for n, ds in rep.disagreeing_devices.items()},
            "ties": rep.ties, "table": rep.table(),
            "tensors": {t["name"]: t for t in rep.tensors}}


def error(fn):
    try:
        fn()
    except seedstore.Error as e:
        return f"{type(e).__name__}: {e}"
    return None


def perturb(arr, local_index):
    """`arr` with the lowest bit of element 0 flipped in this process's `local_index`-th
    device's shard only."""
    shards = sorted(arr.addressable_shards, key=lambda s: s.device.id)
    pieces = []
    for i, s in enumerate(shards):
        a = np.array(s.data)
        if i == local_index:
            a.reshape(-1).view(np.uint16 if a.dtype.itemsize == 2 else np.uint32)[0] ^= 1
        pieces.append(jax.device_put(a, s.device))
    return jax.make_array_from_single_device_arrays(arr.shape, arr.sharding, pieces)


t0 = time.time()
params = ssj.load(SPEC, SHARDINGS)
res["load_s"] = time.time() - t0
t0 = time.time()
res["clean"] = summary(ssj.verify_replicas(params, SPEC))
res["verify_s"] = time.time() - t0
res["clean_nosource"] = summary(ssj.verify_replicas(params))
res["expected_fp"] = {n: cat.fingerprint(n).hex for n in cat.names}
res["nested_names"] = sorted(t["name"] for t in ssj.verify_replicas(
    {"layers": [{"w": params["layers.0.w"]}], "top": params["scale"]}).tensors)

# Process 1 flips one bit: in 'bias' on its 3rd device (4 replicas of [4:8] on process 1: a
# majority names rank 6) and in 'emb' on its 1st device (2 replicas of each row block, one per
# process: a tie; only the source names the off-spec rank 4).
bad = dict(params)
if ME == 1:
    bad["bias"] = perturb(params["bias"], 2)
    bad["emb"] = perturb(params["emb"], 0)
res["flip"] = summary(ssj.verify_replicas(bad, SPEC))
res["flip_nosource"] = summary(ssj.verify_replicas(bad))
res["flip_raise"] = error(lambda: ssj.verify_replicas(bad, SPEC, raise_on_failure=True))

# Bad input, each named, raised on every process before anything is exchanged (or, for inputs
# that differ between processes, by the library's input check on every process).
res["bad_leaf"] = error(lambda: ssj.verify_replicas({"w": params["layers.0.w"], "x": np.zeros(3)}))
res["one_device"] = error(lambda: ssj.verify_replicas({"y": jax.device_put(np.zeros(3), jax.local_devices()[0])}))
res["bad_shape"] = error(lambda: ssj.verify_replicas(
    {"layers.0.w": jax.device_put(np.zeros((16, 8), np.float32), NamedSharding(mesh, P("data", "model")))}, SPEC))
res["differ"] = error(lambda: ssj.verify_replicas({"norm": params["norm"]} if ME == 0 else {"scale": params["scale"]}))
# and the job still works after them
res["after"] = ssj.verify_replicas(params, SPEC).ok

with open(os.path.join(OUT, f"p{ME}.json"), "w") as f:
    json.dump(res, f, indent=1)
jax.distributed.shutdown()
