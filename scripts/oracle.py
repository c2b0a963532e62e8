"""The refactor oracle: 18 fixed sim runs, one folder each, to compare two trees' results to the bit.

    python scripts/oracle.py OUT                      # runs the 18 cases of this checkout into OUT/<case>/
    python scripts/summary_diff.py BEFORE AFTER       # then compare two trees' OUT folders

Each case is `python run.py backend=sim ...` with its overrides (every engine, parallel sampling and beam search,
swap and recompute, a shared prefix, chat, block sizes, Poisson arrivals): the runs a change that "moves no result"
must leave equal, summary key by key and table cell by cell. Run it in each tree (a worktree of the commit before,
this checkout after); `run.py` is the one interface both trees share.
"""
from __future__ import annotations

import argparse
from pathlib import Path
import subprocess
import sys

ROOT = Path(__file__).resolve().parent.parent
BASE = ["backend=sim", "model=opt-13b", "hardware=a100-40gb", "workload.num_requests=150", "workload.seed=3",
        "progress=false"]
POISSON = ["workload.arrival=poisson", "workload.request_rate=2.0"]
CASES: dict[str, list[str]] = {
    "static": ["engine=static"],
    "orca_max": ["engine=orca_max"],
    "orca_pow2": ["engine=orca_pow2"],
    "orca_oracle": ["engine=orca_oracle"],
    "orca_firstfit": ["engine=orca_oracle", "engine.allocator=first_fit"],
    "paged": ["engine=paged"],
    "paged_block8": ["engine=paged", "engine.block_size=8"],
    "paged_block64": ["engine=paged", "engine.block_size=64"],
    "paged_poisson": ["engine=paged", *POISSON],
    "orca_poisson": ["engine=orca_oracle", *POISSON],
    "static_poisson": ["engine=static", *POISSON],
    "paged_n2": ["engine=paged", "workload=alpaca", "sampling=n2"],
    "paged_n4_swap": ["engine=paged", "workload=alpaca", "sampling=n4", "engine.preemption=swap"],
    "paged_beam4": ["engine=paged", "workload=alpaca", "sampling=beam4"],
    "paged_recompute": ["engine=paged", "engine.preemption=recompute", "workload=alpaca", "workload.num_requests=400"],
    "orca_beam2": ["engine=orca_oracle", "workload=alpaca", "sampling=beam2"],
    "paged_prefix": ["engine=paged", "model=llama-13b", "workload=translation", "workload.num_shots=5"],
    "paged_chat": ["engine=paged", "workload=chat"],
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="folder for the run folders (one per case)")
    parser.add_argument("--cases", nargs="*", choices=sorted(CASES), help="a subset (default: all 18)")
    args = parser.parse_args(argv)
    failed = []
    for name in args.cases or CASES:
        run_dir = args.out.resolve() / name
        done = subprocess.run([sys.executable, "run.py", *BASE, *CASES[name], f"hydra.run.dir={run_dir}"],
                              cwd=ROOT, capture_output=True, text=True)
        print(f"{name}: {'ok' if done.returncode == 0 else 'FAILED'}", flush=True)
        if done.returncode != 0:
            failed.append(name)
            print(done.stderr[-2000:], file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
