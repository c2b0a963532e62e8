"""What a run records and how it is summarised.

One run: `frames` (the engine's RunRecord as the iterations and requests
tables), `summary` (metrics from those two tables alone), `store` (the run
folder, written atomically), `console` (the table printed at the end of a
run), `wandb_logger`. A sweep: `sweep` (its run folders read into one table),
`sustainable` (sustainable request rates and paged/baseline ratios), `plots`
(the paper's figures), `aggregate` (tables and figures written beside the
runs; a command), `sweep_callback` (Hydra hooks), `capacity` (the rate
search's tables), and `report` with `report_sharing` (the committed
REPORT.md). Commands beside them: `replay` (the sim against the real
backend), `beam_check` (the sim's beam model against real beam search),
`swap_cost` (Figure 19a on the sim). Imports point one way: aggregate -> plots ->
sustainable -> sweep -> store. May import `engines` for record types and
presets (`engines.loop`, `engines.kv`, `engines.specs`); never decides
anything about scheduling.
"""
