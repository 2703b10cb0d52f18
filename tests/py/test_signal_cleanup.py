"""Ctrl-C and SIGTERM mid-write (invariant I5): nothing left behind, nothing damaged.

A scheduler preempting a job sends SIGTERM (then SIGKILL after a grace period); a user
presses Ctrl-C. `seedstore` removes its uncommitted temporaries and a distributed save's
writer lock on SIGINT, SIGTERM, SIGHUP and SIGQUIT, then ends by that same signal
(io/atomic_file.h, InstallSignalCleanup). For a store write (`import`) and a distributed save
(`reshard --layout`), each signal sent twice at random moments mid-write: the process ends by
the signal; the checkpoint verifies with the old fingerprints (or the new ones, when the signal
came after the rename); the lock is never left; and the folder holds exactly the files it held
before. A split safetensors export (several files and an index) is all or nothing likewise. (A
file another thread creates by name just as the handler runs -- a temporary, HDF5 creating it
again -- is registered first and waited for: signal_cleanup::BeginChange. The last two tests
pin that moment, for a temporary and for the writer lock.)
"""
import hashlib
import json
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

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


def interrupt(cmd, folder, keep, rng, label, span):
    """Runs `cmd` to completion once (timing it), then 8 times, each signal in turn sent at a
    random moment in `span` (fractions of the full run; `keep` restores the previous
    checkpoint); returns how many were interrupted mid-write."""
    before = sorted(os.listdir(folder))
    t0 = time.monotonic()
    subprocess.run(cmd, check=True, capture_output=True)
    full = time.monotonic() - t0
    written = fingerprints(os.path.join(folder, "model.h5"))
    subprocess.run(keep, check=True, capture_output=True)  # the previous checkpoint again
    expected = fingerprints(os.path.join(folder, "model.h5"))
    files = sorted(os.listdir(folder))
    mid = clean = old = 0
    # Runs that finish before their signal count for nothing: go on (at most 6 rounds) until
    # every signal has interrupted two runs' worth on average.
    for k in range(6 * len(SIGNALS)):
        if mid >= 2 * len(SIGNALS):
            break
        sig = SIGNALS[k % len(SIGNALS)]
        # As from a terminal: a launcher or shell that ignores SIGINT/SIGQUIT would pass that on.
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                preexec_fn=lambda: [signal.signal(s, signal.SIG_DFL) for s in SIGNALS])
        time.sleep(rng.uniform(*span) * full)
        if proc.poll() is not None:  # finished first
            proc.communicate()
            subprocess.run(keep, check=True, capture_output=True)
            files = sorted(os.listdir(folder))
            continue
        proc.send_signal(sig)
        mid += 1
        _, err = proc.communicate()
        assert proc.returncode == -sig, f"{label}: {sig!r} -> rc {proc.returncode}\n{err}"
        # The old checkpoint, or the new one when the signal came after its rename.
        now = fingerprints(os.path.join(folder, "model.h5"))
        assert now in (expected, written), f"{label}: {sig!r}: neither old nor new"
        left = sorted(os.listdir(folder))
        assert not [f for f in left if f.endswith(".lock")], f"{label}: {sig!r} left the lock: {left}"
        if now == expected:
            old += 1
            clean += left == files
            extra = sorted(set(left) - set(files))
            assert not extra, f"{label}: {sig!r} left {extra}"
        if left != files:
            subprocess.run(keep, check=True, capture_output=True)
            files = sorted(os.listdir(folder))
            assert not [f for f in files if ".tmp-" in f], f"{label}: the next write left {files}"
            assert len({f.split(".")[2] for f in files if ".rank" in f}) <= 1, \
                f"{label}: pieces of two saves after the next write: {files}"
    assert mid >= len(SIGNALS), f"{label}: only {mid} runs were interrupted mid-write"
    assert 2 * old >= mid, f"{label}: only {old} of {mid} signals came before the rename"
    assert clean == old, f"{label}: only {clean} of {old} interrupted runs left nothing"
    print(f"\n{label}: write {full:.2f} s, {mid} of {2 * len(SIGNALS)} interrupted mid-write, "
          f"{old} before the rename: {clean} left nothing")
    return mid


