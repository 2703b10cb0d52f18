"""Run under `torchrun --nproc_per_node 4` (no MPI) by test_py_distributed.py: each rank writes
its results to $SEEDSTORE_OUT/rank<r>.json, asserted by the test.

seedstore.init_distributed from torchrun's TCPStore (before and after init_process_group), the
replica check through it compared with the torch.distributed (gloo) path on a plain and an
FSDP2 model, a dcp.save through seedstore.torch.Writer over it, one flipped element, bad arguments, and a rank that stops (SIGSTOP) inside a check.
"""
import json
import os
import signal
import sys
import time
import traceback

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import seedstore
import seedstore.torch as sst

OUT = os.environ["SEEDSTORE_OUT"]
RANK, WORLD = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
STALL_RANK, STALL_TIMEOUT = 2, 4.0
res = {"rank": RANK, "mpi_env": sorted(k for k in os.environ if k.startswith(("OMPI_COMM_WORLD", "PMIX_RANK", "PMI_RANK", "PMI_SIZE")))}


def error_of(fn):
    try:
        fn()
    except seedstore.Error as e:
        return [type(e).__name__, str(e)]
    return None


def spec_of(model, seed):
    return {"seedstore": 1, "seed": seed, "tensors": [
        {"name": n, "shape": list(p.shape), "dtype": "float32", "init": {"dist": "normal", "scale": 0.02}}
        for n, p in model.named_parameters()]}


def plain_model():
    torch.manual_seed(RANK)  # unseeded replicas differ until init_module_ fills them
    return nn.Sequential(nn.Linear(13, 29), nn.ReLU(), nn.Linear(29, 7))


def fsdp_model():
    mesh = init_device_mesh("cpu", (WORLD,))
    with torch.device("meta"):
        m = nn.Sequential(nn.Linear(16, 23, bias=False), nn.Linear(23, 17))
    for layer in m:
        fully_shard(layer, mesh=mesh)
    fully_shard(m, mesh=mesh)
    return m


def summary(rep):
    return {"ok": rep.ok, "disagreeing": rep.disagreeing,
            "tensors": {t["name"]: t for t in rep.tensors}}


def flip_one(model, name):
    with torch.no_grad():
        p = dict(model.named_parameters())[name]
        local = p.to_local() if hasattr(p, "to_local") else p
        if local.numel():
            local.view(-1)[local.numel() // 2] += 1


def main():
    # 1. From the environment torchrun sets (MASTER_ADDR/PORT: its TCPStore), before any
    #    process group exists.
    comm = seedstore.init_distributed(backend="store", timeout=60)
    res["env_comm"] = [comm.rank, comm.size, comm.backend]
    res["env_gather"] = list(comm.all_gather(bytes([RANK, 7, RANK * 3])))
    comm.barrier("after gather")
    comm.close()

    dist.init_process_group("gloo")
    # 2. From torch.distributed's default group (its store, rank and size); auto picks the
    #    store backend where this node has fewer GPUs than ranks.
    comm = seedstore.init_distributed(timeout=60)
    res["auto_backend"] = comm.backend
    res["repr"] = repr(comm)

    # 3. The replica check through the communicator equals the gloo path's report.
    for label, make, seed in (("plain", plain_model, 5), ("fsdp", fsdp_model, 6)):
        m = make()
        spec = spec_of(m, seed)
        sst.init_module_(m, spec)
        via_comm = summary(sst.verify_replicas(m, spec, group=comm))
        via_torch = summary(sst.verify_replicas(m, spec))
        res[f"{label}_same"] = via_comm == via_torch
        res[f"{label}_verify"] = via_comm
        if label == "fsdp":  # a distributed save whose exchanges go through the communicator
            ckpt = os.path.join(OUT, "ckpt.h5")
            writer = sst.Writer(ckpt, group=comm)
            dcp.save(m.state_dict(), storage_writer=writer)
            res["save_table_has_rows"] = "1.weight" in writer.table
            if RANK == 0:
                saved, ref = seedstore.open(ckpt), seedstore.open(spec)
                res["save_fingerprints_match"] = {
                    t.name: str(saved.fingerprint(t.name)) == str(ref.fingerprint(t.name)) for t in ref.tensors}
        name = "2.weight" if label == "plain" else "1.weight"
        if RANK == 1:
            flip_one(m, name)
        via_comm = summary(sst.verify_replicas(m, spec, group=comm))
        via_torch = summary(sst.verify_replicas(m, spec))
        res[f"{label}_flip_same"] = via_comm == via_torch
        res[f"{label}_flip_verify"] = via_comm
        res[f"{label}_flip_nosource"] = summary(sst.verify_replicas(m, group=comm))

    # 4. Bad arguments, named (local: no store traffic).
    res["bad_rank"] = error_of(lambda: seedstore.init_distributed(rank=WORLD, timeout=5))
    res["bad_backend"] = error_of(lambda: seedstore.init_distributed(backend="mpi", timeout=5))
    res["bad_timeout"] = error_of(lambda: seedstore.init_distributed(timeout=0))
    res["bad_store"] = error_of(lambda: seedstore.init_distributed(store=object(), timeout=5))
    res["bad_device"] = error_of(lambda: seedstore.init_distributed(backend="nccl", device="tpu:0",
                                                                  timeout=5))
    # ... and ranks started with different world sizes (rank 0 thinks there are 3), on all ranks.
    res["size_mismatch"] = error_of(lambda: seedstore.init_distributed(
        world_size=3 if RANK == 0 else WORLD, backend="store", timeout=20))

    # 5. A rank that stops inside a check: the others get an IoError naming it within the
    #    timeout; continued, it gets the same error (rank 0 published it).
    stall = seedstore.init_distributed(backend="store", timeout=STALL_TIMEOUT)
    m = plain_model()
    spec = spec_of(m, 5)
    sst.init_module_(m, spec)
    pid_file = os.path.join(OUT, f"pid{STALL_RANK}")
    if RANK == STALL_RANK:
        with open(pid_file + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.rename(pid_file + ".tmp", pid_file)
        os.kill(os.getpid(), signal.SIGSTOP)
    t0 = time.monotonic()
    res["stall_error"] = error_of(lambda: sst.verify_replicas(m, spec, group=stall))
    res["stall_seconds"] = time.monotonic() - t0
    res["stall_broken"] = stall.broken
    if RANK == 0:  # let the stopped rank go on once it is stopped
        pid = int(open(pid_file).read())
        for _ in range(200):
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "T":
                    break
            time.sleep(0.05)
        os.kill(pid, signal.SIGCONT)
    dist.barrier()
    dist.destroy_process_group()


try:
    main()
except Exception:  # noqa: BLE001  (the test reads the traceback from the result file)
    res["crash"] = traceback.format_exc()
with open(os.path.join(OUT, f"rank{RANK}.json"), "w") as f:
    json.dump(res, f, indent=1, default=str)
sys.exit(0)
