"""The simulated backend: each iteration takes as long as a cost model of the model and hardware presets
says, on a virtual clock (`executor`). The cost model is a roofline (`cost_model`), or the linear terms
fitted to a real-backend profile (`linear_cost`; the fit is `python -m pagedbench.studies.fit`); `build` holds the
sim's typed config (`SimBackendConfig`) and its builder (`build_sim`: KV budget, scheduler, executor), and
picks the cost model. It sees only the batch's shape and the KV layout, the same function for every
engine. `transfer` times the KV data an iteration moves (device copies, swaps), `swap_cost` tabulates swap
against recompute (Figure 19a); `beam_model` decides, seeded, which beams survive a beam step.
May import `pagedbench.engines.batch`, `pagedbench.engines.sequence`, `pagedbench.engines.specs`, `pagedbench.engines.kv` and the scheduler builder
(`pagedbench.engines.build`); never `real/` or torch.
"""
