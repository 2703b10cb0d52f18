"""seedstore.init_distributed under real `torchrun --nproc_per_node 4`, no MPI (dist_worker.py):
the communicator made from torchrun's TCPStore (from the environment, and from torch's default
group) carries the replica check, whose report equals the torch.distributed (gloo) path's on a
plain and an FSDP2 model -- agreement, and one flipped element named with its tensor and rank;
a dcp.save through seedstore.torch.Writer(group=communicator) holds the spec's fingerprints;
a rank stopped with SIGSTOP inside a check gives the others an IoError naming it within the
timeout, not a hang; bad arguments and mismatched world sizes are named. In-process: the store
backend over a plain set/get object and a FileStore, timeouts naming the missing ranks."""
import json
import os
import re
import threading
import time

import pytest

import seedstore
from seedstore_pkg_util import torchrun

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
STALL_TIMEOUT = 4.0


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist4")
    env_mpi = [k for k in os.environ if k.startswith(("OMPI_COMM_WORLD", "PMIX_RANK"))]
    assert not env_mpi, f"this test must run outside mpirun: {env_mpi}"
    torchrun(os.path.join(HERE, "dist_worker.py"), 4, out)
    res = []
    for r in range(4):
        with open(out / f"rank{r}.json") as f:
            res.append(json.load(f))
    for r in res:
        assert "crash" not in r, f"rank {r['rank']} crashed:\n{r['crash']}"
    return res


def test_no_mpi_and_the_environment_gives_the_world(ranks):
    for r, res in enumerate(ranks):
        assert res["mpi_env"] == []
        assert res["env_comm"] == [r, 4, "store"]
        assert res["env_gather"] == [x for q in range(4) for x in (q, 7, 3 * q)]
        if torch.cuda.device_count() < 4:  # fewer GPUs than ranks: auto is the store backend
            assert res["auto_backend"] == "store"
        assert res["repr"] == f"Communicator(backend='{res['auto_backend']}', rank={r}, size=4)"


@pytest.mark.parametrize("label", ["plain", "fsdp"])
def test_replica_check_through_the_store_equals_the_gloo_path(ranks, label):
    for res in ranks:
        assert res[f"{label}_same"] and res[f"{label}_flip_same"], label
        assert res[f"{label}_verify"] == ranks[0][f"{label}_verify"]
    rep = ranks[0][f"{label}_verify"]
    assert rep["ok"] and rep["disagreeing"] == {}
    for t in rep["tensors"].values():
        assert (t["replicas"], t["composition"]) == ("agree", "ok"), t


def test_distributed_save_through_the_communicator(ranks):
    assert all(r["save_table_has_rows"] for r in ranks)
    assert ranks[0]["save_fingerprints_match"] == {n: True for n in ("0.weight", "1.weight", "1.bias")}


@pytest.mark.parametrize("label,name", [("plain", "2.weight"), ("fsdp", "1.weight")])
def test_one_flipped_element_is_named_with_tensor_and_rank(ranks, label, name):
    rep = ranks[0][f"{label}_flip_verify"]
    assert not rep["ok"]
    assert rep["disagreeing"] == {name: [1]}
    t = rep["tensors"][name]
    assert t["problems"][0]["off_spec"] == [1], t
    # FSDP: rank 1's shard is the only copy of its region, so the whole is off; replicated:
    # rank 1 is outvoted and the majority's value composes
    assert t["composition"] == ("mismatch" if label == "fsdp" else "ok"), t
    if label == "plain":  # four replicas: rank 1 is outvoted even without the source
        nosrc = ranks[0][f"{label}_flip_nosource"]
        assert nosrc["disagreeing"] == {name: [1]}
        assert nosrc["tensors"][name]["replicas"] == "mismatch"


def test_bad_arguments_are_named(ranks):
    res = ranks[0]
    assert res["bad_rank"][0] == "InvalidArgumentError" and "rank 4 is outside [0, 4)" in res["bad_rank"][1]
    assert "backend 'mpi'" in res["bad_backend"][1]
    assert "timeout must be positive" in res["bad_timeout"][1]
    assert "store object has no set/get" in res["bad_store"][1]
    assert "device 'tpu:0'" in res["bad_device"][1]
    for r, res in enumerate(ranks):  # every rank names the mismatch
        kind, msg = res["size_mismatch"]
        assert kind == "InvalidArgumentError" and "world size mismatch" in msg, (r, msg)
        m = re.search(r"world size mismatch: rank (\d) was started with world size (\d), rank (\d) with (\d)", msg)
        assert m and m.group(3) == str(r) and {m.group(2), m.group(4)} == {"3", "4"}, (r, msg)
        assert "0" in (m.group(1), m.group(3)), (r, msg)  # rank 0 started with 3


