"""Calibration and validation studies: commands that run the engines, the
cost models or the kernels to measure or check them, each `python -m
studies.NAME --help`. `profile` times real iterations over designed shapes,
`fit` fits a sim preset to a profile, `replay` runs one trace through both
backends, `beam_check` checks the sim's beam model against real beam search,
`swap_cost` tabulates the sim's swap and recompute costs (Figure 19a),
`swap_bench` and `kernel_bench` measure swaps and attention kernels on the
present device, and `hf_generate` times transformers' own `generate` on a
trace. Studies build engines through the backends' builders; nothing in
`engines`, `workloads` or `results` imports a study.
"""
