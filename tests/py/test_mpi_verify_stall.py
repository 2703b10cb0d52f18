"""verify-ranks names the rank that stalled, and only it (io/collective.h, "Fault handling").

Under real mpirun (3 ranks), one rank stops (SIGSTOP, raised from a thread of its own after a
seeded random delay, so at whatever it is doing then: fingerprinting, before a collective or
inside one; SEEDSTORE_TEST_FAULT "stopafter") -- rank 0 in half the runs, rank 2 in the other
half. Every run must end within the timeout plus a margin with exit 5, and the ranks named as
hung ("rank R did not reach step ...", "rank R reached step ... and then stopped responding")
must be exactly the stopped one: a stopped rank 0 is named (by rank 1) every time, and a rank
that merely waited for the stalled one is never blamed.
"""
import os
import random
import re
import subprocess
import time

import pytest

from seedstore_testlib import BIN, need_binary  # noqa: F401 (an autouse fixture)
from seedstore_testlib import run_with_fault

RUNS = int(os.environ.get("SEEDSTORE_STALL_RUNS", "12"))
SPEC = """{"seedstore": 1, "seed": 7, "generator": "threefry", "tensors": [
 {"name": "embed", "shape": [24000, 1024], "dtype": "bfloat16", "init": {"dist": "normal", "scale": 0.02}},
 {"name": "layers.0.wq", "shape": [1024, 1024], "dtype": "float32", "init": {"dist": "normal"}},
 {"name": "layers.0.w1", "shape": [1024, 1024], "dtype": "float32", "init": {"dist": "uniform"}},
 {"name": "bias", "shape": [32], "dtype": "float16", "init": {"dist": "normal"}}]}"""
LAYOUT = """{"mesh": {"axes": ["data"], "shape": [3]},
 "placements": [{"match": "embed", "spec": ["data", null]}, {"match": "layers.*", "spec": [null, "data"]}]}"""
BLAME = re.compile(r"(?:IO_ERROR: |; )ranks? ([0-9, ]+) (?:did not reach step|reached step)")


def test_a_stopped_rank_is_named_and_no_other(tmp_path):
    if subprocess.run(["sh", "-c", "command -v mpirun"], capture_output=True).returncode != 0:
        pytest.skip("mpirun is not installed: this test needs a real MPI launcher")
    spec, layout = tmp_path / "spec.json", tmp_path / "layout.json"
    spec.write_text(SPEC)
    layout.write_text(LAYOUT)
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    cmd = ["mpirun", "-np", "3", "--oversubscribe", BIN, "verify-ranks", str(spec), "--layout",
           str(layout), "--timeout", "1", "--threads", "1"]
    # The stop must land inside the job: a rank stopped after its last step leaves nothing to
    # name (the others' MPI_Finalize ends at the timeout: test_mpi_end_stall.py). So the delays are drawn
    # within 60% of the fastest of three clean runs of the same job on this machine: a run
    # under a busy suite takes longer than one on a quiet machine, and a window taken from a
    # slow clean run would let a stop in a faster run land after the job's end.
    times = []
    for _ in range(3):
        clean = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
        assert clean.returncode == 0, clean.stderr
        times.append(float(re.search(r"time: ([0-9.]+) s", clean.stdout).group(1)))
    job_s = min(times)
    window = 0.6 * job_s
    rng = random.Random(2323)
    named = {0: 0, 2: 0}
    for run in range(RUNS):
        victim = 0 if run % 2 == 0 else 2
        delay = round(rng.uniform(0.0, window), 4)
        t0 = time.monotonic()
        rc, err, _ = run_with_fault(cmd, env, f"{victim}:verify:stopafter={delay}", 30)
        what = (f"run {run}: rank {victim} stopped after {delay} s (clean runs {times} s): "
                f"rc {rc}\n{err}")
        assert rc == 5, what
        assert time.monotonic() - t0 < 25, what
        blamed = {int(r) for m in BLAME.findall(err) for r in m.split(",")}
        assert blamed == {victim}, what
        named[victim] += 1
    print(f"\n{RUNS} runs (stops within {window:.3f} s of a {job_s:.3f} s job): rank 0 stopped and "
          f"named {named[0]} times, rank 2 {named[2]} times; nobody else blamed")
