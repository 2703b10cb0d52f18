"""Run under `torchrun --nproc_per_node 4` (gloo, CPU) by test_py_torch.py: each scenario's
per-rank results go to $SEEDSTORE_OUT/<scenario>.rank<r>.json, asserted by the test.

A small Llama-shaped model is built on the meta device, parallelized (FSDP2 over 4 ranks;
FSDP2 x TP = 2 x 2) and filled by seedstore.torch.init_module_; every local shard is compared
with the slice of the same model initialized whole (torch's own placement math,
compute_local_shape_and_global_offset, places the slice) and full_tensor() with the whole.
"""
import json
import os
import subprocess
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor
from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

import seedstore
import seedstore.torch as sst

# Prime and uneven sizes: FSDP's dim-0 chunks and TP's column chunks are uneven (torch.chunk).
DIM, HIDDEN, VOCAB, LAYERS, KV = 16, 23, 37, 2, 6


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.wq = nn.Linear(DIM, DIM, bias=False)
        self.wk = nn.Linear(DIM, KV, bias=False)
        self.wv = nn.Linear(DIM, KV, bias=False)
        self.wo = nn.Linear(DIM, DIM, bias=False)


class FeedForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = nn.Linear(DIM, HIDDEN, bias=False)
        self.w2 = nn.Linear(HIDDEN, DIM, bias=False)
        self.w3 = nn.Linear(DIM, HIDDEN, bias=False)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention = Attention()
        self.feed_forward = FeedForward()
        self.attention_norm = nn.RMSNorm(DIM)
        self.ffn_norm = nn.RMSNorm(DIM)


