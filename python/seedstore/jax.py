"""seedstore.jax: jax.Arrays built shard by shard from a seedstore source.

    params = seedstore.jax.load(source, shardings)
    report = seedstore.jax.verify_replicas(params, source)   # across every process of the job

Each addressable device's box (jax.sharding's addressable_devices_indices_map, through
jax.make_array_from_callback) is generated (lazy) or read (dense) by the library alone and
placed on that device: no device ever holds more than its own shard, and the values are those
of the whole tensor sliced -- bit-identical to jax.random under the same key (generator
threefry, key {"seed": N}; docs/JAX-EXACTNESS.md lists the measured exceptions), whatever the
mesh.
"""
from __future__ import annotations

import json

from typing import Any, Dict, List, Mapping, Optional, Union

import jax
import numpy as np

import seedstore as _ss
from seedstore._replicas import ReplicaReport, glob_literal as _glob_literal, verify_groups

__all__ = ["load", "verify_replicas", "ReplicaReport"]


def _box(index, shape):
    """A jax index (a tuple of slices, step 1) as (start, stop) pairs."""
    box = []
    for d, s in enumerate(index):
        start, stop, step = s.indices(shape[d])
        if step != 1:
            raise _ss.InvalidArgumentError(f"INVALID_ARGUMENT: sharding index {index} has a step")
        box.append((start, max(start, stop)))
    return box


def load(source: Any, shardings: Union[Mapping[str, Any], Any], *,
         names: Optional[list] = None, threads: int = 0) -> Dict[str, jax.Array]:
    """Tensors of `source` (anything seedstore.open takes) as jax.Arrays: `shardings` maps a
    tensor name to its jax.sharding.Sharding, or is one Sharding for every tensor (`names`
    picks which; default all, or the mapping's keys). Errors: NotFoundError naming a tensor the
    source lacks; the library's errors (bad boxes, corrupt files) named as everywhere."""
    cat = _ss.open(source)
    if isinstance(shardings, Mapping):
        wanted = list(names if names is not None else shardings.keys())
        pick = shardings.__getitem__
    else:
        wanted = list(names if names is not None else cat.names)
        pick = lambda _n: shardings  # noqa: E731
    missing = [n for n in wanted if n not in cat]
    if missing:
        raise _ss.NotFoundError(f"NOT_FOUND: seedstore.jax.load: source '{cat.origin}' has no tensor " +
                                ", ".join(f"'{n}'" for n in missing))
    if isinstance(shardings, Mapping):
        unplaced = [n for n in wanted if n not in shardings]
        if unplaced:
            raise _ss.NotFoundError("NOT_FOUND: seedstore.jax.load: shardings has no entry for " +
                                    ", ".join(f"'{n}'" for n in unplaced))
    # Every sharding is checked against its tensor's shape before anything is read.
    placed = []
    for name in wanted:
        shape, sharding = tuple(cat[name].shape), pick(name)
        try:
            if not isinstance(sharding, jax.sharding.Sharding):
                raise TypeError(f"{type(sharding).__name__} is not a jax.sharding.Sharding")
            sharding.shard_shape(shape)  # raises where the sharding cannot apply to the shape
            sharding.devices_indices_map(shape)
        except Exception as e:  # JAX's own errors (ValueError, IndexError, TypeError ...)
            raise _ss.InvalidArgumentError(
                f"INVALID_ARGUMENT: seedstore.jax.load: tensor '{name}' of shape {list(shape)}: "
                f"sharding {sharding!r} cannot place it ({type(e).__name__}: {e})") from e
        placed.append((name, shape, sharding))
    out = {}
    for name, shape, sharding in placed:
        def shard(index, name=name, shape=shape):
            return cat.read(name, _box(index, shape) if shape else None, threads=threads)

        out[name] = jax.make_array_from_callback(shape, sharding, shard)
    return out


class _JaxExchange:
    """The library's Exchange over the processes of a JAX job: all-gathers of equal-sized byte
    blocks through jax.experimental.multihost_utils.process_allgather, barriers through
    sync_global_devices. (On CPU, cross-process collectives go through
    jax_cpu_collectives_implementation: "gloo", JAX's default, works; "none" cannot.)"""

    def rank(self) -> int:
        return jax.process_index()

    def size(self) -> int:
        return jax.process_count()

    def all_gather(self, data: bytes) -> bytes:
        if jax.process_count() == 1 or not data:
            return data
        from jax.experimental import multihost_utils
        out = multihost_utils.process_allgather(np.frombuffer(data, dtype=np.uint8), tiled=False)
        return np.asarray(out).tobytes()

    def barrier(self) -> None:
        if jax.process_count() > 1:
            from jax.experimental import multihost_utils
            multihost_utils.sync_global_devices("seedstore.jax.verify_replicas")


def _key_name(k) -> str:
    for attr in ("key", "name", "idx"):
        if hasattr(k, attr):
            return str(getattr(k, attr))
    return str(k)


def _leaf_name(path) -> str:
    """A pytree path as a dotted name: {'layers': [{'w': x}]} -> 'layers.0.w'."""
    return ".".join(_key_name(k) for k in path)


