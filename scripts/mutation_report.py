"""The kill rate of a mutation run (`make mutation`), per module, and the survivors nobody has explained.

    python scripts/mutation_report.py              # after `python scripts/mutate.py run ...` (make mutation)
    python scripts/mutation_report.py --min-kill 80

Reads `python scripts/mutate.py results --all true` (one `name: status` line per mutant)
and data/reference/mutation_equivalent.yaml, where each survivor judged
equivalent (no test can tell it from the original: the program's behaviour
is the same) is listed by mutant name with the mutated line and the reason.
A mutant counts as killed when a test failed or timed out on it, and as a
survivor when the tests passed on it or no test reached it ("no tests");
the kill rate of a module is killed / (checked - equivalent). Exits 1 when a checked
module's kill rate is below --min-kill, or a survivor is neither killed nor
explained, or an explanation no longer matches its mutant's line (the code
moved: explain it again).
"""
from __future__ import annotations

import argparse
from collections import Counter, defaultdict
from pathlib import Path
import re
import subprocess
import sys

import yaml

ROOT = Path(__file__).resolve().parent.parent
EQUIVALENT = ROOT / "data" / "reference" / "mutation_equivalent.yaml"
KILLED = {"killed", "timeout"}
# A mutant no selected test reaches ("no tests") is a survivor too: nothing would notice it.
SURVIVED = {"survived", "no tests"}
LINE = re.compile(r"^\s*(\S+__mutmut_\d+): (.+)$")


def module_of(name: str) -> str:
    """`pagedbench.engines.kv.paged.xǁPagedKVǁfork__mutmut_3` and `pagedbench.results.record.summary.x_steady__mutmut_1` -> module."""
    return re.split(r"\.x[ǁ_]", name, maxsplit=1)[0]


def mutmut(*args: str) -> str:
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "mutate.py"), *args], cwd=ROOT,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"error: mutmut {' '.join(args)} failed: {done.stderr.strip()[-500:]}")
    return done.stdout


def statuses() -> dict[str, str]:
    out = {}
    for line in mutmut("results", "--all", "true").splitlines():
        match = LINE.match(line)
        if match:
            out[match.group(1)] = match.group(2).strip()
    if not out:
        raise SystemExit("error: no mutants found: run `make mutation` first")
    return out


def mutated_line(name: str) -> str:
    """The `+` line of the mutant's diff (what the mutant reads), stripped."""
    added = [l[1:].strip() for l in mutmut("show", name).splitlines() if l.startswith("+") and not l.startswith("+++")]
    return added[0] if added else ""


def judge(status: dict[str, str], explained: dict, line_of) -> tuple[dict[str, Counter], list[str]]:
    """Counts per module (killed, equivalent, survived, not checked, ...) and the problems: survivors not
    explained, explanations whose line (`line_of(name)`, the mutant's `+` line) no longer matches."""
    counts: dict[str, Counter] = defaultdict(Counter)
    problems = []
    for name, state in sorted(status.items()):
        if state in SURVIVED and name in explained:
            if line_of(name) != explained[name]["line"].strip():
                problems.append(f"stale explanation: {name} no longer reads {explained[name]['line']!r}")
            state = "equivalent"
        elif state in SURVIVED:
            problems.append(f"{state}, not explained: {name}: {line_of(name)}")
        counts[module_of(name)]["killed" if state in KILLED else "survived" if state in SURVIVED else state] += 1
    for name in sorted(set(explained) - set(status)):
        problems.append(f"stale explanation: {name} is no mutant any more")
    for name in sorted(n for n in explained if status.get(n) in KILLED):
        problems.append(f"stale explanation: {name} is killed now (its number may have moved: judge again)")
    return counts, problems


def rate_table(counts: dict[str, Counter], min_kill: float) -> tuple[list[str], list[str]]:
    """The table's lines (one per module, then all of them together) and the modules under `min_kill`."""
    lines = [f"{'module':40} {'mutants':>7} {'checked':>7} {'killed':>6} {'equiv.':>6} {'survived':>8} "
             f"{'kill rate':>9}"]
    low = []
    rows = sorted(counts.items()) + [("all", sum(counts.values(), Counter()))]
    for module, c in rows:
        total = sum(c.values())
        checked = total - c["not checked"]
        judged = checked - c["equivalent"]
        rate = 100.0 * c["killed"] / judged if judged else float("nan")
        shown = f"{rate:8.1f}%" if checked else "  not run"
        lines.append(f"{module:40} {total:7d} {checked:7d} {c['killed']:6d} {c['equivalent']:6d} "
                     f"{c['survived']:8d} {shown:>9}")
        other = {k: v for k, v in c.items() if k not in ("killed", "equivalent", "survived", "not checked")}
        if other:
            lines.append(f"{'':40} other: {dict(other)}")
        if module != "all" and checked and judged and rate < min_kill:
            low.append(f"{module}: kill rate {rate:.1f}% < {min_kill:g}%")
    return lines, low


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--min-kill", type=float, default=80.0, help="least kill rate in %% of a checked module")
    args = parser.parse_args()
    explained = (yaml.safe_load(EQUIVALENT.read_text()) or {}) if EQUIVALENT.exists() else {}
    counts, problems = judge(statuses(), explained, mutated_line)
    lines, low = rate_table(counts, args.min_kill)
    print("\n".join(lines))
    for line in problems + low:
        print(f"error: {line}")
    return 1 if problems or low else 0


if __name__ == "__main__":
    sys.exit(main())
