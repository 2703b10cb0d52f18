"""seedstore: a lazy weight store -- any shard of a weight materialized bit-identically from
(spec, global index), with layout-independent 128-bit fingerprints.

This package binds the C++ library (store/, io/); nothing here computes values or
fingerprints itself. The core API:

    cat = seedstore.open(source)          # a spec dict or JSON text, a store, a distributed
                                          # save, a .safetensors file, an HF index, a Spec
    cat.tensors                           # [TensorInfo(name, shape, dtype, lazy, init, ...)]
    cat.materialize("w", out, box=(slice(0, 8), slice(None)))  # into out, no copy (DLPack)
    cat.fingerprint("w", box=...)         # what the source's region fingerprints to
    seedstore.fingerprint(out, "w", shape=global_shape, box=...)  # any array at its position

Errors are seedstore.Error subclasses carrying the CLI's code name and exit code
(InvalidArgumentError: 'INVALID_ARGUMENT', exit 2; NotFoundError; CorruptError; IoError;
UnsupportedError; MismatchError; InternalError). Torch integration: seedstore.torch.

Without MPI (under torchrun): `comm = seedstore.init_distributed()` makes a communicator
through torch.distributed's store (TCPStore) -- the store itself on CPU, NCCL on GPUs -- that
seedstore.torch.verify_replicas takes as `group=` (seedstore.distributed).
"""
from __future__ import annotations

import json as _json
import os as _os
from dataclasses import dataclass as _dataclass
from typing import Any, Optional, Sequence, Tuple



def _preload_framework_cuda_libs() -> None:
    """Where PyTorch's CUDA wheels are installed (the nvidia-* packages), load their NCCL and
    CUDA runtime before the extension: both use the same sonames (libnccl.so.2,
    libcudart.so.13) as the toolkit's the extension links, and the first one loaded serves the
    whole process -- an older toolkit NCCL loaded first would leave torch without symbols it
    needs. Loading the framework's copies first makes one copy serve both (NCCL and the CUDA
    runtime are backward compatible within their major version)."""
    import ctypes
    import importlib.util
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return
    if spec is None or not spec.submodule_search_locations:
        return
    for root in spec.submodule_search_locations:
        for rel in ("cu13/lib/libcudart.so.13", "cuda_runtime/lib/libcudart.so.12",
                    "nccl/lib/libnccl.so.2"):
            path = _os.path.join(root, rel)
            if _os.path.exists(path):
                try:
                    ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
                except OSError:
                    pass


_preload_framework_cuda_libs()
from . import _seedstore as _core  # noqa: E402
from ._seedstore import (  # noqa: F401,E402  (re-exported)
    CorruptError,
    Error,
    Fingerprint,
    InternalError,
    InvalidArgumentError,
    IoError,
    MismatchError,
    NotFoundError,
    Region,
    Shard,
    UnsupportedError,
)

__all__ = [
    "open", "Catalog", "Spec", "Layout", "TensorInfo", "Region", "Shard", "Fingerprint",
    "fingerprint", "cuda_available", "Error", "InvalidArgumentError", "NotFoundError",
    "CorruptError", "IoError", "UnsupportedError", "MismatchError", "InternalError",
    "init_distributed", "Communicator",
]

CUDA_BUILT: bool = _core.cuda_built


def cuda_available() -> bool:
    """Whether this build has the CUDA kernels and a GPU is usable."""
    return _core.cuda_available()[0]


def _json_text(value: Any, what: str) -> str:
    if isinstance(value, (bytes, bytearray)):
        value = value.decode("utf-8")
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        try:
            return _json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise InvalidArgumentError(f"INVALID_ARGUMENT: {what}: not JSON: {e}") from None
    raise InvalidArgumentError(
        f"INVALID_ARGUMENT: {what}: expected a dict or JSON text, not {type(value).__name__}")


def _looks_like_json(s: str) -> bool:
    return s.lstrip().startswith("{")


class Spec:
    """A model spec (README "Spec files"): from a dict, JSON text or a .json path."""

    def __init__(self, spec: Any, origin: str = "<python>"):
        if isinstance(spec, Spec):
            self._s = spec._s
        elif isinstance(spec, (str, _os.PathLike)) and not _looks_like_json(_os.fspath(spec)):
            self._s = _core._Spec.load(_os.fspath(spec))
        else:
            self._s = _core._Spec.parse(_json_text(spec, origin), origin)
        self.origin = origin

    def to_dict(self) -> dict:
        return _json.loads(self._s.to_json())

    @property
    def names(self) -> list:
        return list(self._s.names)

    def __repr__(self) -> str:
        return f"Spec({len(self.names)} tensors)"


