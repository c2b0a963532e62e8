"""Peers: serving engines that are not ours, measured on the same trace as ours.

`transformers_cb` runs transformers' own continuous-batching engine (its paged
KV cache) in process; `http_client` replays a trace against any
OpenAI-compatible endpoint (a vLLM or `transformers serve` server, or ours:
`engines/serving/`). Neither exposes its iterations, so a peer's run is a
`RunRecord` of sequences only (no iteration rows): `timeline` turns what was
measured for each request (arrival, send, each token's time, the tokens
counted, an error) into the `Sequence` the summary reads. Peers may import
`pagedbench.engines.sequence`, `pagedbench.engines.loop` (RunRecord), `pagedbench.engines.real` (the same
model as ours) and `workloads`; nothing of `results`.
"""
