"""The replay's table: the sim against the real backend on one trace, per engine, beside the real backend's
own noise (`python -m pagedbench.studies.replay` writes it as replay.csv; the report and the study print it the same way).

Each cell of a run-level figure reads `sim / real (error; spread)`: the real figure is the mean of the
real repeats, the error the sim's against it, the spread the repeats' max - min over their mean (the
noise floor). The per-iteration cell is the sim's MAPE against the repeats' mean time of each iteration,
then the MAPE of one real repeat against another. A replay.csv written before the repeats (no noise
columns) prints without the noise floor.

The targets (data/reference/validation_targets.yaml, read by `targets`): each iteration's time within
iteration_mape_pct (MAPE), and each run-level figure within the real repeats' spread, or within run_error_pct
where the spread is narrower.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cache
import math
from pathlib import Path

import pandas as pd
import yaml

from pagedbench.paths import REFERENCE

# The run-level figures compared, with their labels: each becomes sim_KEY, real_KEY, KEY_error_pct and
# KEY_real_spread_pct columns.
METRICS = (("makespan_s", "makespan (s)"), ("output_tokens_per_s", "output tok/s"),
           ("mean_batch_size", "mean decode batch"), ("ttft_s_mean", "TTFT mean (s)"),
           ("tpot_s_mean", "TPOT mean (s)"))

TARGETS_FILE = REFERENCE / "validation_targets.yaml"


@dataclass(frozen=True, slots=True)
class Targets:
    iteration_mape_pct: float   # each iteration's time: the sim's MAPE against the real repeats' mean, at most (%)
    run_error_pct: float        # a run-level figure's error where the real repeats' spread is narrower, at most (%)


@cache
def targets(path: Path = TARGETS_FILE) -> Targets:
    """The validation's targets (data/reference/validation_targets.yaml)."""
    d = yaml.safe_load(Path(path).read_text())
    return Targets(iteration_mape_pct=float(d["iteration_mape_pct"]), run_error_pct=float(d["run_error_pct"]))


def known(x) -> bool:
    return x is not None and not (isinstance(x, float) and math.isnan(x))


def iteration_cell(r: dict) -> str:
    if not r["same_schedule"]:
        return "n/a (schedules differ)"
    cell = (f"{r['iteration_mape_pct']:.1f}% (prefill {r['prefill_iteration_mape_pct']:.1f}%, "
            f"decode {r['decode_iteration_mape_pct']:.1f}%)")
    noise = r.get("real_iteration_mape_pct")
    return cell + (f"; real vs real {noise:.1f}%" if known(noise) else "")


def metric_cell(r: dict, key: str) -> str:
    spread = r.get(f"{key}_real_spread_pct")
    noise = f"; spread {spread:.1f}%" if known(spread) else ""
    return f"{r[f'sim_{key}']:.4g} / {r[f'real_{key}']:.4g} ({r[f'{key}_error_pct']:+.1f}%{noise})"


def format_table(table: pd.DataFrame) -> str:
    lines = ["| engine | real runs | per-iteration MAPE: sim vs real mean; real vs real | "
             + " | ".join(f"{label}: sim / real mean (error; real spread)" for _, label in METRICS) + " |",
             "|---|---|---|" + "---|" * len(METRICS)]
    for r in table.to_dict("records"):
        repeats = r.get("repeats")
        cells = [r["engine"], str(int(repeats) if known(repeats) else 1), iteration_cell(r)]
        cells += [metric_cell(r, key) for key, _ in METRICS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def misses(r: dict) -> list[str]:
    """What of one engine's row misses the targets, one phrase each; [] when it meets them all."""
    target = targets()
    out = []
    if not r["same_schedule"]:
        out.append("the runs executed different iterations")
    elif not r["iteration_mape_pct"] <= target.iteration_mape_pct:
        out.append(f"per-iteration MAPE {r['iteration_mape_pct']:.1f}% > {target.iteration_mape_pct:g}%")
    for key, label in METRICS:
        spread = r.get(f"{key}_real_spread_pct")
        bound = max(spread if known(spread) else 0.0, target.run_error_pct)
        error = r[f"{key}_error_pct"]
        if not abs(error) <= bound:
            out.append(f"{label} {error:+.1f}% (bound {bound:.1f}%)")
    return out
