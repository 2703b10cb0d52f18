"""A rank file is opened a fixed number of times, whatever the number of its tensors.

A save over many ranks keeps each rank file's cost per file, not per piece: a rank file opened
once per tensor (to write, to read back, to prove) would make a 64-rank save of 12 tensors open
768 files where 64 suffice, and a tight open-file limit would then fail it. Under an LD_PRELOAD
shim (tests/py/count_opens.c) every open of a path in the output folder is logged; `reshard` of
12 tensors to a flat layout over 64 ranks, with the open-file limit at 64 (soft and hard, so the
binary cannot raise it), must succeed and open each rank file at most a few times, and as many
times for 12 tensors as for 3; `verify` of the save likewise.
"""
import collections
import json
import os
import re
import resource
import subprocess

import pytest

from seedstore_testlib import BIN, need_binary  # noqa: F401 (an autouse fixture)
from seedstore_testlib import computed_fingerprints, verified_fingerprints
from seedstore_testlib import write_bf16_safetensors

RANKS = 64
OPEN_FILE_LIMIT = 64


def shim():
    lib = os.environ.get("SEEDSTORE_COUNT_OPENS", "")
    if not os.path.exists(lib):
        pytest.skip(f"the shim is not built (SEEDSTORE_COUNT_OPENS={lib!r}; ctest sets it)")
    return lib


def limit_open_files():
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    n = OPEN_FILE_LIMIT if hard == resource.RLIM_INFINITY else min(OPEN_FILE_LIMIT, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))


def opens_per_file(cmd, folder, log):
    """Runs `cmd` under the shim with the open-file limit; {file name in `folder`: opens}."""
    if log.exists():
        log.unlink()
    env = dict(os.environ, LD_PRELOAD=shim(), SEEDSTORE_COUNT_OPENS_MATCH=str(folder) + "/",
               SEEDSTORE_COUNT_OPENS_LOG=str(log),
               ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0")
    p = subprocess.run([str(c) for c in cmd], env=env, capture_output=True, text=True,
                       preexec_fn=limit_open_files)
    assert p.returncode == 0, f"{cmd[1]} with {OPEN_FILE_LIMIT} open files at most: " \
                              f"rc={p.returncode}\n{p.stdout}\n{p.stderr}"
    lines = log.read_text().splitlines() if log.exists() else []
    return collections.Counter(os.path.basename(line) for line in lines)


def rank_file_opens(counts):
    """The opens of the save's rank files (`<P>.<id>.rank<r>.h5`, docs/FORMAT.md section 10)."""
    return {f: n for f, n in counts.items() if re.search(r"\.rank[0-9]+\.h5$", f)}


def save_and_count(tmp_path, tensors):
    st = tmp_path / f"src{tensors}.safetensors"
    write_bf16_safetensors(st, tensors, [(64 + 8 * i, 96) for i in range(tensors)])
    layout = tmp_path / "L.json"
    layout.write_text(json.dumps({"mesh": {"axes": ["fsdp"], "shape": [RANKS]},
                                  "placements": [{"match": "*", "flat": ["fsdp"]}]}))
    out = tmp_path / f"out{tensors}"
    out.mkdir()
    log = tmp_path / "opens.log"
    saved = rank_file_opens(
        opens_per_file([BIN, "reshard", st, "--layout", layout, "-o", out / "model.h5"], out, log))
    assert len(saved) == RANKS, f"{len(saved)} rank files opened, want {RANKS}: {sorted(saved)}"
    assert verified_fingerprints(out / "model.h5") == computed_fingerprints(st)
    checked = rank_file_opens(opens_per_file([BIN, "verify", out / "model.h5"], out, log))
    assert len(checked) == RANKS, f"verify opened {len(checked)} rank files, want {RANKS}"
    return saved, checked


def test_a_rank_file_is_opened_a_fixed_number_of_times(tmp_path):
    few_saved, few_checked = save_and_count(tmp_path, 3)
    many_saved, many_checked = save_and_count(tmp_path, 12)
    # Every rank file alike, and as often for 12 tensors as for 3.
    assert set(many_saved.values()) == set(few_saved.values()), (few_saved, many_saved)
    assert set(many_checked.values()) == set(few_checked.values()), (few_checked, many_checked)
    assert max(many_saved.values()) <= 6, many_saved
    assert max(many_checked.values()) <= 3, many_checked
