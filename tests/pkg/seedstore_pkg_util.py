"""Shared by the Python package tests (tests/pkg): the built package's environment, the CLI,
and torchrun."""
import os
import subprocess
import sys

BIN = os.environ.get("SEEDSTORE_BIN", "seedstore")
SOURCE_DIR = os.environ.get("SEEDSTORE_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))


def python_env():
    """The environment of a child Python that imports the same seedstore package."""
    env = dict(os.environ)
    import seedstore
    pkg_parent = os.path.dirname(os.path.dirname(seedstore.__file__))
    env["PYTHONPATH"] = os.pathsep.join([pkg_parent, os.path.dirname(os.path.abspath(__file__))] +
                                        ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


def torchrun(script, nproc, out, *args, timeout=600):
    """Runs `script` under torchrun --nproc_per_node `nproc` (CPU, gloo), SEEDSTORE_OUT=out;
    fails with the ranks' output when it fails."""
    env = python_env()
    env["SEEDSTORE_OUT"] = str(out)
    env.setdefault("OMP_NUM_THREADS", "1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
           "--standalone", str(script), *map(str, args)]
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
    text = p.stdout.decode(errors="replace")
    assert p.returncode == 0, f"{' '.join(cmd)} exited {p.returncode}:\n{text[-8000:]}"
    return text


def cli(*args, check=True):
    p = subprocess.run([BIN, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if check:
        assert p.returncode == 0, f"seedstore {' '.join(map(str, args))}: {p.returncode}\n{p.stderr.decode()}"
    return p
