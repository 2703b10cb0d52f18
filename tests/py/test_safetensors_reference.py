"""safetensors headers read as the reference reads them (label golden).

Hand-made files, each opened by the `safetensors` package (the reference) and by
`seedstore inspect`: both accept it, or both refuse it (seedstore with CORRUPT, exit 4, naming
the file) -- except a gap between tensors' bytes, which seedstore accepts by design
(docs/FORMAT.md 8). Covers the header's framing (only JSON whitespace around the JSON object:
a NUL byte, trailing bytes or a byte-order mark are refused), `"__metadata__": null`, the
100,000,000-byte header limit, and overlapping tensors, also behind an empty tensor.
Runs the shipped CLI ($SEEDSTORE_BIN).
"""
import json
import os
import struct
import subprocess

import pytest

safetensors = pytest.importorskip("safetensors")
from safetensors import safe_open  # noqa: E402

from seedstore_testlib import BIN, need_binary  # noqa: E402,F401 (an autouse fixture)


def write(path, header, data):
    """A safetensors file: the header bytes exactly as given (no padding), then `data`."""
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header + data)
    return str(path)


def reference_accepts(path):
    try:
        with safe_open(path, framework="np") as f:
            for k in f.keys():
                f.get_tensor(k)
        return True
    except Exception:  # the package's SafetensorError, or a Python error for a bad header
        return False


def seedstore_accepts(path):
    p = subprocess.run([BIN, "inspect", path], capture_output=True, text=True)
    assert p.returncode in (0, 4), f"{path}: rc={p.returncode}\n{p.stdout}\n{p.stderr}"
    if p.returncode == 4:
        assert "CORRUPT" in p.stderr and path in p.stderr, p.stderr
        assert "terminate" not in p.stderr, p.stderr
    return p.returncode == 0


def entry(begin, end, dtype="U8", shape=None):
    return {"dtype": dtype, "shape": [end - begin] if shape is None else shape, "data_offsets": [begin, end]}


A = json.dumps({"a": entry(0, 24, "F32", [2, 3])}).encode()
CASES = {
    # framing: only JSON whitespace (space, tab, LF, CR) around one JSON object
    "plain": (A, True),
    "whitespace-around": (b" \t\r\n" + A + b"\t\r\n  ", True),
    "nul-then-garbage": (A + b"\0 trailing garbage {{{ \xff\xfe", False),
    "nul-padding": (A + b"\0\0\0", False),
    "nul-before": (b"\0" + A, False),
    "trailing-bytes": (A + b" x", False),
    "form-feed": (A + b"\f", False),
    "byte-order-mark": (b"\xef\xbb\xbf" + A, False),
    "not-an-object": (b"[1, 2]", False),
    "invalid-utf8-in-name": (b'{"\xff": ' + json.dumps(entry(0, 24)).encode() + b"}", False),
    "empty-header": (b"", False),
    # __metadata__: a map of strings, or null (no metadata)
    "metadata-null": (json.dumps({"__metadata__": None, "a": entry(0, 24)}).encode(), True),
    "metadata-strings": (json.dumps({"__metadata__": {"k": "v"}, "a": entry(0, 24)}).encode(), True),
    "metadata-number": (json.dumps({"__metadata__": {"k": 1}, "a": entry(0, 24)}).encode(), False),
    "metadata-array": (json.dumps({"__metadata__": [], "a": entry(0, 24)}).encode(), False),
    # overlaps, also behind an empty tensor; empty tensors at a boundary are fine
    "overlap-behind-empty": (json.dumps({"a": entry(0, 24), "e": entry(12, 12), "c": entry(16, 20)}).encode(), False),
    "overlap": (json.dumps({"a": entry(0, 24), "c": entry(16, 20)}).encode(), False),
    "empty-inside": (json.dumps({"a": entry(0, 24), "e": entry(8, 8)}).encode(), False),
    "empty-at-ends": (json.dumps({"e0": entry(0, 0), "a": entry(0, 24), "e1": entry(24, 24, shape=[0, 2])}).encode(), True),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_header_accepted_exactly_when_the_reference_accepts_it(name, tmp_path):
    header, accepted = CASES[name]
    path = write(tmp_path / f"{name}.safetensors", header, bytes(range(24)))
    assert reference_accepts(path) == accepted, f"{name}: the reference changed its mind"
    assert seedstore_accepts(path) == accepted, name


def test_a_gap_is_the_one_documented_difference(tmp_path):
    path = write(tmp_path / "gap.safetensors", json.dumps({"a": entry(0, 8), "b": entry(16, 24)}).encode(), bytes(24))
    assert not reference_accepts(path)
    assert seedstore_accepts(path)


def test_header_limit_is_the_references(tmp_path):
    # 100,000,000 header bytes are accepted, one more is refused, by both.
    for n, accepted in ((100_000_000, True), (100_000_001, False)):
        header = b"{}" + b" " * (n - 2)
        path = write(tmp_path / "big.safetensors", header, b"")
        assert reference_accepts(path) == accepted, n
        assert seedstore_accepts(path) == accepted, n
        os.remove(path)