def _spec_entry(leaf: str, e):
    if e is None or isinstance(e, str):
        return e
    if isinstance(e, tuple) and all(isinstance(a, str) for a in e):
        return list(e)
    raise _ss.UnsupportedError(f"UNSUPPORTED: verify_replicas: leaf '{leaf}': PartitionSpec entry {e!r} "
                               "is not None, a mesh axis or a tuple of mesh axes")


def verify_replicas(pytree: Any, source: Any = None, *, threads: int = 0,
                    raise_on_failure: bool = False) -> ReplicaReport:
    """Checks, in a live (multi-process) JAX job, that the devices of every process hold one
    model: every process fingerprints each addressable shard of every jax.Array leaf of
    `pytree` at its global position (no array data moves), the processes all-gather the
    16-byte fingerprints (+1 flag byte) per shard, and the library decides per tensor (a leaf,
    named by its dotted pytree path: 'layers.0.w') whether replicas agree -- naming by majority
    the disagreeing ranks, `report.devices` / `report.processes` mapping each to its device and
    process -- and, with `source` (anything seedstore.open takes), whether the shards compose
    to the source's fingerprint, naming off-spec ranks. The report is the one
    seedstore.torch.verify_replicas gives; ranks are the job's devices ordered by (process
    index, device id). Every process must call it with the same pytree structure, shapes,
    dtypes and shardings. Leaves must be jax.Arrays sharded over every device of the job by a
    NamedSharding (or fully replicated); anything else raises InvalidArgumentError or
    UnsupportedError naming the leaf before anything is exchanged. Every process must hold
    the same number of devices. Given a source, a leaf it lacks raises NotFoundError naming it.
    With raise_on_failure a failed verdict raises MismatchError."""
    devices = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
    rank_of = {d: r for r, d in enumerate(devices)}
    per_process: Dict[int, int] = {}
    for d in devices:
        per_process[d.process_index] = per_process.get(d.process_index, 0) + 1
    if len(set(per_process.values())) > 1:
        raise _ss.UnsupportedError("UNSUPPORTED: verify_replicas: the processes hold different numbers "
                                   f"of devices ({per_process}); every process must hold as many")
    local = [d for d in devices if d.process_index == jax.process_index()]
    everything = set(devices)
    flat, _ = jax.tree_util.tree_flatten_with_path(pytree)
    groups: Dict[str, list] = {}  # mesh key -> [mesh json, rules, leaves]
    for path, leaf in flat:
        name = _leaf_name(path)
        if not isinstance(leaf, jax.Array):
            raise _ss.InvalidArgumentError(f"INVALID_ARGUMENT: verify_replicas: leaf '{name}' is a "
                                           f"{type(leaf).__name__}, not a jax.Array")
        sh = leaf.sharding
        if set(sh.device_set) != everything:
            raise _ss.InvalidArgumentError(
                f"INVALID_ARGUMENT: verify_replicas: leaf '{name}' is placed on {len(sh.device_set)} of "
                f"the job's {len(devices)} devices; verify_replicas checks arrays sharded over all of them")
        if isinstance(sh, jax.sharding.NamedSharding):
            mesh = sh.mesh
            mj = {"axes": [str(a) for a in mesh.axis_names], "shape": list(mesh.devices.shape),
                  "devices": [rank_of[d] for d in mesh.devices.flat]}
            spec = [_spec_entry(name, e) for e in sh.spec]
        elif sh.is_fully_replicated:
            mj = {"axes": ["devices"], "shape": [len(devices)], "devices": list(range(len(devices)))}
            spec = []
        else:
            raise _ss.UnsupportedError(f"UNSUPPORTED: verify_replicas: leaf '{name}': sharding "
                                       f"{type(sh).__name__} is neither a NamedSharding nor fully replicated")
        g = groups.setdefault(json.dumps(mj, sort_keys=True), [mj, [], []])
        g[1].append({"match": _glob_literal(name), "spec": spec, "strict": True})
        g[2].append((name, leaf))
    plan = []
    for mj, rules, leaves in groups.values():
        layout = _ss.Layout({"mesh": mj, "placements": rules})
        hosted: List[list] = [[] for _ in local]
        for name, leaf in leaves:
            shape = tuple(leaf.shape)
            by_device = {s.device: s for s in leaf.addressable_shards}
            for j, d in enumerate(local):
                s = by_device[d]
                region = layout.shard(name, shape, rank_of[d]).region
                box = _box(s.index, shape) if shape else []
                if [list(b) for b in box] != [[a, b] for a, b in zip(region.start, region.stop)]:
                    raise _ss.InternalError(f"INTERNAL: verify_replicas: leaf '{name}' on {d}: JAX's index "
                                            f"{box} is not the layout's region {region}")
                hosted[j].append((name, list(shape), s.data))
        plan.append((layout, hosted))
    ref = None
    if source is not None:
        cat = _ss.open(source)
        lacking = [_leaf_name(path) for path, _ in flat if _leaf_name(path) not in cat]
        if lacking:  # before anything is exchanged: every process raises alike
            raise _ss.NotFoundError(
                f"NOT_FOUND: verify_replicas: source '{cat.origin}' has no tensor " +
                ", ".join(f"'{n}'" for n in lacking) + " (the pytree's leaves are named by path)")
        ref = cat._c
    for _, leaf in flat:
        leaf.block_until_ready()
    return verify_groups(_JaxExchange(), plan, ref, threads, raise_on_failure,
                         processes=[d.process_index for d in devices], devices=devices)
