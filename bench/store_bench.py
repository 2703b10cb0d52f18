"""Store benchmark, one run, side by side (results in docs/PERF.md "Store").

1. build/bench/seedstore_store_bench: dense write/read through the HDF5 store (zstd level 1,
   2 threads, checksums and fingerprints included, atomic commit with fsync) vs the same bytes
   as one raw file (write + fsync, read hot from the page cache and cold after
   POSIX_FADV_DONTNEED), and compression ratios, for four kinds of data.
2. The `safetensors` Python package writing (serialize_file + fsync) and reading (safe_open,
   numpy) the same tensors (bf16 tensors are passed as U16: same bytes, numpy has no bf16).
3. A lazy Llama-3-70B store: `seedstore init` time and file size (with and without
   fingerprints), `seedstore inspect` wall time (median of 7 process runs).

Usage: build/venv/bin/python bench/store_bench.py [--build build] [--mib 256] [--no-70b-fingerprints]
Prints a markdown table and the raw JSON.

--hot-reads: only hot (page-cache) reads, against their floors, in one run: the store with
shuffle + zstd against zstd's decoder alone on the same chunks in memory (into a destination of
all the decoded bytes, as a read leaves them, and into one reused scratch buffer), and the store with
--codec none against a raw `read` of the same bytes (medians of --reps each).
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time

import numpy as np


def st_bench(mib, reps, tmp):
    from safetensors import TensorSpec, safe_open, serialize_file
    out = []
    rng = np.random.default_rng(7)
    for kind, dt, npt in [("bf16-normal", "U16", np.uint16), ("f32-normal", "F32", np.float32)]:
        per = 4096 * 4096 * np.dtype(npt).itemsize
        n = max(1, (mib << 20) // per)
        arrays = {}
        for k in range(n):
            x = (rng.standard_normal((4096, 4096), dtype=np.float32) * 0.02)
            if npt == np.uint16:  # round to bfloat16 (nearest even), keep the bits
                u = x.view(np.uint32)
                x = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
            arrays[f"layers.{k}.weight"] = np.ascontiguousarray(x)
        total = sum(a.nbytes for a in arrays.values())
        path = os.path.join(tmp, "bench.safetensors")
        w, r = [], []
        for _ in range(reps):
            t0 = time.perf_counter()
            specs = {k: TensorSpec(dtype=v.dtype.name, shape=v.shape, data_ptr=v.ctypes.data,
                                   data_len=v.nbytes) for k, v in arrays.items()}
            serialize_file(specs, path)
            fd = os.open(path, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
            w.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            with safe_open(path, framework="np") as f:
                got = {k: f.get_tensor(k) for k in f.keys()}
            r.append(time.perf_counter() - t0)
            assert all(got[k].tobytes() == arrays[k].tobytes() for k in arrays)
        os.unlink(path)
        out.append({"kind": kind, "bytes": total,
                    "st_write_gbs": total / 1e9 / statistics.median(w),
                    "st_read_gbs": total / 1e9 / statistics.median(r)})
    return out


def lazy70b(binary, tmp, with_fp):
    res = {}
    path = os.path.join(tmp, "llama70b.h5")
    runs = [("no_fp", ["--no-fingerprints"])] + ([("fp", [])] if with_fp else [])
    for tag, extra in runs:
        t0 = time.perf_counter()
        subprocess.run([binary, "init", "--preset", "llama-3-70b", "-o", path, *extra],
                       check=True, capture_output=True)
        res[f"init_s_{tag}"] = time.perf_counter() - t0
        res[f"file_bytes_{tag}"] = os.path.getsize(path)
        ts = []
        for _ in range(7):
            t0 = time.perf_counter()
            subprocess.run([binary, "inspect", path, "--json"], check=True, capture_output=True)
            ts.append(time.perf_counter() - t0)
        res[f"inspect_ms_{tag}"] = statistics.median(ts) * 1e3
    return res


def store_bench(a, tmp, codec, kinds=None):
    cmd = [os.path.join(a.build, "bench", "seedstore_store_bench"), "--mib", str(a.mib), "--reps",
           str(a.reps), "--dir", tmp, "--fresh", "1" if a.fresh else "0", "--codec", codec]
    if kinds:
        cmd += ["--kind", kinds]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def hot_reads(a):
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR", "/tmp")) as tmp:
        z = {r["kind"]: r for r in store_bench(a, tmp, "zstd")["results"]}
        n = {r["kind"]: r for r in store_bench(a, tmp, "none")["results"]}
    print(f"| data ({a.mib} MiB) | zstd: store hot GB/s | zstd decode into the destination | "
          f"ratio | zstd decode into scratch | ratio | none: store hot GB/s | raw read hot | ratio | "
          f"none: file / data |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for k, r in z.items():
        m = n[k]
        print(f"| {k} | {r['store_read_gbs']:.2f} | {r['zstd_decode_floor_gbs']:.2f} | "
              f"**{r['store_read_gbs'] / r['zstd_decode_floor_gbs']:.2f}** | "
              f"{r['zstd_decode_scratch_gbs']:.2f} | "
              f"**{r['store_read_gbs'] / r['zstd_decode_scratch_gbs']:.2f}** | "
              f"{m['store_read_gbs']:.2f} | {m['raw_read_gbs']:.2f} | "
              f"**{m['store_read_gbs'] / m['raw_read_gbs']:.2f}** | {1 / m['ratio']:.4f} |")
    print(json.dumps({"zstd": z, "none": n}))


def main():
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--build", default=os.path.join(here, "build"))
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--no-70b-fingerprints", action="store_true")
    ap.add_argument("--fresh", action="store_true",
                    help="write to new paths (no previous file to free; see store_bench.cc)")
    ap.add_argument("--hot-reads", action="store_true", help="hot reads against their floors only")
    a = ap.parse_args()
    if a.hot_reads:
        return hot_reads(a)
    binary = os.path.join(a.build, "tools", "seedstore")
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR", "/tmp")) as tmp:
        p = subprocess.run([os.path.join(a.build, "bench", "seedstore_store_bench"), "--mib",
                            str(a.mib), "--reps", str(a.reps), "--dir", tmp,
                            "--fresh", "1" if a.fresh else "0"],
                           check=True, capture_output=True, text=True)
        store = json.loads(p.stdout)
        st = {r["kind"]: r for r in st_bench(a.mib, a.reps, tmp)}
        lazy = lazy70b(binary, tmp, not a.no_70b_fingerprints)
    print(f"| data ({a.mib} MiB) | ratio | store write GB/s (per CPU-s) | raw write | "
          f"safetensors write | store read hot (per CPU-s) | raw read hot | zstd decode alone | "
          f"store read cold | raw read cold | safetensors read |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in store["results"]:
        s = st.get(r["kind"], {})
        f = lambda k: f"{s[k]:.2f}" if k in s else "–"  # noqa: E731
        print(f"| {r['kind']} | {r['ratio']:.3f} | {r['store_write_gbs']:.2f} "
              f"({r['store_write_gb_per_cpus']:.2f}) | {r['raw_write_gbs']:.2f} | "
              f"{f('st_write_gbs')} | {r['store_read_gbs']:.2f} ({r['store_read_gb_per_cpus']:.2f}) | "
              f"{r['raw_read_gbs']:.2f} | {r['zstd_decode_floor_gbs']:.2f} | {r['store_read_cold_gbs']:.2f} | "
              f"{r['raw_read_cold_gbs']:.2f} | {f('st_read_gbs')} |")
    print()
    print("lazy Llama-3-70B:", json.dumps(lazy))
    print(json.dumps({"store": store, "safetensors": st, "lazy70b": lazy}))


if __name__ == "__main__":
    main()
