"""Engines: a scheduler over a KV-memory manager, driven by the engine loop and executed by a backend.

At the top live what every piece shares: `sequence` (a request's life in an
engine), `batch` (what one iteration runs), `config` (engine and limit
configs), `build` (config name -> scheduler over its KV manager) and `loop`
(release arrivals, schedule, execute, account). The subpackages are
`specs/` (model and hardware descriptions, presets), `kv/` (allocators, KV
managers, the memory split, the budget), `scheduling/` (admission and the
schedulers), `sim/` (the simulated backend: cost model and virtual-clock
executor) and `real/` (the real backend: a transformers model on the
engine's KV layout). Imports point down that list: `specs` and `kv` import
nothing of `scheduling`, `sim` or `real`; `scheduling` imports `kv`; the two
backends import what they execute but never each other. From outside the
package, engines may import `workloads.request` (the Request type) and
`kernels` (from `real/` only), nothing of `results`.
"""
