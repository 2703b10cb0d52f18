"""seedstore.torch: PyTorch integration.

    seedstore.torch.init_module_(module, source)   # fill a meta-built, parallelized module
    seedstore.torch.verify_replicas(module, source=None, group=None)  # live replica check

A module's parameters and buffers are matched to the source's tensors by their
fully-qualified names (`name_map` renames). A DTensor's placement on its DeviceMesh --
Shard(d), Replicate(), and the _StridedShard FSDP2 puts over a TP-sharded dim -- is turned
into the library's layout notation (a mesh and DTensor placements, docs/LAYOUT.md), and the
library computes the region each rank holds: each rank generates only its local shard, bit for
bit the slice of the whole tensor (invariant I1). Plain tensors are whole tensors, replicated.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import torch
import torch.distributed as dist

import seedstore as _ss
from seedstore import _core
from seedstore._replicas import ReplicaReport, glob_literal as _glob_literal, verify_groups

__all__ = ["init_module_", "verify_replicas", "InitReport", "ReplicaReport", "layout_of", "Reader",
           "Writer"]

NameMap = Union[None, Dict[str, str], Callable[[str], Optional[str]]]

_TORCH_DTYPES = {
    torch.float32: "float32", torch.float64: "float64", torch.bfloat16: "bfloat16",
    torch.float16: "float16", torch.uint8: "uint8", torch.int8: "int8", torch.int16: "int16",
    torch.int32: "int32", torch.int64: "int64", torch.bool: "bool",
}
for _n in ("uint16", "uint32", "uint64"):
    if hasattr(torch, _n):
        _TORCH_DTYPES[getattr(torch, _n)] = _n


def _err(cls, code: str, msg: str):
    return cls(f"{code}: {msg}")


def _is_dtensor(t: torch.Tensor) -> bool:
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # pragma: no cover - torch without DTensor
        return False
    return isinstance(t, DTensor)


def _local(t: torch.Tensor) -> torch.Tensor:
    """The rank's local shard (same storage), detached."""
    if _is_dtensor(t):
        t = t.to_local()
    return t.detach()


@dataclass
class _MeshPlacement:
    """A DTensor's placement in the library's notation: mesh axes (reordered for
    _StridedShard), their sizes, the rank at each row-major position, one DTensor entry per
    axis. `ranks` holds the layout's rank at each position of the mesh in its own axis order
    `mesh_axes`; `nest` lists, per sharded dim, the axes sharding it outermost first."""
    axes: List[str]
    shape: List[int]
    devices: List[int]  # group ranks, row-major over `axes`
    entries: List[str]
    mesh_axes: List[str] = field(default_factory=list)
    ranks: Any = None
    nest: Dict[int, List[str]] = field(default_factory=dict)

    def mesh_json(self) -> dict:
        return {"axes": self.axes, "shape": self.shape, "devices": self.devices}

    def key(self) -> str:
        return json.dumps(self.mesh_json(), sort_keys=True)

    def reordered(self, axes: List[str]) -> Optional["_MeshPlacement"]:
        """The same placement over the same mesh with its axes in order `axes`, when that
        order keeps every dim's nesting (else None)."""
        if sorted(axes) != sorted(self.mesh_axes) or self.ranks is None:
            return None
        for order in self.nest.values():
            if [a for a in axes if a in order] != order:
                return None
        by = dict(zip(self.axes, self.entries))
        sizes = dict(zip(self.axes, self.shape))
        perm = self.ranks.permute(*[self.mesh_axes.index(a) for a in axes]).reshape(-1).tolist()
        return _MeshPlacement(axes=list(axes), shape=[sizes[a] for a in axes], devices=perm,
                              entries=[by[a] for a in axes], mesh_axes=self.mesh_axes,
                              ranks=self.ranks, nest=self.nest)


