"""Figures and the report: `plots` (the paper's figures from a sweep table),
`aggregate` (a sweep's tables and figures written beside its runs; a command),
`callback` (the Hydra hooks that name a sweep's folder and aggregate it when it
ends), `paper` (the paper's numbers, read from `data/paper/`), `section` (what
a section of the report is: its text, and the parts without runs) and `write`
with `sharing` (the report; `python -m results.report`). May import
`results.sweeps` and `results.record`.
"""
