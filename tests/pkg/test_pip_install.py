"""`pip install .` from a clone: the files git tracks (as they are in the working tree) are copied
to a folder of their own and built into a wheel by pyproject.toml's backend (scikit-build-core
through the project's CMake), then installed into a folder of its own and imported from there by
a child Python that does not see this build's package. It must read and fingerprint exactly what
this build's package does.

The build runs without build isolation (the backend and nanobind of this virtual environment,
which tools/setup.sh installs: no network needed); otherwise it is pip's own path."""
import os
import shutil
import subprocess
import sys
import zipfile

import numpy as np
import pytest

import seedstore
from seedstore_pkg_util import SOURCE_DIR

SPEC = {"seedstore": 1, "seed": 7, "tensors": [
    {"name": "w", "shape": [37, 53], "dtype": "bfloat16", "init": {"dist": "normal", "scale": 0.02}},
    {"name": "b", "shape": [101], "dtype": "float32", "init": {"dist": "uniform", "minval": -1, "maxval": 2}}]}

CHILD = r"""
import json, sys
import seedstore
cat = seedstore.open(json.loads(sys.argv[1]))
out = {"file": seedstore.__file__}
for n in cat.names:
    out[n] = [cat.read(n).tobytes().hex(), str(cat.fingerprint(n))]
print(json.dumps(out))
"""


def tracked_files():
    if shutil.which("git") is None or not os.path.isdir(os.path.join(SOURCE_DIR, ".git")):
        pytest.skip(f"SKIPPED: {SOURCE_DIR} is not a git checkout (no clone to install from)")
    p = subprocess.run(["git", "-C", SOURCE_DIR, "ls-files", "-z"], stdout=subprocess.PIPE, check=True)
    return [f for f in p.stdout.decode().split("\0") if f]


def test_pip_install_from_a_clone_reads_what_this_build_reads(tmp_path):
    pytest.importorskip("scikit_build_core")
    pytest.importorskip("nanobind")
    clone = tmp_path / "clone"
    for f in tracked_files():
        src = os.path.join(SOURCE_DIR, f)
        if os.path.isfile(src):  # a file deleted in the working tree is not in the clone either
            os.makedirs(clone / os.path.dirname(f), exist_ok=True)
            shutil.copy2(src, clone / f)
    wheels = tmp_path / "wheels"
    env = dict(os.environ, CMAKE_BUILD_PARALLEL_LEVEL=os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", "2"))
    env.pop("PYTHONPATH", None)
    p = subprocess.run([sys.executable, "-m", "pip", "wheel", str(clone), "--no-build-isolation",
                        "--no-deps", "-q", "-w", str(wheels)], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=1500)
    assert p.returncode == 0, p.stdout.decode(errors="replace")[-6000:]
    (wheel,) = wheels.glob("seedstore-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert any(n.startswith("seedstore/_seedstore") and n.endswith(".so") for n in names), names
    for mod in ["__init__.py", "torch.py", "jax.py", "distributed.py"]:
        assert f"seedstore/{mod}" in names, (mod, names)
    assert not [n for n in names if not (n.startswith("seedstore/") or ".dist-info/" in n)], names

    site = tmp_path / "site"
    p = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target",
                        str(site), str(wheel)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert p.returncode == 0, p.stdout.decode(errors="replace")
    import json
    p = subprocess.run([sys.executable, "-c", CHILD, json.dumps(SPEC)], cwd=tmp_path,
                       env=dict(env, PYTHONPATH=str(site)), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=120)
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    got = json.loads(p.stdout)
    assert got.pop("file").startswith(str(site)), "the child imported another seedstore"
    cat = seedstore.open(SPEC)
    assert sorted(got) == sorted(cat.names)
    for n in cat.names:
        assert bytes.fromhex(got[n][0]) == cat.read(n).tobytes(), n
        assert got[n][1] == str(cat.fingerprint(n)), n
    assert np.frombuffer(bytes.fromhex(got["b"][0]), np.float32).min() >= -1
