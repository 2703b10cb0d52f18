"""Rank faults at every step of a distributed save, under real mpirun (docs/FORMAT.md 10,
"Writing"): `save-ranks`, `reshard` and `reshard --consolidate`, 2 and 3 processes.

In each trial one rank stops itself (SIGSTOP), is killed (SIGKILL) or sleeps past --timeout at
one step (the test-only hook SEEDSTORE_TEST_FAULT, TestFaultPoint in io/collective.h): lock,
plan, source-fingerprints, rank-files, master, prove, before-rename and after-rename (just
before and just after rank 0 renames the new master over PATH), done. Just before and after
the rename rank 0 and the last rank get every fault; at the other steps one fault per step,
rotating over ranks and faults: 112 trials. Each rank's exit code is recorded (SEEDSTORE_TEST_EXIT_FILE). After every
trial:
  * PATH passes `seedstore verify` and holds exactly the old or exactly the new model
    (fingerprints of every tensor);
  * every rank that exited says which: 0 if and only if PATH holds the new model; so does
    mpirun's exit code when it is 0;
  * the next trial's save (to the same PATH, the other model) is never refused for a lock its
    holder left: no one removes a lock file by hand.
Then one save without a fault leaves exactly its own files next to PATH. SEEDSTORE_FAULT_MATRIX=full
runs every (rank, fault) at every step (390 trials).
"""
import json
import os
import subprocess
import time

import pytest

from seedstore_testlib import BIN, need_binary  # noqa: F401 (an autouse fixture)
from seedstore_testlib import run_with_fault
from seedstore_testlib import verified_fingerprints as fingerprints

TIMEOUT = 1.0  # --timeout of the saves: stops and long sleeps cost this much each
STEPS = ["lock", "plan", "source-fingerprints", "rank-files", "master", "prove",
         "before-rename", "after-rename", "done"]
COMMIT_STEPS = {"before-rename", "after-rename"}
ACTIONS = ["stop", "kill", f"sleep={1.5 * TIMEOUT}"]
SPEC = {"seedstore": 1, "seed": 7, "generator": "threefry", "tensors": [
    {"name": "embed", "shape": [64, 32], "dtype": "bfloat16", "init": {"dist": "normal", "scale": 0.02}},
    {"name": "layers.0.wq", "shape": [32, 32], "dtype": "float32", "init": {"dist": "normal"}},
    {"name": "layers.0.w1", "shape": [33, 17], "dtype": "float32", "init": {"dist": "uniform"}},
    {"name": "flat.norm", "shape": [37], "dtype": "float32", "init": {"dist": "truncated_normal"}},
    {"name": "bias", "shape": [32], "dtype": "float16", "init": {"dist": "normal"}}]}


