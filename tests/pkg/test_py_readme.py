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
dist.barrier()
dist.destroy_process_group()  # a job's end: without it gloo's threads can abort the exit
open(os.path.join(os.environ["SEEDSTORE_OUT"], f"ended{os.environ['RANK']}"), "w").close()
'''

# A rank aborting in interpreter teardown, after every check above passed and the process
# group was destroyed ("terminate called without an active exception" from a joinable thread,
# seen about once in 20 CI runs; not yet traced to seedstore, torch or gloo): the job's work is
# proven by the files each rank wrote, so the run is repeated once -- a second abort, or any
# other failure, fails the test.
EXIT_ABORT = "terminate called without an active exception"


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
    try:
        torchrun(script, 4, tmp_path)
    except AssertionError as e:
        ended = all((tmp_path / f"ended{r}").exists() for r in range(4))
        if not (ended and EXIT_ABORT in str(e)):
            raise
        print(f"a rank aborted after the job ended ({EXIT_ABORT}); running it again")
        for f in [*tmp_path.glob("ok*"), *tmp_path.glob("ended*")]:
            f.unlink()
        torchrun(script, 4, tmp_path)
    for r in range(4):
        table = (tmp_path / f"ok{r}").read_text()
        assert "0.weight" in table and "1.bias" in table
