"""The Hydra callback of a sweep (conf/config.yaml `hydra.callbacks`): its aggregate written (and, with
`logger=wandb`, logged as the sweep's own wandb run) when it ends, and its failed runs named for the run command
(results/sweeps/sweep_dir.py, which the run command reads)."""
from __future__ import annotations

import logging
from pathlib import Path

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from pagedbench.results.sweeps.sweep_dir import note_failure

log = logging.getLogger("pagedbench")


class AggregateSweep(Callback):
    """Write the sweep's aggregate table and figures once every run of the sweep has ended, log them as the
    sweep's own wandb run when `logger=wandb` (in the group of the sweep's runs), and say which runs failed
    (their errors are in failures.csv and each run's error.json)."""

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        from pagedbench.results.sweeps.collect import collect_failures

        folder = Path(config.hydra.sweep.dir)
        try:
            from pagedbench.results.report.aggregate import write_aggregate

            log.info("sweep aggregate: %s", write_aggregate(folder))
        except Exception as err:   # the runs' own results are already safe on disk
            log.warning("could not aggregate %s (%s); run `python -m pagedbench.results.report.aggregate %s`", folder, err, folder)
        log_sweep_to_wandb(config, folder)
        failures = collect_failures(folder)
        if len(failures):
            first = failures.iloc[0]
            log.error("%s", note_failure(f"{len(failures)} run(s) of the sweep in {folder} failed (listed in "
                                         f"{folder / 'failures.csv'}); first: {first['run_dir']}: {first['error']}"))


def log_sweep_to_wandb(config: DictConfig, folder: Path) -> None:
    """The sweep's wandb run: its tables and figures (`pagedbench.results.record.wandb_backfill.log_sweep`); nothing,
    without importing wandb, unless `logger=wandb`. A failure is one warning line."""
    if "logger" not in config or config.logger.get("name") != "wandb":
        return
    from pagedbench.results.record.wandb_backfill import log_sweep

    try:
        logger_cfg = OmegaConf.to_container(config.logger, resolve=True)
        sweep_config = OmegaConf.to_container(OmegaConf.masked_copy(config, [k for k in config if k != "hydra"]),
                                              resolve=True)
        log_sweep(folder, logger_cfg, sweep_config)
    except Exception as err:   # the sweep's results are on disk already
        log.warning("could not log the sweep %s to wandb (%s); run `python -m pagedbench.results.record.wandb_backfill %s`",
                    folder, err, folder)
