"""A rank that stops after the job's last step does not hang the job (tools/cli.h, RunRanks).

Under real mpirun (3 ranks), one rank stops itself (SIGSTOP) at the test-only step "end"
(SEEDSTORE_TEST_FAULT, TestFaultPoint in io/collective.h): after the last barrier of
save-ranks, reshard or verify-ranks -- for a save, after the commit. MPI_Finalize waits for
every rank and has no deadline, so without a bound the other ranks and mpirun would wait for
the stopped one forever. Each trial asserts:
  * mpirun ends within --timeout plus a margin, and the stopped process is gone by then
    (OpenMPI's mpirun sends it SIGCONT and SIGTERM when a rank exits without MPI_Finalize);
  * every other rank says, by name, that MPI_Finalize did not finish, what is true of the job
    ("the save 'P' is committed"), and the exit code it ends with; and it ends with the
    command's true code (SEEDSTORE_TEST_EXIT_FILE): 0 for a committed save, the mismatch
    code for a verify-ranks that found a flipped bit;
  * mpirun's exit code is that code when it is nonzero; when it is 0, mpirun reports 1 (OpenMPI
    calls a rank's exit without MPI_Finalize improper whatever its status);
  * P verifies and holds the new model (the fingerprints of a clean save of it).
"""
import json
import os
import subprocess
import time

import pytest

from seedstore_testlib import BIN, need_binary  # noqa: F401 (an autouse fixture)
from seedstore_testlib import run_with_fault
from seedstore_testlib import verified_fingerprints as fingerprints

TIMEOUT = 2.0  # --timeout: the watchdog's bound on MPI_Finalize
MARGIN = 20.0  # mpirun's start and teardown on a loaded 2-core machine
SPEC = {"seedstore": 1, "seed": 7, "generator": "threefry", "tensors": [
    {"name": "embed", "shape": [64, 32], "dtype": "bfloat16", "init": {"dist": "normal", "scale": 0.02}},
    {"name": "layers.0.w1", "shape": [33, 17], "dtype": "float32", "init": {"dist": "uniform"}},
    {"name": "bias", "shape": [37], "dtype": "float16", "init": {"dist": "normal"}}]}
LAYOUT = {"mesh": {"axes": ["data"], "shape": [3]},
          "placements": [{"match": "embed", "spec": ["data", None]},
                         {"match": "layers.*", "spec": [None, "data"]}]}
MISMATCH = 7  # exit code of kMismatch (verify-ranks found a flipped bit): 1 + Code::kMismatch


@pytest.mark.parametrize("cmd,victim", [("save-ranks", 0), ("reshard", 0), ("save-ranks", 2),
                                        ("verify-ranks", 0), ("verify-flip", 2)])
def test_a_rank_stopped_after_the_last_step_does_not_hang_the_job(tmp_path, cmd, victim):
    if subprocess.run(["sh", "-c", "command -v mpirun"], capture_output=True).returncode != 0:
        pytest.skip("mpirun is not installed: this test needs a real MPI launcher")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    old, new, layout = tmp_path / "old.json", tmp_path / "new.json", tmp_path / "layout.json"
    old.write_text(json.dumps(SPEC))
    new.write_text(json.dumps(dict(SPEC, seed=8)))
    layout.write_text(json.dumps(LAYOUT))
    ckpt, ref = tmp_path / "model.h5", tmp_path / "ref.h5"
    for src, out in ((old, ckpt), (new, ref)):
        subprocess.run([BIN, "reshard", str(src), "--layout", str(layout), "-o", str(out), "-q"],
                       check=True, capture_output=True)
    expected = fingerprints(ref)
    assert fingerprints(ckpt) != expected
    if cmd in ("save-ranks", "reshard"):
        args, code = [cmd, str(new), "--layout", str(layout), "-o", str(ckpt), "-q"], 0
        says = f"the save '{ckpt}' is committed"
    else:
        args, code = ["verify-ranks", str(new), "--layout", str(layout)], 0
        if cmd == "verify-flip":
            args, code = args + ["--simulate", "flip", "--simulate-rank", "1"], MISMATCH
        says = "rank 0 has reported the verdict"
    rc_file = tmp_path / "rc"
    t0 = time.monotonic()
    left = []
    rc, err, hung = run_with_fault(
        ["mpirun", "-np", "3", "--oversubscribe", BIN] + args +
        ["--threads", "1", "--timeout", str(TIMEOUT)],
        dict(env, SEEDSTORE_TEST_EXIT_FILE=str(rc_file)), f"{victim}:end:stop", TIMEOUT + MARGIN,
        left_behind=left)
    took = time.monotonic() - t0
    what = f"{cmd}, rank {victim} stopped at 'end': mpirun rc {rc} after {took:.1f} s\n{err}"
    assert not hung, f"mpirun did not end within {TIMEOUT + MARGIN} s: " + what
    assert "test fault stop at step 'end'" in err, what  # the stop happened
    assert not left, "mpirun ended but left the stopped rank behind: " + what
    others = [r for r in range(3) if r != victim]
    ended = [r for r in others if (
        f"rank {r}: MPI_Finalize did not finish within {TIMEOUT:g} s: another rank stopped "
        f"or hung after the job's last step; {says}; rank {r} ends with exit code {code} "
        "without MPI_Finalize") in err]
    assert ended, "no rank ended by itself: " + what
    # The first rank to end that way makes mpirun kill the rest: on a loaded machine a rank whose
    # own timer ran out later can be killed before it says so (it records no exit code).
    if ended != others:
        assert "exiting improperly" in err, what
    codes = {int(f.suffix[1:]): int(f.read_text()) for f in tmp_path.glob("rc.*")
             if f.suffix[1:].isdigit()}
    assert codes and set(codes) <= set(others) and set(codes.values()) == {code}, (
        f"recorded exit codes {codes}: " + what)
    if ended == others:
        assert set(codes) == set(others), f"recorded exit codes {codes}: " + what
    assert rc == (code if code else 1), what
    if cmd in ("save-ranks", "reshard"):
        assert fingerprints(ckpt) == expected, what
