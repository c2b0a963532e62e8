"""How far the paged / Orca capacity ratios depend on the sim's uncertain inputs (Figures 12, 15 and 17).

    python -m pagedbench.studies.sensitivity [--figures 12 15 17] [--inputs ...] [--out outputs/sensitivity]

The sim's cost model has inputs no run here measures on the paper's GPU. For each figure and each such
input, the capacity search of `experiment=capacity` (latency criterion: mean normalized latency <= 0.2
s/token) runs paged, Orca (Oracle) and Orca (Max) with the input at the low and the high end of a stated
range, every other input at its preset value, and once with every input at its preset (the default row);
the paged / Orca ratios then show which conclusions hold across the range. An input that cannot change a
figure by construction is not varied for it (the host link moves nothing where nothing is swapped: single
sequences are recomputed; beam persistence exists only for beams).

To keep the grid affordable the searches are smaller than the figures' own: one seed (0), 10-minute Poisson
traces, precision 3%; the default row is measured the same way, so each row compares like with like. Each
search is an ordinary Hydra capacity sweep under OUT/fig<N>/<input>_<value>/ (re-running skips what is
done); OUT/sensitivity.csv holds one row per figure, input, value and baseline, read by the report
(`make report` runs this study as one of its steps).
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
import os
from pathlib import Path
import subprocess
import sys

import pandas as pd

from pagedbench.engines import registry
from pagedbench.paths import OUTPUTS, ROOT
from pagedbench.results.record.store import atomic_write
from pagedbench.results.report.paper import paper
from pagedbench.results.sweeps.capacity import CAPACITY_CSV

BASES = registry.baselines(("orca_oracle", "orca_max"))   # the Orca variants paged is compared against
ENGINES = ",".join(e.name for e in (registry.entry("paged"), *BASES))   # the sweep's engine= option
BASELINES = tuple(e.label for e in BASES)
SEARCH = ["hydra/sweeper=capacity", "hydra/launcher=local", "backend=sim", "model=opt-13b", "hardware=a100-40gb",
          "workload.arrival=poisson", "workload.duration_s=600", "workload.seed=0", "hydra.sweeper.precision=0.03",
          "hydra.sweeper.criteria=[{name:latency,threshold:0.2}]", "logger=none", "progress=false"]


@dataclass(frozen=True, slots=True)
class Input:
    key: str                   # the Hydra key it sets
    low: float
    high: float
    why: str                   # where the range comes from


@dataclass(frozen=True, slots=True)
class Figure:
    overrides: tuple[str, ...]
    label: str
    claim: float               # the paper's paged / Orca (Oracle) ratio for this setting (data/reference/paper.yaml)
    inputs: tuple[str, ...]    # the inputs that can move it


CLAIMS = paper().sensitivity_claims
INPUTS = {
    "iteration_overhead_s": Input(
        "hardware.iteration_overhead_s", 1e-3, 10e-3,
        "3 ms preset: a step's host work and launch gaps; 1 ms (CUDA graphs, a lean scheduler) to 10 ms (Python "
        "heavy, as the fitted CPU preset's host share suggests)"),
    "paged_block_cost_tokens": Input(
        "hardware.paged_block_cost_tokens", 0.0, 7.36,
        "3.68 preset (23% at block 16, Figure 18a's 20-26%); 0 (no penalty) to twice it (46%)"),
    "bandwidth_efficiency": Input(
        "hardware.bandwidth_efficiency", 0.6, 0.9,
        "0.8 preset for bandwidth-bound kernels (decode GEMV, attention); 0.6 to 0.9"),
    "host_transfer_latency_s": Input(
        "hardware.host_transfer_latency_s", 2e-6, 50e-6,
        "10 us preset per block transfer (an assumption); 2 us to 50 us"),
    "beam_persistence": Input(
        "backend.beam_persistence", 0.0, 0.99,
        "the calibrated preset (pagedbench.studies.beam_persistence); 0 (every parent drawn afresh) to 0.99"),
}
FIGURES = {
    "12": Figure(("workload=sharegpt",), "Figure 12: ShareGPT", CLAIMS["12"],
                 ("iteration_overhead_s", "paged_block_cost_tokens", "bandwidth_efficiency")),
    "15": Figure(("workload=alpaca", "sampling=beam6", "swap_space=64"), "Figure 15: Alpaca, beam width 6", CLAIMS["15"],
                 ("iteration_overhead_s", "paged_block_cost_tokens", "bandwidth_efficiency",
                  "host_transfer_latency_s", "beam_persistence")),
    "17": Figure(("workload=chat",), "Figure 17: chat", CLAIMS["17"],
                 ("iteration_overhead_s", "paged_block_cost_tokens", "bandwidth_efficiency")),
}


def settings(figure: Figure, inputs: list[str]) -> list[tuple[str, float | None]]:
    """(input, value) pairs to search for `figure`: the default ("default", None), then each input's two ends."""
    out: list[tuple[str, float | None]] = [("default", None)]
    for name in figure.inputs:
        if name in inputs:
            out += [(name, INPUTS[name].low), (name, INPUTS[name].high)]
    return out