class Llama(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok_embeddings = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList([Block() for _ in range(LAYERS)])
        self.norm = nn.RMSNorm(DIM)
        self.output = nn.Linear(DIM, VOCAB, bias=False)
        # Not part of the checkpoint: init_module_ names it unless told (strict=False).
        self.register_buffer("freqs", torch.zeros(DIM // 2), persistent=False)


def spec_of(model, seed=7):
    tensors = []
    for n, p in model.named_parameters():
        init = {"dist": "ones"} if "norm" in n else {"dist": "normal", "scale": 0.02}
        tensors.append({"name": n, "shape": list(p.shape), "dtype": "float32", "init": init})
    return {"seedstore": 1, "seed": seed, "tensors": tensors}


def normal_spec(model, seed):
    """A spec of every parameter of `model`: float32, normal."""
    return {"seedstore": 1, "seed": seed, "tensors": [
        {"name": n, "shape": list(p.shape), "dtype": "float32", "init": {"dist": "normal"}}
        for n, p in model.named_parameters()]}


def whole_model(spec):
    m = Llama()
    sst.init_module_(m, spec, strict=False)
    return m


def compare_with_whole(model, whole):
    """Per parameter: the local shard equals the whole tensor's slice (bytes), and the
    all-gathered full_tensor() equals the whole tensor."""
    ref = dict(whole.named_parameters())
    bad = []
    for n, p in model.named_parameters():
        w = ref[n].detach()
        if isinstance(p, DTensor):
            shape, offset = compute_local_shape_and_global_offset(p.shape, p.device_mesh, p.placements)
            sl = tuple(slice(o, o + s) for o, s in zip(offset, shape))
            local = p.to_local().detach()
            if not torch.equal(local.view(torch.int32), w[sl].contiguous().view(torch.int32)):
                bad.append(f"{n}: local shard differs from whole{list(offset)}+{list(shape)}")
            full = p.full_tensor().detach()
        else:
            full = p.detach()
        if not torch.equal(full.view(torch.int32), w.view(torch.int32)):
            bad.append(f"{n}: full tensor differs")
    return bad


def placements(model):
    return {n: [str(x) for x in p.placements] for n, p in model.named_parameters() if isinstance(p, DTensor)}


def fsdp(mesh):
    with torch.device("meta"):
        m = Llama()
    for layer in m.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(m, mesh=mesh)
    return m


def fsdp_tp(mesh):
    with torch.device("meta"):
        m = Llama()
    for layer in m.layers:
        parallelize_module(layer, mesh["tp"], {
            "attention.wq": ColwiseParallel(), "attention.wk": ColwiseParallel(),
            "attention.wv": ColwiseParallel(), "attention.wo": RowwiseParallel(),
            "feed_forward.w1": ColwiseParallel(), "feed_forward.w2": RowwiseParallel(),
            "feed_forward.w3": ColwiseParallel()})
    parallelize_module(m, mesh["tp"], {"output": ColwiseParallel()})
    for layer in m.layers:
        fully_shard(layer, mesh=mesh["dp"])
    fully_shard(m, mesh=mesh["dp"])
    return m


def report_summary(rep):
    return {"ok": rep.ok, "disagreeing": rep.disagreeing, "ties": rep.ties,
            "tensors": {t["name"]: {k: t[k] for k in ("replicas", "composition", "reference", "composed",
                                                      "expected", "problems")} for t in rep.tensors}}


def flip_one_element(t):
    """Flips the lowest bit of one element of the rank's local shard of `t`."""
    with torch.no_grad():
        local = t.to_local() if isinstance(t, DTensor) else t
        flat = local.detach().view(-1).view(torch.int32)
        flat[flat.numel() // 2] ^= 1


def main():
    out = os.environ["SEEDSTORE_OUT"]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(1234)  # the meta module's own init never runs; values come from the spec
    spec = spec_of(Llama())
    whole = whole_model(spec)
    results = {}

    def record(name, value):
        results[name] = value

    # --- FSDP2 over 4 ranks.
    m = fsdp(init_device_mesh("cpu", (world,), mesh_dim_names=("dp",)))
    try:
        sst.init_module_(m, spec)
        record("fsdp_strict_error", None)
    except seedstore.Error as e:
        record("fsdp_strict_error", [type(e).__name__, str(e)])
    rep = sst.init_module_(m, spec, strict=False)
    record("fsdp_unmatched", rep.unmatched)
    m.freqs.zero_()  # the buffer the spec lacks: the job's own (after to_empty: uninitialized)
    record("fsdp_placements", placements(m))
    record("fsdp_bad", compare_with_whole(m, whole))
    record("fsdp_verify", report_summary(sst.verify_replicas(m, spec)))
    fp = seedstore.open(spec)
    record("fsdp_fingerprints", {n: str(fp.fingerprint(n)) for n in fp.names})
    # One flipped element in rank 1's shard of one tensor: off-spec, named, composition fails.
    if rank == 1:
        flip_one_element(m.layers[1].feed_forward.w2.weight)
    record("fsdp_flip_verify", report_summary(sst.verify_replicas(m, spec)))

    # --- FSDP2 x TP = 2 x 2.
    mesh2 = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    m2 = fsdp_tp(mesh2)
    sst.init_module_(m2, spec, strict=False)
    m2.freqs.zero_()
    record("tp_placements", placements(m2))
    record("tp_bad", compare_with_whole(m2, whole))
    record("tp_verify", report_summary(sst.verify_replicas(m2, spec)))
    # The same composed fingerprints without a source (layout-independent, I4).
    record("tp_verify_nosource", report_summary(sst.verify_replicas(m2)))

    # --- DCP: a store (lazy) and its safetensors export (dense) loaded into both shardings.
    if rank == 0:
        with open(os.path.join(out, "spec.json"), "w") as f:
            json.dump(spec, f)
        subprocess.run([os.environ["SEEDSTORE_BIN"], "init", "--spec", os.path.join(out, "spec.json"),
                        "-o", os.path.join(out, "store.h5")], check=True)
        subprocess.run([os.environ["SEEDSTORE_BIN"], "export", os.path.join(out, "store.h5"), "--format",
                        "safetensors", "-o", os.path.join(out, "m.safetensors")], check=True)
    dist.barrier()
    for src in ("store.h5", "m.safetensors"):
        for label, make in (("fsdp", lambda: fsdp(init_device_mesh("cpu", (world,), mesh_dim_names=("dp",)))),
                            ("tp", lambda: fsdp_tp(init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))))):
            mm = make()
            mm.to_empty(device="cpu")
            mm.freqs.zero_()
            sd = mm.state_dict()
            dcp.load(sd, storage_reader=sst.Reader(os.path.join(out, src)))
            key = f"dcp_{label}_{src.split('.')[-1]}"
            record(key + "_bad", compare_with_whole(mm, whole))
            rep = sst.verify_replicas(mm)
            record(key + "_composed", {t["name"]: t["composed"] for t in rep.tensors})

    # --- DCP save through seedstore.torch.Writer: a seedstore distributed save of the FSDP2 x TP
    # shards that `seedstore verify` accepts, resharded and read back into FSDP2.
    ckpt = os.path.join(out, "ckpt.h5")
    writer = sst.Writer(ckpt)
    dcp.save(m2.state_dict(), storage_writer=writer)
    record("save_table_has_rows", "layers.0.attention.wq.weight" in writer.table)
    if rank == 0:
        bin_ = os.environ["SEEDSTORE_BIN"]
        v = subprocess.run([bin_, "verify", ckpt], capture_output=True, text=True)
        record("save_cli_check", [v.returncode, v.stdout[-2000:], v.stderr[-2000:]])
        c = subprocess.run([bin_, "reshard", ckpt, "--consolidate", "-o", os.path.join(out, "cons.h5"), "-q"],
                           capture_output=True, text=True)
        record("save_reshard", [c.returncode, c.stderr[-2000:]])
        f = subprocess.run([bin_, "fingerprint", os.path.join(out, "cons.h5"), "--json"], capture_output=True, text=True)
        record("save_fingerprints", {r["name"]: r["fingerprint"] for r in json.loads(f.stdout)} if f.returncode == 0 else f.stderr)
    mm = fsdp(init_device_mesh("cpu", (world,), mesh_dim_names=("dp",)))
    mm.to_empty(device="cpu")
    dcp.load(mm.state_dict(), storage_reader=sst.Reader(ckpt))
    record("save_load_bad", compare_with_whole(mm, whole))

    # --- Writer: a state dict whose first tensor (by name) has a placement that fixes no
    # order of the mesh axes (FSDP only), before a colwise (_StridedShard) weight that needs
    # "tp" outside "dp": one layout places both. A plain DTensor sharding one dim over "dp"
    # then "tp" beside that weight really is the opposite nesting: refused, named.
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    with torch.device("meta"):
        mo = nn.Module()
        mo.a_norm = nn.RMSNorm(DIM)
        mo.l = nn.Linear(DIM, HIDDEN, bias=False)
    parallelize_module(mo, mesh["tp"], {"l": ColwiseParallel()})
    fully_shard(mo, mesh=mesh["dp"])
    ospec = normal_spec(mo, 3)
    sst.init_module_(mo, ospec)
    record("order_placements", placements(mo))
    ockpt = os.path.join(out, "order.h5")
    dcp.save(mo.state_dict(), storage_writer=sst.Writer(ockpt))
    if rank == 0:
        v = subprocess.run([os.environ["SEEDSTORE_BIN"], "verify", ockpt], capture_output=True, text=True)
        record("order_cli_check", [v.returncode, v.stderr[-2000:]])
    back = seedstore.open(ockpt)
    record("order_bad", [n for n, p in mo.named_parameters()
                         if not torch.equal(p.full_tensor(), torch.from_numpy(back.read(n)))])
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    sd = {"a": mo.l.weight, "b": distribute_tensor(torch.ones(8, 4), mesh, [Shard(0), Shard(0)])}
    try:
        dcp.save(sd, storage_writer=sst.Writer(os.path.join(out, "opposite.h5")))
        record("opposite_error", None)
    except BaseException as e:  # DCP wraps the ranks' errors in a CheckpointException
        record("opposite_error", str(e)[-3000:])
    record("opposite_left", os.path.exists(os.path.join(out, "opposite.h5")))

    # --- FSDP2 x TP with tp = 1: FSDP's "dp" sub-mesh spans every rank beside the (dp, tp)
    # root mesh; the Writer lifts it to the root and saves one layout. DTensors on two unrelated
    # meshes over the same ranks are refused, naming the meshes.
    mesh41 = init_device_mesh("cpu", (world, 1), mesh_dim_names=("dp", "tp"))
    with torch.device("meta"):
        ms = nn.Module()
        ms.a = nn.Linear(DIM, HIDDEN, bias=False)
        ms.b = nn.Linear(HIDDEN, DIM, bias=False)
    parallelize_module(ms, mesh41["tp"], {"a": ColwiseParallel()})
    fully_shard(ms, mesh=mesh41["dp"])
    sspec = normal_spec(ms, 5)
    sst.init_module_(ms, sspec)
    sckpt = os.path.join(out, "submesh.h5")
    dcp.save(ms.state_dict(), storage_writer=sst.Writer(sckpt))
    if rank == 0:  # a valid save, equal to the spec (diff exits 0 on identical tensors)
        sjson = os.path.join(out, "submesh_spec.json")
        with open(sjson, "w") as f:
            json.dump(sspec, f)
        bin_ = os.environ["SEEDSTORE_BIN"]
        v = subprocess.run([bin_, "verify", sckpt], capture_output=True, text=True)
        d = subprocess.run([bin_, "diff", sckpt, sjson], capture_output=True, text=True)
        record("submesh_cli_check", [v.returncode, d.returncode, v.stderr[-1000:] + d.stderr[-1000:]])
    two = {"a": distribute_tensor(torch.ones(8, 4), init_device_mesh("cpu", (world,)), [Shard(0)]),
           "b": distribute_tensor(torch.ones(8, 4), mesh, [Shard(0), Replicate()])}
    try:
        dcp.save(two, storage_writer=sst.Writer(os.path.join(out, "two.h5")))
        record("two_meshes_error", None)
    except BaseException as e:
        record("two_meshes_error", str(e)[-3000:])
    record("two_meshes_left", os.path.exists(os.path.join(out, "two.h5")))

    # --- FSDP2 over a parameter with a zero-size dim: torch shapes some empty local shards
    # [0, 0] where the layout's region is [k, 0]; nothing to fill, no error.
    with torch.device("meta"):
        mz = nn.Module()
        mz.w = nn.Parameter(torch.empty(23, 0))
        mz.v = nn.Parameter(torch.empty(5))
    fully_shard(mz, mesh=init_device_mesh("cpu", (world,)))
    zspec = normal_spec(mz, 0)
    try:
        rep = sst.init_module_(mz, zspec)
        record("zero_dim", [sorted(rep.initialized), list(mz.w.to_local().shape),
                            torch.equal(mz.v.full_tensor(), torch.from_numpy(seedstore.open(zspec).read("v"))),
                            sst.verify_replicas(mz, source=zspec).ok])
    except seedstore.Error as e:
        record("zero_dim", f"{type(e).__name__}: {e}")

    # --- torchtitan#166: DDP-style replicas (plain tensors on every rank) never seeded alike.
    r = Llama()
    torch.manual_seed(rank)
    r.apply(lambda mod: mod.reset_parameters() if hasattr(mod, "reset_parameters") else None)
    record("unseeded_verify", report_summary(sst.verify_replicas(r)))
    record("unseeded_verify_source", report_summary(sst.verify_replicas(r, spec)))
    # Replicas from the spec, then rank 2 re-seeds one tensor and rank 3 flips one element.
    sst.init_module_(r, spec, strict=False)
    if rank == 2:
        torch.manual_seed(99)
        with torch.no_grad():
            nn.init.normal_(r.layers[0].attention.wq.weight, std=0.02)
    if rank == 3:
        flip_one_element(r.output.weight)
    record("replica_verify", report_summary(sst.verify_replicas(r)))
    try:
        sst.verify_replicas(r, raise_on_failure=True)
        record("replica_raise", None)
    except seedstore.MismatchError as e:
        record("replica_raise", [e.code, str(e)])

    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(results, f, indent=1, sort_keys=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
