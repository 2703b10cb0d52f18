"""Store files against the real Python packages (label golden).

* h5py + hdf5plugin read every dense tensor of a seedstore file exactly (bfloat16 by the
  documented recipe: the uint16 dataset viewed as ml_dtypes.bfloat16);
* a file written by the `safetensors` package imports bit-exactly, every dtype;
* `seedstore export` writes safetensors that the package reads back bit-exactly: whole
  tensors, split files with a model.safetensors.index.json, and one rank's shards whose
  seedstore.shards metadata reassembles the whole tensors.
Runs the shipped CLI ($SEEDSTORE_BIN).
"""
import hashlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest

h5py = pytest.importorskip("h5py")
hdf5plugin = pytest.importorskip("hdf5plugin")
ml_dtypes = pytest.importorskip("ml_dtypes")
safetensors = pytest.importorskip("safetensors")
from safetensors import TensorSpec, safe_open, serialize_file  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BIN = os.environ.get("SEEDSTORE_BIN", os.path.join(ROOT, "build", "tools", "seedstore"))

# safetensors dtype code -> numpy dtype of the same bytes (bf16 via ml_dtypes).
ST_NP = {
    "BF16": ml_dtypes.bfloat16, "F16": np.float16, "F32": np.float32, "F64": np.float64,
    "I8": np.int8, "I16": np.int16, "I32": np.int32, "I64": np.int64,
    "U8": np.uint8, "U16": np.uint16, "U32": np.uint32, "U64": np.uint64, "BOOL": np.bool_,
}
SEEDSTORE_DTYPE = {
    "BF16": "bfloat16", "F16": "float16", "F32": "float32", "F64": "float64", "I8": "int8",
    "I16": "int16", "I32": "int32", "I64": "int64", "U8": "uint8", "U16": "uint16",
    "U32": "uint32", "U64": "uint64", "BOOL": "bool",
}


@pytest.fixture(scope="module", autouse=True)
def _need_binary():
    if not os.access(BIN, os.X_OK):
        pytest.skip(f"seedstore binary not found at {BIN} (set SEEDSTORE_BIN)")


def run(*args, ok=True):
    p = subprocess.run([BIN, *map(str, args)], capture_output=True, text=True)
    if ok:
        assert p.returncode == 0, f"{args}: rc={p.returncode}\n{p.stdout}\n{p.stderr}"
    return p


def escape(name):
    if set(name) <= {"."}:
        return name.replace(".", "%2E")
    return name.replace("%", "%25").replace("/", "%2F")


def read_st(path):
    """Every tensor of a safetensors file as raw numpy arrays (bf16 as ml_dtypes), by name."""
    out = {}
    with safe_open(path, framework="np") as f, safe_open(path, framework="flax") as fx:
        meta = f.metadata()
        for k in f.keys():
            if f.get_slice(k).get_dtype() == "BF16":  # numpy has no bfloat16: jax arrays
                out[k] = np.asarray(fx.get_tensor(k))
            else:
                out[k] = f.get_tensor(k)
    return out, meta


def write_st(path, arrays, metadata=None):
    """Writes numpy arrays (bf16 as ml_dtypes) with the safetensors package."""
    keep = {k: np.require(v, requirements="C") for k, v in arrays.items()}  # keeps 0-d
    specs = {k: TensorSpec(dtype=v.dtype.name, shape=v.shape, data_ptr=v.ctypes.data,
                           data_len=v.nbytes) for k, v in keep.items()}
    serialize_file(specs, str(path), metadata=metadata)


def text(a):
    """A string attribute as str, whether written fixed-length (h5py: bytes) or variable-length."""
    return a.decode() if isinstance(a, bytes) else a


def read_h5(path):
    """Every dense tensor of a store through h5py + hdf5plugin, as the FORMAT.md recipe says."""
    out = {}
    with h5py.File(path, "r") as f:
        assert f.attrs["seedstore.format"] in ("seedstore", b"seedstore")
        assert int(f.attrs["seedstore.version"]) == 1
        index = json.loads(bytes(f["seedstore/index"][()]))
        for rec in index["tensors"]:
            if rec["kind"] != "dense":
                continue
            d = f["tensors"][escape(rec["name"])]
            # Fixed-length string attributes (h5py: bytes; older files: str).
            assert text(d.attrs["seedstore.name"]) == rec["name"]
            dtype = rec["dtype"]
            assert text(d.attrs["seedstore.dtype"]) == dtype
            arr = np.asarray(d[()])
            if dtype == "bfloat16":
                arr = arr.view(ml_dtypes.bfloat16).reshape(arr.shape)
            elif dtype == "bool":
                arr = arr.view(np.bool_).reshape(arr.shape)
            assert list(arr.shape) == rec["shape"]
            out[rec["name"]] = arr
    return out, index