def folder(out: Path, fig: str, name: str, value: float | None) -> Path:
    return out / f"fig{fig}" / (name if value is None else f"{name}_{value:g}")   # no "=": Hydra parses the path


def search(fig: str, name: str, value: float | None, sweep_dir: Path) -> None:
    """One capacity sweep (paged and both Orca baselines) with `name` set to `value`."""
    args = [sys.executable, "run.py", "-m", *SEARCH, *FIGURES[fig].overrides, f"engine={ENGINES}",
            f"hydra.sweep.dir={sweep_dir}"]
    if value is not None:
        args.append(f"{INPUTS[name].key}={value!r}")
    print(f"figure {fig}: {name}{'' if value is None else f' = {value:g}'} -> {sweep_dir}", flush=True)
    done = subprocess.run(args, cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-3:]
        raise RuntimeError(f"the search for figure {fig}, {name}={value} failed (exit {done.returncode}): "
                           + " | ".join(tail))


def ratios(cap: pd.DataFrame) -> dict[str, tuple[float, bool]]:
    """paged / baseline capacity, and whether either is only a bound, per baseline."""
    by = {r.engine: r for r in cap.itertuples(index=False)}
    out = {}
    for base in BASELINES:
        if "paged" in by and base in by:
            p, b = by["paged"], by[base]
            out[base] = (p.capacity / b.capacity, p.bound != "=" or b.bound != "=")
    return out


def collect(out: Path, figures: list[str], inputs: list[str]) -> pd.DataFrame:
    rows = []
    for fig in figures:
        for name, value in settings(FIGURES[fig], inputs):
            path = folder(out, fig, name, value) / CAPACITY_CSV
            cap = pd.read_csv(path)
            caps = dict(zip(cap["engine"], cap["capacity"]))
            for base, (ratio, is_bound) in ratios(cap).items():
                rows.append(dict(figure=fig, label=FIGURES[fig].label, claim=FIGURES[fig].claim, input=name,
                                 value=value, range=INPUTS[name].why if name in INPUTS else "",
                                 baseline=base, paged=caps.get("paged"), baseline_capacity=caps.get(base),
                                 ratio=ratio, ratio_is_bound=is_bound))
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pagedbench.studies.sensitivity", description=__doc__.split("\n\n")[0])
    parser.add_argument("--figures", nargs="+", default=list(FIGURES), choices=list(FIGURES))
    parser.add_argument("--inputs", nargs="+", default=list(INPUTS), choices=list(INPUTS))
    parser.add_argument("--out", type=Path, default=OUTPUTS / "sensitivity")
    args = parser.parse_args(argv)
    for fig in args.figures:
        for name, value in settings(FIGURES[fig], args.inputs):
            sweep_dir = folder(args.out, fig, name, value)
            if (sweep_dir / CAPACITY_CSV).is_file() and not (sweep_dir / CAPACITY_CSV).stat().st_size == 0:
                cap = pd.read_csv(sweep_dir / CAPACITY_CSV)
                if len(cap) and cap["done"].all():
                    continue
            try:
                search(fig, name, value, sweep_dir)
            except RuntimeError as err:
                print(f"error: {err}", file=sys.stderr)
                return 1
    table = collect(args.out, args.figures, args.inputs)
    atomic_write(args.out / "sensitivity.csv", lambda tmp: table.to_csv(tmp, index=False))
    shown = table.assign(value=table["value"].map(lambda v: "preset" if pd.isna(v) else f"{v:g}"))
    print(shown[["figure", "input", "value", "baseline", "paged", "baseline_capacity", "ratio"]]
          .round(3).to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
