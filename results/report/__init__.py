"""Figures and the report: `plots` (the paper's figures from a sweep table),
`aggregate` (a sweep's tables and figures written beside its runs; a command),
`callback` (the Hydra hooks that name a sweep's folder and aggregate it when it
ends), `paper` (the paper's numbers, read from `data/reference/`), `section`
(what a section of the report is: its text, and the parts without runs), the
sections themselves (`paper_sections`: method, Table 1, Figures 2, 12, 13 and
18b; `sharing`: Figures 14-17 and 19; `backend_sections`: the real CPU backend
and the sim against it, with `replay_table`), and `write`, which composes and
writes the report (`python -m results.report`). May import `results.sweeps`
and `results.record`.
"""
