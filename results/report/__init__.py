"""Figures and the report: `plots` (the paper's figures from a sweep table),
`sharing_plots` (Figures 14-17, 19a and 19b), `distribution_plots` (TTFT and
TPOT per engine at one rate), `aggregate` (a sweep's tables and figures written
beside its runs; a command), `callback` (the Hydra hooks that name a sweep's
folder, aggregate it when it ends and log it to wandb), `paper` (the paper's
numbers and the figures before the sharing revision, read from
`data/reference/`), `section` (what a section of the report is: its text, and
the parts without runs), `markdown` (tables and numbers), `read` (an
experiment's runs and tables), `bounds` (capacities that are only bounds), the
sections themselves (`paper_sections`: method, Table 1, Figures 2, 12, 13 and
18b; `sharing`: Figures 14-17, with `beams` (the beam model's calibration and
check); `swapping`: Figure 19; `sensitivity`: the claim against the sim's
uncertain inputs; `backend_sections`: the real CPU backend and the sim
against it, with `replay_table`), and `write`, which composes and writes the
report (`python -m pagedbench.results.report`). May import `pagedbench.results.sweeps` and
`pagedbench.results.record`.
"""
