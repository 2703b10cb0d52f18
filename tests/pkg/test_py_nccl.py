"""seedstore.init_distributed's NCCL backend, bootstrapped through a TCPStore (no MPI): a world
of one on one GPU (NCCL refuses two ranks on one GPU: that refusal is checked too, by name),
and two ranks on two GPUs when there are two. The replica check of CUDA parameters runs through
the NCCL communicator. Runs only with a GPU, a CUDA + NCCL build and torch with CUDA; skips
visibly otherwise; SEEDSTORE_REQUIRE_GPU=1 (tools/gpu-check.sh) turns the skip into a failure."""
import json
import os
import socket
import subprocess
import sys

import pytest

import seedstore
from seedstore_pkg_util import python_env

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def _skip_or_fail(why):
    if os.environ.get("SEEDSTORE_REQUIRE_GPU", "0") not in ("", "0"):
        pytest.fail(f"{why} (SEEDSTORE_REQUIRE_GPU is set)")
    pytest.skip(f"NCCL backend not run: {why}")


@pytest.fixture(scope="module", autouse=True)
def gpu():
    if not seedstore._core.nccl_built:
        _skip_or_fail("seedstore was built without NCCL")
    if not torch.cuda.is_available():
        _skip_or_fail("torch sees no CUDA device")
    if not seedstore.cuda_available():
        _skip_or_fail("seedstore sees no usable CUDA device")


def test_world_of_one_through_a_tcpstore():
    store = dist.TCPStore("127.0.0.1", 0, 1, True, wait_for_workers=False)
    comm = seedstore.init_distributed(store, rank=0, world_size=1, backend="nccl", device=0, timeout=60)
    assert (comm.backend, comm.rank, comm.size, comm.device) == ("nccl", 0, 1, 0)
    assert comm.all_gather(b"\x01\x02\x03") == b"\x01\x02\x03"
    comm.barrier()
    import seedstore.torch as sst
    m = torch.nn.Linear(64, 32).cuda()
    spec = {"seedstore": 1, "seed": 0, "tensors": [
        {"name": n, "shape": list(p.shape), "dtype": "float32", "init": {"dist": "normal"}}
        for n, p in m.named_parameters()]}
    sst.init_module_(m, spec)
    assert sst.verify_replicas(m, spec, group=comm).ok
    with torch.no_grad():
        m.weight.view(-1)[17] += 1
    assert sst.verify_replicas(m, spec, group=comm).disagreeing == {"weight": [0]}
    comm.close()
    # auto: NCCL where this node has a GPU per local rank (one here)
    auto = seedstore.init_distributed(store, rank=0, world_size=1, timeout=60)
    assert auto.backend == "nccl", auto
    auto.close()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _two_ranks(devices):
    """nccl_worker.py as ranks 0 and 1 on `devices`; their RESULT dicts."""
    port = _free_port()
    procs = []
    for r, d in enumerate(devices):
        env = python_env()
        env.update(RANK=str(r), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   LOCAL_RANK=str(r), LOCAL_WORLD_SIZE="2")
        procs.append(subprocess.Popen([sys.executable, os.path.join(HERE, "nccl_worker.py"), str(d), str(r)],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    res = []
    for p in procs:
        text = p.communicate(timeout=240)[0].decode(errors="replace")
        line = [x for x in text.splitlines() if x.startswith("RESULT ")]
        assert line, f"rank exited {p.returncode} without a result:\n{text[-4000:]}"
        res.append(json.loads(line[-1][7:]))
    return res


def test_two_ranks_on_one_gpu_are_refused_by_name():
    res = _two_ranks([0, 0])
    for r in res:
        kind, msg = r["error"]
        assert kind == "InvalidArgumentError", r
        assert "ranks 0 and 1 would share GPU 0" in msg, r


def test_two_ranks_on_two_gpus():
    if torch.cuda.device_count() < 2:
        pytest.skip(f"two-rank NCCL not run: {torch.cuda.device_count()} GPU(s) visible, it needs 2")
    res = _two_ranks([0, 1])
    for r in res:
        assert "error" not in r, r
        assert (r["backend"], r["device"]) == ("nccl", r["rank"])
        assert r["gather"] == [0, 9, 1, 9]
        assert r["ok"] and r["flip"] == {"weight": [1]}, r
