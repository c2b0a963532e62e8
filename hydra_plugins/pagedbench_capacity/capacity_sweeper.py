"""A Hydra sweeper that searches each curve's capacity (the highest request rate meeting a criterion).

    python run.py -m experiment=capacity                # conf/hydra/sweeper/capacity.yaml

Hydra finds sweepers only in the `hydra_plugins` package, hence this folder;
the search itself is `pagedbench.results.sweeps.capacity.RateSearch`. The grid of
`hydra.sweeper.params` (and sweep arguments on the command line) gives the
curves, e.g. engine x workload x seed. Each round asks every open search
for its next rate and launches all of those runs at once through the
configured launcher (joblib processes, or SLURM / local via submitit), so
the runs of one round go in parallel; the searches then read each run's
summary (the job's return value) and the next round starts. Runs are
ordinary run folders under the sweep folder, named by their overrides:
re-running an interrupted search skips every finished run (its summary is
read back) and goes on from there. After each round the capacity table is
written to the sweep folder.

With `warm_start` (a swept key, `workload.seed` by default), a curve whose
value of that key is not the key's first waits for the curve with the first
value (all else the same) and starts from its capacity, the same criterion's:
a warm `RateSearch`, which ends on the bracket the cold search would (on a
curve monotone in the rate) in fewer runs.
"""
from __future__ import annotations

import itertools
import logging
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.plugins import Plugins
from hydra.core.utils import JobStatus
from hydra.plugins.sweeper import Sweeper
from omegaconf import DictConfig, OmegaConf

from pagedbench.engines.batch import ADMISSION_LIMITS
from pagedbench.results.record.store import ERROR, REFUSED
from pagedbench.results.sweeps.capacity import Criterion, RateSearch, write_tables
from pagedbench.results.sweeps.collect import read_error

log = logging.getLogger("pagedbench")


def expand_grid(overrides) -> list[list[str]]:
    """Every combination of the sweep overrides (a,b,c lists), plain overrides kept in each. A key given twice
    takes its last value, as Hydra's basic sweeper does: a command-line `workload.seed=0` replaces the
    experiment's `workload.seed: 0,1,2`."""
    choices = {}
    for override in overrides:
        key = override.get_key_element()
        if override.is_sweep_override():
            if not override.is_discrete_sweep():
                raise ValueError(f"the capacity sweeper takes lists (a,b,c), not {override.input_line!r}")
            choices[key] = [f"{key}={value}" for value in override.sweep_string_iterator()]
        else:
            choices[key] = [f"{key}={override.get_value_element_as_str()}"]
    return [list(combo) for combo in itertools.product(*choices.values())]


def run_error(result) -> str:
    """Why a run returned no summary: its error.json (or refused.json), else what the launcher saw."""
    try:
        run_dir = Path(result.hydra_cfg.hydra.runtime.output_dir)
    except AttributeError:
        run_dir = None
    for name in (ERROR, REFUSED):
        if run_dir is not None and (run_dir / name).is_file():
            return read_error(run_dir, name)
    if result.status == JobStatus.FAILED:
        return repr(result._return_value)
    return f"no summary and no {ERROR} in {run_dir}"


def warm_neighbours(curves: list[list[str]], key: str | None) -> dict[int, int]:
    """curve -> the curve it starts from: the same overrides but the first value of `key` (the first curve's, as
    `expand_grid` varies the last key fastest and begins every key at its first value); curves at that first
    value, and every curve when `key` is None or not swept, start cold."""
    if key is None or not curves:
        return {}
    index = {tuple(curve): c for c, curve in enumerate(curves)}
    first = [o for o in curves[0] if o.split("=", 1)[0] == key]
    neighbours = {}
    for c, curve in enumerate(curves):
        at = [i for i, o in enumerate(curve) if o.split("=", 1)[0] == key]
        if not at or not first or curve[at[0]] == first[0]:
            continue
        n = index.get(tuple(curve[:at[0]] + [first[0]] + curve[at[0] + 1:]))
        if n is not None:
            neighbours[c] = n
    return neighbours


