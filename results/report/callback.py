"""Hydra hooks for sweeps: where a sweep writes, and its aggregate written when it ends."""
from __future__ import annotations

import logging
from pathlib import Path

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

log = logging.getLogger("pagedbench")


def sweep_dir(experiment: str | None, stamp: str) -> str:
    """An experiment sweeps into outputs/experiments/NAME (re-running it skips finished runs);
    any other multirun into outputs/multirun/DATE/TIME."""
    return f"outputs/experiments/{experiment}" if experiment else f"outputs/multirun/{stamp}"


def register_resolvers() -> None:
    if not OmegaConf.has_resolver("sweep_dir"):
        OmegaConf.register_new_resolver("sweep_dir", sweep_dir)


class AggregateSweep(Callback):
    """Write the sweep's aggregate table and figures once every run of the sweep has ended."""

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        folder = Path(config.hydra.sweep.dir)
        try:
            from results.report.aggregate import write_aggregate

            log.info("sweep aggregate: %s", write_aggregate(folder))
        except Exception as err:   # the runs' own results are already safe on disk
            log.warning("could not aggregate %s (%s); run `python -m results.report.aggregate %s`", folder, err, folder)
