"""The simulated backend: each iteration takes as long as a cost model of the model and hardware presets
says, on a virtual clock (`executor`). The cost model is a roofline (`cost_model`), or the linear terms
fitted to a real-backend profile (`linear_cost`, fitted by `fit`); `build.build_cost_model` picks one. It sees
only the batch's shape and the KV layout, the same function for every engine. `transfer` times the KV data
an iteration moves (device copies, swaps); `beam_model` decides, seeded, which beams survive a beam step.
May import `engines.batch`, `engines.sequence` and `engines.specs`; never `real/`, the schedulers or torch.
"""
