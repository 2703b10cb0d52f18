"""seedstore.jax: jax.Arrays built shard by shard from a seedstore source.

    params = seedstore.jax.load(source, shardings)

Each addressable device's box (jax.sharding's addressable_devices_indices_map, through
jax.make_array_from_callback) is generated (lazy) or read (dense) by the library alone and
placed on that device: no device ever holds more than its own shard, and the values are those
of the whole tensor sliced -- bit-identical to jax.random under the same key (generator
threefry, key {"seed": N}; docs/JAX-EXACTNESS.md lists the measured exceptions), whatever the
mesh.
"""
from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Union

import jax
import numpy as np

import seedstore as _ss

__all__ = ["load"]


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
    out = {}
    for name in wanted:
        info = cat[name]
        shape = tuple(info.shape)

        def shard(index, name=name, shape=shape):
            return cat.read(name, _box(index, shape) if shape else None, threads=threads)

        out[name] = jax.make_array_from_callback(shape, pick(name), shard)
    return out