def same_bytes(a, b):
    return a.dtype.itemsize == b.dtype.itemsize and a.shape == b.shape and \
        a.tobytes() == b.tobytes()


@pytest.fixture(scope="module")
def source_file(tmp_path_factory):
    """A safetensors file written by the safetensors package: every dtype, odd shapes."""
    d = tmp_path_factory.mktemp("st")
    rng = np.random.default_rng(7)
    shapes = [[], [0], [1], [3, 0, 2], [257], [31, 67], [300, 700], [5, 6, 7, 3]]
    arrays = {}
    for code, npt in ST_NP.items():
        for k, shape in enumerate(shapes):
            n = int(np.prod(shape)) if shape else 1
            size = np.dtype(npt).itemsize
            if code == "BOOL":
                raw = rng.integers(0, 2, n, dtype=np.uint8).tobytes()
            elif code in ("BF16", "F16", "F32", "F64"):
                # Normal values (compressible like weights), plus NaN/inf/-0 bit patterns.
                x = (rng.standard_normal(n) * 0.02).astype(np.float32)
                if code == "BF16":
                    raw = x.astype(ml_dtypes.bfloat16).tobytes()
                else:
                    raw = x.astype(npt).tobytes()
                raw = bytearray(raw)
                if n >= 4:
                    raw[0:size] = b"\xff" * size  # a NaN pattern
                raw = bytes(raw)
            else:
                raw = rng.integers(0, 256, n * size, dtype=np.uint8).tobytes()
            name = f"{code.lower()}/t{k}.weight"
            arrays[name] = np.frombuffer(raw, dtype=npt).reshape(shape)
    path = d / "src.safetensors"
    write_st(path, arrays, {"format": "pt"})
    return path, arrays


@pytest.fixture(scope="module")
def dense_store(source_file, tmp_path_factory):
    path, arrays = source_file
    store = tmp_path_factory.mktemp("h5") / "dense.h5"
    run("import", path, "-o", store, "--chunk-bytes", 65536, "--threads", 2)
    return store, arrays


def test_import_of_safetensors_package_file_is_bit_exact(dense_store):
    store, arrays = dense_store
    got, index = read_h5(store)
    assert set(got) == set(arrays)
    for name, want in arrays.items():
        assert same_bytes(got[name], want), name
    # dtypes are kept
    dt = {r["name"]: r["dtype"] for r in index["tensors"]}
    for name in arrays:
        assert dt[name] == SEEDSTORE_DTYPE[name.split("/")[0].upper()]


def test_h5py_sees_documented_pipeline(dense_store):
    store, _ = dense_store
    with h5py.File(store, "r") as f:
        d = f["tensors"][escape("f32/t6.weight")]  # [300, 700] float32, many chunks
        assert d.chunks is not None and d.id.get_num_chunks() > 4
        filters = d.id.get_create_plist()
        ids = [filters.get_filter(i)[0] for i in range(filters.get_nfilters())]
        assert ids == [2, 32015]
        sums = f["checksums"][escape("f32/t6.weight")][()]
        assert sums.dtype == np.uint64 and sums.size == d.id.get_num_chunks()
        b = f["tensors"][escape("bf16/t5.weight")]
        assert b.dtype == np.uint16 and b.attrs["seedstore.dtype"] == b"bfloat16"
        # Written fixed-length, in the object header (checksummed), not the global heap.
        assert b.attrs.get_id("seedstore.dtype").get_type().is_variable_str() is False
        assert f.attrs.get_id("seedstore.format").get_type().is_variable_str() is False


