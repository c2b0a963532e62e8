"""Capacity: the highest request rate an engine serves within a criterion, found by search.

    python -m pagedbench.results.sweeps.capacity SWEEP_DIR

A capacity search (the `capacity` Hydra sweeper, `python run.py -m
experiment=capacity`) runs, for every curve of its grid (engine, workload,
seed, ...) and every criterion, a `RateSearch` (results/sweeps/rate_search.py):
bracket the capacity by multiplying or dividing a start rate by `growth`
until one rate meets the criterion and another does not, then bisect
between the highest rate that met it and the lowest that did not until
they are within `precision` (relative); a search warmed by a neighbouring
curve's capacity ends on the same bracket with fewer runs. The capacity
reported is the highest rate measured to meet the criterion (`bound` "="),
the lower end of the final bracket; `upper` is the upper end. A rate is only ever judged from a finished run's summary, so a
search replays exactly from its run folders.

A search that did not bracket its capacity reports only a bound, and every
table says so in words: `capacity_is_bound` and `bound_reason` in
capacity.csv, "lower bound: max_rate" beside the figure in what is printed,
and one warning line naming those curves. `bound` ">=" is a lower bound
(`bound_reason` "max_rate": the search never failed up to its max_rate);
"<" an upper bound ("min_rate": it failed already at its min_rate);
"unfinished": the search stopped (max_rounds) or was interrupted before
bracketing it; "run failed": a run of the curve failed. A mean over seeds
or a ratio with a bound in it is a bound too (`ratio_bound`).

Criteria, both over the requests that arrive in the steady window:

- `latency`: mean normalized latency (end-to-end latency / output tokens)
  at or under `threshold` s/token, the paper's Figure 12 criterion;
- `goodput`: at least `attainment` of the requests meet the run's SLO
  (TTFT and TPOT limits, `measure.slo`), as vLLM's goodput benchmarks
  define a served request.

Ratios divide the reference engine's capacity (paged) by each baseline's
for the same workload, model, criterion and seed, then report the mean and
the min-max over seeds.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
import logging
import math
from pathlib import Path
import sys

import pandas as pd

from pagedbench.engines import registry
from pagedbench.results.record.store import atomic_write, write_parquet
from pagedbench.results.sweeps.rate_search import RateSearch  # noqa: F401  (the search, imported from here too)
from pagedbench.results.sweeps.sustainable import ratio_bound

CAPACITY_CSV = "capacity.csv"
RATIOS_CSV = "capacity_ratios.csv"
CRITERIA = ("latency", "goodput")
# A bound ("=" exact, ">=" capacity at least, "<" capacity under, "<=" a ratio at most, "?" both ways) in words.
BOUND_WORDS = {"=": "exact", ">=": "lower bound", "<": "upper bound", "<=": "upper bound", "?": "bounds both ways"}
CURVE_KEYS = ("engine", "block_size", "preemption", "workload", "model", "seed", "criterion")
log = logging.getLogger("pagedbench")


@dataclass(slots=True, frozen=True)
class Criterion:
    """`latency` (with `threshold`, s/token) or `goodput` (with `attainment`, a share of requests)."""

    name: str
    threshold: float | None = None
    attainment: float | None = None

    def __post_init__(self) -> None:
        if self.name not in CRITERIA:
            raise ValueError(f"criterion {self.name!r} is not one of {list(CRITERIA)}")
        if self.name == "latency" and not (isinstance(self.threshold, (int, float)) and self.threshold > 0):
            raise ValueError(f"the latency criterion needs a threshold > 0 (s/token), got {self.threshold!r}")
        if self.name == "goodput" and not (isinstance(self.attainment, (int, float))
                                           and 0 < self.attainment <= 1):
            raise ValueError(f"the goodput criterion needs an attainment in (0, 1], got {self.attainment!r}")

    @classmethod
    def from_dict(cls, d: dict) -> "Criterion":
        unknown = set(d) - {"name", "threshold", "attainment"}
        if unknown:
            raise ValueError(f"unknown criterion key(s) {sorted(unknown)}; valid: name, threshold, attainment")
        return cls(**d)

    @property
    def label(self) -> str:
        if self.name == "latency":
            return f"latency<={self.threshold:g}s/tok"
        return f"goodput>={self.attainment:.0%}"

    def met(self, summary: dict) -> bool:
        """Whether a run meets the criterion; a missing or NaN figure does not."""
        if self.name == "latency":
            value = summary.get("steady_norm_latency_s_mean")
            return value is not None and not math.isnan(value) and value <= self.threshold
        value = summary.get("steady_slo_attainment")
        return value is not None and not math.isnan(value) and value >= self.attainment


def bound_reason(bound: str, done: bool = True, error=None) -> str:
    """Why a capacity is only a bound ("" when it is exact): what ended its search before it bracketed it."""
    if bound == "=":
        return ""
    if isinstance(error, str) and error:
        return "run failed"
    if not done:
        return "unfinished"
    return "max_rate" if bound == ">=" else "min_rate"


def name_bounds(capacity: pd.DataFrame) -> pd.DataFrame:
    """`capacity` with `capacity_is_bound` and `bound_reason` beside `bound` (a table written before them gains them)."""
    named = capacity.drop(columns=["capacity_is_bound", "bound_reason"], errors="ignore")
    done = named["done"] if "done" in named else [True] * len(named)
    error = named["error"] if "error" in named else [None] * len(named)
    at = list(named.columns).index("bound") + 1
    named.insert(at, "capacity_is_bound", named["bound"] != "=")
    named.insert(at + 1, "bound_reason", [bound_reason(b, d, e) for b, d, e in zip(named["bound"], done, error)])
    return named


def combined_bound(bounds) -> str:
    """The bound of a mean over seeds: "=" when every seed's is exact, else the one kind among them, or "?"."""
    kinds = set(bounds) - {"="}
    if not kinds:
        return "="
    return kinds.pop() if len(kinds) == 1 else "?"


