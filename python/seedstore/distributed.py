"""seedstore.init_distributed: the library's communicators without MPI.

    comm = seedstore.init_distributed()          # under torchrun, after or without
                                                 # torch.distributed.init_process_group
    seedstore.torch.verify_replicas(model, spec, group=comm)

The ranks meet through a key-value store -- torch.distributed's TCPStore or FileStore (set,
get, wait with a timeout), or any object with set(key, bytes) and get(key) -- the library's
Bootstrap seam (io/bootstrap.h), whose other transport is MPI (for jobs under mpirun, which
need no store). Backend "store" exchanges through the store itself (CPU, no
GPU needed); "nccl" creates an NCCL communicator on this rank's GPU whose unique id travels
through the store. Every step has a deadline: a rank that stalls or dies is named on the
others (IoError) instead of hanging them.
"""
from __future__ import annotations

import datetime as _dt
import os as _os
import time as _time
from typing import Any, Optional

from . import _core
from ._seedstore import InvalidArgumentError

__all__ = ["init_distributed", "Communicator"]

_BACKENDS = ("auto", "nccl", "store")
# Communicators made so far, per rank (one rank per process in a job; several in a test's
# threads): the n-th communicator of every rank uses the key prefix seedstore/<n>/.
_made: dict = {}


class Communicator:
    """A communicator of the library (io/collective.h): `rank`, `size`, `backend` ('store' or
    'nccl'), `device` (the CUDA device of an NCCL communicator, else None), `timeout` (seconds
    per step). Pass it as `group=` to seedstore.torch.verify_replicas (or Writer). After an
    IoError (a timeout) it is unusable: make a new one."""

    def __init__(self, core):
        self._c = core

    @property
    def rank(self) -> int:
        return self._c.rank

    @property
    def size(self) -> int:
        return self._c.size

    @property
    def backend(self) -> str:
        return self._c.backend

    @property
    def device(self) -> Optional[int]:
        return self._c.device if self._c.device >= 0 else None

    @property
    def timeout(self) -> float:
        return self._c.timeout

    @timeout.setter
    def timeout(self, seconds: float) -> None:
        self._c.timeout = float(seconds)

    @property
    def broken(self) -> bool:
        return self._c.broken

    def all_gather(self, data: bytes, what: str = "all_gather") -> bytes:
        """Every rank's `data` (the same length on every rank), concatenated in rank order."""
        return self._c.all_gather(bytes(data), what)

    def barrier(self, what: str = "barrier") -> None:
        """Returns once every rank has called it (IoError naming the missing ranks otherwise)."""
        self._c.barrier(what)

    def close(self) -> None:
        self._c.close()

    def __repr__(self) -> str:
        dev = f", device={self.device}" if self.device is not None else ""
        return f"Communicator(backend='{self.backend}', rank={self.rank}, size={self.size}{dev})"


def _err(msg: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"INVALID_ARGUMENT: seedstore.init_distributed: {msg}")


def _is_timeout(e: Exception) -> bool:
    return type(e).__name__ == "DistStoreError" or "timeout" in str(e).lower()


class _StoreCallables:
    """put / get-with-timeout / has over a torch.distributed Store (wait and check), or over
    any object with set(key, bytes) and get(key) (polled; a missing key is None or KeyError)."""

    def __init__(self, store):
        self.store = store
        self.waits = hasattr(store, "wait") and hasattr(store, "check")

    def put(self, key: str, value: bytes) -> None:
        self.store.set(key, value)

    def get(self, key: str, timeout_s: float) -> Optional[bytes]:
        if self.waits:
            try:
                self.store.wait([key], _dt.timedelta(seconds=max(timeout_s, 1e-3)))
            except Exception as e:  # noqa: BLE001  (torch raises DistStoreError/RuntimeError)
                if _is_timeout(e):
                    return None
                raise
            return bytes(self.store.get(key))
        deadline = _time.monotonic() + timeout_s
        pause = 1e-3
        while True:
            v = self._try_get(key)
            if v is not None:
                return v
            if _time.monotonic() >= deadline:
                return None
            _time.sleep(pause)
            pause = min(pause * 2, 0.05)

    def has(self, key: str) -> bool:
        if self.waits:
            return bool(self.store.check([key]))
        return self._try_get(key) is not None

    def _try_get(self, key: str) -> Optional[bytes]:
        try:
            v = self.store.get(key)
        except KeyError:
            return None
        return None if v is None else bytes(v)


def _torch_dist():
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    return dist if dist.is_available() and dist.is_initialized() else None


def _env_int(name: str) -> Optional[int]:
    v = _os.environ.get(name)
    if v is None or v == "":
        return None
    try:
        return int(v)
    except ValueError:
        raise _err(f"environment variable {name}={v!r} is not an integer") from None


def _seconds(timeout: Any) -> float:
    if isinstance(timeout, _dt.timedelta):
        timeout = timeout.total_seconds()
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise _err(f"timeout must be seconds (a number or a timedelta), not {type(timeout).__name__}")
    if not timeout > 0:
        raise _err(f"timeout must be positive seconds, not {timeout}")
    return float(timeout)