def test_codec_none_is_read_by_plain_h5py_bit_exact(source_file, tmp_path):
    """--codec none:GLOB stores the matching tensors with no filters: h5py reads them without
    hdf5plugin (a fresh interpreter that never imports it); the others keep shuffle + zstd."""
    path, arrays = source_file
    store = tmp_path / "none.h5"
    run("import", path, "-o", store, "--chunk-bytes", 4096, "--codec", "none:f32/*",
        "--codec", "none:bf16/*")
    assert run("verify", store).returncode == 0
    got, _ = read_h5(store)
    for name, want in arrays.items():
        assert same_bytes(got[name], want), name
    with h5py.File(store, "r") as f:
        for name in arrays:
            d = f["tensors"][escape(name)]
            if d.chunks is None:
                continue  # scalars and empty tensors are contiguous, never filtered
            pl = d.id.get_create_plist()
            ids = [pl.get_filter(i)[0] for i in range(pl.get_nfilters())]
            if name.startswith(("f32/", "bf16/")):
                assert ids == [], name
            else:
                assert ids[-1] == 32015, name
    info = {t["name"]: t for t in json.loads(run("inspect", store, "--json").stdout)["tensors"]}
    assert info["f32/t6.weight"]["codec"] == "none"
    assert info["i32/t6.weight"]["codec"] == "shuffle+zstd-1"
    assert info["u8/t6.weight"]["codec"] == "zstd-1"
    plain = subprocess.run(
        [sys.executable, "-c", """
import hashlib, json, sys, h5py
assert "hdf5plugin" not in sys.modules
out = {}
with h5py.File(sys.argv[1], "r") as f:
    for k in f["tensors"]:
        if k.startswith(("f32", "bf16")):
            out[k] = hashlib.sha256(f["tensors"][k][()].tobytes()).hexdigest()
print(json.dumps(out))
""", str(store)], capture_output=True, text=True, env={**os.environ, "HDF5_PLUGIN_PATH": "/nonexistent"})
    assert plain.returncode == 0, plain.stderr
    hashes = json.loads(plain.stdout)
    want = {escape(n): hashlib.sha256(a.tobytes()).hexdigest()
            for n, a in arrays.items() if n.startswith(("f32/", "bf16/"))}
    assert hashes == want and len(want) == 16


def test_reshard_and_save_ranks_take_codec_none(dense_store, tmp_path):
    """reshard --codec none:GLOB and save-ranks --codec none: the rank files' pieces of the
    matching tensors have no filters, and h5py reads every global tensor through the master."""
    store, arrays = dense_store
    layout = tmp_path / "l2.json"
    layout.write_text(json.dumps({"mesh": {"axes": ["data"], "shape": [2]},
                                  "placements": [{"match": "*", "flat": ["data"]}]}))
    one = tmp_path / "l1.json"
    one.write_text(json.dumps({"mesh": {"axes": ["data"], "shape": [1]},
                               "placements": [{"match": "*", "flat": ["data"]}]}))
    for out, args, raw in [
            (tmp_path / "r.h5", ["reshard", store, "--layout", layout, "--codec", "none:f64/*"],
             lambda n: n.startswith("f64/")),
            (tmp_path / "s.h5", ["save-ranks", store, "--layout", one, "--codec", "none",
                                 "--backend", "self"], lambda n: True)]:
        run(*args, "-o", out, "-q")
        assert run("verify", out).returncode == 0
        seen = 0
        for rank_file in tmp_path.glob(out.name + ".*.rank*.h5"):
            with h5py.File(rank_file, "r") as f:
                # Version 2 rank files (docs/FORMAT.md 11): chunked pieces are cells of sets.
                assert f.attrs["seedstore.version"] == 2
                index = json.loads(bytes(f["seedstore/index"][()]))
                for rec in index["tensors"]:
                    if "cells" not in rec:
                        continue
                    d = f["cells"][str(rec["cells"]["set"])]
                    name = rec["name"]
                    assert (d.id.get_create_plist().get_nfilters() == 0) == raw(name), (out, name)
                    seen += raw(name)
        assert seen > 0
        with h5py.File(out, "r") as f:
            for name, want in arrays.items():
                if want.size == 0 or want.ndim == 0:
                    continue
                got = np.asarray(f["tensors"][escape(name)][()])
                assert got.tobytes() == want.tobytes(), (out, name)


def test_codec_flag_errors_name_the_value(source_file, tmp_path):
    path, _ = source_file
    p = run("import", path, "-o", tmp_path / "x.h5", "--codec", "lz4", ok=False)
    assert p.returncode == 2 and "--codec 'lz4': expected zstd, none or none:GLOB" in p.stderr
    p = run("import", path, "-o", tmp_path / "x.h5", "--codec", "none:nope*", ok=False)
    assert p.returncode == 2 and "--codec none: 'nope*' matches no tensor" in p.stderr
    assert not (tmp_path / "x.h5").exists()


def test_verify_and_inspect_dense(dense_store):
    store, arrays = dense_store
    p = run("verify", store, "--json")
    rep = json.loads(p.stdout)
    assert rep["ok"] and not rep["problems"]
    info = json.loads(run("inspect", store, "--json").stdout)
    assert info["dense"] == len(arrays) and info["lazy"] == 0


