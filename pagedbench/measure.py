"""One whole process measured from outside: its wall time, its CPU time and its own peak memory.

Linux carries a process's peak resident set (`ru_maxrss`) across `exec`: a child that subprocess starts by
fork or vfork inherits the high-water mark of the address space it was copied from or shared, so the peak
`wait4` reports for a child of a 900 MiB process is at least 900 MiB, whatever the child itself used (a
benchmark started from pytest, after an in-process run, read its parent's peak). `measure` starts the
command from a small starter process (a bare Python, about 10 MiB), which waits for it and hands back its
rusage: the peak is then the command's own, with the starter's few MiB as its floor.

    from pagedbench.measure import measure
    m = measure([sys.executable, "run.py", "backend=sim"], cwd=ROOT, stdout=log)   # m.wall_s, m.cpu_s, m.peak_mib
"""
from __future__ import annotations

from dataclasses import dataclass
import json
import os
from pathlib import Path
import subprocess
import sys

# The starter: runs argv[2:], waits for it, writes its figures as JSON to the file descriptor argv[1].
STARTER = """\
import json, os, subprocess, sys, time
fd, args = int(sys.argv[1]), sys.argv[2:]
start = time.perf_counter()
try:
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL)
except OSError as e:
    figures = {"errno": e.errno, "strerror": e.strerror}
else:
    _, status, usage = os.wait4(proc.pid, 0)
    figures = {"wall_s": time.perf_counter() - start, "cpu_s": usage.ru_utime + usage.ru_stime,
               "peak_kib": usage.ru_maxrss, "returncode": os.waitstatus_to_exitcode(status)}
with os.fdopen(fd, "w") as out:
    json.dump(figures, out)
"""


@dataclass(frozen=True, slots=True)
class ProcessMeasure:
    wall_s: float       # from the command's start to its exit (the starter's own start-up not counted)
    cpu_s: float        # user + system CPU seconds of the command (and the children it waited for)
    peak_mib: float     # the command's maximum resident set (the largest of it and the children it waited for)
    returncode: int     # its exit code; -N when signal N killed it


def measure(args: list[str], cwd: str | Path | None = None, stdout=None) -> ProcessMeasure:
    """Run `args` (a program and its arguments) in `cwd` to its end, its output to `stdout` (a file, or None:
    this process's), stdin empty; its figures. OSError when the program cannot be started."""
    if not args:
        raise ValueError("measure: no command")
    read, write = os.pipe()
    try:
        starter = subprocess.Popen([sys.executable, "-c", STARTER, str(write), *map(str, args)], cwd=cwd,
                                   stdout=stdout, stderr=subprocess.STDOUT if stdout is not None else None,
                                   stdin=subprocess.DEVNULL, pass_fds=(write,))
    except BaseException:
        os.close(read)
        raise
    finally:
        os.close(write)
    with os.fdopen(read) as figures_in:
        text = figures_in.read()
    code = starter.wait()
    if not text:
        raise RuntimeError(f"the starter of {args[0]!r} exited {code} without its figures")
    figures = json.loads(text)
    if "errno" in figures:
        raise OSError(figures["errno"], figures["strerror"])
    return ProcessMeasure(figures["wall_s"], figures["cpu_s"], figures["peak_kib"] / 1024,   # KiB on Linux
                          figures["returncode"])
