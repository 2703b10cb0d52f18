"""The seedstore Python package's core API against real oracles: the shipped CLI (gen,
fingerprint, init/export/import/reshard to make every kind of source), real jax.random, numpy
and torch arrays. Seeded random shapes, boxes and dtypes, plus boundaries (0-d, one element,
primes, flat indices >= 2^32, empty boxes) and bad input refused by name before a byte is
written."""
import itertools
import json
import os
import random

import ml_dtypes
import numpy as np
import pytest

import seedstore
from seedstore_pkg_util import cli

SEED = int(os.environ.get("SEEDSTORE_PY_SEED", "20261204"))
TRIALS = int(os.environ.get("SEEDSTORE_PY_TRIALS", "12"))
NP = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16,
      "float64": np.float64, "uint32": np.uint32, "int8": np.int8, "bool": np.bool_}


def model_spec():
    return {"seedstore": 1, "seed": 11, "tensors": [
        {"name": "emb", "shape": [37, 16], "dtype": "bfloat16", "init": {"dist": "normal", "scale": 0.02}},
        {"name": "layers.0.w", "shape": [23, 16], "dtype": "float32",
         "init": {"dist": "uniform", "minval": -1, "maxval": 1}, "key": {"seed": 5}},
        {"name": "layers.0.norm", "shape": [16], "dtype": "float32", "init": {"dist": "ones"}},
        {"name": "scalar", "shape": [], "dtype": "float32", "init": {"dist": "normal"}},
        {"name": "one", "shape": [1], "dtype": "float16", "init": {"dist": "truncated_normal"}},
        {"name": "bits", "shape": [3, 5], "dtype": "uint32", "init": {"dist": "bits"}}]}


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """The same model as every kind of source: spec dict, JSON text, spec file, lazy store,
    dense store, distributed save (dense pieces), safetensors file, HF index."""
    d = tmp_path_factory.mktemp("sources")
    spec = model_spec()
    (d / "spec.json").write_text(json.dumps(spec))
    cli("init", "--spec", d / "spec.json", "-o", d / "lazy.h5")
    cli("export", d / "lazy.h5", "--format", "safetensors", "-o", d / "model.safetensors")
    (d / "hf").mkdir()
    cli("export", d / "lazy.h5", "--format", "safetensors", "-o", d / "hf" / "model.safetensors",
        "--max-shard-size", "800")
    cli("import", d / "model.safetensors", "-o", d / "dense.h5")
    (d / "layout.json").write_text(json.dumps(
        {"mesh": {"axes": ["d"], "shape": [3]},
         "placements": [{"match": "scalar", "spec": []}, {"match": "*", "flat": ["d"]}]}))
    cli("reshard", d / "dense.h5", "--layout", d / "layout.json", "-o", d / "dist.h5", "-q")
    return {"dict": spec, "text": json.dumps(spec), "spec_file": str(d / "spec.json"),
            "spec_obj": seedstore.Spec(spec), "lazy_store": d / "lazy.h5",
            "dense_store": str(d / "dense.h5"), "dist_save": str(d / "dist.h5"),
            "safetensors": str(d / "model.safetensors"),
            "hf_index": str(d / "hf" / "model.safetensors.index.json")}


LAZY = {"dict", "text", "spec_file", "spec_obj", "lazy_store"}


@pytest.mark.parametrize("kind", ["dict", "text", "spec_file", "spec_obj", "lazy_store", "dense_store",
                                  "dist_save", "safetensors", "hf_index"])
def test_every_source_lists_and_reads_the_same_model(sources, kind):
    spec = seedstore.open(sources["dict"])
    cat = seedstore.open(sources[kind])
    assert sorted(cat.names) == sorted(t["name"] for t in model_spec()["tensors"])
    for t in model_spec()["tensors"]:
        info = cat[t["name"]]
        assert info.shape == tuple(t["shape"]) and info.dtype == t["dtype"]
        assert info.lazy == (kind in LAZY), (kind, info)
        if info.lazy:
            assert info.init["dist"] == t["init"]["dist"] and info.generator == "threefry"
        whole = cat.read(t["name"])
        assert whole.tobytes() == spec.read(t["name"]).tobytes(), (kind, t["name"])
        assert cat.fingerprint(t["name"]) == spec.fingerprint(t["name"])
    if kind == "hf_index":
        assert len(os.listdir(os.path.dirname(sources[kind]))) > 2  # really split