class CapacitySweeper(Sweeper):
    def __init__(self, params: dict | None = None, criteria: list | None = None, rate_key: str = "workload.request_rate",
                 start_rate: float = 1.0, growth: float = 2.0, precision: float = 0.02, min_rate: float = 0.01,
                 max_rate: float = 1000.0, max_rounds: int = 40, warm_start: str | None = None,
                 guesses: int = 6) -> None:
        super().__init__()
        self.params = dict(params or {})
        raw = OmegaConf.to_container(criteria, resolve=True) if isinstance(criteria, (DictConfig,)) or \
            OmegaConf.is_config(criteria) else criteria
        self.criteria = [Criterion.from_dict(dict(c)) for c in (raw or [{"name": "latency", "threshold": 0.2}])]
        self.rate_key = rate_key
        self.search_args = dict(start=start_rate, growth=growth, precision=precision, min_rate=min_rate,
                                max_rate=max_rate, guesses=guesses)
        if warm_start is not None and not (isinstance(warm_start, str) and warm_start):
            raise ValueError(f"warm_start names a swept key (such as workload.seed) or is null, got {warm_start!r}")
        self.warm_start = warm_start
        RateSearch(**self.search_args)   # check the settings before any run starts
        self.max_rounds = max_rounds
        self.config: DictConfig | None = None
        self.launcher = None
        self.hydra_context = None

    def setup(self, *, hydra_context, task_function, config: DictConfig) -> None:
        self.hydra_context = hydra_context
        self.config = config
        self.launcher = Plugins.instance().instantiate_launcher(hydra_context=hydra_context,
                                                                task_function=task_function, config=config)

    def curves(self, arguments: list[str]) -> list[list[str]]:
        params = [f"{k}={v}" for k, v in self.params.items()] + list(arguments)
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        curves = expand_grid(parser.parse_overrides(params))
        if any(o.split("=", 1)[0].lstrip("+~") == self.rate_key for c in curves for o in c):
            raise ValueError(f"{self.rate_key} is what the capacity sweeper searches; do not set or sweep it")
        return curves

    def sweep(self, arguments: list[str]) -> Any:
        sweep_dir = Path(self.config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        curves = self.curves(arguments)
        searches = {(c, k): RateSearch(**self.search_args) for c in range(len(curves))
                    for k in range(len(self.criteria))}
        neighbours = warm_neighbours(curves, self.warm_start)
        waits = {(c, k): (n, k) for c, n in neighbours.items() for k in range(len(self.criteria))}
        summaries: dict[tuple[int, float], dict | None] = {}   # (curve, rate) -> summary, None if it failed
        errors: dict[int, str] = {}
        log.info("capacity search: %d curves x %d criteria (%s), precision %.0f%%%s", len(curves),
                 len(self.criteria), ", ".join(c.label for c in self.criteria), 100 * self.search_args["precision"],
                 f"; {len(neighbours)} curves start from their first {self.warm_start}'s capacity" if neighbours
                 else "")
        job_idx = 0
        for round_no in range(1, self.max_rounds + 1):
            wanted = self._advance(searches, summaries, errors, waits)
            if not wanted:
                break
            log.info("capacity round %d: %d runs for %d open searches%s", round_no, len(wanted),
                     sum(1 for key, s in searches.items() if key[0] not in errors and key not in waits
                         and s.next_rates()), f", {len(waits)} waiting for a neighbour" if waits else "")
            batch = [curves[c] + [f"{self.rate_key}={rate}"] for c, rate in wanted]
            results = self.launcher.launch(batch, initial_job_idx=job_idx)
            job_idx += len(batch)
            for (c, rate), result in zip(wanted, results):
                value = result._return_value if result.status == JobStatus.COMPLETED else None
                if not isinstance(value, dict):
                    errors.setdefault(c, f"run at {self.rate_key}={rate} failed: {run_error(result)}")
                    log.warning("capacity: curve %s: %s", " ".join(curves[c]), errors[c])
                summaries[(c, rate)] = value if isinstance(value, dict) else None
            self._write(curves, searches, summaries, errors, sweep_dir)
        else:
            log.warning("capacity search stopped after max_rounds=%d with searches still open", self.max_rounds)
        self._advance(searches, summaries, errors, waits)
        table = self._write(curves, searches, summaries, errors, sweep_dir)
        log.info("capacity table: %s (python -m pagedbench.results.sweeps.capacity %s)", sweep_dir / "capacity.csv", sweep_dir)
        return table

    def _advance(self, searches, summaries, errors, waits) -> list[tuple[int, float]]:
        """Feed every search the outcomes already measured, and each waiting one its neighbour's capacity once
        that search has ended; the (curve, rate) runs still needed."""
        wanted: dict[tuple[int, float], None] = {}
        for (c, k), search in searches.items():   # a neighbour comes before the curves that wait for it
            if c in errors:
                continue
            if (c, k) in waits:
                neighbour = waits[(c, k)]
                if neighbour[0] not in errors and searches[neighbour].next_rates():
                    continue
                found = searches[neighbour].result()
                search.hint = found["capacity"] if neighbour[0] not in errors and found["bound"] == "=" else None
                del waits[(c, k)]
            while True:
                rates = search.next_rates()
                known = [rate for rate in rates if (c, rate) in summaries]
                if not known:
                    break
                for rate in known:
                    search.record(rate, self.criteria[k].met(summaries[(c, rate)] or {}))
            wanted.update(((c, rate), None) for rate in rates)
        return list(wanted)

    def _write(self, curves, searches, summaries, errors, sweep_dir: Path):
        import pandas as pd

        rows = []
        for (c, k), search in searches.items():
            runs = [s for (cc, _), s in summaries.items() if cc == c and s]
            first = runs[0] if runs else {}
            result = search.result()
            at = summaries.get((c, result["capacity"])) or {}
            rows.append({
                "engine": first.get("engine"), "block_size": first.get("block_size"),
                "preemption": first.get("preemption"),
                "workload": first.get("workload"), "model": first.get("model"),
                "seed": first.get("workload_seed"), "duration_s": first.get("duration_s"),
                "criterion": self.criteria[k].label, **result, "hint": search.hint,
                "done": result["done"] and c not in errors, "error": errors.get(c),
                "overrides": " ".join(curves[c]),
                # The run at the capacity found: how full its batches were and what sharing saved there.
                "batch_size_at_capacity": at.get("steady_mean_batch_size"),
                "memory_saving_at_capacity": at.get("steady_memory_saving"),
                # Which limit kept waiting requests out there (shares of the steady window's iterations with
                # a queue), how much KV was free and how often a request was preempted: the limit that binds.
                **{f"blocked_by_{limit}_at_capacity": at.get(f"admission_blocked_by_{limit}") for limit in ADMISSION_LIMITS},
                "mem_free_at_capacity": at.get("steady_mem_free"),
                "preemptions_at_capacity": at.get("num_preemptions"),
            })
        table = pd.DataFrame(rows)
        write_tables(table, sweep_dir)
        return table