def _on_root_mesh(name: str, t: torch.Tensor, world: int):
    """DTensor `t`'s mesh and placements, lifted to its root mesh when its own mesh is a
    smaller named sub-mesh (e.g. FSDP's "dp" of a ("dp", "tp") mesh): Replicate() on the root
    axes it does not use."""
    from torch.distributed.tensor import Replicate
    mesh, placements = t.device_mesh, list(t.placements)
    if mesh.size() == world or not hasattr(mesh, "_get_root_mesh"):
        return mesh, placements  # a mesh spanning the group: _widened joins equal arrangements
    root = mesh._get_root_mesh()
    names, root_names = list(mesh.mesh_dim_names or []), list(root.mesh_dim_names or [])
    if root is mesh or not names or any(n not in root_names for n in names):
        raise _err(_ss.InvalidArgumentError, "INVALID_ARGUMENT",
                   f"verify_replicas: tensor '{name}': its DeviceMesh {mesh} spans {mesh.size()} of "
                   f"the group's {world} ranks and is no named sub-mesh of a mesh spanning them: pass "
                   "the group its mesh spans")
    lifted = [placements[names.index(n)] if n in names else Replicate() for n in root_names]
    return root, lifted


def _mesh_placement(name: str, t: torch.Tensor, to_rank: Callable[[int], int],
                    on=None) -> _MeshPlacement:
    """The placement of DTensor `t` over its own mesh, or over the (mesh, placements) `on`
    gives (_widened: lifted to a root or wider mesh); `to_rank` maps a global rank to the rank numbering
    of the layout (the group's). Unsupported placements (Partial, a _StridedShard whose split
    factor is not the later axes sharding its dim) are named."""
    mesh, placements = on if on is not None else (t.device_mesh, list(t.placements))
    names = list(mesh.mesh_dim_names or [f"d{i}" for i in range(mesh.ndim)])
    sizes = list(mesh.shape)
    ranks = mesh.mesh  # tensor of global ranks, shape = sizes
    entries: List[str] = []
    order = list(range(mesh.ndim))
    ndim = t.dim()
    def strided(p) -> bool:
        return type(p).__name__ == "_StridedShard" and hasattr(p, "split_factor")

    def sharded(p) -> bool:
        return p.is_shard() or strided(p)

    for a, p in enumerate(placements):
        if p.is_replicate():
            entries.append("Replicate()")
            continue
        if not sharded(p):
            raise _err(_ss.UnsupportedError, "UNSUPPORTED",
                       f"tensor '{name}': placement {p} on mesh axis '{names[a]}' is not a shard or "
                       "a replica (Partial values are not a tensor's elements)")
        d = p.dim % ndim if ndim else 0
        entries.append(f"Shard({d})")
        if strided(p):
            sf = p.split_factor
            # FSDP2 over a TP-sharded dim: the later axes sharding dim d chunk first, then this
            # axis chunks each of their pieces -- nesting with those axes outermost.
            later = [b for b in range(a + 1, mesh.ndim)
                     if sharded(placements[b]) and placements[b].dim % ndim == d]
            prod = 1
            for b in later:
                prod *= sizes[b]
            if not later or prod != sf:
                raise _err(_ss.UnsupportedError, "UNSUPPORTED",
                           f"tensor '{name}': {p} on mesh axis '{names[a]}': split factor {sf} is not "
                           f"the product of the later mesh axes sharding dim {d} ({prod})")
            order.remove(a)
            order.insert(order.index(later[-1]) + 1, a)
    mapped = torch.tensor([to_rank(g) for g in ranks.reshape(-1).tolist()]).reshape(ranks.shape)
    nest: Dict[int, List[str]] = {}
    for a in order:
        e = entries[a]
        if e.startswith("Shard("):
            nest.setdefault(int(e[6:-1]), []).append(names[a])
    return _MeshPlacement(axes=[names[a] for a in order], shape=[sizes[a] for a in order],
                          devices=mapped.permute(*order).reshape(-1).tolist(),
                          entries=[entries[a] for a in order], mesh_axes=names, ranks=mapped,
                          nest=nest)