def bound_text(bound: str, reason: str = "") -> str:
    """A bound in words: "exact", or "lower bound: max_rate (seeds 0, 2)"."""
    return f"{BOUND_WORDS[bound]}: {reason}" if reason else BOUND_WORDS[bound]


def _seed(seed) -> str:
    return str(int(seed)) if isinstance(seed, (int, float)) and not math.isnan(seed) else str(seed)


def _reasons_by_seed(group: pd.DataFrame) -> str:
    """"max_rate (seeds 0, 2)": each reason why a figure of `group` is a bound, with the seeds it holds for."""
    seeds: dict[str, list[str]] = {}
    for seed, bound, why in zip(group["seed"], group["bound"], group["bound_reason"]):
        if bound != "=":
            seeds.setdefault(why if isinstance(why, str) and why else "bound", []).append(_seed(seed))
    return "; ".join(f"{why} (seed{'s' if len(s) > 1 else ''} {', '.join(s)})" for why, s in seeds.items())


def _over_seeds(table: pd.DataFrame, keys: list[str], value: str) -> pd.DataFrame:
    """Per group of `keys`: mean and min-max over seeds of `value`, `exact` (every seed's is), the mean's bound and
    why it is one."""
    rows = []
    for key, group in table.groupby(keys, sort=False, dropna=False):   # keys a list: each key a tuple
        rows.append({**dict(zip(keys, key)), "mean": group[value].mean(), "min": group[value].min(),
                     "max": group[value].max(), "seeds": group["seed"].nunique(),
                     "exact": bool((group["bound"] == "=").all()), "bound": combined_bound(group["bound"]),
                     "bound_reason": _reasons_by_seed(group)})
    return pd.DataFrame(rows, columns=[*keys, "mean", "min", "max", "seeds", "exact", "bound", "bound_reason"])


def ratio_table(capacity: pd.DataFrame, reference: str = "paged") -> pd.DataFrame:
    """reference / baseline capacity per workload, model, criterion and seed (rows `seed` holds each).

    `bound` is the ratio's (`ratio_bound`): "=" when both capacities are exact, ">=" / "<=" when the ratio
    is a lower / upper bound, "?" when its two bounds pull opposite ways; `bound_reason` names the bounds.
    """
    keys = [c for c in ("workload", "model", "criterion") if c in capacity]
    rows = []
    ok = name_bounds(capacity[capacity["capacity"].notna()])
    for key, group in ok.groupby(keys + ["seed"], sort=False):
        refs = group[group["engine"] == reference]
        for ref in refs.itertuples():
            for base in group[group["engine"] != reference].itertuples():
                bound = ratio_bound(ref.bound, base.bound)
                why = ", ".join(f"{r.engine} {r.bound_reason}" for r in (ref, base) if r.bound != "=")
                rows.append([*key, ref.block_size, base.engine, ref.capacity / base.capacity, bound, bound != "=",
                             why])
    return pd.DataFrame(rows, columns=[*keys, "seed", "block_size", "baseline", "ratio", "bound", "ratio_is_bound",
                                       "bound_reason"])


def ratio_summary(ratios: pd.DataFrame) -> pd.DataFrame:
    """Mean and min-max over seeds of each ratio; `exact` False when any seed's capacity was a bound, and then
    `bound` (">=", "<=", "?") and `bound_reason` say which way and why."""
    keys = [c for c in ("workload", "model", "criterion", "block_size", "baseline") if c in ratios]
    if "bound_reason" not in ratios:
        ratios = ratios.assign(bound_reason="")
    out = _over_seeds(ratios, keys, "ratio")
    order = [e.label for e in reversed(registry.ENGINES)]
    out["_rank"] = out["baseline"].map(lambda e: order.index(e) if e in order else len(order))
    return out.sort_values([*keys[:3], "_rank"]).drop(columns="_rank").reset_index(drop=True)