class Layout:
    """A mesh and per-tensor placements (README "Layout files", docs/LAYOUT.md)."""

    def __init__(self, layout: Any, origin: str = "<python>"):
        if isinstance(layout, Layout):
            self._l = layout._l
        elif isinstance(layout, _core._Layout):
            self._l = layout
        elif isinstance(layout, (str, _os.PathLike)) and not _looks_like_json(_os.fspath(layout)):
            self._l = _core._Layout.load(_os.fspath(layout))
        else:
            self._l = _core._Layout.parse(_json_text(layout, origin), origin)

    @staticmethod
    def replicated(world: int) -> "Layout":
        return Layout(_core._Layout.replicated(world))

    @staticmethod
    def fsdp(world: int) -> "Layout":
        """FSDP1/ZeRO flat ranges over `world` ranks."""
        return Layout(_core._Layout.fsdp(world))

    @staticmethod
    def hsdp(replicate: int, shard: int) -> "Layout":
        return Layout(_core._Layout.hsdp(replicate, shard))

    @property
    def world_size(self) -> int:
        return self._l.world_size

    def to_dict(self) -> dict:
        return _json.loads(self._l.to_json())

    def shard(self, name: str, shape: Sequence[int], rank: int) -> Shard:
        """The region of tensor `name` (global `shape`) that `rank` holds, and its replicas."""
        return self._l.shard(name, list(shape), rank)

    def distinct_shards(self, name: str, shape: Sequence[int]) -> list:
        return self._l.distinct_shards(name, list(shape))


@_dataclass(frozen=True)
class TensorInfo:
    """One tensor of a catalog. `lazy`: described by an init rule (`init`, `generator`);
    else dense (stored bytes). `fingerprint`: the recorded whole-tensor fingerprint (hex) if
    the source records one. `piece`: the global Region when this is a rank file's piece."""
    name: str
    shape: Tuple[int, ...]
    dtype: str
    lazy: bool
    init: Optional[dict]
    generator: Optional[str]
    fingerprint: Optional[str]
    piece: Optional[Region]


def _stream_of(array: Any) -> Optional[int]:
    """The caller's current CUDA stream for a torch CUDA tensor (None otherwise)."""
    dev = getattr(array, "device", None)
    if getattr(dev, "type", None) == "cuda" and type(array).__module__.startswith("torch"):
        import torch
        return torch.cuda.current_stream(dev).cuda_stream
    return None


def _as_dlpack(array: Any) -> Any:
    """The array itself, or (numpy arrays of ml_dtypes' bfloat16, which numpy cannot export)
    a view of its bytes that the library reads as bfloat16. torch tensors that require grad
    are detached (same storage)."""
    if getattr(array, "requires_grad", False):
        array = array.detach()
    dt = getattr(array, "dtype", None)
    if getattr(dt, "name", None) == "bfloat16" and type(array).__module__ == "numpy":
        return _BF16View(array)
    return array