def _dense_ranks(devs: List[int], name: str) -> List[int]:
    if sorted(devs) != list(range(len(devs))):
        raise _err(_ss.InvalidArgumentError, "INVALID_ARGUMENT",
                   f"tensor '{name}': its DeviceMesh ranks {sorted(devs)} are not the ranks 0..n-1 "
                   "of the group")
    return devs


def layout_of(name: str, t: torch.Tensor, group=None) -> Tuple[_ss.Layout, int]:
    """The library Layout placing tensor `name` as `t` is placed, and this process's rank in
    it: a DTensor's mesh and placements (ranks numbered in `group`, default: the world; for
    init, the mesh's own ranks), or, for a plain tensor, one rank holding it whole."""
    if not _is_dtensor(t):
        return _ss.Layout.replicated(1), 0
    mesh_ranks = sorted(t.device_mesh.mesh.reshape(-1).tolist())
    if group is None:
        index = {g: i for i, g in enumerate(mesh_ranks)}
        to_rank = index.__getitem__
        me = index[dist.get_rank()]
    else:
        to_rank = lambda g: dist.get_group_rank(group, g)  # noqa: E731
        me = dist.get_rank(group)
    mp = _mesh_placement(name, t, to_rank)
    _dense_ranks(mp.devices, name)
    layout = _ss.Layout({"mesh": mp.mesh_json(),
                         "placements": [{"match": _glob_literal(name), "dtensor": mp.entries}]})
    return layout, me


def _named_tensors(module: torch.nn.Module):
    seen = set()
    for kind, it in (("parameter", module.named_parameters()), ("buffer", module.named_buffers())):
        for n, t in it:
            if id(t) in seen:
                continue
            seen.add(id(t))
            yield kind, n, t


def _map_name(name_map: NameMap, n: str) -> Optional[str]:
    if name_map is None:
        return n
    if callable(name_map):
        return name_map(n)
    return name_map.get(n, n)


@dataclass
class InitReport:
    """What init_module_ filled (module name -> source name) and what it left (names)."""
    initialized: Dict[str, str] = field(default_factory=dict)
    unmatched: List[str] = field(default_factory=list)


