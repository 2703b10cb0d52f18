"""seedstore.torch under real `torchrun --nproc_per_node 4` with gloo on CPU (torch_worker.py):
init_module_ on a meta-built Llama-shaped model under FSDP2 (4 ranks) and FSDP2 x TP (2 x 2),
every local shard equal to the slice of the same model initialized whole; verify_replicas in
the torchtitan#166 scenario (unseeded replicas), with a re-seeded tensor on one rank and one
flipped element on another, each named with its tensor and rank; torch.distributed.checkpoint
loading a lazy store and its dense safetensors export through seedstore.torch.Reader into both
shardings; dcp.save through seedstore.torch.Writer giving a distributed save that `seedstore
verify` accepts and `seedstore reshard` consolidates."""
import json
import os
import subprocess
import sys

import pytest

from seedstore_pkg_util import python_env, torchrun

pytest.importorskip("torch")

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("torch4")
    torchrun(os.path.join(HERE, "torch_worker.py"), 4, out)
    res = []
    for r in range(4):
        with open(out / f"rank{r}.json") as f:
            res.append(json.load(f))
    return res


def test_every_rank_reaches_the_same_verdicts(ranks):
    for key in ranks[0]:
        if "verify" in key:
            for r in range(1, 4):
                assert ranks[r][key] == ranks[0][key], (key, r)


def test_fsdp2_local_shards_are_slices_of_the_whole_model(ranks):
    for r, res in enumerate(ranks):
        assert res["fsdp_bad"] == [], (r, res["fsdp_bad"])
        # every parameter really is sharded, unevenly for the prime sizes
        assert set(map(tuple, res["fsdp_placements"].values())) == {("S(0)",)}


def test_fsdp2_tp_local_shards_are_slices_of_the_whole_model(ranks):
    for r, res in enumerate(ranks):
        assert res["tp_bad"] == [], (r, res["tp_bad"])
    pl = ranks[0]["tp_placements"]
    # colwise TP under FSDP2 is the _StridedShard case; rowwise shards two dims
    assert pl["layers.0.feed_forward.w1.weight"] == ["_S(0, 2)", "S(0)"]
    assert pl["layers.0.feed_forward.w2.weight"] == ["S(0)", "S(1)"]
    assert pl["tok_embeddings.weight"] == ["S(0)"]


def test_unmatched_tensors_are_named(ranks):
    kind, msg = ranks[0]["fsdp_strict_error"]
    assert kind == "NotFoundError" and "'freqs'" in msg and msg.startswith("NOT_FOUND")
    assert ranks[0]["fsdp_unmatched"] == ["freqs"]


def test_verify_agrees_and_composes_under_both_layouts(ranks):
    spec_fps = ranks[0]["fsdp_fingerprints"]
    for key in ("fsdp_verify", "tp_verify"):
        rep = ranks[0][key]
        assert rep["ok"], (key, rep["disagreeing"], rep["ties"])
        for name, fp in spec_fps.items():
            t = rep["tensors"][name]
            assert (t["replicas"], t["composition"], t["reference"]) == ("agree", "ok", "spec"), (key, name, t)
            assert t["composed"] == fp == t["expected"]
    # without a source: the same composed fingerprints (they do not depend on the layout)
    rep = ranks[0]["tp_verify_nosource"]
    for name, fp in spec_fps.items():
        assert rep["tensors"][name]["composed"] == fp
        assert rep["tensors"][name]["composition"] == "not_checked"


def test_one_flipped_element_in_a_shard_is_named(ranks):
    rep = ranks[0]["fsdp_flip_verify"]
    assert not rep["ok"]
    assert rep["disagreeing"] == {"layers.1.feed_forward.w2.weight": [1]}
    t = rep["tensors"]["layers.1.feed_forward.w2.weight"]
    assert t["composition"] == "mismatch" and t["problems"][0]["off_spec"] == [1]


