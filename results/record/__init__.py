"""One run's record: `frames` (the engine's RunRecord as the iterations and
requests tables), `summary` (the run's summary, built here and only here),
`store` (the run folder, written atomically), `console` (the table printed at
the end of a run), `wandb_logger` (live and sweep runs), `wandb_series` (the
per-iteration points they chart) and `wandb_backfill`
(logging finished run folders afterwards). Imports nothing else of `results`.
"""