def _default_device(module: torch.nn.Module) -> torch.device:
    for _, _, t in _named_tensors(module):
        if _is_dtensor(t):
            dt = t.device_mesh.device_type
            if dt == "cuda":
                return torch.device("cuda", torch.cuda.current_device())
            return torch.device(dt)
    if _ss.CUDA_BUILT and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def init_module_(module: torch.nn.Module, source: Any, *, device=None, strict: bool = True,
                 name_map: NameMap = None, threads: int = 0) -> InitReport:
    """Fills every parameter and buffer of `module` from `source` (anything seedstore.open
    takes), in place: each rank generates (lazy) or reads (dense) only its local shard of
    each DTensor, plain tensors whole. A module's meta tensors are first given storage on
    `device` (default: the DTensors' mesh device type, else CUDA when available and built, else
    CPU), as `module.to_empty` but for them only (a tensor that has storage keeps its values)
    and keeping tied parameters tied.

    Everything is checked before a value is written: a tensor the source lacks (strict: every
    parameter and buffer must match; strict=False: they are left as they are and listed in
    InitReport.unmatched), a global shape or dtype that differs from the source's, an
    unsupported placement -- each raises an Error naming the tensors.
    """
    cat = _ss.open(source)
    plan = []
    unmatched, problems = [], []
    for kind, n, t in _named_tensors(module):
        src = _map_name(name_map, n)
        if src is None or src not in cat:
            unmatched.append(n)
            continue
        info = cat[src]
        shape = tuple(t.shape)
        dtype = _TORCH_DTYPES.get(t.dtype, str(t.dtype))
        if shape != tuple(info.shape):
            problems.append(f"{kind} '{n}' has shape {list(shape)}, source tensor '{src}' {list(info.shape)}")
        elif dtype != info.dtype:
            problems.append(f"{kind} '{n}' has dtype {dtype}, source tensor '{src}' {info.dtype}")
        else:
            plan.append((n, src, t))
    if problems:
        raise _err(_ss.InvalidArgumentError, "INVALID_ARGUMENT",
                   f"init_module_ from '{cat.origin}': " + "; ".join(problems))
    if unmatched and strict:
        raise _err(_ss.NotFoundError, "NOT_FOUND",
                   f"init_module_: source '{cat.origin}' has no tensor for {len(unmatched)} of the "
                   f"module's tensors: " + ", ".join(f"'{u}'" for u in unmatched) +
                   " (name_map= renames; strict=False leaves them as they are)")
    regions = []
    for n, src, t in plan:
        layout, me = layout_of(src, t)
        region = layout.shard(src, list(t.shape), me).region
        local = tuple(_local(t).shape)  # a meta tensor's too: to_empty keeps every shape
        # torch may shape an empty local shard otherwise than the layout does ([0, 0] for
        # [6, 0]): nothing to fill either way.
        if local != tuple(region.local_shape) and (math.prod(local) or region.count):
            raise _err(_ss.InternalError, "INTERNAL",
                       f"init_module_: tensor '{n}': local shard {list(local)} is not the "
                       f"region {region} the layout gives ({list(region.local_shape)})")
        regions.append(region)
    if any(t.is_meta for _, _, t in _named_tensors(module)):
        _to_empty(module, device if device is not None else _default_device(module))
        by_name = {n: t for _, n, t in _named_tensors(module)}
        plan = [(n, src, by_name[n]) for n, src, _ in plan]
    report = InitReport(unmatched=unmatched)
    with torch.no_grad():
        for (n, src, t), region in zip(plan, regions):
            if region.count:
                local = _local(t)
                if local.is_contiguous():
                    cat.materialize(src, local, region, threads=threads)
                else:  # a strided parameter: through one contiguous buffer
                    tmp = torch.empty(local.shape, dtype=local.dtype, device=local.device)
                    cat.materialize(src, tmp, region, threads=threads)
                    local.copy_(tmp)
            report.initialized[n] = src
    return report


def _to_empty(module: torch.nn.Module, device) -> None:
    """`module.to_empty(device=device)` for its meta tensors only: a tensor that has storage
    keeps it (and its values), and a parameter tied under several names stays one parameter
    (torch's to_empty gives each name its own uninitialized tensor)."""
    names: Dict[int, List[str]] = {}
    for n, p in module.named_parameters(remove_duplicate=False):
        names.setdefault(id(p), []).append(n)
    made: Dict[int, Tuple[torch.Tensor, torch.Tensor]] = {}  # id(meta) -> (meta, new)

    def fn(t: torch.Tensor) -> torch.Tensor:
        if not t.is_meta:
            return t
        if id(t) not in made:
            made[id(t)] = (t, torch.empty_like(t, device=device))
        return made[id(t)][1]

    module._apply(fn)
    for tied in names.values():
        first = module.get_parameter(tied[0])
        for n in tied[1:]:
            owner, _, leaf = n.rpartition(".")
            sub = module.get_submodule(owner)
            if sub._parameters[leaf] is not first:
                sub._parameters[leaf] = first


class _TorchExchange:
    """The library's Exchange over torch.distributed: all-gathers of equal-sized byte blocks
    and barriers on `group` (gloo: CPU tensors; NCCL: the current CUDA device)."""

    def __init__(self, group):
        self.group = group
        backend = dist.get_backend(group)
        self.device = (torch.device("cuda", torch.cuda.current_device())
                       if backend == "nccl" else torch.device("cpu"))

    def rank(self) -> int:
        return dist.get_rank(self.group)

    def size(self) -> int:
        return dist.get_world_size(self.group)

    def all_gather(self, data: bytes) -> bytes:
        n = len(data)
        mine = torch.frombuffer(bytearray(data), dtype=torch.uint8) if n else torch.empty(0, dtype=torch.uint8)
        mine = mine.to(self.device)
        outs = [torch.empty(n, dtype=torch.uint8, device=self.device) for _ in range(self.size())]
        dist.all_gather(outs, mine, group=self.group)
        return b"".join(o.cpu().numpy().tobytes() for o in outs)

    def barrier(self) -> None:
        dist.barrier(group=self.group)


