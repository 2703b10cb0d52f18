"""The replica check shared by seedstore.torch and seedstore.jax: the library's live-job
verification (io/collective.h VerifyHostedBuffers) over a framework's exchange, and its report.
The decision -- replica votes, deviating / off-spec ranks, composition -- is the library's."""
from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, Sequence, Tuple

from seedstore import _core


def glob_literal(name: str) -> str:
    """`name` as a layout rule's glob matching exactly itself (fnmatch's *, ? and [ bracketed)."""
    return "".join(f"[{c}]" if c in "*?[" else c for c in name)


class ReplicaReport:
    """verify_replicas' verdict, the same on every rank. `tensors`: one dict per tensor (the
    library's JSON: name, ok, replicas 'agree'/'mismatch'/'tie'/'incomplete', composition
    'ok'/'mismatch'/'not_checked'/'undetermined', composed and expected fingerprints,
    problems with their region, replicas, votes, deviating / off_spec / failed ranks).

    Ranks are the layout's: torch.distributed group ranks, or (seedstore.jax) global devices
    numbered by (process index, device id). `processes[r]` is the process holding rank r and
    `devices[r]` its device (None where a rank is a process)."""

    def __init__(self, reports, processes: Optional[Sequence[int]] = None,
                 devices: Optional[Sequence[Any]] = None):
        self._reports = reports
        self.processes = list(processes) if processes is not None else None
        self.devices = list(devices) if devices is not None else None
        self.tensors: List[dict] = []
        for r in reports:
            self.tensors.extend(json.loads(r.to_json())["tensors"])
        self.ok: bool = all(r.ok for r in reports)

    def __getitem__(self, name: str) -> dict:
        for t in self.tensors:
            if t["name"] == name:
                return t
        raise KeyError(name)

    @property
    def disagreeing(self) -> Dict[str, List[int]]:
        """Tensor -> ranks whose shard differs from its replicas' majority or from the source
        (deviating, off-spec or failed), for every tensor with such ranks."""
        out = {}
        for t in self.tensors:
            ranks = set()
            for g in t["problems"]:
                ranks.update(g["deviating"], g["off_spec"], g["failed"])
            if ranks:
                out[t["name"]] = sorted(ranks)
        return out

    @property
    def disagreeing_processes(self) -> Dict[str, List[int]]:
        """`disagreeing` with each rank replaced by the process holding it."""
        at = self.processes
        return {n: sorted({at[r] if at is not None else r for r in ranks})
                for n, ranks in self.disagreeing.items()}

    @property
    def disagreeing_devices(self) -> Dict[str, list]:
        """`disagreeing` with each rank replaced by its device (empty where ranks are processes)."""
        if self.devices is None:
            return {}
        return {n: [self.devices[r] for r in ranks] for n, ranks in self.disagreeing.items()}

    @property
    def ties(self) -> List[str]:
        """Tensors whose replicas split with no majority (every value named in `votes`)."""
        return [t["name"] for t in self.tensors if t["replicas"] == "tie"]

    def table(self, problems_only: bool = False) -> str:
        return "\n".join(r.table(problems_only) for r in self._reports)

    def raise_if_failed(self) -> None:
        """MismatchError (or the failure's own error) naming the first problem tensors."""
        for r in self._reports:
            r.raise_if_failed()

    def __repr__(self) -> str:
        return f"ReplicaReport(ok={self.ok}, {len(self.tensors)} tensors, disagreeing={self.disagreeing})"


def verify_groups(exchange: Any, groups: List[Tuple[Any, List[list]]], reference: Any,
                  threads: int, raise_on_failure: bool, processes=None,
                  devices=None) -> ReplicaReport:
    """One library verification per (Layout, hosted) group -- hosted[j] the (name, global
    shape, local shard) triples of layout rank exchange.rank() * len(hosted) + j -- in order
    (a collective: every process passes the same groups), as one ReplicaReport."""
    reports = [_core.verify_buffers(exchange, hosted, layout._l, reference, threads)
               for layout, hosted in groups]
    report = ReplicaReport(reports, processes, devices)
    if raise_on_failure:
        report.raise_if_failed()
    return report
