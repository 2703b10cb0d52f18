"""A folder fsync that fails after a rename is reported, never passed over (invariant I5).

After an atomic write renames its temporary into place, fsync of the folder is what makes the
rename survive a power loss. Under an LD_PRELOAD shim (tests/py/fail_dir_fsync.c) every fsync
of a folder fails with EIO, files sync as usual. Each way of writing -- one store (`init`,
`import`), a safetensors export, a split export (several files committed together) -- must end
with the I/O exit code and a message naming the folder; the files are in place (the rename
happened) and whole. A distributed save (`reshard --layout`) fails at its rank files' folder
fsync, before its commit point: it leaves nothing behind and the save it was to replace stays.
(A failed fsync after the commit point itself:
`Cli.AFailedFsyncAfterTheCommitKeepsTheReplacedSavesFiles`.)
"""
import json
import os
import subprocess

import pytest

from seedstore_testlib import BIN, need_binary  # noqa: F401 (an autouse fixture)
from seedstore_testlib import computed_fingerprints, verified_fingerprints
from seedstore_testlib import write_bf16_safetensors

EXIT_IO = 1 + 4  # tools/cli.h ExitCode: 1 + Code::kIo


def shim_env():
    shim = os.environ.get("SEEDSTORE_FAIL_DIR_FSYNC", "")
    if not os.path.exists(shim):
        pytest.skip(f"the shim is not built (SEEDSTORE_FAIL_DIR_FSYNC={shim!r}; ctest sets it)")
    # (An ASan build wants its runtime first among the libraries; the shim may come first.)
    return dict(os.environ, LD_PRELOAD=shim,
                ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0")


def run_failing(cmd, folder):
    p = subprocess.run([str(c) for c in cmd], env=shim_env(), capture_output=True, text=True)
    assert p.returncode == EXIT_IO, (
        f"{cmd[1]} under a failing folder fsync: rc={p.returncode}, want {EXIT_IO}\n{p.stderr}")
    assert f"fsync of folder '{folder}" in p.stderr, f"{cmd[1]}: the folder is not named:\n{p.stderr}"
    return p


def test_one_store_reports_a_failed_folder_fsync(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    run_failing([BIN, "init", "--preset", "gpt2", "-o", out / "m.h5"], out)
    assert sorted(os.listdir(out)) == ["m.h5"]
    lazy = verified_fingerprints(out / "m.h5")
    # An import over it: the new store is in place and whole.
    st = tmp_path / "a.safetensors"
    write_bf16_safetensors(st, 5, [(96, 64), (7,)])
    run_failing([BIN, "import", st, "-o", out / "m.h5"], out)
    assert sorted(os.listdir(out)) == ["m.h5"]
    assert verified_fingerprints(out / "m.h5") == computed_fingerprints(st)
    assert verified_fingerprints(out / "m.h5") != lazy


def test_exports_report_a_failed_folder_fsync(tmp_path):
    st = tmp_path / "a.safetensors"
    write_bf16_safetensors(st, 6, [(512, 1024), (1024, 512), (33,)])
    out = tmp_path / "out"
    out.mkdir()
    run_failing([BIN, "export", st, "-o", out / "one.safetensors"], out)
    assert computed_fingerprints(out / "one.safetensors") == computed_fingerprints(st)
    run_failing([BIN, "export", st, "-o", out / "split.safetensors", "--max-shard-size", "1MiB"],
                out)
    index = [f for f in os.listdir(out) if f.endswith(".index.json")]
    assert len(index) == 1, sorted(os.listdir(out))
    assert not [f for f in os.listdir(out) if ".tmp-" in f], sorted(os.listdir(out))
    assert computed_fingerprints(out / index[0]) == computed_fingerprints(st)


def test_a_distributed_save_reports_a_failed_folder_fsync(tmp_path):
    """The rank files' folder fsync fails before the commit point: the save fails, leaves
    nothing of its own behind, and the save it was to replace stays whole."""
    layout = tmp_path / "L.json"
    layout.write_text(json.dumps({"mesh": {"axes": ["fsdp"], "shape": [4]},
                                  "placements": [{"match": "*", "flat": ["fsdp"]}]}))
    out = tmp_path / "out"
    out.mkdir()
    old, new = tmp_path / "old.safetensors", tmp_path / "new.safetensors"
    write_bf16_safetensors(old, 7, [(64, 96), (13,)])
    write_bf16_safetensors(new, 8, [(64, 96), (13,)])
    p = subprocess.run([BIN, "reshard", old, "--layout", layout, "-o", out / "model.h5"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    before = sorted(os.listdir(out))
    run_failing([BIN, "reshard", new, "--layout", layout, "-o", out / "model.h5"], out)
    assert sorted(os.listdir(out)) == before
    assert verified_fingerprints(out / "model.h5") == computed_fingerprints(old)