class _BF16View:
    """DLPack export of a numpy bfloat16 (ml_dtypes) array as DLPack bfloat16, same memory."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, stream=None, max_version=None, **kw):
        import numpy as np
        u = self._a.view(np.uint16)
        if max_version is not None:
            cap = u.__dlpack__(max_version=max_version)
        else:
            cap = u.__dlpack__()
        return _core._retag_bf16(cap)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


class Catalog:
    """A model source: its tensors, any region of which can be materialized or fingerprinted."""

    def __init__(self, core: "_core._Catalog"):
        self._c = core
        self._infos = [TensorInfo(**d) for d in core.tensors()]
        self._by_name = {t.name: t for t in self._infos}

    @property
    def origin(self) -> str:
        return self._c.origin

    @property
    def tensors(self) -> list:
        return list(self._infos)

    @property
    def names(self) -> list:
        return [t.name for t in self._infos]

    def __len__(self) -> int:
        return len(self._infos)

    def __contains__(self, name: str) -> bool:
        return name in self._by_name

    def __getitem__(self, name: str) -> TensorInfo:
        try:
            return self._by_name[name]
        except KeyError:
            raise NotFoundError(
                f"NOT_FOUND: source '{self.origin}' has no tensor '{name}'") from None

    def __iter__(self):
        return iter(self._infos)

    def region(self, name: str, box: Any = None, flat: Optional[Tuple[int, int]] = None) -> Region:
        """The Region of tensor `name` that `box` names: None (whole), a Region, a string
        'a:b,:,c:d', or a sequence of slices (step 1) or (start, stop) pairs for the leading
        dims; or `flat=(begin, end)`, a flat range of row-major indices."""
        return self._c.region(name, box, None if flat is None else tuple(flat))

    def materialize(self, name: str, out: Any, box: Any = None, *, flat=None, threads: int = 0,
                    stream: Optional[int] = None) -> Any:
        """Writes region `box` of tensor `name` into `out` (row-major), in place through DLPack:
        a numpy array, a torch CPU tensor, or a CUDA tensor (generated on the GPU, enqueued on
        `stream`, by default torch's current stream for a torch tensor). `out` must have the
        tensor's dtype and exactly the region's shape (Region.local_shape), be C-contiguous and
        writable: anything else is refused (InvalidArgumentError naming it) before a byte is
        written. Returns `out`."""
        r = self.region(name, box, flat)
        if stream is None:
            stream = _stream_of(out)
        self._c.materialize(name, _as_dlpack(out), r, threads, stream)
        return out

    def read(self, name: str, box: Any = None, *, flat=None, threads: int = 0):
        """A new numpy array holding the region (bfloat16 as ml_dtypes.bfloat16)."""
        import numpy as np
        t = self[name]
        r = self.region(name, box, flat)
        out = np.empty(tuple(r.local_shape), dtype=_numpy_dtype(t.dtype))
        return self.materialize(name, out, r, threads=threads)

    def fingerprint(self, name: str, box: Any = None, *, flat=None, threads: int = 0) -> Fingerprint:
        """The fingerprint of the source's region (lazy: generated and hashed, never held)."""
        return self._c.fingerprint(name, self.region(name, box, flat), threads)

    def fingerprint_array(self, array: Any, name: str, box: Any = None, *, flat=None,
                          threads: int = 0) -> Fingerprint:
        """The fingerprint of `array` as region `box` of this source's tensor `name` (its frame:
        global indices, the tensor's fingerprint seed): equal to fingerprint(name, box) when
        the array holds the source's values."""
        r = self.region(name, box, flat)
        return self._c.fingerprint_array(_as_dlpack(array), name, r, threads, _stream_of(array))

    def __repr__(self) -> str:
        return f"Catalog('{self.origin}', {len(self)} tensors)"


def _numpy_dtype(name: str):
    import numpy as np
    if name == "bfloat16":
        import ml_dtypes
        return ml_dtypes.bfloat16
    return np.dtype(name)


def open(source: Any) -> Catalog:  # noqa: A001  (seedstore.open, as the CLI takes any source)
    """Opens any source as a Catalog: a Spec, a spec dict, JSON text, or a path -- a spec
    (.json), a seedstore store or distributed save (.h5), a .safetensors file, or a Hugging
    Face model.safetensors.index.json. Errors name the file (NotFoundError, CorruptError, ...)."""
    if isinstance(source, Catalog):
        return source
    if isinstance(source, Spec):
        return Catalog(_core._Catalog.from_spec(source._s, source.origin))
    if isinstance(source, dict) or (isinstance(source, str) and _looks_like_json(source)):
        return open(Spec(source))
    if isinstance(source, (str, _os.PathLike)):
        return Catalog(_core._Catalog.open(_os.fspath(source)))
    raise InvalidArgumentError(
        "INVALID_ARGUMENT: seedstore.open: expected a path, a spec dict or JSON text, a Spec or "
        f"a Catalog, not {type(source).__name__}")


def fingerprint(array: Any, name: str, box: Any = None, *, shape: Optional[Sequence[int]] = None,
                flat=None, threads: int = 0) -> Fingerprint:
    """The fingerprint of `array` as region `box` of a tensor `name` of global `shape` (default:
    the array's own shape, box the whole tensor) and the array's dtype. Fingerprints of the
    disjoint pieces of a tensor add up to the whole tensor's, whatever the layout."""
    return _core.fingerprint_array(_as_dlpack(array), name, None if shape is None else list(shape),
                                   box, None if flat is None else tuple(flat), threads,
                                   _stream_of(array))


from .distributed import Communicator, init_distributed  # noqa: E402
