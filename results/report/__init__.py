"""Figures and the report: `plots` (the paper's figures from a sweep table),
`aggregate` (a sweep's tables and figures written beside its runs; a command),
`callback` (the Hydra hooks that name a sweep's folder and aggregate it when it
ends), `paper` (the paper's numbers, read from `data/paper/`), and `write` with
`sharing` (docs/REPORT.md; `python -m results.report`). May import
`results.sweeps` and `results.record`.
"""
