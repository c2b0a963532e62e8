"""Engines: a scheduler over a KV-memory manager, driven by the engine loop and executed by a backend.

At the top live what every piece shares: `sequence` (a request's life in an
engine), `batch` (what one iteration runs), `protocols` (the seams: what a
scheduler asks of a KV manager, what the loop asks of a scheduler and an
executor, what a backend's builder returns), `config` (engine and limit
configs), `build` (config name -> scheduler over its KV manager), `engine`
(`Engine.step`: schedule, execute, account, in one place; one `IterationRow`
each, kept in `run_record`) and `loop` (a trace's driver of the engine).
The subpackages are `specs/` (model and hardware descriptions, presets), `kv/` (allocators, KV
managers, the memory split, the budget), `scheduling/` (admission and the
schedulers), `sim/` (the simulated backend: cost model and virtual-clock
executor), `real/` (the real backend: a transformers model on the
engine's KV layout), `serving/` (our engines behind an OpenAI-compatible
HTTP server, an online engine loop over the real backend) and `peers/`
(engines not ours, measured on the same trace: transformers' continuous
batching in process, any OpenAI-compatible endpoint over HTTP); each
backend has one typed config and one builder (`sim/build.py`,
`real/build.py`, `peers/replay.py`). Imports point down that list: `specs`
and `kv` import
nothing of `scheduling`, `sim` or `real`; `scheduling` imports `kv`; the two
backends import what they execute but never each other. `serving` and `peers` sit on top:
they may import the engine, the loop, `real` and `pagedbench.workloads.tokenizer`. From outside the
package, engines may import `pagedbench.workloads.request` (the Request type),
`paths` (where the presets live) and `kernels` (from `real/` only), nothing
of `results` or `studies`.
"""