def test_signals_mid_write_remove_temporaries_and_the_lock(tmp_path):
    a_st, b_st = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    for path, seed in ((a_st, 1), (b_st, 2)):
        write_bf16_safetensors(path, seed, [(1024, 4096)] * 8)  # 64 MiB
    out = tmp_path / "ckpt"
    out.mkdir()
    model = out / "model.h5"
    rng = random.Random(99)
    # A store write: import replaces model.h5.
    subprocess.run([BIN, "import", a_st, "-o", model], check=True, capture_output=True)
    interrupt([BIN, "import", b_st, "-o", model, "--threads", "2"], out,
              [BIN, "import", a_st, "-o", model], rng, "import", (0.1, 0.8))
    # A distributed save: rank files, master, lock.
    lay = tmp_path / "l4.json"
    lay.write_text(json.dumps({"mesh": {"axes": ["data", "tensor"], "shape": [2, 2]},
                               "placements": [{"match": "*", "spec": ["data", "tensor"]}]}))
    b_h5 = tmp_path / "b.h5"
    subprocess.run([BIN, "import", b_st, "-o", b_h5], check=True, capture_output=True)
    a_h5 = tmp_path / "a.h5"
    subprocess.run([BIN, "import", a_st, "-o", a_h5], check=True, capture_output=True)
    model.unlink()
    subprocess.run([BIN, "reshard", a_h5, "--layout", lay, "-o", model, "-q"], check=True,
                   capture_output=True)
    interrupt([BIN, "reshard", b_h5, "--layout", lay, "-o", model, "-q", "--threads", "2"], out,
              [BIN, "reshard", a_h5, "--layout", lay, "-o", model, "-q"], rng, "reshard",
              (0.05, 0.4))  # its proof (reading the save back) follows the rename


def signal_each_time(cmd, out, appeared, what):
    """Under the LD_PRELOAD shim (tests/py/slow_create.c), runs `cmd` once per signal and sends
    that signal as soon as appeared(files of `out`) holds; the process must end by it and leave
    `out` empty."""
    slow = os.environ.get("SEEDSTORE_SLOW_CREATE", "")
    if not os.path.exists(slow):
        pytest.skip(f"the shim is not built (SEEDSTORE_SLOW_CREATE={slow!r}; ctest sets it)")
    # (An ASan build wants its runtime first among the libraries; the shim may come first.)
    env = dict(os.environ, LD_PRELOAD=slow,
               ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0")
    for sig in SIGNALS:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                preexec_fn=lambda: [signal.signal(s, signal.SIG_DFL) for s in SIGNALS])
        deadline = time.monotonic() + 20
        while not appeared(os.listdir(out)):
            assert proc.poll() is None, f"{sig!r}: {cmd[1]} ended before its {what} appeared"
            assert time.monotonic() < deadline, f"{sig!r}: no {what} appeared in 20 s"
            time.sleep(0.002)
        proc.send_signal(sig)
        _, err = proc.communicate()
        assert proc.returncode == -sig, f"{sig!r} -> rc {proc.returncode}\n{err}"
        assert os.listdir(out) == [], f"{sig!r} left {os.listdir(out)}"


def test_a_signal_while_a_temporary_is_created_leaves_none(tmp_path):
    """The moment between a temporary's creation and its registration for removal, widened
    to 400 ms by an LD_PRELOAD shim (tests/py/slow_create.c): a signal sent as soon as import's
    temporary exists -- each signal in turn -- ends the process and leaves the folder empty.
    The name is registered before the file is created, and the handler waits for a creation in
    flight (signal_cleanup::BeginChange); before, the temporary stayed every time."""
    st = tmp_path / "a.safetensors"
    write_bf16_safetensors(st, 3, [(64, 64)])
    out = tmp_path / "out"
    out.mkdir()
    signal_each_time([BIN, "import", st, "-o", out / "model.h5"], out,
                     lambda files: [f for f in files if ".tmp-" in f], "temporary")