def test_whole_fingerprints_equal_the_cli(sources):
    out = json.loads(cli("fingerprint", sources["spec_file"], "--json").stdout)
    cat = seedstore.open(sources["lazy_store"])
    for row in out:
        assert str(cat.fingerprint(row["name"])) == row["fingerprint"]
        assert cat[row["name"]].fingerprint == row["fingerprint"]  # recorded by init


def gen_cli(shape, dtype, init, seed, box):
    p = cli("gen", "--shape", ",".join(map(str, shape)) or "", "--dtype", dtype, "--init", json.dumps(init),
            "--seed", seed, "--format", "raw", "--box", ",".join(f"{a}:{b}" for a, b in box))
    return p.stdout


def random_case(rng):
    rank = rng.randint(1, 3)
    shape = [rng.choice([1, 2, 3, 5, 7, 13, 31, 64]) for _ in range(rank)]
    box = []
    for n in shape:
        a = rng.randint(0, n)
        b = rng.randint(a, n)
        box.append((a, b))
    dtype = rng.choice(["float32", "bfloat16"])
    init = rng.choice([{"dist": "normal", "scale": 0.05}, {"dist": "uniform", "minval": -2, "maxval": 3},
                       {"dist": "truncated_normal"}])
    return shape, box, dtype, init, rng.randint(0, 2**31 - 1)


def test_random_boxes_equal_the_cli_and_jax_random():
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    rng = random.Random(SEED)
    for trial in range(TRIALS):
        shape, box, dtype, init, seed = random_case(rng)
        cat = seedstore.open({"seedstore": 1, "tensors": [
            {"name": "t", "shape": shape, "dtype": dtype, "init": init, "key": {"seed": seed}}]})
        ext = [b - a for a, b in box]
        out = np.full(ext, 7, dtype=NP[dtype])
        assert cat.materialize("t", out, box=[slice(a, b) for a, b in box]) is out
        assert out.tobytes() == gen_cli(shape, dtype, init, seed, box), (trial, shape, box, dtype, init)
        key = jax.random.key(seed)
        jd = jnp.bfloat16 if dtype == "bfloat16" else jnp.float32
        if init["dist"] == "normal":
            ref = jax.random.normal(key, shape, jd) * jnp.asarray(init["scale"], jd)
        elif init["dist"] == "uniform":
            ref = jax.random.uniform(key, shape, jd, init["minval"], init["maxval"])
        else:
            ref = jax.random.truncated_normal(key, -2.0, 2.0, shape, jd)
        ref = np.asarray(ref)[tuple(slice(a, b) for a, b in box)]
        assert out.tobytes() == np.ascontiguousarray(ref).tobytes(), (trial, shape, box, dtype, init)
        # the same box as (start, stop) pairs, as a string and as a Region
        r = cat.region("t", box)
        assert r == cat.region("t", ",".join(f"{a}:{b}" for a, b in box))
        assert tuple(r.local_shape) == tuple(ext)


def test_fingerprints_of_pieces_add_up_to_the_whole():
    rng = random.Random(SEED + 1)
    for trial in range(TRIALS):
        shape, box, dtype, init, seed = random_case(rng)
        cat = seedstore.open({"seedstore": 1, "tensors": [
            {"name": "t", "shape": shape, "dtype": dtype, "init": init, "key": {"seed": seed}}]})
        whole = cat.read("t")
        fp = seedstore.fingerprint(whole, "t")
        assert fp == cat.fingerprint("t")
        # split dim 0 at a random point: two boxes, fingerprinted at their global positions
        cut = rng.randint(0, shape[0])
        lo, hi = whole[:cut], whole[cut:]
        parts = (seedstore.fingerprint(lo, "t", [(0, cut)], shape=shape) +
                 seedstore.fingerprint(hi, "t", [(cut, shape[0])], shape=shape))
        assert parts == fp, trial
        assert cat.fingerprint_array(np.ascontiguousarray(hi), "t", [(cut, shape[0])]) == cat.fingerprint("t", [(cut, shape[0])])
        # a flat range of the row-major tensor
        n = whole.size
        b = rng.randint(0, n)
        flat = whole.reshape(-1)[b:]
        assert (seedstore.fingerprint(whole.reshape(-1)[:b], "t", flat=(0, b), shape=shape) +
                seedstore.fingerprint(flat, "t", flat=(b, n), shape=shape)) == fp