def _exchange_of(group, what: str):
    """The exchange verify_replicas / Writer run over, its size, and the map from a global
    torch rank to its rank in it: a torch.distributed group (`group`, default the world), or a
    seedstore.Communicator (seedstore.init_distributed), whose ranks are the job's global
    ranks."""
    if isinstance(group, _ss.Communicator):
        if dist.is_available() and dist.is_initialized() and (
                group.size != dist.get_world_size() or group.rank != dist.get_rank()):
            raise _err(_ss.InvalidArgumentError, "INVALID_ARGUMENT",
                       f"{what}: the communicator's rank {group.rank} of {group.size} is not this "
                       f"process's torch.distributed rank {dist.get_rank()} of {dist.get_world_size()}")
        return group._c, group.size, (lambda g: g)
    if group is None:
        group = dist.group.WORLD
    ex = _TorchExchange(group)
    return ex, ex.size(), (lambda g: dist.get_group_rank(group, g))


def _axis_order(mesh_axes: List[str], nests: List[List[str]]) -> Optional[List[str]]:
    """An order of `mesh_axes` in which every list of `nests` (axes sharding one dim, outermost
    first) keeps its order, ties broken by the mesh's own order; None when they conflict."""
    after = {a: set() for a in mesh_axes}
    for order in nests:
        for x, y in zip(order, order[1:]):
            after[x].add(y)
    before = {a: sum(a in after[x] for x in mesh_axes) for a in mesh_axes}
    out: List[str] = []
    while len(out) < len(mesh_axes):
        free = [a for a in mesh_axes if a not in out and before[a] == 0]
        if not free:
            return None
        out.append(free[0])
        for y in after[free[0]]:
            before[y] -= 1
    return out


def _widened(named, world: int) -> Dict[str, tuple]:
    """Each DTensor's (mesh, placements) on its root mesh (_on_root_mesh), then on a wider mesh
    of the same ranks that another DTensor of `named` uses, when the wider mesh only adds axes
    of size 1: torch can hand FSDP's "dp" sub-mesh of a (dp, tp) = (4, 1) mesh back as a root
    mesh of its own (an equal "dp" mesh made earlier), and the two are one arrangement."""
    from torch.distributed.tensor import Replicate
    on = {n: _on_root_mesh(n, t, world) for n, t in named if _is_dtensor(t)}
    meshes = []
    for m, _ in on.values():
        if all(m is not x for x in meshes):
            meshes.append(m)
    for n, (m, pl) in on.items():
        names = list(m.mesh_dim_names or [])
        for w in meshes:
            wide = list(w.mesh_dim_names or [])
            if (w.ndim > m.ndim and names and [a for a in wide if a in names] == names and
                    all(k == 1 for a, k in zip(wide, w.shape) if a not in names) and
                    w.mesh.reshape(-1).tolist() == m.mesh.reshape(-1).tolist()):
                on[n] = (w, [pl[names.index(a)] if a in names else Replicate() for a in wide])
                break
    return on


