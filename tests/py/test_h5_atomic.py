"""Atomic writes (invariant I5): kill -9 the writer at random moments during a large write.

A checkpoint A is saved at PATH. Then, 24 times, a writer starts saving checkpoint B (or A
again) at the same PATH and is killed with SIGKILL after a random delay spread over the
whole write. After every kill PATH must hold a complete checkpoint that `seedstore verify`
accepts and whose tensors are exactly A's or exactly B's -- never a mix, never a broken
file. Stray temporaries ("PATH.tmp-<host>-<pid>-<n>") of the killed writers may remain
between trials; they never replace PATH, and the next successful write to PATH removes them
(their writers are dead: io/atomic_file.h), so none remains at the end.
"""
import os
import random
import signal
import subprocess
import time

import pytest

pytest.importorskip("ml_dtypes")
from seedstore_testlib import BIN, need_binary  # noqa: E402,F401 (an autouse fixture)
from seedstore_testlib import verified_fingerprints as fingerprints  # noqa: E402
from seedstore_testlib import write_bf16_safetensors  # noqa: E402

TRIALS = 24


def test_kill9_during_write_never_damages_the_checkpoint(tmp_path):
    a_src, b_src = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    for path, seed in ((a_src, 1), (b_src, 2)):
        write_bf16_safetensors(path, seed, [(1024, 4096)] * 12)  # 96 MiB
    ckpt = tmp_path / "ckpt.h5"
    t0 = time.monotonic()
    subprocess.run([BIN, "import", a_src, "-o", ckpt, "--threads", "2"], check=True,
                   capture_output=True)
    full = time.monotonic() - t0
    fp_a = fingerprints(ckpt)
    subprocess.run([BIN, "import", b_src, "-o", tmp_path / "b.h5"], check=True,
                   capture_output=True)
    fp_b = fingerprints(tmp_path / "b.h5")
    assert fp_a != fp_b
    rng = random.Random(1234)
    outcomes = {}
    killed = 0
    previous = fp_a
    for trial in range(TRIALS):
        src, target = (b_src, fp_b) if previous == fp_a else (a_src, fp_a)
        proc = subprocess.Popen([BIN, "import", src, "-o", ckpt, "--threads", "2"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.0, full * 1.1))
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            killed += 1
        proc.wait()
        fp = fingerprints(ckpt)
        assert fp in (previous, target), f"trial {trial}: checkpoint is neither old nor new"
        outcomes["old" if fp == previous else "new"] = outcomes.get("old" if fp == previous else "new", 0) + 1
        previous = fp
    # Most kills must have landed mid-write for the test to mean anything.
    assert killed >= TRIALS // 2, f"only {killed} of {TRIALS} writers were killed mid-write"
    strays = [f for f in os.listdir(tmp_path) if ".tmp-" in f]
    # One more write that runs to completion removes every stale temporary of PATH.
    src, target = (b_src, fp_b) if previous == fp_a else (a_src, fp_a)
    subprocess.run([BIN, "import", src, "-o", ckpt, "--threads", "2"], check=True,
                   capture_output=True)
    assert fingerprints(ckpt) == target
    left = [f for f in os.listdir(tmp_path) if ".tmp-" in f]
    print(f"\nfull write {full:.2f} s; {killed}/{TRIALS} killed mid-write; "
          f"outcomes {outcomes}; {len(strays)} stray temporaries, {len(left)} after the next write")
    assert left == [], f"stale temporaries survived the next successful write: {left}"