def test_torch_cpu_tensors_are_written_in_place():
    torch = pytest.importorskip("torch")
    cat = seedstore.open(model_spec())
    t = torch.zeros(37, 16, dtype=torch.bfloat16)
    ptr = t.data_ptr()
    cat.materialize("emb", t)
    assert t.data_ptr() == ptr
    assert t.view(torch.int16).numpy().tobytes() == cat.read("emb").tobytes()
    # a row slice of a larger tensor that is contiguous: written where it lies
    big = torch.zeros(40, 16, dtype=torch.bfloat16)
    cat.materialize("emb", big[3:8], box=[(10, 15)])
    assert big[3:8].view(torch.int16).numpy().tobytes() == cat.read("emb", [(10, 15)]).tobytes()
    assert not big[:3].any() and not big[8:].any()
    # a parameter that requires grad
    p = torch.nn.Parameter(torch.zeros(23, 16))
    cat.materialize("layers.0.w", p)
    assert p.detach().numpy().tobytes() == cat.read("layers.0.w").tobytes()


def test_boundaries_scalar_one_element_empty_and_flat_beyond_2_32():
    cat = seedstore.open(model_spec())
    s = np.zeros((), np.float32)
    cat.materialize("scalar", s)
    assert s.tobytes() == cat.read("scalar").tobytes() and s != 0
    one = np.zeros(1, np.float16)
    cat.materialize("one", one)
    assert abs(float(one[0])) <= 2
    empty = np.zeros((0, 16), ml_dtypes.bfloat16)
    cat.materialize("emb", empty, box=[(5, 5)])
    assert seedstore.fingerprint(empty, "emb", [(5, 5)], shape=(37, 16)) == seedstore.Fingerprint()
    # 2^33 elements, lazy: a flat range past 2^32 equals the box of the same row
    big = seedstore.open({"seedstore": 1, "tensors": [
        {"name": "huge", "shape": [2**17, 2**16], "dtype": "float32", "init": {"dist": "normal"},
         "key": {"seed": 9}}]})
    b = 2**32 + 5
    row, col = divmod(b, 2**16)
    flat = np.zeros(100, np.float32)
    big.materialize("huge", flat, flat=(b, b + 100))
    box = big.read("huge", [(row, row + 1), (col, col + 100)])
    assert flat.tobytes() == box.tobytes()
    assert big.fingerprint("huge", flat=(b, b + 100)) == big.fingerprint_array(box, "huge", [(row, row + 1), (col, col + 100)])
    assert flat.tobytes() == gen_cli([2**17, 2**16], "float32", {"dist": "normal"}, 9,
                                     [(row, row + 1), (col, col + 100)])


def test_layouts_and_shards_from_dicts():
    lay = seedstore.Layout({"mesh": {"axes": ["dp", "tp"], "shape": [2, 3]},
                            "placements": [{"match": "layers.*", "dtensor": ["Shard(0)", "Shard(1)"]},
                                           {"match": "emb", "flat": ["dp", "tp"]}]})
    assert lay.world_size == 6 and lay.to_dict()["mesh"]["shape"] == [2, 3]
    covered = np.zeros((23, 16), np.int32)
    for r in range(6):
        sh = lay.shard("layers.0.w", (23, 16), r)
        sl = tuple(slice(a, b) for a, b in zip(sh.region.start, sh.region.stop))
        covered[sl] += 1
        assert sh.replicas == [r]
    assert (covered == 1).all()
    # torch.chunk semantics: 23 rows over 2 -> 12 + 11; 16 columns over 3 -> 6, 6, 4
    assert lay.shard("layers.0.w", (23, 16), 5).region.start == [12, 12]
    fl = [lay.shard("emb", (37, 16), r).region for r in range(6)]
    assert all(r.flat for r in fl) and fl[0].begin == 0 and fl[-1].end == 37 * 16
    assert lay.shard("other", (4,), 3).replicas == list(range(6))  # unmatched: replicated
    assert seedstore.Layout.fsdp(4).shard("x", (10,), 3).region.flat
    with pytest.raises(seedstore.InvalidArgumentError, match="unknown mesh axis 'tp'"):
        seedstore.Layout({"mesh": {"axes": ["dp"], "shape": [2]}, "placements": [{"match": "*", "spec": ["tp"]}]})
    with pytest.raises(seedstore.InvalidArgumentError, match="rank 6"):
        lay.shard("layers.0.w", (23, 16), 6)


