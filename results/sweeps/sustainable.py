"""The request rate each engine sustains, and how many times paged's that is.

    python -m pagedbench.results.sweeps.sustainable SWEEP_DIR [--threshold S]

The paper compares systems by "the request rate each system sustains before
normalized latency blows up" (Figure 12). Here that is made a number:

- A curve is one group of runs (by default one workload, model, engine and
  block size) with a finite request rate; offline runs (rate NaN) are left
  out. Runs repeated at one rate are averaged. A run in which no request
  finished (latency NaN) counts as over the threshold.
- The threshold is a mean normalized latency in seconds per output token,
  chosen by the caller (`threshold=`, `--threshold`); the default, 1.0
  s/token, is the top of the paper's Figure 12 y-axis. A rate is sustained
  when the mean normalized latency is at or under the threshold.
- Walking the rates upwards, the sustainable rate lies between the last rate
  under the threshold and the first one over it, where the straight line
  between those two points crosses the threshold (bound "="). A curve that
  dips back under the threshold at a higher rate does not count: the rate is
  where latency first leaves the threshold.
- If every measured rate is under the threshold, the highest measured rate is
  reported with bound ">=" (a lower bound: the sweep stopped too early).
- If even the lowest rate is over, the lowest rate is reported with bound "<"
  (the engine sustains less than that).

`ratios` divides the reference engine's rate (paged) by each baseline's in
the same group, for every block size of the reference. A ratio is exact
("=") when both rates are; ">=" when the numerator is a lower bound or the
denominator an upper bound (and nothing pulls the other way); "<=" in the
mirror case; "?" when the two bounds pull in opposite directions, so the
value is only the ratio of the measured end points.
"""
from __future__ import annotations

import argparse
import math
from pathlib import Path
import sys

import pandas as pd

from pagedbench.engines import registry
from pagedbench.results.sweeps.collect import check_sweep_dir, collect

DEFAULT_THRESHOLD = 1.0   # s/token: the top of the paper's Figure 12 y-axis
BY = ("workload", "model", "engine", "block_size")
EXACT, LOWER, BELOW = "=", ">=", "<"
# Which way the true value may lie from the reported one: +1 higher, -1 lower.
DIRECTION = {EXACT: 0, LOWER: 1, BELOW: -1}
RATE_COLUMNS = ["sustainable_rate", "bound", "num_rates", "min_rate", "max_rate", "threshold"]


def crossing(rates: list[float], latencies: list[float], threshold: float) -> tuple[float, str]:
    """(sustainable rate, bound) of one curve; `rates` ascending, NaN latency counts as over."""
    if not rates:
        raise ValueError("a latency curve needs at least one rate")
    over = [not (lat <= threshold) for lat in latencies]   # NaN compares False: over
    if not any(over):
        return rates[-1], LOWER
    k = over.index(True)
    if k == 0:
        return rates[0], BELOW
    r0, r1, l0, l1 = rates[k - 1], rates[k], latencies[k - 1], latencies[k]
    if math.isnan(l1) or math.isinf(l1):
        return r0, EXACT if l0 == threshold else LOWER
    return r0 + (threshold - l0) * (r1 - r0) / (l1 - l0), EXACT


def sustainable_rates(df: pd.DataFrame, threshold: float = DEFAULT_THRESHOLD, by=BY) -> pd.DataFrame:
    """Per group of `by`: the highest request rate whose mean normalized latency stays <= `threshold`."""
    if threshold <= 0:
        raise ValueError(f"threshold must be a positive latency in s/token, got {threshold}")
    by = [c for c in by if c in df.columns]
    empty = pd.DataFrame(columns=[*by, *RATE_COLUMNS])
    if not len(df) or "request_rate" not in df or "norm_latency_s_mean" not in df:
        return empty
    curves = df.assign(request_rate=pd.to_numeric(df["request_rate"], errors="coerce").astype(float),
                       latency=pd.to_numeric(df["norm_latency_s_mean"], errors="coerce").astype(float))
    curves = curves[curves["request_rate"].notna() & (curves["request_rate"] < math.inf)]
    if not len(curves):
        return empty
    rows = []
    for key, group in curves.groupby(by, dropna=False, sort=False):
        # A repeated rate: mean latency of its runs; one run with no finished request spoils that rate.
        points = group.groupby("request_rate")["latency"].agg(lambda s: s.mean() if s.notna().all() else math.nan)
        rate, bound = crossing(points.index.tolist(), points.tolist(), threshold)
        rows.append([*key, rate, bound, len(points), points.index.min(), points.index.max(), threshold])
    out = pd.DataFrame(rows, columns=[*by, *RATE_COLUMNS])
    return _sort(out)


def _sort(df: pd.DataFrame) -> pd.DataFrame:
    keys = [c for c in ("workload", "model") if c in df]
    rank = df["engine"].map(registry.rank) if "engine" in df else 0
    block = pd.to_numeric(df["block_size"], errors="coerce").fillna(-1) if "block_size" in df else 0
    order = df.assign(_rank=rank, _block=block).sort_values([*keys, "_rank", "_block"], kind="mergesort").index
    return df.loc[order].reset_index(drop=True)