def test_unseeded_replicas_torchtitan_166(ranks):
    rep = ranks[0]["unseeded_verify"]
    assert not rep["ok"]
    # four replicas, four values: no majority, every rank named in the votes
    t = rep["tensors"]["layers.0.attention.wq.weight"]
    assert t["replicas"] == "tie"
    votes = t["problems"][0]["votes"]
    assert sorted(r for v in votes for r in v["ranks"]) == [0, 1, 2, 3] and len(votes) == 4
    assert rep["tensors"]["norm.weight"]["replicas"] == "agree"  # ones everywhere
    # with the source: every rank's random tensors are off-spec, by name
    rep = ranks[0]["unseeded_verify_source"]
    assert rep["disagreeing"]["output.weight"] == [0, 1, 2, 3]
    assert "norm.weight" not in rep["disagreeing"]


def test_majority_names_the_deviating_ranks(ranks):
    rep = ranks[0]["replica_verify"]
    assert rep["disagreeing"] == {"layers.0.attention.wq.weight": [2], "output.weight": [3]}
    code, msg = ranks[0]["replica_raise"]
    assert code == "MISMATCH" and "layers.0.attention.wq.weight" in msg and "output.weight" in msg


def test_dcp_loads_a_store_and_safetensors_into_both_shardings(ranks):
    spec_fps = ranks[0]["fsdp_fingerprints"]
    for res in ranks:
        for label in ("fsdp", "tp"):
            for kind in ("h5", "safetensors"):
                key = f"dcp_{label}_{kind}"
                assert res[key + "_bad"] == [], (key, res[key + "_bad"])
                composed = res[key + "_composed"]
                # the same fingerprints whatever the sharding and the source format
                assert {n: composed[n] for n in spec_fps} == spec_fps, key


def test_dcp_save_with_the_writer_is_a_seedstore_save(ranks):
    spec_fps = ranks[0]["fsdp_fingerprints"]
    assert all(r["save_table_has_rows"] for r in ranks)
    code, out, err = ranks[0]["save_cli_check"]
    assert code == 0, (out, err)
    code, err = ranks[0]["save_reshard"]
    assert code == 0, err
    assert ranks[0]["save_fingerprints"] == spec_fps  # consolidated: the model's fingerprints
    for r, res in enumerate(ranks):  # read back into another sharding through the Reader
        assert res["save_load_bad"] == [], (r, res["save_load_bad"])


def test_writer_places_a_state_dict_whatever_its_first_tensor(ranks):
    pl = ranks[0]["order_placements"]
    assert pl["a_norm.weight"] == ["S(0)"] and pl["l.weight"] == ["_S(0, 2)", "S(0)"], pl
    code, err = ranks[0]["order_cli_check"]
    assert code == 0, err
    for r, res in enumerate(ranks):
        assert res["order_bad"] == [], (r, res["order_bad"])


def test_writer_names_opposite_nestings_and_writes_nothing(ranks):
    for r, res in enumerate(ranks):
        err = res["opposite_error"]
        assert err and "UNSUPPORTED" in err and "opposite orders" in err, (r, err)
        assert not res["opposite_left"], r


def test_writer_lifts_a_sub_mesh_spanning_every_rank_and_names_two_meshes(ranks):
    # FSDP2 x TP with tp = 1: saved as one layout, verified, equal to the spec.
    assert ranks[0]["submesh_cli_check"][:2] == [0, 0], ranks[0]["submesh_cli_check"]
    for r, res in enumerate(ranks):
        err = res["two_meshes_error"]
        assert err and "UNSUPPORTED" in err and "2 different DeviceMeshes" in err, (r, err)
        assert not res["two_meshes_left"], r


def test_empty_local_shards_shaped_otherwise_by_torch_are_filled_as_empty(ranks):
    for r, res in enumerate(ranks):
        got = res["zero_dim"]
        assert isinstance(got, list), (r, got)
        initialized, _, v_equal, verified = got
        assert initialized == ["v", "w"] and v_equal and verified, (r, got)
    assert any(res["zero_dim"][1] == [0, 0] for res in ranks), [res["zero_dim"][1] for res in ranks]
