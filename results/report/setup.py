"""How a step's runs were made, in words read from the runs themselves: their traces and their seeds.

A section's prose names the traces its figures come from ("one-hour Poisson traces, seeds 0-2"). Typed into
a template, that text is right for one build and wrong for another (the quick build runs 20-second traces of
one seed); read from the runs' summaries, it is right for whatever made them.

    trace_setup(runs)   # {"traces": "one-hour Poisson traces", "seeds": "seeds 0-2", "num_seeds": 3, ...}
"""
from __future__ import annotations

import math

import pandas as pd

SECONDS_PER_MINUTE = 60
SECONDS_PER_HOUR = 60 * SECONDS_PER_MINUTE
SEED_COLUMNS = ("workload_seed", "seed")          # a run's summary, then a capacity table
ARRIVALS = {"poisson": "Poisson", "gamma": "gamma"}
NUMBER_WORDS = {1: "one"}


def duration_words(seconds: float) -> str:
    """A trace's duration as an adjective: "one-hour", "10-minute", "20-second"."""
    for unit, name in ((SECONDS_PER_HOUR, "hour"), (SECONDS_PER_MINUTE, "minute")):
        if seconds >= unit and float(seconds) % unit == 0:
            count = int(seconds // unit)
            return f"{NUMBER_WORDS.get(count, count)}-{name}"
    return f"{float(seconds):g}-second"


def seed_words(seeds) -> str:
    """"seed 0", "seeds 0-2" (a consecutive run) or "seeds 0, 2, 5"; "" without any."""
    values = sorted({int(s) for s in seeds if s is not None and not (isinstance(s, float) and math.isnan(s))})
    if not values:
        return ""
    if len(values) == 1:
        return f"seed {values[0]}"
    if values == list(range(values[0], values[-1] + 1)):
        return f"seeds {values[0]}-{values[-1]}"
    return "seeds " + ", ".join(str(v) for v in values)


def _distinct(runs: pd.DataFrame, column: str) -> list:
    if column not in runs:
        return []
    return sorted(v for v in runs[column].dropna().unique())


def trace_setup(runs: pd.DataFrame | None) -> dict:
    """The runs' traces and seeds in words, and the figures behind them: `traces` ("one-hour Poisson traces", or
    "1,000-request Poisson traces" for a fixed request count, joined by "and" when the runs differ), `seeds`
    ("seeds 0-2"), `words` (both, comma-joined, empty parts left out), `num_seeds`, `durations` (seconds) and
    `requests` (the fixed request counts); "" and empty lists when `runs` has none of them (no records)."""
    if runs is None or not len(runs):
        return {"traces": "", "seeds": "", "words": "", "num_seeds": 0, "durations": [], "requests": []}
    arrivals = _distinct(runs, "arrival")
    arrival = " and ".join(ARRIVALS.get(a, a) for a in arrivals)
    durations = [float(d) for d in _distinct(runs, "duration_s")]
    requests = [] if durations else [int(n) for n in _distinct(runs, "num_requests")]
    if durations:
        sizes = [duration_words(d) for d in durations]
    else:
        sizes = [f"{n:,}-request" for n in requests]
    traces = " and ".join(sizes) + (f" {arrival}" if arrival else "") + " traces" if sizes else ""
    column = next((c for c in SEED_COLUMNS if c in runs), None)
    seeds = _distinct(runs, column) if column else []
    words = ", ".join(w for w in (traces.strip(), seed_words(seeds)) if w)
    return {"traces": traces.strip(), "seeds": seed_words(seeds), "words": words, "num_seeds": len(seeds),
            "durations": durations, "requests": requests}