def test_export_whole_is_read_bit_exact_by_safetensors(dense_store, tmp_path):
    store, arrays = dense_store
    out = tmp_path / "model.safetensors"
    run("export", store, "--format", "safetensors", "-o", out)
    got, meta = read_st(str(out))
    assert set(got) == set(arrays)
    for name, want in arrays.items():
        assert same_bytes(got[name], want), name


def test_export_split_with_hf_index(dense_store, tmp_path):
    store, arrays = dense_store
    out = tmp_path / "model.safetensors"
    p = run("export", store, "-o", out, "--max-shard-size", "400KB", "--json")
    files = json.loads(p.stdout)["files"]
    assert len(files) > 2 and files[-1].endswith("model.safetensors.index.json")
    index = json.loads(open(files[-1]).read())
    total = sum(a.nbytes for a in arrays.values())
    assert index["metadata"]["total_size"] == total
    assert set(index["weight_map"]) == set(arrays)
    seen = {}
    for f in files[:-1]:
        assert os.path.basename(f).startswith("model-") and "-of-" in f
        got, _ = read_st(f)
        seen.update(got)
    for name, want in arrays.items():
        assert index["weight_map"][name] in [os.path.basename(f) for f in files[:-1]]
        assert same_bytes(seen[name], want), name
    # ... and the index imports back bit-exactly.
    back = tmp_path / "back.h5"
    run("import", files[-1], "-o", back)
    got, _ = read_h5(back)
    for name, want in arrays.items():
        assert same_bytes(got[name], want), name


LAYOUT = {
    "mesh": {"axes": ["data", "tensor"], "shape": [2, 2]},
    "placements": [
        {"match": "*proj.weight", "spec": ["tensor", "data"]},
        {"match": "*embed_tokens*", "dtensor": ["Replicate()", "Shard(0)"]},
        {"match": "*norm*", "flat": ["data", "tensor"]},
    ],
}


def test_lazy_store_export_rank_shards_reassemble(tmp_path):
    store = tmp_path / "lazy.h5"
    run("init", "--preset", "tiny-llama", "--seed", 3, "-o", store)
    whole_path = tmp_path / "whole.safetensors"
    run("export", store, "-o", whole_path)
    whole, _ = read_st(str(whole_path))
    layout = tmp_path / "layout.json"
    layout.write_text(json.dumps(LAYOUT))
    rebuilt = {k: np.zeros_like(v) for k, v in whole.items()}
    covered = {k: np.zeros(v.shape, dtype=np.int32) for k, v in whole.items()}
    for rank in range(4):
        out = tmp_path / f"rank{rank}.safetensors"
        run("export", store, "-o", out, "--layout", layout, "--rank", rank)
        got, meta = read_st(str(out))
        shards = json.loads(meta["seedstore.shards"])
        assert set(shards) == set(got)
        for name, arr in got.items():
            s = shards[name]
            assert s["global_shape"] == list(whole[name].shape)
            if "flat" in s:
                b, e = s["flat"]
                flat = rebuilt[name].reshape(-1)
                flat[b:e] = arr
                covered[name].reshape(-1)[b:e] += 1
            else:
                sl = tuple(slice(a, z) for a, z in zip(s["start"], s["stop"]))
                rebuilt[name][sl] = arr
                covered[name][sl] += 1
    for name in whole:
        assert same_bytes(rebuilt[name], whole[name]), name
        assert covered[name].min() >= 1


def test_lazy_then_dense_update_reads_in_h5py(tmp_path):
    store = tmp_path / "m.h5"
    run("init", "--preset", "tiny-gpt2", "-o", store)
    exported = tmp_path / "all.safetensors"
    run("export", store, "-o", exported)
    base, _ = read_st(str(exported))
    # A "training step" on two tensors, written by the safetensors package, imported in place.
    upd = {}
    for name in ["h.0.attn.c_attn.weight", "ln_f.bias"]:
        upd[name] = base[name].astype(np.float32) + np.float32(0.5)
    write_st(tmp_path / "upd.safetensors", upd)
    run("import", tmp_path / "upd.safetensors", "-o", store, "--update")
    got, index = read_h5(store)
    kinds = {r["name"]: r["kind"] for r in index["tensors"]}
    assert kinds["h.0.attn.c_attn.weight"] == "dense" and kinds["wte.weight"] == "lazy"
    assert set(got) == set(upd)
    for name, u in upd.items():
        assert same_bytes(got[name], u), name
    run("verify", store)
    again, _ = read_st(str(run_export(store, tmp_path)))
    for name in base:
        if name not in upd:
            assert same_bytes(again[name], base[name]), name


def run_export(store, tmp_path):
    out = tmp_path / "again.safetensors"
    run("export", store, "-o", out)
    return out


