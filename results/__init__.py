"""What a run records and what is made of many runs, one subpackage per job.

`record/` is one run's record: its tables, summary, run folder, printed
table and wandb log. `sweeps/` reads a sweep's run folders and analyses them:
the table of runs, sustainable rates, the capacity search's tables. `report/`
turns sweeps into figures and the committed report, with the paper's numbers
read from `data/paper/`. Imports point one way: report -> sweeps -> record.
May import `engines` for record types and presets; never decides anything
about scheduling. The studies that run engines to validate the sim live in
`studies/`, outside this package.
"""