def ratio_bound(numerator: str, denominator: str) -> str:
    """Bound of a / b from the bounds of a and b."""
    ways = {DIRECTION[numerator], -DIRECTION[denominator]} - {0}
    if not ways:
        return "="
    if len(ways) == 2:
        return "?"
    return ">=" if ways == {1} else "<="


def ratios(rates: pd.DataFrame, reference: str = "paged") -> pd.DataFrame:
    """reference/baseline sustainable-rate ratios per group, for each baseline engine present.

    Baselines in the engine registry's order of ratio columns (`registry.baselines`: the
    paper's, strongest first). Columns: the group keys, `block_size` (the
    reference's), `name` ("paged/orca-oracle"), `baseline`, `ratio`, `bound`,
    and the two rates with their bounds.
    """
    columns = ["name", "baseline", "ratio", "bound", "reference_rate", "reference_bound",
               "baseline_rate", "baseline_bound"]
    keys = [c for c in rates.columns if c not in ("engine", "block_size", *RATE_COLUMNS)]
    has_block = "block_size" in rates.columns
    out_columns = [*keys, *(["block_size"] if has_block else []), *columns]
    if not len(rates):
        return pd.DataFrame(columns=out_columns)
    engines = set(rates["engine"])
    baselines = [e for e in reversed(registry.LABELS) if e != reference and e in engines]
    baselines += sorted(e for e in engines - set(registry.LABELS) if e != reference)
    rows = []
    groups = rates.groupby(keys, dropna=False, sort=False) if keys else [((), rates)]
    for key, group in groups:
        key = key if isinstance(key, tuple) else (key,)
        for ref in group[group["engine"] == reference].itertuples(index=False):
            for baseline in baselines:
                for base in group[group["engine"] == baseline].itertuples(index=False):
                    ratio = ref.sustainable_rate / base.sustainable_rate if base.sustainable_rate > 0 else math.nan
                    rows.append([*key, *([ref.block_size] if has_block else []), f"{reference}/{baseline}",
                                 baseline, ratio, ratio_bound(ref.bound, base.bound),
                                 ref.sustainable_rate, ref.bound, base.sustainable_rate, base.bound])
    return pd.DataFrame(rows, columns=out_columns)


def _block(value) -> str:
    return "-" if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)) \
        else str(int(value))


def format_rates(rates: pd.DataFrame) -> str:
    show = rates.drop(columns=["threshold"]).copy()
    if "block_size" in show:
        show["block_size"] = show["block_size"].map(_block)
    show["sustainable_rate"] = [f"{b if b != '=' else ''}{r:.3g}" for r, b in
                                zip(show.pop("sustainable_rate"), show.pop("bound"))]
    show["measured"] = [f"{lo:g}{'' if hi == lo else f'-{hi:g}'} ({n})" for lo, hi, n in
                        zip(show.pop("min_rate"), show.pop("max_rate"), show.pop("num_rates"))]
    return show.rename(columns={"sustainable_rate": "req/s", "measured": "rates (n)"}).to_string(index=False)


def format_ratios(table: pd.DataFrame) -> str:
    """One line per group and reference block size, one column per ratio ("2.31x", ">=4.1x")."""
    keys = [c for c in table.columns if c not in ("name", "baseline", "ratio", "bound", "reference_rate",
                                                    "reference_bound", "baseline_rate", "baseline_bound")]
    cell = [f"{'' if b == '=' else b}{r:.2f}x" for r, b in zip(table["ratio"], table["bound"])]
    wide = table.assign(cell=cell)
    if "block_size" in wide:
        wide["block_size"] = wide["block_size"].map(_block)
    wide = wide.pivot_table(index=keys, columns="name", values="cell", aggfunc="first", sort=False)
    wide = wide[list(dict.fromkeys(table["name"]))].fillna("n/a")
    note = "(>= lower bound, <= upper bound, ? both rates are bounds pulling opposite ways)"
    return wide.reset_index().rename_axis(columns=None).to_string(index=False) + "\n" + note


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pagedbench.results.sweeps.sustainable", description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dir", type=Path, metavar="SWEEP_DIR")
    parser.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD,
                        help=f"mean normalized latency (s/token) still sustained (default {DEFAULT_THRESHOLD})")
    parser.add_argument("--reference", default="paged", help="engine in the ratios' numerator (default paged)")
    args = parser.parse_args(argv)
    problem = check_sweep_dir(args.sweep_dir)
    if problem is None and args.threshold <= 0:
        problem = f"--threshold must be positive, got {args.threshold}"
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    rates = sustainable_rates(collect(args.sweep_dir), args.threshold)
    if not len(rates):
        print(f"error: {args.sweep_dir}: no run with a finite request rate (offline runs have no curve)",
              file=sys.stderr)
        return 2
    print(f"sustainable request rate (mean normalized latency <= {args.threshold:g} s/token):")
    print(format_rates(rates))
    table = ratios(rates, args.reference)
    if len(table):
        print(format_ratios(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