def test_a_signal_while_the_writer_lock_is_created_leaves_none(tmp_path):
    """The writer lock of a distributed save is registered for removal right after it is
    created (O_EXCL: a file by that name may be another writer's). A signal that comes in
    between, on the thread creating it, would find the lock unregistered and leave it (a
    stale lock; the next save refused). The shim widens that moment to 400 ms; each signal in
    turn is sent as soon as the lock exists. The creating thread blocks the signals until the
    lock is registered (signal_cleanup::BeginChange), so the process ends and leaves the folder
    as it was."""
    st = tmp_path / "a.safetensors"
    write_bf16_safetensors(st, 3, [(64, 64)])
    layout = tmp_path / "L.json"
    layout.write_text(json.dumps({"mesh": {"axes": ["data"], "shape": [2]},
                                  "placements": [{"match": "*", "spec": ["data"]}]}))
    out = tmp_path / "out"
    out.mkdir()
    signal_each_time([BIN, "reshard", st, "--layout", layout, "-o", out / "model.h5"], out,
                     lambda files: "model.h5.lock" in files, "lock")


def test_a_signal_mid_split_export_leaves_the_previous_export_whole(tmp_path):
    """`export --max-shard-size` writes every shard file and the index to synced temporaries
    and renames them only once all are complete, the index last, in one bracket that no signal
    interrupts (AtomicFile::CommitAll). Each signal twice, at random moments: the process ends
    by it and the folder holds exactly the previous export, byte for byte, or exactly the new
    one -- never a mix of old and new files (before: each file was renamed as soon as it was
    written, so a signal left the first ones new and the old index loading them with the old
    rest), and no temporary."""
    a_st, b_st = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    for path, seed in ((a_st, 1), (b_st, 2)):
        write_bf16_safetensors(path, seed, [(1024, 4096)] * 8)  # 8 tensors of 8 MiB
    out = tmp_path / "out"
    out.mkdir()

    def export(src):
        return [BIN, "export", src, "-o", out / "model.safetensors", "--max-shard-size", "8MiB"]

    def folder():
        return {f: hashlib.sha256((out / f).read_bytes()).hexdigest() for f in os.listdir(out)}

    t0 = time.monotonic()
    subprocess.run(export(b_st), check=True, capture_output=True)
    full = time.monotonic() - t0
    new = folder()
    t0 = time.monotonic()
    subprocess.run(export(a_st), check=True, capture_output=True)
    full = min(full, time.monotonic() - t0)  # the first run may be slower (cold page cache)
    old = folder()
    assert len(old) == 9 and old.keys() == new.keys()  # model-0000k-of-00008, the index
    assert all(old[f] != new[f] for f in old if not f.endswith(".json"))
    rng = random.Random(7)
    mid = 0
    for k in range(2 * len(SIGNALS)):
        sig = SIGNALS[k % len(SIGNALS)]
        proc = subprocess.Popen(export(b_st), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True,
                                preexec_fn=lambda: [signal.signal(s, signal.SIG_DFL) for s in SIGNALS])
        time.sleep(rng.uniform(0.02, 0.7) * full)
        if proc.poll() is None:
            proc.send_signal(sig)
            mid += 1
        _, err = proc.communicate()
        now = folder()
        assert now in (old, new), f"{sig!r}: neither the old export nor the new: {sorted(now)}\n{err}"
        if proc.returncode != 0:
            assert proc.returncode == -sig, f"{sig!r} -> rc {proc.returncode}\n{err}"
        if now != old:
            subprocess.run(export(a_st), check=True, capture_output=True)
    assert mid >= len(SIGNALS), f"only {mid} runs were interrupted mid-export"