def test_materialize_from_a_shard_region_equals_the_cli_rank_file(tmp_path, sources):
    lay_path = tmp_path / "l.json"
    lay = {"mesh": {"axes": ["d"], "shape": [3]},
           "placements": [{"match": "scalar", "spec": []}, {"match": "*", "spec": ["d"]}]}
    lay_path.write_text(json.dumps(lay))
    cli("materialize", sources["spec_file"], "--layout", lay_path, "--rank", 2, "-o", tmp_path / "r2.safetensors")
    from safetensors.numpy import load_file
    ref = load_file(str(tmp_path / "r2.safetensors"))
    cat = seedstore.open(sources["spec_file"])
    layout = seedstore.Layout(lay)
    for name in ("layers.0.w", "bits", "layers.0.norm"):
        info = cat[name]
        region = layout.shard(name, info.shape, 2).region
        out = np.empty(region.local_shape, NP[info.dtype])
        cat.materialize(name, out, region)
        assert out.tobytes() == ref[name].tobytes(), name


@pytest.mark.parametrize("case", ["dtype", "shape", "stride", "readonly", "transposed", "not_array",
                                  "bad_box_step", "box_outside", "box_too_many_dims", "unknown_tensor"])
def test_bad_outputs_are_refused_by_name_before_anything_is_written(case):
    torch = pytest.importorskip("torch")
    cat = seedstore.open(model_spec())
    name, box = "layers.0.w", None
    out = np.full((23, 16), 7, np.float32)
    expect, cls = None, seedstore.InvalidArgumentError
    if case == "dtype":
        out = np.full((23, 16), 7, np.float64)
        expect = "out has dtype float64, the tensor is float32"
    elif case == "shape":
        out = np.full((16, 23), 7, np.float32)
        expect = r"out has shape \[16, 23\], the region needs \[23, 16\]"
    elif case == "stride":
        base = np.full((23, 32), 7, np.float32)
        out = base[:, ::2]
        expect = "not C-contiguous"
    elif case == "readonly":
        out.setflags(write=False)
        expect = "read-only"
    elif case == "transposed":
        out = torch.full((16, 23), 7.0).t()
        expect = "not C-contiguous"
    elif case == "not_array":
        out = [[7.0] * 16] * 23
        expect = "not an array"
    elif case == "bad_box_step":
        box = [slice(0, 23, 2)]
        expect = "box dim 0: slice step must be 1"
    elif case == "box_outside":
        box = [(0, 24)]
        expect = r"box dim 0: \[0:24\] is outside \[0:23\]"
    elif case == "box_too_many_dims":
        box = [(0, 1), (0, 1), (0, 1)]
        expect = "box has 3 dims, the tensor 2"
    elif case == "unknown_tensor":
        name, expect, cls = "nope", "has no tensor 'nope'", seedstore.NotFoundError
    before = out.clone() if isinstance(out, torch.Tensor) else np.array(out, copy=True)
    with pytest.raises(cls, match=expect) as e:
        cat.materialize(name, out, box)
    assert e.value.code == cls.code and isinstance(e.value, seedstore.Error)
    assert np.array_equal(np.asarray(out), np.asarray(before)), "a refused output was written"
    if case in ("dtype", "shape", "stride", "readonly", "unknown_tensor"):
        assert f"'{name}'" in str(e.value)


def test_source_errors_carry_the_cli_codes(tmp_path):
    with pytest.raises(seedstore.NotFoundError) as e:
        seedstore.open(str(tmp_path / "missing.h5"))
    assert e.value.exit_code == 3 and "missing.h5" in str(e.value)
    bad = tmp_path / "bad.h5"
    bad.write_bytes(b"\x89HDF\r\n\x1a\n" + b"\0" * 100)
    with pytest.raises(seedstore.Error) as e:
        seedstore.open(str(bad))
    assert e.value.code in ("CORRUPT", "INVALID_ARGUMENT", "IO_ERROR") and "bad.h5" in str(e.value)
    spec = model_spec()
    spec["tensors"][1]["init"]["scael"] = 1
    with pytest.raises(seedstore.InvalidArgumentError, match="scael") as e:
        seedstore.open(spec)
    assert e.value.exit_code == 2
    with pytest.raises(seedstore.InvalidArgumentError, match="dtype"):
        seedstore.open({"seedstore": 1, "tensors": [{"name": "x", "shape": [2], "dtype": "float8"}]})
    with pytest.raises(seedstore.InvalidArgumentError, match="not JSON"):
        seedstore.Spec({"seedstore": 1, "tensors": [{"name": "x", "shape": [float("nan")]}]})
    with pytest.raises(seedstore.InvalidArgumentError, match="malformed JSON"):
        seedstore.open('{"seedstore": 1, "tensors": [}')


