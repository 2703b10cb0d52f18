"""Can HDF5 virtual datasets serve a global tensor whose pieces are packed as cells?

docs/FORMAT.md, "Version 2 (draft)": a rank file stores each piece's chunks as cells of one
dataset of shape [cells, *chunk] (chunked one cell per chunk), and the master maps every chunk's
box, clipped to its piece, from the block [cell, 0:extent...] of that dataset. This probe builds
such files for seeded random tensors (ranks 1-4, uneven boxes split over 1-5 ranks, flat
pieces, edge chunks clipped in every dim), reads the global tensors and random sub-boxes back
through h5py (its bundled libhdf5), and prints the libhdf5 versions. `h5dump` (Debian's libhdf5
1.10, the one seedstore links) reads the same master when run on it (the probe does, where
h5dump exists). Exit 0 when every read equals the tensor.

Usage: build/venv/bin/python bench/v2_vds_probe.py [--seed N] [--cases N] [--dir D]
"""
import argparse
import itertools
import os
import shutil
import subprocess
import sys
import tempfile

import h5py
import numpy as np


def boxes_of(shape, parts, rng):
    """Split `shape` into `parts` boxes along one random dim (uneven, some possibly empty)."""
    d = int(rng.integers(len(shape)))
    cuts = np.sort(rng.integers(0, shape[d] + 1, size=parts - 1))
    edges = [0, *cuts.tolist(), shape[d]]
    out = []
    for b, e in zip(edges, edges[1:]):
        if e > b:
            start = [0] * len(shape)
            stop = list(shape)
            start[d], stop[d] = b, e
            out.append((start, stop))
    return out


def chunk_boxes(start, stop, chunk):
    """The chunk grid of a piece (anchored at its start), row-major, as (offset, extent) boxes."""
    ranges = [range(b, e, c) for b, e, c in zip(start, stop, chunk)]
    for origin in itertools.product(*ranges):
        yield origin, [min(c, e - o) for o, c, e in zip(origin, chunk, stop)]


def run_case(rng, folder, case):
    rank = int(rng.integers(1, 5))
    shape = [int(rng.integers(1, 40)) for _ in range(rank)]
    chunk = [int(rng.integers(1, 12)) for _ in range(rank)]
    tensor = rng.standard_normal(shape).astype(np.float32)
    pieces = boxes_of(shape, int(rng.integers(1, 6)), rng)
    name = f"t{case}"
    maps = []
    for r, (start, stop) in enumerate(pieces):
        cells = []
        for origin, extent in chunk_boxes(start, stop, chunk):
            cell = np.zeros(chunk, np.float32)  # edge cells padded to the full chunk
            cell[tuple(slice(0, x) for x in extent)] = tensor[
                tuple(slice(o, o + x) for o, x in zip(origin, extent))]
            maps.append((r, len(cells), origin, extent))
            cells.append(cell)
        with h5py.File(os.path.join(folder, f"{name}.rank{r}.h5"), "w") as f:
            f.create_dataset("packed", data=np.stack(cells), chunks=(1, *chunk))
    master = os.path.join(folder, f"{name}.h5")
    with h5py.File(master, "w", libver="earliest") as f:
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        vspace = h5py.h5s.create_simple(tuple(shape))
        for r, cell, origin, extent in maps:
            ncells = sum(1 for m in maps if m[0] == r)
            sspace = h5py.h5s.create_simple((ncells, *chunk))
            vspace.select_hyperslab(tuple(origin), (1,) * rank, block=tuple(extent))
            sspace.select_hyperslab((cell, *([0] * rank)), (1,) * (rank + 1),
                                    block=(1, *extent))
            dcpl.set_virtual(vspace, f"{name}.rank{r}.h5".encode(), b"packed", sspace)
        h5py.h5d.create(f.id, b"t", h5py.h5t.IEEE_F32LE, h5py.h5s.create_simple(tuple(shape)),
                        dcpl=dcpl)
    with h5py.File(master, "r") as f:
        if not np.array_equal(f["t"][()], tensor):
            return f"case {case}: shape {shape} chunk {chunk}: the global read differs"
        for _ in range(4):
            lo = [int(rng.integers(0, n)) for n in shape]
            hi = [int(rng.integers(b + 1, n + 1)) for b, n in zip(lo, shape)]
            sel = tuple(slice(b, e) for b, e in zip(lo, hi))
            if not np.array_equal(f["t"][sel], tensor[sel]):
                return f"case {case}: shape {shape} chunk {chunk}: sub-box {sel} differs"
    if shutil.which("h5dump"):
        dump = subprocess.run(["h5dump", "-d", "t", "-w", "0", "-m", "%.9g", master],
                              capture_output=True, text=True, cwd=folder)
        values = [float(v) for line in dump.stdout.splitlines() if "):" in line
                  for v in line.split("):", 1)[1].replace(",", " ").split()]
        if dump.returncode != 0 or not np.array_equal(np.float32(values), tensor.ravel()):
            return f"case {case}: shape {shape} chunk {chunk}: h5dump (libhdf5 1.10) differs"
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=20261205)
    ap.add_argument("--cases", type=int, default=40)
    ap.add_argument("--dir")
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    folder = a.dir or tempfile.mkdtemp(prefix="v2vds.")
    failures = [m for m in (run_case(rng, folder, c) for c in range(a.cases)) if m]
    print(f"h5py {h5py.__version__}, libhdf5 {h5py.version.hdf5_version}; h5dump: "
          f"{'yes' if shutil.which('h5dump') else 'absent'}; seed {a.seed}: "
          f"{a.cases - len(failures)} of {a.cases} cases read back exactly")
    for m in failures:
        print(m)
    if not a.dir:
        shutil.rmtree(folder)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
