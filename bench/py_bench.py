"""The Python package's costs (docs/PERF.md, "Python package"):

  1. materialize into torch CPU tensors and numpy arrays through DLPack vs the C++ path alone
     (Catalog::Read into a buffer the C++ side owns), the same regions, medians of --reps;
  2. Llama-3-8B's rank-0 shards under FSDP = 8 (DTensor Shard(0) over 8 ranks, bf16): filled
     by seedstore (what init_module_ does on that rank: the library's region, materialized in
     place) vs torch's meta -> to_empty -> nn.init.normal_ on the same shard shapes; peak RSS
     before and after, against the shards' own bytes (no extra copy);
  3. with --verify N: verify_replicas under torchrun --nproc_per_node N (gloo) on a model of
     many small parameters, seconds per parameter.

Run: PYTHONPATH=build/python build/venv/bin/python bench/py_bench.py [--reps 5] [--threads 0]
     [--skip-8b] [--verify 4]
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

import seedstore
import seedstore.torch as sst


def rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def median_time(fn, reps):
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def bench_materialize(reps, threads):
    rows = []
    for dtype, dist in (("float32", "normal"), ("bfloat16", "normal"), ("float32", "uniform")):
        shape = [4096, 4096]
        cat = seedstore.open({"seedstore": 1, "tensors": [
            {"name": "w", "shape": shape, "dtype": dtype, "init": {"dist": dist}}]})
        region = cat.region("w")
        tt = torch.empty(shape, dtype=torch.float32 if dtype == "float32" else torch.bfloat16)
        arr = np.empty(shape, dtype=seedstore._numpy_dtype(dtype))
        # interleaved, one of each per round, so that the machine's load falls on all three alike
        c, a, b = [], [], []
        for _ in range(reps):
            c.append(cat._c._time_read("w", region, threads, 1)[0])
            a.append(median_time(lambda: cat.materialize("w", tt, region, threads=threads), 1))
            b.append(median_time(lambda: cat.materialize("w", arr, region, threads=threads), 1))
        cpp, t_torch, t_np = statistics.median(c), statistics.median(a), statistics.median(b)
        n = region.count
        rows.append({"case": f"{dtype} {dist} {shape}", "elements": n,
                     "cpp_s": cpp, "torch_s": t_torch, "numpy_s": t_np,
                     "torch_vs_cpp": cpp / t_torch, "numpy_vs_cpp": cpp / t_np,
                     "cpp_Melem_s": n / cpp / 1e6})
    # the fixed cost of one call (DLPack import, checks, GIL release): a one-element region
    cat = seedstore.open({"seedstore": 1, "tensors": [
        {"name": "w", "shape": [4096, 4096], "dtype": "float32", "init": {"dist": "normal"}}]})
    one = cat.region("w", [(7, 8), (9, 10)])
    tt, arr = torch.empty(1, 1), np.empty((1, 1), np.float32)
    for name, out in (("torch", tt), ("numpy", arr)):
        calls = 2000
        t = median_time(lambda: [cat.materialize("w", out, one, threads=1) for _ in range(calls)], 5)
        cpp = statistics.median(cat._c._time_read("w", one, 1, calls))
        rows.append({"case": f"one-element call overhead, {name}", "python_call_us": 1e6 * t / calls,
                     "cpp_read_us": 1e6 * cpp})
    return rows


def bench_llama8b(reps, threads):
    d = tempfile.mkdtemp(prefix="seedstore-pybench-")
    store = os.path.join(d, "llama8b.h5")
    subprocess.run([os.environ.get("SEEDSTORE_BIN", "build/tools/seedstore"), "init", "--preset", "llama-3-8b",
                    "--no-fingerprints", "-o", store], check=True, stdout=subprocess.DEVNULL)
    cat = seedstore.open(store)
    layout = seedstore.Layout({"mesh": {"axes": ["dp"], "shape": [8]},
                               "placements": [{"match": "*", "dtensor": ["Shard(0)"]}]})
    dtypes = {"bfloat16": torch.bfloat16, "float32": torch.float32}
    shards = []
    for t in cat.tensors:
        r = layout.shard(t.name, t.shape, 0).region
        shards.append((t, r))
    nbytes = sum(r.count * (2 if t.dtype == "bfloat16" else 4) for t, r in shards)
    rss0 = rss_mb()
    tensors = [torch.empty(tuple(r.local_shape), dtype=dtypes[t.dtype]) for t, r in shards]
    for x in tensors:
        x.zero_()  # touch: the shards' own memory
    rss1 = rss_mb()

    def seed_fill():
        for (t, r), x in zip(shards, tensors):
            cat.materialize(t.name, x, r, threads=threads)

    t_seed = median_time(seed_fill, reps)
    rss2 = rss_mb()
    del tensors

    def torch_init():
        with torch.device("meta"):
            ps = [torch.nn.Parameter(torch.empty(tuple(r.local_shape), dtype=dtypes[t.dtype])) for t, r in shards]
        m = torch.nn.ParameterList(ps).to_empty(device="cpu")
        with torch.no_grad():
            for (t, r), p in zip(shards, m):
                if t.init and t.init["dist"] == "normal":
                    torch.nn.init.normal_(p, mean=0.0, std=t.init.get("scale", 1.0))
                else:
                    torch.nn.init.ones_(p)
        return m

    t_torch = median_time(torch_init, reps)
    return {"tensors": len(shards), "shard_elements": sum(r.count for _, r in shards),
            "shard_bytes": nbytes, "seedstore_s": t_seed, "torch_meta_to_empty_normal_s": t_torch,
            "seedstore_vs_torch": t_torch / t_seed, "rss_before_mb": rss0,
            "rss_after_alloc_mb": rss1, "rss_after_fill_mb": rss2,
            "rss_growth_during_fill_mb": rss2 - rss1, "threads": torch.get_num_threads()}


VERIFY_WORKER = r'''
import json, os, sys, time, torch, torch.distributed as dist
import seedstore.torch as sst
dist.init_process_group("gloo")
n = int(sys.argv[1])
m = torch.nn.ParameterList([torch.nn.Parameter(torch.zeros(64, 64)) for _ in range(n)])
spec = {"seedstore": 1, "tensors": [{"name": k, "shape": [64, 64], "dtype": "float32",
        "init": {"dist": "normal"}} for k, _ in m.named_parameters()]}
sst.init_module_(m, spec)
sst.verify_replicas(m)  # warm-up
ts = []
for _ in range(3):
    dist.barrier(); t0 = time.perf_counter(); sst.verify_replicas(m); ts.append(time.perf_counter() - t0)
ts2 = []
for _ in range(3):
    dist.barrier(); t0 = time.perf_counter(); sst.verify_replicas(m, spec); ts2.append(time.perf_counter() - t0)
if dist.get_rank() == 0:
    print(json.dumps({"params": n, "verify_s": sorted(ts)[1], "verify_with_source_s": sorted(ts2)[1]}))
dist.destroy_process_group()
'''


def bench_verify(nproc):
    rows = []
    with tempfile.TemporaryDirectory() as d:
        w = os.path.join(d, "w.py")
        with open(w, "w") as f:
            f.write(VERIFY_WORKER)
        for n in (10, 100, 400):
            p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                                str(nproc), w, str(n)], capture_output=True, text=True, check=True,
                               env=dict(os.environ, OMP_NUM_THREADS="1"))
            r = json.loads([l for l in p.stdout.splitlines() if l.startswith("{")][-1])
            r["per_param_ms"] = 1e3 * r["verify_s"] / n
            r["ranks"] = nproc
            rows.append(r)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--skip-8b", action="store_true")
    ap.add_argument("--verify", type=int, default=0)
    a = ap.parse_args()
    out = {"cpu_count": os.cpu_count(), "materialize": bench_materialize(a.reps, a.threads)}
    if not a.skip_8b:
        out["llama8b_fsdp8_rank0"] = bench_llama8b(max(1, a.reps // 2), a.threads)
    if a.verify:
        out["verify_replicas"] = bench_verify(a.verify)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