def test_init_module_plain_and_errors_write_nothing():
    torch = pytest.importorskip("torch")
    import seedstore.torch as sst
    cat = seedstore.open(model_spec())

    class M(torch.nn.Module):
        def __init__(self, dtype=torch.float32):
            super().__init__()
            self.emb = torch.nn.Parameter(torch.zeros(37, 16, dtype=torch.bfloat16))
            self.layers = torch.nn.ModuleList([torch.nn.Module()])
            self.layers[0].w = torch.nn.Parameter(torch.zeros(23, 16, dtype=dtype))
            self.layers[0].register_buffer("norm", torch.zeros(16))

    m = M()
    rep = sst.init_module_(m, model_spec(), strict=False)
    assert rep.initialized == {"emb": "emb", "layers.0.w": "layers.0.w", "layers.0.norm": "layers.0.norm"}
    assert m.layers[0].w.detach().numpy().tobytes() == cat.read("layers.0.w").tobytes()
    assert (m.layers[0].norm == 1).all()
    # on the meta device: storage first, then values
    with torch.device("meta"):
        mm = M()
    sst.init_module_(mm, model_spec(), strict=False)
    assert mm.emb.device.type == "cpu" and torch.equal(mm.emb, m.emb)
    # a wrong dtype anywhere: named, nothing written
    bad = M(dtype=torch.float64)
    with pytest.raises(seedstore.InvalidArgumentError, match="'layers.0.w' has dtype float64"):
        sst.init_module_(bad, model_spec(), strict=False)
    assert not bad.emb.any() and not bad.layers[0].norm.any()
    # a tensor the source lacks (strict): every one named, nothing written
    spec = model_spec()
    spec["tensors"] = [t for t in spec["tensors"] if t["name"] != "emb"]
    fresh = M()
    with pytest.raises(seedstore.NotFoundError, match="'emb'"):
        sst.init_module_(fresh, spec)
    assert not fresh.layers[0].w.any()
    # name_map renames
    rep = sst.init_module_(fresh, model_spec(), name_map={"emb": "emb"}, strict=False)
    assert "emb" in rep.initialized



def test_init_module_keeps_ties_storage_and_fills_strided_parameters():
    torch = pytest.importorskip("torch")
    import seedstore.torch as sst
    spec = {"seedstore": 1, "seed": 4, "tensors": [
        {"name": "emb.weight", "shape": [5, 4], "dtype": "float32", "init": {"dist": "normal"}},
        {"name": "w", "shape": [3, 7], "dtype": "float32", "init": {"dist": "uniform"}}]}
    cat = seedstore.open(spec)
    # Tied on meta (head.weight is emb.weight): still one parameter after, with the values.
    with torch.device("meta"):
        m = torch.nn.Module()
        m.emb = torch.nn.Embedding(5, 4)
        m.head = torch.nn.Linear(4, 5, bias=False)
        m.head.weight = m.emb.weight
        m.w = torch.nn.Parameter(torch.empty(3, 7))
    rep = sst.init_module_(m, spec)
    assert rep.unmatched == [] and m.head.weight is m.emb.weight
    assert m.emb.weight.detach().numpy().tobytes() == cat.read("emb.weight").tobytes()
    # strict=False on a partly meta module: a tensor that has storage keeps its values.
    with torch.device("meta"):
        p = torch.nn.Module()
        p.w = torch.nn.Parameter(torch.empty(3, 7))
    p.register_buffer("freqs", torch.arange(6, dtype=torch.float32))
    rep = sst.init_module_(p, spec, strict=False)
    assert rep.unmatched == ["freqs"] and torch.equal(p.freqs, torch.arange(6, dtype=torch.float32))
    assert p.w.detach().numpy().tobytes() == cat.read("w").tobytes()
    # A strided (transposed) parameter is filled through a buffer.
    s = torch.nn.Module()
    s.w = torch.nn.Parameter(torch.zeros(7, 3).t())
    assert not s.w.is_contiguous()
    sst.init_module_(s, spec, strict=False)
    assert s.w.detach().contiguous().numpy().tobytes() == cat.read("w").tobytes()

