"""README.md's Python quick start (section "Python"), extracted and run as written under
`torchrun --nproc_per_node 4` (gloo, CPU); a check appended after it compares every rank's
FSDP2 shards, gathered, with the spec's whole tensors."""
import os
import re

import pytest

from seedstore_pkg_util import SOURCE_DIR, torchrun

pytest.importorskip("torch")

CHECK = '''
import json, os
import seedstore
cat = seedstore.open(spec)
for n, p in model.named_parameters():
    full = p.full_tensor().detach().numpy()
    assert full.tobytes() == cat.read(n).tobytes(), n
    assert p.to_local().shape[0] < p.shape[0], n  # really sharded
with open(os.path.join(os.environ["SEEDSTORE_OUT"], f"ok{dist.get_rank()}"), "w") as f:
    f.write(report.table())
'''


def quickstart():
    with open(os.path.join(SOURCE_DIR, "README.md")) as f:
        text = f.read()
    section = text.split("\n## Python\n", 1)[1]
    m = re.search(r"```python\n(.*?)```", section, re.S)
    assert m, "README.md has no python block under ## Python"
    return m.group(1)


def test_readme_quick_start_runs_under_torchrun(tmp_path):
    code = quickstart()
    lines = [l for l in code.splitlines() if l.strip()]
    assert 8 <= len(lines) <= 16, f"the quick start has {len(lines)} lines"
    script = tmp_path / "quickstart.py"
    script.write_text(code + CHECK)
    torchrun(script, 4, tmp_path)
    for r in range(4):
        table = (tmp_path / f"ok{r}").read_text()
        assert "0.weight" in table and "1.bias" in table