def _device_index(device: Any) -> int:
    if device is None:
        local = _env_int("LOCAL_RANK")
        try:
            import torch
            if torch.cuda.is_available():
                n = torch.cuda.device_count()
                return local % n if local is not None else torch.cuda.current_device()
        except ImportError:
            pass
        return local if local is not None else -1
    if isinstance(device, int) and not isinstance(device, bool):
        index = device
    else:
        text = str(device)
        if text == "cuda":
            return _device_index(None)
        if not text.startswith("cuda:") or not text[5:].isdigit():
            raise _err(f"device {device!r}: expected a CUDA device index, 'cuda', 'cuda:N' or a "
                       "torch.device")
        index = int(text[5:])
    if index < 0:
        raise _err(f"device {index} is negative")
    return index


def _gpus_for_local_ranks() -> bool:
    """Whether this node has a usable GPU for each of its ranks (NCCL refuses two ranks on one)."""
    from . import cuda_available
    if not (_core.nccl_built and cuda_available()):
        return False
    try:
        import torch
        count = torch.cuda.device_count()
    except ImportError:
        count = 1
    local = _env_int("LOCAL_WORLD_SIZE") or 1
    return count >= local


def init_distributed(store: Any = None, rank: Optional[int] = None,
                     world_size: Optional[int] = None, backend: str = "auto",
                     device: Any = None, timeout: Any = 300.0) -> Communicator:
    """A communicator over the ranks of a job, made through a key-value store, without MPI.

    store: a torch.distributed Store (TCPStore, FileStore, PrefixStore ...) or any object with
        set(key, bytes) and get(key). Default: torch.distributed's default group's store when
        init_process_group was called, else a TCPStore at MASTER_ADDR:MASTER_PORT (torchrun's).
    rank, world_size: default: torch.distributed's default group, else RANK and WORLD_SIZE.
    backend: "store" (exchanges through the store, CPU), "nccl" (an NCCL communicator on this
        rank's GPU, its unique id through the store) or "auto" (nccl when seedstore has NCCL and
        CUDA and this node has a GPU per local rank, else store).
    device: the CUDA device for nccl (int, 'cuda:N', torch.device); default LOCAL_RANK modulo
        the visible GPUs, else torch's current device. NCCL steps make it the calling thread's
        current CUDA device (as torch.cuda.set_device(device) would).
    timeout: seconds (or a timedelta) each step may wait for the other ranks.

    Every rank of the job calls it, in the same order as its other collective calls. Errors:
    InvalidArgumentError (rank outside [0, world_size), a missing RANK/WORLD_SIZE/MASTER_ADDR,
    an unknown backend, ranks started with different world sizes -- named), IoError (a rank
    did not arrive within the timeout, named; the store failed), UnsupportedError (nccl without
    an NCCL build or a GPU, or two ranks on one GPU)."""
    if backend not in _BACKENDS:
        raise _err(f"backend {backend!r}: expected one of {', '.join(_BACKENDS)}")
    seconds = _seconds(timeout)
    dist = _torch_dist()
    for name, value in (("rank", rank), ("world_size", world_size)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise _err(f"{name} must be an integer, not {type(value).__name__}")
    if rank is None:
        rank = dist.get_rank() if dist is not None else _env_int("RANK")
    if world_size is None:
        world_size = dist.get_world_size() if dist is not None else _env_int("WORLD_SIZE")
    if rank is None or world_size is None:
        missing = [n for n, v in (("rank (RANK)", rank), ("world_size (WORLD_SIZE)", world_size)) if v is None]
        raise _err(f"{' and '.join(missing)} not given: pass them, set the environment variables "
                   "(torchrun does), or call torch.distributed.init_process_group first")
    if world_size < 1:
        raise _err(f"world_size {world_size} must be >= 1")
    if not 0 <= rank < world_size:
        raise _err(f"rank {rank} is outside [0, {world_size}) (world size {world_size})")
    if store is None:
        store = _default_store(dist, rank, world_size, seconds)
    if not (hasattr(store, "set") and hasattr(store, "get")):
        raise _err(f"store {type(store).__name__} has no set/get: pass a torch.distributed Store "
                   "or an object with set(key, bytes) and get(key)")
    if backend == "auto":
        backend = "nccl" if _gpus_for_local_ranks() else "store"
    dev = _device_index(device) if backend == "nccl" else -1
    calls = _StoreCallables(store)
    n = _made.get(rank, 0)
    _made[rank] = n + 1
    prefix = f"seedstore/{n}/"
    return Communicator(_core._store_communicator(rank, world_size, prefix, calls.put, calls.get,
                                                  calls.has, backend, dev, seconds))


def _default_store(dist, rank: int, world_size: int, seconds: float):
    if dist is not None:
        return dist.distributed_c10d._get_default_store()
    addr, port = _os.environ.get("MASTER_ADDR"), _env_int("MASTER_PORT")
    if not addr or port is None:
        missing = [n for n, v in (("MASTER_ADDR", addr), ("MASTER_PORT", port)) if not v]
        raise _err(f"no store given and {' and '.join(missing)} not set (torchrun sets them; or "
                   "pass store=, or call torch.distributed.init_process_group first)")
    try:
        from torch.distributed import TCPStore
    except ImportError:
        raise _err("no store given and torch.distributed is not available to reach "
                   f"{addr}:{port}: pass store=") from None
    # torchrun's agent hosts the store its workers join (TORCHELASTIC_USE_AGENT_STORE); else
    # rank 0 hosts it.
    agent = _os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"
    return TCPStore(addr, port, world_size, is_master=(rank == 0 and not agent),
                    timeout=_dt.timedelta(seconds=seconds), wait_for_workers=False)
