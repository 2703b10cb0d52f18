"""What the Python tests that run the `seedstore` binary share: where it is, the checkpoints
they write with the real safetensors package, and the fingerprints `seedstore verify` proves."""
import json
import os
import re
import signal
import subprocess
import time

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BIN = os.environ.get("SEEDSTORE_BIN", os.path.join(ROOT, "build", "tools", "seedstore"))


@pytest.fixture(scope="module", autouse=True)
def need_binary():
    """Imported by a test module, skips it (visibly) when the binary is missing."""
    if not os.access(BIN, os.X_OK):
        pytest.skip(f"seedstore binary not found at {BIN} (set SEEDSTORE_BIN)")


def write_bf16_safetensors(path, seed, shapes, extra=None):
    """A safetensors file of bf16 N(0, 0.02) matrices "layers.<i>.weight" of `shapes`, from
    numpy's generator `seed`, plus the arrays in `extra` (name -> array)."""
    import ml_dtypes
    from safetensors import TensorSpec, serialize_file
    rng = np.random.default_rng(seed)
    arrays = {f"layers.{i}.weight": (rng.standard_normal(s) * 0.02).astype(np.float32)
              .astype(ml_dtypes.bfloat16) for i, s in enumerate(shapes)}
    arrays.update(extra(rng) if callable(extra) else extra or {})
    specs = {k: TensorSpec(dtype=v.dtype.name, shape=v.shape, data_ptr=v.ctypes.data,
                           data_len=v.nbytes) for k, v in arrays.items()}
    serialize_file(specs, str(path))


def verified_fingerprints(path):
    """{tensor: fingerprint} of the checkpoint at `path`, which `seedstore verify` must accept."""
    p = subprocess.run([BIN, "verify", str(path), "--json"], capture_output=True, text=True)
    assert p.returncode == 0, f"verify {path} failed (rc={p.returncode}):\n{p.stdout}\n{p.stderr}"
    rep = json.loads(p.stdout)
    assert rep["ok"]
    return {t["name"]: t["fingerprint"] for t in rep["tensors"]}


def computed_fingerprints(path):
    """{tensor: fingerprint} of any checkpoint at `path` (safetensors too), `seedstore fingerprint`."""
    p = subprocess.run([BIN, "fingerprint", str(path), "--json"], capture_output=True, text=True)
    assert p.returncode == 0, f"fingerprint {path} failed (rc={p.returncode}):\n{p.stderr}"
    return {t["name"]: t["fingerprint"] for t in json.loads(p.stdout)}


def process_gone(pid):
    """Whether process `pid` has ended (exited, or a zombie waiting to be reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def run_with_fault(cmd, env, fault, timeout, left_behind=None):
    """Runs `cmd` (mpirun ... seedstore ...) with the test-only fault SEEDSTORE_TEST_FAULT=`fault`
    ("RANK:STEP:ACTION", TestFaultPoint in io/collective.h) for at most `timeout` s, then
    SIGKILLs the process the hook named ("(pid N)"): a stopped rank the launcher left would hold
    the writer lock. The pids of those still alive 5 s after `cmd` ended are appended to the list
    `left_behind` (when given): a rank the launcher sent SIGTERM may still be running its exit
    (signal cleanup; under ASan, the leak check) when the launcher returns. Returns (returncode,
    stderr, whether it timed out)."""
    p = subprocess.Popen(cmd, env=dict(env, SEEDSTORE_TEST_FAULT=fault), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    timed_out = False
    try:
        _, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        p.kill()
        _, err = p.communicate()
    for pid in re.findall(r"test fault \S+ at step '[^']*' \(pid (\d+)\)", err):
        if left_behind is not None:
            deadline = time.monotonic() + 5
            while not process_gone(int(pid)) and time.monotonic() < deadline:
                time.sleep(0.05)
            if not process_gone(int(pid)):
                left_behind.append(int(pid))
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass
    return p.returncode, err, timed_out