def _layout_groups(named, name_map: NameMap, to_rank, world: int, what: str):
    """Tensors `named` ((name, tensor) pairs) as few library layouts over the group as their
    placements allow (one, unless two tensors over one mesh nest its axes in orders no single
    order of the axes keeps): a list of (Layout, [(name, global shape, local shard)]) -- plain
    tensors, unmatched by any rule, replicated over the first --, whether any shard is on
    CUDA, and over how many distinct meshes the groups lie. A group's axis order is found from
    all its tensors' nestings (_axis_order), so the order of `named` does not decide whether
    they fit one layout."""
    groups: List[Tuple[_MeshPlacement, list, list]] = []  # (first placement, nests, members)
    plain = []
    cuda = False
    named = [(n, t) for n, t in named if _map_name(name_map, n) is not None]
    on = _widened(named, world)
    for n, t in named:
        name = _map_name(name_map, n)
        local = _local(t)
        cuda = cuda or local.is_cuda
        if not _is_dtensor(t):
            plain.append((name, list(t.shape), local))
            continue
        mp = _mesh_placement(name, t, to_rank, on[n])
        if len(mp.devices) != world:
            raise _err(_ss.InvalidArgumentError, "INVALID_ARGUMENT",
                       f"{what}: tensor '{n}': its DeviceMesh has {len(mp.devices)} ranks, "
                       f"the group {world}: pass the group its mesh spans")
        _dense_ranks(mp.devices, n)
        nests = [o for o in mp.nest.values() if len(o) > 1]
        for g in groups:
            if (g[0].mesh_axes == mp.mesh_axes and torch.equal(g[0].ranks, mp.ranks) and
                    _axis_order(mp.mesh_axes, g[1] + nests) is not None):
                break
        else:
            g = (mp, [], [])
            groups.append(g)
        g[1].extend(nests)
        g[2].append((name, mp, list(t.shape), local))
    out = []
    for first, nests, members in groups:
        axes = _axis_order(first.mesh_axes, nests)
        placed = [(name, mp.reordered(axes), shape, local) for name, mp, shape, local in members]
        layout = _ss.Layout({"mesh": placed[0][1].mesh_json(),
                             "placements": [{"match": _glob_literal(name), "dtensor": mp.entries}
                                            for name, mp, _, _ in placed]})
        out.append((layout, [(name, shape, local) for name, _, shape, local in placed]))
    if not out:
        out.append((_ss.Layout({"mesh": {"axes": ["data"], "shape": [world],
                                         "devices": list(range(world))}, "placements": []}), []))
    out[0] = (out[0][0], out[0][1] + plain)
    meshes = {(tuple(g[0].mesh_axes), tuple(g[0].ranks.reshape(-1).tolist())) for g in groups}
    return out, cuda, len(meshes)


def verify_replicas(module: torch.nn.Module, source: Any = None, group=None, *,
                    name_map: NameMap = None, threads: int = 0,
                    raise_on_failure: bool = False) -> ReplicaReport:
    """In a live job, checks that the ranks of `group` (default: the world; or a
    seedstore.Communicator from seedstore.init_distributed) hold one model:
    each rank fingerprints its local shard of every parameter and buffer and the ranks exchange
    16 bytes (+1 flag byte) per shard. Per tensor the report says whether the replicas of each
    region agree, naming the ranks that differ from the majority (a tie blames nobody and lists
    the votes), and -- with `source` (anything seedstore.open takes) -- whether the shards
    compose to the source's fingerprint, naming off-spec ranks. Every rank must call it with
    the same module structure. Errors: InvalidArgumentError when ranks pass different tensors
    or a DTensor's mesh is not the group; IoError from the exchange. With raise_on_failure a
    failed verdict raises MismatchError."""
    ex, world, to_rank = _exchange_of(group, "verify_replicas")
    ref = _ss.open(source)._c if source is not None else None
    groups, cuda, _ = _layout_groups(((n, t) for _, n, t in _named_tensors(module)), name_map, to_rank,
                                  world, "verify_replicas")
    if cuda:
        torch.cuda.current_stream().synchronize()
    return verify_groups(ex, [(layout, [params]) for layout, params in groups], ref, threads,
                         raise_on_failure)


_DTYPES_BY_NAME = {v: k for k, v in _TORCH_DTYPES.items()}


try:
    from torch.distributed.checkpoint import StorageReader as _StorageReader
except ImportError:  # pragma: no cover - torch without DCP
    _StorageReader = object