def mesh(world):
    tp = 2 if world % 2 == 0 else 1
    return {"mesh": {"axes": ["data", "tensor"], "shape": [world // tp, tp]},
            "placements": [{"match": "embed", "spec": [["data", "tensor"], None]},
                           {"match": "layers.*.wq", "spec": [None, "tensor"]},
                           {"match": "layers.*.w1", "dtensor": ["Shard(1)", "Shard(0)"]},
                           {"match": "flat.*", "flat": ["data"]}]}


def mpirun(np_):
    return ["mpirun", "-np", str(np_), "--oversubscribe"]


def trials():
    """(command, processes, step, rank, fault): the matrix, or a rotation over it."""
    full = os.environ.get("SEEDSTORE_FAULT_MATRIX") == "full"
    out, k = [], 0
    for cmd in ("save-ranks", "reshard", "consolidate"):
        for np_ in (2, 3):
            for step in STEPS:
                if cmd == "consolidate" and step == "rank-files":
                    continue  # one writer, no rank files
                if full:
                    out += [(cmd, np_, step, r, a) for r in range(np_) for a in ACTIONS]
                elif step in COMMIT_STEPS:  # rank 0, and the last rank (rank 1 when 2)
                    out += [(cmd, np_, step, r, a) for r in (0, np_ - 1) for a in ACTIONS]
                else:
                    out.append((cmd, np_, step, k % np_, ACTIONS[k % len(ACTIONS)]))
                    k += 1
    return out


def test_every_fault_at_every_step_leaves_the_old_or_the_new_save(tmp_path):
    if subprocess.run(["sh", "-c", "command -v mpirun"], capture_output=True).returncode != 0:
        pytest.skip("mpirun is not installed: the fault matrix needs a real MPI launcher")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    specs, stores = {}, {}
    for name, seed in (("a", 7), ("b", 8)):
        spec = dict(SPEC, seed=seed)
        specs[name] = tmp_path / f"{name}.json"
        specs[name].write_text(json.dumps(spec))
    layouts = {w: tmp_path / f"l{w}.json" for w in (2, 3)}
    for w, p in layouts.items():
        p.write_text(json.dumps(mesh(w)))
    for name in ("a", "b"):  # dense stores: what reshard and --consolidate read
        dist, store = tmp_path / f"{name}_dist.h5", tmp_path / f"{name}.h5"
        for cmd in ([BIN, "reshard", specs[name], "--layout", layouts[2], "-o", dist, "-q"],
                    [BIN, "reshard", dist, "--consolidate", "-o", store, "-q"]):
            subprocess.run(cmd, check=True, capture_output=True)
        stores[name] = store
    fp = {name: fingerprints(stores[name]) for name in ("a", "b")}
    assert fp["a"] != fp["b"]
    ckpt = tmp_path / "ckpt" / "model.h5"
    ckpt.parent.mkdir()
    subprocess.run([BIN, "reshard", stores["a"], "--layout", layouts[3], "-o", ckpt, "-q"], check=True)
    current = "a"
    rc_file = tmp_path / "rc"
    counts = {"old": 0, "new": 0}
    faults_hit = 0
    t0 = time.monotonic()
    matrix = trials()
    for n, (cmd, np_, step, rank, action) in enumerate(matrix):
        new = "b" if current == "a" else "a"
        if cmd == "save-ranks":
            args = ["save-ranks", specs[new], "--layout", layouts[np_]]
        elif cmd == "reshard":
            args = ["reshard", stores[new], "--layout", layouts[3]]
        else:
            args = ["reshard", stores[new], "--consolidate"]
        for f in tmp_path.glob("rc.*"):
            f.unlink()
        fault = f"{rank}:{step}:{action}"
        rc, err, timed_out = run_with_fault(
            mpirun(np_) + [BIN] + [str(a) for a in args] +
            ["-o", str(ckpt), "-q", "--threads", "1", "--timeout", str(TIMEOUT)],
            dict(env, SEEDSTORE_TEST_EXIT_FILE=str(rc_file)), fault, 60)
        assert not timed_out, f"trial {n} ({cmd} -np {np_}, {fault}): mpirun did not end in 60 s\n{err}"
        faults_hit += "test fault" in err
        what = f"trial {n} ({cmd} -np {np_}, fault {fault}): mpirun rc {rc}\n{err}"
        assert "writer-lock" not in err, what  # no lock a gone writer left blocks a save
        got = fingerprints(ckpt)  # verify passes
        assert got in (fp[current], fp[new]), f"{what}\nneither the old nor the new model"
        outcome = "new" if got == fp[new] else "old"
        codes = {f.name: int(f.read_text()) for f in tmp_path.glob("rc.*") if f.suffix[1:].isdigit()}
        for r, code in codes.items():
            assert (code == 0) == (outcome == "new"), f"{what}\n{r} exited {code}, the save is the {outcome} one"
        if rc == 0:
            assert outcome == "new", what
        counts[outcome] += 1
        current = new if outcome == "new" else current
        if n % 20 == 19:
            print(f"\n{n + 1}/{len(matrix)} trials, {time.monotonic() - t0:.0f} s, {counts}", flush=True)
    # One save without a fault leaves exactly its master and rank files: what every
    # interrupted save left, and the save it replaced, are gone.
    new = "b" if current == "a" else "a"
    p = subprocess.run(mpirun(3) + [BIN, "reshard", str(stores[new]), "--layout", str(layouts[3]),
                                    "-o", str(ckpt), "-q", "--timeout", "30"],
                       env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert fingerprints(ckpt) == fp[new]
    left = sorted(f for f in os.listdir(ckpt.parent) if f != "model.h5")
    ids = {f.split(".")[2] for f in left}
    assert len(ids) == 1 and left == [f"model.h5.{next(iter(ids))}.rank{r}.h5" for r in range(3)], left
    print(f"\nfault matrix: {len(matrix)} trials in {time.monotonic() - t0:.0f} s, {faults_hit} faults "
          f"hit; outcomes {counts}")
    assert counts["old"] > 0 and counts["new"] > 0
    assert faults_hit >= len(matrix) * 0.9, "most trials must reach their fault's step"
