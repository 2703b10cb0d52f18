#!/usr/bin/env python3
"""Audit of tests/sanitizers/lsan.supp (used by tools/sanitize.sh with LSAN_AUDIT=1).

Reads ASan/LSan report files written with the suppressions switched OFF, and for every leak
stack decides (1) whether lsan.supp would suppress it -- LSan's rule: a "leak:X" pattern
suppresses a stack when X is a substring of any frame's function, file or module; here of the
whole frame line, which is broader, so the audit errs on the strict side -- and (2) where the
leaked block was allocated: the first frame after the allocator (ASan's interceptors,
operator new). A suppressed stack whose allocating frame is in seedstore (a path under the
source or build folder) would be a hidden seedstore leak: the audit fails. Stacks that are not
suppressed are listed too (the normal run reports them anyway).

Usage: lsan_audit.py SUPP_FILE SOURCE_DIR BUILD_DIR REPORT_FILE...
"""
import collections
import functools
import re
import subprocess
import sys


def patterns(supp):
    out = []
    for line in open(supp):
        line = line.split("#", 1)[0].strip()
        if line.startswith("leak:"):
            out.append(line[len("leak:"):])
    return out


FRAME = re.compile(r"^\s*#\d+ 0x[0-9a-f]+ (?:in (\S+) )?(.*)$")
ALLOCATOR = ("libsanitizer/", "libasan.so", "__interceptor_", "operator new", "__asan_")


def stacks(path):
    block = None
    for line in open(path, errors="replace"):
        if re.match(r"^(Direct|Indirect) leak of", line):
            block = {"head": line.strip(), "frames": []}
            continue
        if block is None:
            continue
        m = FRAME.match(line)
        if m:
            block["frames"].append(line.strip())
        else:
            yield block
            block = None
    if block is not None:
        yield block


@functools.lru_cache(maxsize=None)
def mapped_end(module):
    """End of the highest PT_LOAD segment of an ELF file (0 when unreadable)."""
    try:
        out = subprocess.run(["readelf", "-lW", module], capture_output=True, text=True).stdout
    except OSError:
        return 0
    end = 0
    for line in out.splitlines():
        f = line.split()
        if f and f[0] == "LOAD":
            end = max(end, int(f[2], 16) + int(f[5], 16))
    return end


def is_ours(frame, ours):
    """A frame in seedstore code: symbolized to a source file under the source folder, or an
    unsymbolized address inside a seedstore binary's mapped segments. (After a library was
    unloaded, LSan may attribute its addresses to the nearest module, a seedstore binary, at an
    offset past the binary's end: those are not ours.)"""
    m = re.search(r"\(([^()+]+)\+0x([0-9a-f]+)\)\s*$", frame)
    if m:
        module, off = m.group(1), int(m.group(2), 16)
        return any(module.startswith(o) for o in ours) and off < mapped_end(module)
    return any(" " + o in frame for o in ours)


def site(frames):
    for f in frames:
        if not any(a in f for a in ALLOCATOR):
            return f
    return frames[-1] if frames else "?"


def entry(frames, ours):
    """(the third-party function our code called, our calling function) for a stack, or None
    when no seedstore frame is on it (e.g. a library's own thread or constructor)."""
    for i, f in enumerate(frames):
        if is_ours(f, ours):
            callee = FRAME.match(frames[i - 1]) if i > 0 else None
            caller = FRAME.match(f)
            return ((callee.group(1) if callee else "?") or "?", (caller.group(1) if caller else "?") or "?")
    return None


def module_of(frame):
    m = re.search(r"\(([^()+]+)\+0x[0-9a-f]+\)\s*$", frame)
    if m:
        return m.group(1).rsplit("/", 1)[-1]
    m = FRAME.match(frame)
    return (m.group(2).split(":")[0] if m else frame)


def main():
    supp, src, build, reports = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    pats = patterns(supp)
    ours = (src.rstrip("/") + "/", build.rstrip("/") + "/")
    total = suppressed = 0
    by_site = collections.Counter()
    by_pattern = collections.Counter()
    by_entry = collections.Counter()
    hidden, unsuppressed = [], []
    truncated = 0
    for r in reports:
        for b in stacks(r):
            if not b["frames"]:  # the process was ended (mpirun) while printing its report
                truncated += 1
                continue
            total += 1
            hit = next((p for p in pats if any(p in f for f in b["frames"])), None)
            s = site(b["frames"])
            if hit is None:
                unsuppressed.append((r, b))
                continue
            suppressed += 1
            by_pattern[hit] += 1
            m = module_of(s)
            if any(o in s for o in ours) and not is_ours(s, ours):
                m = f"unloaded library (address past the end of {m})"
            by_site[m] += 1
            by_entry[entry(b["frames"], ours)] += 1
            if is_ours(s, ours):
                hidden.append((r, b))
    print(f"lsan audit: {total} leak stacks in {len(reports)} report files; "
          f"{suppressed} matched by lsan.supp, {len(unsuppressed)} not matched; "
          f"{truncated} cut off (process ended while printing)")
    for p, n in by_pattern.most_common():
        print(f"  pattern leak:{p:<20} {n} stacks")
    print("  allocating frame's module of the matched stacks:")
    for m, n in by_site.most_common():
        print(f"    {m:<40} {n}")
    print("  entry from seedstore code (library function <- our caller) of the matched stacks:")
    for e, n in by_entry.most_common():
        print(f"    {'(no seedstore frame: library-internal)' if e is None else e[0] + ' <- ' + e[1]:<70} {n}")
    for title, items in (("HIDDEN seedstore leaks (allocated in our code, suppressed)", hidden),
                         ("not matched by lsan.supp (reported by the normal run)", unsuppressed)):
        if items:
            print(f"{title}: {len(items)}")
            for r, b in items[:20]:
                print(f"== {r}\n{b['head']}\n  " + "\n  ".join(b["frames"]))
    return 1 if hidden else 0


if __name__ == "__main__":
    sys.exit(main())
