"""Atomic distributed saves (invariant I5): kill -9 `seedstore reshard` at random moments.

A distributed save A (4 ranks) is at PATH. Then, 20 times, one process reshards model B (or A
again) to PATH under another layout (3 or 4 ranks, uneven pieces included) and is killed with
SIGKILL after a random delay: half of them spread over the whole save (rank files, master,
rename, removal of the replaced save's rank files), half aimed at the master's writing (when
its temporary exists, seen by watching the folder during one save, which also checks that a
save creates no file beyond those the cleanup rules remove: master, lock, rank files and
their temporaries). After every
kill, PATH must open, pass `seedstore verify` and hold exactly A's or exactly B's tensors --
never a mix, never a master whose rank files are gone.

A killed writer may leave its lock file PATH.lock; nobody holds it any more, so the next
writer takes it over (saying so) and succeeds: no manual removal. A writer that exits 0 has
replaced the save (it proves before it commits). At the end one save that runs to completion
must leave exactly its own master and rank files next to PATH: no temporaries, no pieces or
commit-protocol files of the killed saves or of the saves they replaced.
"""
import json
import os
import random
import re
import signal
import subprocess
import time

import numpy as np
import pytest

pytest.importorskip("ml_dtypes")
from seedstore_testlib import BIN, need_binary  # noqa: E402,F401 (an autouse fixture)
from seedstore_testlib import verified_fingerprints as fingerprints  # noqa: E402
from seedstore_testlib import write_bf16_safetensors  # noqa: E402

TRIALS = int(os.environ.get("SEEDSTORE_KILL_TRIALS", "20"))  # more by hand


def layout(path, data, tensor):
    with open(path, "w") as f:
        json.dump({"mesh": {"axes": ["data", "tensor"], "shape": [data, tensor]},
                   "placements": [{"match": "layers.*", "spec": ["data", "tensor"]},
                                  {"match": "norm", "spec": ["data"]}]}, f)


def reshard(src, lay, out):
    return [BIN, "reshard", str(src), "--layout", str(lay), "-o", str(out), "-q",
            "--threads", "2", "--timeout", "30"]


def master_window(cmd, ckpt):
    """How long one save takes, and when, after its start, its master's temporary exists
    (its writer is between creating it and renaming it over PATH): seen by watching the
    folder during that save."""
    # The master is written as "<PATH>.<id>.new" (then linked as "<PATH>.<id>.commit" and
    # renamed over PATH: docs/FORMAT.md 10, "Writing").
    staging = re.compile(re.escape(ckpt.name) + r"\.[0-9a-f]{8}\.(new|commit)")
    # The only names a save may create next to PATH: what the cleanup rules of
    # io/atomic_file.h and io/dist_store.h remove after a kill (a temporary of a temporary,
    # say, would stay forever).
    temp = r"\.tmp-[A-Za-z0-9._]+-[0-9]+-[0-9]+"
    allowed = re.compile(re.escape(ckpt.name) +
                         rf"(\.lock|\.[0-9a-f]{{8}}\.(rank[0-9]+\.h5({temp})?|new({temp})?|commit|veto))?")
    seen = set()
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    first = last = None
    while proc.poll() is None:
        names = os.listdir(ckpt.parent)
        seen.update(names)
        if any(staging.match(f) for f in names):
            last = time.monotonic() - t0
            first = last if first is None else first
    assert proc.wait() == 0
    full = time.monotonic() - t0
    odd = sorted(f for f in seen if not allowed.fullmatch(f))
    assert not odd, f"the save created files no cleanup rule covers: {odd}"
    if first is None:  # too brief for this poll on a busy machine: the save's last third
        return full, 0.66 * full, full
    return full, max(0.0, first - 0.005), last + 0.005


def test_kill9_during_distributed_save_never_damages_the_save(tmp_path):
    a_st, b_st = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    for path, seed in ((a_st, 1), (b_st, 2)):  # 32 MiB
        write_bf16_safetensors(path, seed, [(1024 + i, 2048) for i in range(8)],
                               lambda rng: {"norm": rng.standard_normal(2048).astype(np.float32)})
    a, b = tmp_path / "a.h5", tmp_path / "b.h5"
    for st, h5 in ((a_st, a), (b_st, b)):
        subprocess.run([BIN, "import", st, "-o", h5], check=True, capture_output=True)
    l4, l3 = tmp_path / "l4.json", tmp_path / "l3.json"
    layout(l4, 2, 2)
    layout(l3, 3, 1)
    ckpt = tmp_path / "ckpt" / "model.h5"
    ckpt.parent.mkdir()
    # How long a save takes, and when its master is written, for each source and layout.
    timing = {(src, lay): master_window(reshard(src, lay, ckpt), ckpt)
              for src in (b, a) for lay in (l3, l4)}
    fp_a, fp_b = fingerprints(ckpt), fingerprints(b)
    assert fp_a == fingerprints(a) and fp_a != fp_b
    rng = random.Random(4321)
    outcomes, killed, stale_locks = {}, 0, 0
    previous = fp_a
    for trial in range(TRIALS):
        src, target = (b, fp_b) if previous == fp_a else (a, fp_a)
        lay = l3 if trial % 2 == 0 else l4
        proc = subprocess.Popen(reshard(src, lay, ckpt), stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        # Half the kills anywhere in the save, half while the master is being written.
        full, m0, m1 = timing[(src, lay)]
        time.sleep(rng.uniform(0.0, full * 1.1) if trial % 4 < 2 else rng.uniform(m0, m1))
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            killed += 1
        else:  # done already: this machine is faster now than when timed; aim earlier next time
            timing[(src, lay)] = tuple(0.7 * t for t in timing[(src, lay)])
        _, err = proc.communicate()
        assert proc.returncode in (0, -signal.SIGKILL), f"trial {trial}: rc {proc.returncode}\n{err}"
        fp = fingerprints(ckpt)
        assert fp in (previous, target), f"trial {trial}: the save is neither the old nor the new one"
        if proc.returncode == 0:
            assert fp == target, f"trial {trial}: exit 0 but the save is the old one"
        outcome = "old" if fp == previous else "new"
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        previous = fp
        lock = str(ckpt) + ".lock"
        if os.path.exists(lock):  # left by the killed writer: the next trial's save takes it over
            stale_locks += 1
    assert killed >= TRIALS // 2, f"only {killed} of {TRIALS} writers were killed mid-save"
    strays = sorted(os.listdir(ckpt.parent))
    # One save that runs to completion removes everything the killed ones left.
    src, target = (b, fp_b) if previous == fp_a else (a, fp_a)
    p = subprocess.run(reshard(src, l3, ckpt) + ["--json"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert fingerprints(ckpt) == target
    # Exactly the new master and its 3 rank files, of one save id (io/dist_store.h).
    pieces = [f for f in os.listdir(ckpt.parent) if f != "model.h5"]
    ids = {f.split(".")[2] for f in pieces}
    assert len(ids) == 1 and sorted(pieces) == [f"model.h5.{next(iter(ids))}.rank{r}.h5"
                                                for r in range(3)], f"left behind: {pieces}"
    left = sorted(os.listdir(ckpt.parent))
    print(f"\nsaves {min(t[0] for t in timing.values()):.2f}-{max(t[0] for t in timing.values()):.2f} s; {killed}/{TRIALS} killed mid-save; outcomes {outcomes}; "
          f"{stale_locks} stale locks; {len(strays)} files before the last save, {len(left)} after")
