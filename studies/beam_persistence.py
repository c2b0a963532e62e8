"""Calibrate the sim's beam persistence to the paper's Figure 15 memory savings.

    python -m pagedbench.studies.beam_persistence [--grid 0 0.2 ... 0.99] [--widths 2 4 6] [--rates 4 12]
                                       [--out outputs/beam_persistence]

The sim draws which old beam each new beam extends (`engines/sim/beam_model.py`); persistence is the
probability that a new beam continues its own rank's lineage before any draw. No trained model's beams can
be had offline, so its value is calibrated: for each persistence of the grid and each beam width, the paged
engine serves an Alpaca Poisson trace on the sim (OPT-13B, A100-40GB: the paper's Figure 15 setting, as
`experiment=beam` runs it) and its memory saving is read (`steady_memory_saving`, time-weighted over the steady window, after
copy-on-write). The persistence whose savings are closest to the paper's (37.56 / 53.13 / 55.16% at widths
2 / 4 / 6; least squares over widths and rates) is printed, with every point in OUT/persistence.csv.

The savings move little with the request rate (a step's sharing is within one request); the grid is run at
each of `--rates` and the fit uses them all, so the calibration does not hang on one load.
"""
from __future__ import annotations

import argparse
from pathlib import Path
import sys

from hydra import compose, initialize_config_dir
import pandas as pd

from pagedbench.paths import CONF, OUTPUTS
from pagedbench.results.record.store import atomic_write
from pagedbench.results.report.paper import paper

GRID = [0.0, 0.2, 0.4, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 0.99]


def overrides(width: int, persistence: float, rate: float, duration_s: float, seed: int) -> list[str]:
    return ["backend=sim", "model=opt-13b", "hardware=a100-40gb", "engine=paged", "swap_space=64",
            "workload=alpaca", f"sampling=beam{width}", "workload.arrival=poisson",
            f"workload.request_rate={rate}", f"workload.duration_s={duration_s}", f"workload.seed={seed}",
            f"backend.beam_persistence={persistence}", "logger=none", "progress=false"]


def measure(grid: list[float], widths: list[int], rates: list[float], duration_s: float, seed: int,
            out: Path) -> pd.DataFrame:
    """Serve every (persistence, width, rate) point with run.py's own run; one row each."""
    from pagedbench.run import run   # the entry point's run: the same config, trace and engine as experiment=beam

    rows = []
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        for rate in rates:
            for width in widths:
                for persistence in grid:
                    cfg = compose(config_name="config", overrides=overrides(width, persistence, rate, duration_s, seed))
                    run_dir = out / "runs" / f"rate{rate:g}_beam{width}_p{persistence:.2f}"
                    summary = run(cfg, run_dir)
                    rows.append(dict(rate=rate, width=width, persistence=persistence,
                                     saving=100 * summary["steady_memory_saving"],
                                     norm_latency_s=summary["norm_latency_s_mean"],
                                     copied_tokens=summary["num_copied_tokens"]))
                    print(f"rate {rate:g}  width {width}  persistence {persistence:.2f}: "
                          f"saving {rows[-1]['saving']:.1f}%", flush=True)
    return pd.DataFrame(rows)


def fit(points: pd.DataFrame, target: dict[int, float]) -> pd.DataFrame:
    """Squared error against the paper's savings, per persistence (summed over widths and rates), best first."""
    err = points.assign(error=(points["saving"] - points["width"].map(target)) ** 2)
    return (err.groupby("persistence")["error"].sum().rename("squared_error").reset_index()
            .sort_values("squared_error"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pagedbench.studies.beam_persistence", description=__doc__.split("\n\n")[0])
    parser.add_argument("--grid", type=float, nargs="+", default=GRID, help="persistence values to try, in [0, 1]")
    parser.add_argument("--widths", type=int, nargs="+", default=[2, 4, 6])
    parser.add_argument("--rates", type=float, nargs="+", default=[4.0, 12.0], help="Alpaca Poisson rates, req/s")
    parser.add_argument("--duration", type=float, default=600.0, help="trace length, s (default 600)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=OUTPUTS / "beam_persistence")
    args = parser.parse_args(argv)
    bad = [p for p in args.grid if not 0 <= p <= 1]
    if bad:
        print(f"error: --grid values must be in [0, 1]; got {bad}", file=sys.stderr)
        return 2
    target = {w: paper().saving_alpaca.get(f"beam{w}") for w in args.widths}
    missing = [w for w, v in target.items() if v is None]
    if missing:
        print(f"error: the paper gives no Alpaca beam saving for width(s) {missing}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    points = measure(sorted(args.grid), args.widths, args.rates, args.duration, args.seed, args.out)
    atomic_write(args.out / "persistence.csv", lambda tmp: points.to_csv(tmp, index=False))
    ranked = fit(points, target)
    best = float(ranked["persistence"].iloc[0])
    table = points.pivot_table(index="persistence", columns=["rate", "width"], values="saving")
    print(table.round(1).to_string())
    print(f"paper: " + " / ".join(f"{target[w]:.2f}" for w in args.widths) + f" % at widths {args.widths}")
    at_best = points[points["persistence"] == best].groupby("width")["saving"].mean()
    print(f"best persistence {best:.2f}: saving " + " / ".join(f"{at_best[w]:.1f}" for w in args.widths)
          + f" % (mean over rates {args.rates})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
