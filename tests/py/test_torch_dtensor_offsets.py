"""DTensor placements: every (tensor, rank) box `seedstore fingerprint --layout` reports equals
torch's own `compute_local_shape_and_global_offset` (local shape and global offset) on a
DeviceMesh over a fake process group, for seeded random meshes, placements and uneven shapes
-- empty shards included (torch puts them at offset = the dim's full size)."""
import json
import re
import subprocess

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not importable: DTensor offsets skipped")
dist = pytest.importorskip("torch.distributed", reason="torch.distributed is not available")
from torch.distributed.device_mesh import DeviceMesh  # noqa: E402
from torch.distributed.tensor import Replicate, Shard  # noqa: E402
from torch.distributed.tensor._utils import compute_local_shape_and_global_offset  # noqa: E402
from torch.testing._internal.distributed.fake_pg import FakeStore  # noqa: E402

from seedstore_testlib import BIN, need_binary  # noqa: E402,F401 (autouse fixture)


def random_case(rng):
    mesh = [int(x) for x in rng.integers(1, 4, rng.integers(1, 4))]
    tensors = []
    for t in range(6):
        nd = int(rng.integers(1, 4))
        shape = [int(x) for x in rng.integers(0, 8, nd)]
        # Shard(d) with d in [-nd, nd) (DTensor normalizes negative dims), or Replicate().
        pl = [f"Shard({int(rng.integers(-nd, nd))})" if rng.random() < 0.75 else "Replicate()"
              for _ in mesh]
        tensors.append({"name": f"t{t}", "shape": shape, "placements": pl})
    return mesh, tensors


def torch_boxes(mesh, tensors):
    """{(name, rank): (local shape, global offset)} from torch, one fake process group a rank."""
    world = int(np.prod(mesh))
    out = {}
    for rank in range(world):
        dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)
        try:
            dm = DeviceMesh("cpu", torch.arange(world).reshape(mesh))
            for t in tensors:
                nd = len(t["shape"])
                pl = [Shard(int(p[6:-1]) % nd) if p.startswith("Shard") else Replicate()
                      for p in t["placements"]]
                shape, offset = compute_local_shape_and_global_offset(t["shape"], dm, pl)
                out[(t["name"], rank)] = (tuple(shape), tuple(offset))
        finally:
            dist.destroy_process_group()
    return out


def seedstore_boxes(tmp_path, mesh, tensors):
    spec = {"seed": 0, "tensors": [{"name": t["name"], "shape": t["shape"], "dtype": "float32",
                                    "init": {"dist": "zeros"}} for t in tensors]}
    axes = [f"m{a}" for a in range(len(mesh))]
    layout = {"mesh": {"axes": axes, "shape": mesh},
              "placements": [{"match": t["name"], "dtensor": t["placements"]} for t in tensors]}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    (tmp_path / "layout.json").write_text(json.dumps(layout))
    out = {}
    for rank in range(int(np.prod(mesh))):
        res = subprocess.run([BIN, "fingerprint", str(tmp_path / "spec.json"), "--layout",
                              str(tmp_path / "layout.json"), "--rank", str(rank), "--json"],
                             check=True, capture_output=True, text=True)
        for e in json.loads(res.stdout):
            dims = re.findall(r"(\d+):(\d+)", e["region"])
            out[(e["name"], rank)] = (tuple(int(b) - int(a) for a, b in dims),
                                      tuple(int(a) for a, _ in dims))
    return out


def test_issue_example(tmp_path):
    mesh, tensors = [2, 2], [{"name": "w", "shape": [2, 2], "placements": ["Shard(0)", "Shard(0)"]}]
    ours = seedstore_boxes(tmp_path, mesh, tensors)
    assert ours[("w", 1)] == ((0, 2), (2, 0))
    assert ours == torch_boxes(mesh, tensors)


def test_random_meshes_placements_shapes(tmp_path):
    rng = np.random.default_rng(2024)
    boxes = empty = 0
    for trial in range(14):
        mesh, tensors = random_case(rng)
        ref = torch_boxes(mesh, tensors)
        ours = seedstore_boxes(tmp_path, mesh, tensors)
        assert ours.keys() == ref.keys()
        for k in ref:
            assert ours[k] == ref[k], (
                f"mesh {mesh} tensor {next(t for t in tensors if t['name'] == k[0])} rank {k[1]}: "
                f"seedstore (shape, offset) {ours[k]}, torch {ref[k]}")
            boxes += 1
            empty += 0 in ref[k][0]
    print(f"\n{boxes} (tensor, rank) boxes equal torch's, {empty} of them empty")
    assert empty > 20  # the point of the test
