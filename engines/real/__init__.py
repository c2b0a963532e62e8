"""The real backend: a transformers model runs every iteration on the engine's own KV layout.

`model` builds the OPT or LLaMA model (random or local weights), `kv_cache`
allocates the per-layer cache tensors from a byte budget, `context` carries
one iteration's slot mapping, block tables or regions to `attention` (the
function swapped in through `transformers.AttentionInterface`), `executor`
turns a `Batch` into one packed forward pass timed by the wall clock, and
`swap` moves blocks between the device cache and the host pool. `build`
holds the typed config (`RealBackendConfig`) and the builder (`build_real`,
over a model loaded once by `load_real_model`) that wires them to a
scheduler. May import `engines` (batch, config, build, protocols, specs)
and `kernels`; never `pagedbench.engines.sim`.
"""
