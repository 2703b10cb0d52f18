#!/usr/bin/env python3
"""Side-by-side CPU throughput: seedstore vs jax.random.normal (jitted) vs numpy Philox.

Runs build/bench/seedstore_bench and, in subprocesses on the same sizes, jax.random.normal
(jit, CPU, after warm-up, output blocked on) and numpy Generator(Philox).standard_normal(
dtype=float32, out=preallocated). Each is measured on one core (seedstore --threads 1; JAX and
numpy pinned with taskset to one CPU) and on all cores. Prints medians (elements/s) and the
ratios the targets in docs/PERF.md are judged on. "1 core" rates are elements per CPU-second of a
process pinned to / running one thread (immune to being descheduled on a shared machine);
"all cores" rates are elements per wall-clock second with every core in use.
  threefry normal >= 1.5x JAX,  philox normal >= 2x numpy Philox,  fingerprint >= 500 M/s/core.

Usage: build/venv/bin/python bench/compare.py [--n N] [--reps R] [--bench PATH] [--json OUT]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PEER = textwrap.dedent(r"""
    import json, statistics, sys, time
    which, n, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    out = {}
    def med(f):
        f(); f()  # warm-up (compilation, caches, page faults)
        ws, cs = [], []
        for _ in range(reps):
            c = time.process_time(); t = time.perf_counter(); f()
            ws.append(time.perf_counter() - t); cs.append(time.process_time() - c)
        return [statistics.median(ws), statistics.median(cs)]
    if which == "jax":
        import jax, jax.numpy as jnp
        jax.config.update("jax_platforms", "cpu")
        key = jax.random.key(0)
        for name, dt in (("float32", jnp.float32), ("bfloat16", jnp.bfloat16)):
            fn = jax.jit(lambda k, dt=dt: jax.random.normal(k, (n,), dt))
            out[name] = med(lambda: fn(key).block_until_ready())
    else:
        import numpy as np
        g = np.random.Generator(np.random.Philox(0))
        buf = np.empty(n, np.float32)
        out["float32"] = med(lambda: g.standard_normal(n, dtype=np.float32, out=buf))
    print(json.dumps(out))
""")


def run_peer(which, n, reps, pin):
    cmd = [sys.executable, "-c", PEER, which, str(n), str(reps)]
    if pin:
        cmd = ["taskset", "-c", "0"] + cmd
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1 << 24, help="elements per call (default 2^24)")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--bench", default=os.path.join(ROOT, "build", "bench", "seedstore_bench"))
    ap.add_argument("--json", help="also write all measurements here")
    a = ap.parse_args()

    ncpu = os.cpu_count() or 1
    r = subprocess.run([a.bench, "--n", str(a.n), "--reps", str(a.reps)], capture_output=True,
                       text=True, check=True)
    ours = {}
    isa = "?"
    for line in r.stdout.splitlines():
        d = json.loads(line)
        isa = d["isa"]
        if d["threads"] == 1:
            ours[(d["bench"], d["dtype"], "1")] = d["elems_per_cpu_s"]
        else:
            ours[(d["bench"], d["dtype"], "all")] = d["elems_per_s"]

    peers = {}
    for scope, pin in (("1", True), ("all", False)):
        for which in ("jax", "numpy"):
            for dt, (wall, cpu) in run_peer(which, a.n, a.reps, pin).items():
                peers[(which, dt, scope)] = a.n / (cpu if scope == "1" else wall)

    def fmt(x):
        return f"{x / 1e6:9.1f}" if x else "        -"

    print(f"n = {a.n}, reps = {a.reps} (medians), cpus = {ncpu}, seedstore isa = {isa}")
    print(f"{'what':<34}{'1 core M/s':>12}{'all cores M/s':>15}{'ratio 1c':>10}{'ratio all':>11}  target")
    rows = []

    def row(label, key_ours, key_peer, target, per_core_target=None):
        o1, oa = ours.get(key_ours + ("1",)), ours.get(key_ours + ("all",))
        if key_peer:
            p1, pa = peers.get(key_peer + ("1",)), peers.get(key_peer + ("all",))
            print(f"{'  ' + key_peer[0] + ' ' + key_peer[1]:<34}{fmt(p1)}{'':>3}{fmt(pa)}")
            r1 = o1 / p1 if o1 and p1 else None
            ra = oa / pa if oa and pa else None
            ok = r1 is not None and r1 >= target
            print(f"{'  seedstore ' + label:<34}{fmt(o1)}{'':>3}{fmt(oa)}"
                  f"{r1:>9.2f}x{ra:>10.2f}x  >= {target}x {'MET' if ok else 'NOT MET'}")
            rows.append(dict(what=label, ours_1=o1, ours_all=oa, peer_1=p1, peer_all=pa,
                             ratio_1=r1, ratio_all=ra, target=target, met=ok))
        else:
            ok = o1 is not None and o1 >= per_core_target
            print(f"{'  seedstore ' + label:<34}{fmt(o1)}{'':>3}{fmt(oa)}{'':>21}  >= "
                  f"{per_core_target / 1e6:.0f} M/s/core {'MET' if ok else 'NOT MET'}")
            rows.append(dict(what=label, ours_1=o1, ours_all=oa, target_per_core=per_core_target,
                             met=ok))

    print("threefry normal vs jax.random.normal (jit)")
    row("threefry normal float32", ("threefry_normal", "float32"), ("jax", "float32"), 1.5)
    row("threefry normal bfloat16", ("threefry_normal", "bfloat16"), ("jax", "bfloat16"), 1.5)
    print("philox normal vs numpy Generator(Philox).standard_normal(float32)")
    row("philox normal float32", ("philox_normal", "float32"), ("numpy", "float32"), 2.0)
    row("philox normal bfloat16", ("philox_normal", "bfloat16"), ("numpy", "float32"), 2.0)
    print("fingerprint (XXH3-128 per element, summed)")
    row("fingerprint float32", ("fingerprint", "float32"), None, None, 500e6)
    row("fingerprint bfloat16", ("fingerprint", "bfloat16"), None, None, 500e6)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(n=a.n, reps=a.reps, isa=isa, cpus=ncpu, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