class Reader(_StorageReader):
    """A torch.distributed.checkpoint StorageReader over any seedstore source: a store, a
    distributed save, a spec, safetensors or an HF index.

        dcp.load(state_dict, storage_reader=seedstore.torch.Reader(path))

    loads it into any sharding of `state_dict` (DTensors of FSDP2 / TP, plain tensors): the
    planner asks for each local shard's box of the global tensor, which is generated in place
    (lazy tensors) or read (dense ones) -- no rank reads or generates more than its shards.
    Each source tensor is presented to DCP as one chunk covering it (the library serves any box
    of it, whatever layout it was saved under). Only tensors: a non-tensor entry of the state
    dict is not in the checkpoint. `name_map` (a dict) renames state-dict keys to source
    names."""

    def __init__(self, source: Any, *, name_map: Optional[Dict[str, str]] = None,
                 threads: int = 0):
        super().__init__()
        if name_map is not None and not isinstance(name_map, dict):
            raise _err(_ss.InvalidArgumentError, "INVALID_ARGUMENT",
                       "seedstore.torch.Reader: name_map must be a dict (state-dict key -> source "
                       f"name), not {type(name_map).__name__}: DCP looks the checkpoint up by "
                       "state-dict key, and a function cannot list them")
        self._source = source
        self._cat = _ss.open(source)
        self._name_map = name_map
        self._threads = threads

    def _src(self, fqn: str) -> str:
        n = _map_name(self._name_map, fqn)
        return fqn if n is None else n

    def reset(self, checkpoint_id=None) -> None:
        if checkpoint_id is not None and str(checkpoint_id) != str(self._source):
            self._source = checkpoint_id
            self._cat = _ss.open(checkpoint_id)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id) -> bool:
        try:
            _ss.open(checkpoint_id)
            return True
        except (_ss.Error, TypeError):
            return False

    def read_metadata(self):
        from torch.distributed.checkpoint.metadata import (ChunkStorageMetadata, Metadata,
                                                           TensorProperties, TensorStorageMetadata)
        md = {}
        inverse = {}
        if isinstance(self._name_map, dict):
            inverse = {v: k for k, v in self._name_map.items()}
        for t in self._cat.tensors:
            dtype = _DTYPES_BY_NAME.get(t.dtype)
            if dtype is None:
                continue  # a dtype torch has no type for: not offered
            size = torch.Size(t.shape)
            md[inverse.get(t.name, t.name)] = TensorStorageMetadata(
                properties=TensorProperties(dtype=dtype), size=size,
                chunks=[ChunkStorageMetadata(offsets=torch.Size([0] * len(size)), sizes=size)])
        return Metadata(state_dict_metadata=md)

    def set_up_storage_reader(self, metadata, is_coordinator: bool) -> None:
        pass

    def prepare_local_plan(self, plan):
        return plan

    def prepare_global_plan(self, plans):
        return plans

    def read_data(self, plan, planner):
        from torch.distributed.checkpoint.planner import LoadItemType
        from torch.futures import Future
        for item in plan.items:
            if item.type == LoadItemType.BYTE_IO:
                raise _err(_ss.UnsupportedError, "UNSUPPORTED",
                           f"seedstore.torch.Reader: '{item.dest_index.fqn}' is not a tensor; a seedstore "
                           "source holds tensors only")
            name = self._src(item.storage_index.fqn)
            start = [o + s for o, s in zip(item.storage_index.offset or [0] * len(item.lengths),
                                           item.storage_offsets)]
            box = [(a, a + n) for a, n in zip(start, item.lengths)]
            target = planner.resolve_tensor(item).detach()
            if target.is_contiguous():
                self._cat.materialize(name, target, box, threads=self._threads)
            else:  # a strided view of the destination: through one contiguous buffer
                tmp = torch.empty(target.shape, dtype=target.dtype, device=target.device)
                self._cat.materialize(name, tmp, box, threads=self._threads)
                target.copy_(tmp)
            planner.commit_tensor(item, target)
        fut = Future()
        fut.set_result(None)
        return fut


try:
    from torch.distributed.checkpoint import StorageWriter as _StorageWriter
except ImportError:  # pragma: no cover - torch without DCP
    _StorageWriter = object