def capacity_summary(capacity: pd.DataFrame) -> pd.DataFrame:
    """Mean and min-max over seeds of each engine's capacity, with the mean's bound and why (see `ratio_summary`)."""
    keys = [c for c in ("workload", "model", "criterion", "engine", "block_size", "preemption") if c in capacity]
    out = _over_seeds(name_bounds(capacity[capacity["capacity"].notna()]), keys, "capacity")
    out["_rank"] = out["engine"].map(registry.rank)
    return out.sort_values([*keys[:3], "_rank"]).drop(columns="_rank").reset_index(drop=True)


def curve_label(row) -> str:
    """A curve in a few words: "paged block 16 sharegpt opt-13b seed 0 latency<=0.2s/tok"."""
    words = []
    for key in CURVE_KEYS:
        value = row.get(key)
        if value is None or (isinstance(value, float) and math.isnan(value)):
            continue
        if key == "preemption":
            if value != "auto":   # the default rule goes unsaid
                words.append(f"preempt by {value}")
            continue
        words.append(f"block {int(value)}" if key == "block_size" else f"seed {_seed(value)}" if key == "seed"
                     else str(value))
    return " ".join(words)


def bound_warning(capacity: pd.DataFrame, unfinished: bool = True) -> str | None:
    """One line naming the curves whose capacity is only a bound (with `unfinished` False, leaving out searches
    that have not ended), or None when there are none."""
    named = name_bounds(capacity)
    bounded = named[named["capacity_is_bound"] & (unfinished | (named["bound_reason"] != "unfinished"))]
    if not len(bounded):
        return None
    curves = [f"{curve_label(r)}: {BOUND_WORDS[r['bound']]} {r['capacity']:g} req/s ({r['bound_reason']})"
              for _, r in bounded.iterrows()]
    return f"the capacity of {len(bounded)} of {len(named)} curves is only a bound: " + "; ".join(curves)


def _blocks(table: pd.DataFrame) -> pd.DataFrame:
    if "block_size" not in table:
        return table
    return table.assign(block_size=[("-" if pd.isna(b) else str(int(b))) for b in table["block_size"]])


def _format_spread(table: pd.DataFrame, spec: str, column: str) -> str:
    """`table` (mean, min, max, bound per row) as text: the spread in one cell, "4.56 (4.5-4.62)", then the bound in
    words, "exact" or "lower bound: max_rate (seed 1)"."""
    table = _blocks(table)
    cells = [f"{spec.format(m)} ({spec.format(lo)}-{spec.format(hi)})"
             for m, lo, hi in zip(table["mean"], table["min"], table["max"])]
    bounds = [bound_text(b, why) for b, why in zip(table["bound"], table["bound_reason"])]
    return (table.drop(columns=["mean", "min", "max", "exact", "bound", "bound_reason"])
            .assign(**{column: cells, "bound": bounds}).to_string(index=False))


def format_capacity(capacity: pd.DataFrame) -> str:
    return _format_spread(capacity_summary(capacity), "{:.3g}", "req/s mean (min-max)")


def format_ratios(ratios: pd.DataFrame) -> str:
    return _format_spread(ratio_summary(ratios), "{:.2f}x", "paged / baseline")


def write_tables(capacity: pd.DataFrame, sweep_dir: Path) -> list[Path]:
    """capacity.csv / .parquet (one row per curve and criterion) and capacity_ratios.csv (per seed); logs one
    warning naming the ended searches whose capacity is only a bound."""
    sweep_dir = Path(sweep_dir)
    capacity = name_bounds(capacity)
    paths = [sweep_dir / CAPACITY_CSV, sweep_dir / "capacity.parquet", sweep_dir / RATIOS_CSV]
    atomic_write(paths[0], lambda tmp: capacity.to_csv(tmp, index=False))
    write_parquet(capacity, paths[1])
    ratios = ratio_table(capacity)
    atomic_write(paths[2], lambda tmp: ratios.to_csv(tmp, index=False))
    warning = bound_warning(capacity, unfinished=False)
    if warning:
        log.warning("%s: %s", paths[0], warning)
    return paths


def read_capacity(sweep_dir: Path) -> pd.DataFrame:
    path = Path(sweep_dir) / CAPACITY_CSV
    if not path.is_file():
        raise ValueError(f"{sweep_dir}: no {CAPACITY_CSV}; run the capacity search first "
                         f"(python run.py -m experiment=capacity)")
    return name_bounds(pd.read_csv(path))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pagedbench.results.sweeps.capacity", description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dir", type=Path, metavar="SWEEP_DIR")
    args = parser.parse_args(argv)
    try:
        capacity = read_capacity(args.sweep_dir)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    unfinished = capacity[~capacity["done"].astype(bool)]
    print(f"{args.sweep_dir}: {len(capacity)} searches, {len(unfinished)} unfinished")
    print("capacity, mean over seeds (min-max), and whether it is exact or only a bound (and why):")
    print(format_capacity(capacity))
    ratios = ratio_table(capacity)
    if len(ratios):
        print("paged / baseline capacity, mean over seeds (min-max):")
        print(format_ratios(ratios))
    warning = bound_warning(capacity)
    if warning:
        print(f"warning: {warning}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
