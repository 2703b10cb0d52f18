"""One rank of test_py_nccl.py's multi-process cases: seedstore.init_distributed from the
environment (RANK, WORLD_SIZE, MASTER_ADDR/PORT: rank 0 hosts the TCPStore), backend nccl on
the CUDA device argv[1], then the replica check of a CUDA module through it (rank 1 flips one
element). Prints one JSON line: the result or the error."""
import json
import sys

import torch

import seedstore
import seedstore.torch as sst

rank, device = int(sys.argv[2]), int(sys.argv[1])
out = {"rank": rank}
try:
    comm = seedstore.init_distributed(backend="nccl", device=device, timeout=60)
    out["backend"], out["device"] = comm.backend, comm.device
    out["gather"] = list(comm.all_gather(bytes([rank, 9])))
    torch.cuda.set_device(device)
    m = torch.nn.Linear(64, 31).cuda()
    spec = {"seedstore": 1, "seed": 4, "tensors": [
        {"name": n, "shape": list(p.shape), "dtype": "float32", "init": {"dist": "normal"}}
        for n, p in m.named_parameters()]}
    sst.init_module_(m, spec)
    out["ok"] = sst.verify_replicas(m, spec, group=comm).ok
    if rank == 1:
        with torch.no_grad():
            m.weight.view(-1)[100] += 1
    out["flip"] = sst.verify_replicas(m, spec, group=comm).disagreeing
    comm.barrier("done")
    comm.close()
except seedstore.Error as e:
    out["error"] = [type(e).__name__, str(e)]
print("RESULT " + json.dumps(out), flush=True)