def test_diff_proves_package_files_equal_and_names_each_difference(source_file, dense_store, tmp_path):
    """`seedstore diff` on files the safetensors package wrote: a file, an HF-style split with
    its index, the store imported from them -- identical by fingerprints -- and a copy with one
    bit flipped (in a 0-d tensor and in the last element of a 300 x 700 one), a tensor dropped,
    one added, one reinterpreted as another dtype and one reshaped: each named, exit 7."""
    path, arrays = source_file
    store, _ = dense_store
    j = json.loads(run("diff", path, store, "--json").stdout)
    assert j["identical"] and j["counts"]["identical"] == len(arrays)
    assert all(t["a"]["fingerprint"] == t["b"]["fingerprint"] for t in j["tensors"])
    # The fingerprints of the package's file are those the store recorded when importing it.
    recorded = {t["name"]: t["fingerprint"] for t in json.loads(run("inspect", store, "--json").stdout)["tensors"]}
    of_file = {t["name"]: t["fingerprint"] for t in json.loads(run("fingerprint", path, "--json").stdout)}
    assert of_file == recorded
    # A Hugging Face style split: two files and an index, all written here.
    names = sorted(arrays)
    d = tmp_path / "hf"
    d.mkdir()
    parts = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    weight_map = {}
    for k, part in enumerate(parts):
        chunk = names[k::2]
        write_st(d / part, {n: arrays[n] for n in chunk})
        weight_map.update({n: part for n in chunk})
    (d / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": sum(a.nbytes for a in arrays.values())}, "weight_map": weight_map}))
    p = run("diff", store, d / "model.safetensors.index.json")
    assert f"{len(arrays)} compared: {len(arrays)} identical" in p.stdout
    # The modified copy.
    mod = dict(arrays)
    want = {}
    for name in ["f32/t6.weight", "bf16/t0.weight"]:
        a = arrays[name].copy()
        a.reshape(-1).view(np.uint8)[-1] ^= 0x01  # one bit of the last element's last byte
        mod[name] = a
        want[name] = "values-differ"
    del mod["i8/t4.weight"]
    want["i8/t4.weight"] = "only-in-a"
    mod["extra.bias"] = np.zeros(3, np.float32)
    want["extra.bias"] = "only-in-b"
    mod["u32/t5.weight"] = arrays["u32/t5.weight"].view(np.int32)  # the same bytes as int32
    want["u32/t5.weight"] = "dtype-differs"
    mod["f64/t5.weight"] = arrays["f64/t5.weight"].reshape(67, 31)
    want["f64/t5.weight"] = "shape-differs"
    write_st(tmp_path / "mod.safetensors", mod)
    p = run("diff", store, tmp_path / "mod.safetensors", "--json", ok=False)
    assert p.returncode == 7, p.stderr
    j = json.loads(p.stdout)
    assert not j["identical"]
    got = {t["name"]: t["result"] for t in j["tensors"] if t["result"] != "identical"}
    assert got == want
    assert j["counts"]["identical"] == len(arrays) - 5
    p = run("diff", store, tmp_path / "mod.safetensors", ok=False)
    assert p.returncode == 7 and "differ in 6 of" in p.stderr
    listed = {tuple(line.split()[:2]) for line in p.stdout.splitlines()}
    for name, result in want.items():
        assert (result, name) in listed, name


def test_diff_lazy_store_against_a_trained_checkpoint(tmp_path):
    """The story of a lazy checkpoint: a lazy preset store, its weights written out by the
    safetensors package (as a training job's checkpoint would be) -- identical to the spec --
    then one "training step" on one tensor: that tensor, and only it, is named."""
    store = tmp_path / "m.h5"
    run("init", "--preset", "tiny-gpt2", "-o", store)
    exported = tmp_path / "all.safetensors"
    run("export", store, "-o", exported)
    base, _ = read_st(str(exported))
    ckpt = tmp_path / "ckpt.safetensors"
    write_st(ckpt, base)
    j = json.loads(run("diff", store, ckpt, "--json").stdout)
    assert j["identical"] and {t["a"]["kind"] for t in j["tensors"]} == {"lazy"}
    base["h.1.mlp.c_fc.weight"] = base["h.1.mlp.c_fc.weight"] - np.float32(1e-3)
    write_st(ckpt, base)
    p = run("diff", store, ckpt, "--json", ok=False)
    assert p.returncode == 7
    got = {t["name"]: t["result"] for t in json.loads(p.stdout)["tensors"] if t["result"] != "identical"}
    assert got == {"h.1.mlp.c_fc.weight": "values-differ"}