class Writer(_StorageWriter):
    """A torch.distributed.checkpoint StorageWriter that writes a seedstore distributed save:

        dcp.save(state_dict, storage_writer=seedstore.torch.Writer("ckpt.h5"))

    Every rank writes its own shards (replica 0 of each region) into its rank file, in
    parallel, from the state dict's memory (io/dist_store.h SaveBuffers), and the save is proven
    against the shards' fingerprints before dcp.save returns; `seedstore verify ckpt.h5`
    checks it and Reader (or any seedstore command) reads it under any layout. The state dict's
    DTensor placements become the save's layout. Tensors in host memory only; an entry that is
    not a tensor is refused by name. DCP's own .metadata file is not written: the save's
    master file is its index.

    `codec`: "zstd" (default: shuffle + zstd), "none" (every tensor stored uncompressed: page-cache
    reads at copy speed, bigger files) or a list of tensor-name globs to store uncompressed
    (`seedstore save-ranks --codec none:GLOB`; docs/FORMAT.md 4.2)."""

    def __init__(self, path: Any, *, group=None, threads: int = 0, codec: Any = "zstd"):
        super().__init__()
        self.path = str(path)
        self.group = group
        self.threads = threads
        if codec == "zstd":
            self.uncompressed = []
        elif codec == "none":
            self.uncompressed = ["*"]
        elif not isinstance(codec, str) and all(isinstance(g, str) and g for g in codec):
            self.uncompressed = list(codec)
        else:
            raise _err(_ss.InvalidArgumentError, "INVALID_ARGUMENT",
                       f"seedstore.torch.Writer: codec {codec!r}: expected 'zstd', 'none' or a "
                       "list of tensor-name globs to store uncompressed")
        self.table = ""

    def reset(self, checkpoint_id=None) -> None:
        if checkpoint_id is not None:
            self.path = str(checkpoint_id)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id) -> bool:
        return isinstance(checkpoint_id, (str, bytes)) or hasattr(checkpoint_id, "__fspath__")

    def set_up_storage_writer(self, is_coordinator: bool, *args, **kwargs) -> None:
        pass

    def prepare_local_plan(self, plan):
        return plan

    def prepare_global_plan(self, plans):
        return plans

    def write_data(self, plan, planner):
        from torch.distributed.checkpoint.storage import WriteResult
        from torch.futures import Future
        state = getattr(planner, "state_dict", None)
        if state is None:
            raise _err(_ss.UnsupportedError, "UNSUPPORTED",
                       f"seedstore.torch.Writer: planner {type(planner).__name__} keeps no state_dict")
        bad = [k for k, v in state.items() if not isinstance(v, torch.Tensor)]
        if bad:
            raise _err(_ss.InvalidArgumentError, "INVALID_ARGUMENT",
                       "seedstore.torch.Writer: a seedstore save holds tensors only; not tensors: " +
                       ", ".join(f"'{k}'" for k in bad))
        ex, world, to_rank = _exchange_of(self.group, "seedstore.torch.Writer")
        groups, _, meshes = _layout_groups(sorted(state.items()), None, to_rank, world,
                                           "seedstore.torch.Writer")
        if len(groups) != 1:
            which = "; ".join(f"'{members[0][0]}'" + (f" and {len(members) - 1} more" if len(members) > 1 else "")
                              for _, members in groups)
            why = (f"are on {meshes} different DeviceMeshes ({which}): one save has one mesh, "
                   "so put them on one (named sub-meshes of it are fine)" if meshes > 1 else
                   f"nest the same mesh axes in opposite orders ({which}), which one layout cannot place")
            raise _err(_ss.UnsupportedError, "UNSUPPORTED",
                       "seedstore.torch.Writer: the state dict's DTensors " + why)
        layout, params = groups[0]
        self.table = _core.save_buffers(ex, params, layout._l, self.path, self.threads,
                                        self.uncompressed)
        results = [WriteResult(index=item.index, size_in_bytes=0, storage_data=None) for item in plan.items]
        fut = Future()
        fut.set_result(results)
        return fut

    def finish(self, metadata, results) -> None:
        pass