def test_a_stopped_rank_is_named_within_the_timeout(ranks):
    for r, res in enumerate(ranks):
        kind, msg = res["stall_error"]
        assert kind == "IoError", (r, msg)
        assert res["stall_broken"]
        if r == 2:  # continued after the others gave up: it gets rank 0's verdict at once
            assert "(reported by rank 0)" in msg, msg
            continue
        assert "rank 2 did not put" in msg and "within 4.0 s" in msg, (r, msg)
        # rank 0 at its deadline; the others as soon as rank 0 reports (before their own)
        assert 0.9 * STALL_TIMEOUT <= res["stall_seconds"] <= STALL_TIMEOUT + 2 + 3, (r, res["stall_seconds"])
        if r != 0:
            assert "(reported by rank 0)" in msg, msg


# ---- in-process: the store backend over other stores ------------------------------------


class DictStore:
    """Any object with set/get: a missing key raises KeyError."""

    def __init__(self):
        self.d, self.lock = {}, threading.Lock()

    def set(self, k, v):
        with self.lock:
            self.d[k] = bytes(v)

    def get(self, k):
        with self.lock:
            return self.d[k]


def _world(store, n, body, timeout=10.0):
    """Runs body(comm) on n threads, each rank r of one store backend; returns per-rank
    results (or exceptions)."""
    out = [None] * n

    def run(r):
        try:
            comm = seedstore.init_distributed(store, rank=r, world_size=n, backend="store", timeout=timeout)
            out[r] = body(comm)
        except Exception as e:  # noqa: BLE001
            out[r] = e
    ts = [threading.Thread(target=run, args=(r,)) for r in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    return out


@pytest.mark.parametrize("kind", ["dict", "file"])
def test_store_backend_all_gather_on_threads(kind, tmp_path):
    store = DictStore() if kind == "dict" else dist.FileStore(str(tmp_path / "fs"), 3)
    res = _world(store, 3, lambda c: [c.all_gather(bytes([c.rank]) * 5, "g"), c.barrier(), c.rank])
    for r, v in enumerate(res):
        assert not isinstance(v, Exception), v
        assert v[0] == b"".join(bytes([q]) * 5 for q in range(3)) and v[2] == r


def test_missing_ranks_are_named_by_the_store_backend():
    store = DictStore()
    t0 = time.monotonic()
    with pytest.raises(seedstore.IoError, match=r"rank 1 did not put '.*bootstrap setup.*' within 0.5 s.*nor did ranks 2, 3"):
        seedstore.init_distributed(store, rank=0, world_size=4, backend="store", timeout=0.5)
    assert time.monotonic() - t0 < 5
    with pytest.raises(seedstore.IoError, match=r"rank 0 did not put .* \(seen by rank 3\)"):
        seedstore.init_distributed(store, rank=3, world_size=4, backend="store", timeout=0.5)


def test_arguments_without_a_job_are_named(monkeypatch):
    for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(v, raising=False)
    with pytest.raises(seedstore.InvalidArgumentError, match=r"rank \(RANK\) and world_size \(WORLD_SIZE\) not given"):
        seedstore.init_distributed()
    with pytest.raises(seedstore.InvalidArgumentError, match="MASTER_ADDR and MASTER_PORT not set"):
        seedstore.init_distributed(rank=0, world_size=1)
    with pytest.raises(seedstore.InvalidArgumentError, match="world_size 0 must be >= 1"):
        seedstore.init_distributed(DictStore(), rank=0, world_size=0)
    with pytest.raises(seedstore.InvalidArgumentError, match="rank must be an integer"):
        seedstore.init_distributed(DictStore(), rank="0", world_size=1)
    monkeypatch.setenv("RANK", "x")
    with pytest.raises(seedstore.InvalidArgumentError, match="RANK='x' is not an integer"):
        seedstore.init_distributed(DictStore(), world_size=1)
