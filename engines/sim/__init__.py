"""The simulated backend: each iteration takes as long as a roofline cost model of the model and
hardware presets says (`cost_model`), on a virtual clock (`executor`). It sees only the batch's shape,
the same function for every engine. May import `engines.batch` and `engines.specs`; never `real/`,
the schedulers or torch.
"""
