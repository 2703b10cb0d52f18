"""seedstore.jax.verify_replicas in a real 2-process JAX job on CPU (jax_worker.py): each
process drives 4 emulated CPU devices (a 2x4 mesh, row p on process p), jax.distributed with
a coordinator on 127.0.0.1, cross-process collectives over gloo. A model loaded by
seedstore.jax.load agrees and composes to its source; one flipped bit in one device's replica
on process 1 is named with its tensor, rank, device and process (by majority where there is
one, by the source where two replicas tie); bad input is named."""
import json
import os
import socket
import subprocess
import sys

import pytest

pytest.importorskip("jax")
from seedstore_pkg_util import python_env  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def procs(tmp_path_factory):
    out = tmp_path_factory.mktemp("jaxmp")
    env = python_env()
    env.pop("XLA_FLAGS", None)
    env["OMP_NUM_THREADS"] = "1"
    addr = f"127.0.0.1:{free_port()}"
    ps = [subprocess.Popen([sys.executable, os.path.join(HERE, "jax_worker.py"), addr, str(i), str(out)],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for i in range(2)]
    texts = []
    for p in ps:
        try:
            texts.append(p.communicate(timeout=120)[0].decode(errors="replace"))
        except subprocess.TimeoutExpired:
            for q in ps:
                q.kill()
            pytest.fail("a JAX process hung:\n" + "\n".join(t[-4000:] for t in texts))
    for i, p in enumerate(ps):
        assert p.returncode == 0, f"process {i} exited {p.returncode}:\n{texts[i][-6000:]}"
    return [json.loads((out / f"p{i}.json").read_text()) for i in range(2)]


def test_both_processes_reach_the_same_verdicts(procs):
    for key in ("clean", "clean_nosource", "flip", "flip_nosource"):
        a, b = procs[0][key], procs[1][key]
        assert a["tensors"] == b["tensors"], key
        assert a["disagreeing"] == b["disagreeing"], key


def test_loaded_model_agrees_and_composes_to_the_source(procs):
    for p in procs:
        rep = p["clean"]
        assert rep["ok"], rep["table"]
        assert sorted(rep["tensors"]) == sorted(p["expected_fp"])
        for name, t in rep["tensors"].items():
            assert t["replicas"] == "agree" and t["composition"] == "ok", (name, t)
            assert t["composed"] == p["expected_fp"][name], name
        # without a source: replicas agree, and the composed fingerprints are the source's
        nos = p["clean_nosource"]
        assert nos["ok"] and all(t["composition"] == "not_checked" for t in nos["tensors"].values())
        assert {n: t["composed"] for n, t in nos["tensors"].items()} == p["expected_fp"]
        # the 2x4 mesh: 'bias' P('data') has 2 regions of 4 replicas, 'emb' P('model') 4 of 2
        assert rep["tensors"]["bias"]["shards"] == 2 and rep["tensors"]["bias"]["max_replicas"] == 4
        assert rep["tensors"]["emb"]["shards"] == 4 and rep["tensors"]["emb"]["max_replicas"] == 2
        assert rep["tensors"]["layers.0.w"]["shards"] == 8
        assert p["nested_names"] == ["layers.0.w", "top"]


def test_one_flipped_bit_on_one_process_is_named(procs):
    for p in procs:
        rank6 = [d for d, r in p["rank_of"].items() if r == 6]
        rep = p["flip"]
        assert not rep["ok"]
        # bias: 4 replicas of [4:8] on process 1, one flipped -> the majority names rank 6
        bias = rep["tensors"]["bias"]
        assert bias["replicas"] == "mismatch" and bias["composition"] == "ok", bias
        assert rep["disagreeing"]["bias"] == [6] and rep["processes"]["bias"] == [1]
        assert rep["devices"]["bias"] == rank6
        # emb: two replicas per region (one per process) -> a tie; the source names rank 4
        emb = rep["tensors"]["emb"]
        assert emb["replicas"] == "tie" and emb["composition"] == "undetermined", emb
        assert rep["disagreeing"]["emb"] == [4] and rep["processes"]["emb"] == [1]
        assert rep["ties"] == ["emb"]
        assert sorted(rep["disagreeing"]) == ["bias", "emb"]
        for n in ("layers.0.w", "norm", "scale"):
            assert rep["tensors"][n]["ok"], n
        nos = p["flip_nosource"]
        assert nos["disagreeing"] == {"bias": [6]} and nos["ties"] == ["emb"]
        assert p["flip_raise"].startswith("MismatchError") and "bias" in p["flip_raise"]


def test_bad_input_is_named(procs):
    for p in procs:
        assert p["bad_leaf"].startswith("InvalidArgumentError") and "'x'" in p["bad_leaf"], p["bad_leaf"]
        assert "ndarray" in p["bad_leaf"]
        assert "'y'" in p["one_device"] and "1 of the job's 8 devices" in p["one_device"], p["one_device"]
        assert p["bad_shape"].startswith("InvalidArgumentError") and "'layers.0.w'" in p["bad_shape"]
        assert p["differ"].startswith("InvalidArgumentError") and "process 1" in p["differ"], p["differ"]
        assert p["after"] is True