def test_dcp_writer_and_reader_in_a_world_of_one(tmp_path):
    torch = pytest.importorskip("torch")
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    import seedstore.torch as sst
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/pg", rank=0, world_size=1)
    try:
        cat = seedstore.open(model_spec())
        sd = {"w": torch.from_numpy(cat.read("layers.0.w")), "n": torch.from_numpy(cat.read("layers.0.norm"))}
        ckpt = tmp_path / "ckpt.h5"
        w = sst.Writer(ckpt)
        dcp.save(sd, storage_writer=w)
        assert cli("verify", ckpt).returncode == 0
        back = {"w": torch.zeros(23, 16), "n": torch.zeros(16)}
        dcp.load(back, storage_reader=sst.Reader(str(ckpt)))
        assert torch.equal(back["w"], sd["w"]) and torch.equal(back["n"], sd["n"])
        # renamed keys through name_map; a key the source lacks is DCP's own error
        ren = {"weight": torch.zeros(23, 16)}
        dcp.load(ren, storage_reader=sst.Reader(str(ckpt), name_map={"weight": "w"}))
        assert torch.equal(ren["weight"], sd["w"])
        with pytest.raises(seedstore.InvalidArgumentError, match="name_map must be a dict"):
            sst.Reader(str(ckpt), name_map=lambda k: "w")
        # codec none for the tensors a glob names: stored without filters, read back equal
        dcp.save(sd, storage_writer=sst.Writer(tmp_path / "raw.h5", codec=["w"]))
        assert cli("verify", tmp_path / "raw.h5").returncode == 0
        back = {"w": torch.zeros(23, 16), "n": torch.zeros(16)}
        dcp.load(back, storage_reader=sst.Reader(str(tmp_path / "raw.h5")))
        assert torch.equal(back["w"], sd["w"]) and torch.equal(back["n"], sd["n"])
        import h5py
        import hdf5plugin  # noqa: F401 (the index is zstd-compressed)
        (rank0,) = tmp_path.glob("raw.h5.*.rank0.h5")
        with h5py.File(rank0, "r") as f:  # version 2: each piece's cells are in a cell set
            index = json.loads(bytes(f["seedstore/index"][()]))
            sets = {r["name"]: str(r["cells"]["set"]) for r in index["tensors"] if "cells" in r}
            pipelines = {k: f["cells"][sets[k]].id.get_create_plist().get_nfilters()
                         for k in ("w", "n")}
        assert pipelines == {"w": 0, "n": 2}, pipelines
        with pytest.raises(seedstore.InvalidArgumentError, match="codec 'lz4'"):
            sst.Writer(tmp_path / "x.h5", codec="lz4")
        # a state dict entry that is not a tensor is refused by name, nothing written
        with pytest.raises(BaseException) as e:  # DCP wraps each rank's exception (a BaseException)
            dcp.save({"w": sd["w"], "step": 3}, storage_writer=sst.Writer(tmp_path / "bad.h5"))
        failures = getattr(e.value, "failures", {0: e.value})
        inner = failures[0][0] if isinstance(failures[0], tuple) else failures[0]  # (exception, trace)
        assert isinstance(inner, seedstore.InvalidArgumentError) and "'step'" in str(inner), repr(inner)
        assert not (tmp_path / "bad.h5").exists()
    finally:
        dist.destroy_process_group()


def test_mesh_axis_order_keeps_every_nesting_or_is_none():
    pytest.importorskip("torch")
    from seedstore.torch import _axis_order
    assert _axis_order(["dp", "tp"], []) == ["dp", "tp"]              # no nesting: the mesh's order
    assert _axis_order(["dp", "tp"], [["tp", "dp"]]) == ["tp", "dp"]
    assert _axis_order(["dp", "tp"], [["tp", "dp"], ["dp", "tp"]]) is None  # opposite nestings
    # two nestings no first-come order keeps: b before a and c before a
    assert _axis_order(["a", "b", "c"], [["b", "a"], ["c", "a"]]) == ["b", "c", "a"]
    assert _axis_order(["a", "b", "c"], [["c", "b"], ["b", "a"]]) == ["c", "b", "a"]
    assert _axis_order(["a", "b", "c"], [["a", "c"], ["c", "b"], ["b", "a"]]) is None  # a cycle
    rng = random.Random(SEED + 7)
    for _ in range(300):  # random chains over 4 axes: the order found keeps each, else a cycle
        axes = ["p", "q", "r", "s"]
        nests = [rng.sample(axes, rng.randint(2, 3)) for _ in range(rng.randint(0, 3))]
        got = _axis_order(axes, nests)
        keeps = lambda o: all([a for a in o if a in n] == n for n in nests)  # noqa: E731
        if got is None:
            assert not any(keeps(list(p)) for p in itertools.permutations(axes)), nests
        else:
            assert sorted(got) == sorted(axes) and keeps(got), (nests, got)
