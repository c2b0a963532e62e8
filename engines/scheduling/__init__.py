"""Scheduling: which requests run in each iteration, given what the KV manager can hold.

`admission` rejects on arrival a request no engine state could serve, the
same rule for every engine; `static.StaticScheduler` is request-level
batching (FasterTransformer); `iteration.IterationScheduler` is
iteration-level batching (Orca's contiguous regions or vLLM's paged blocks,
by the KV manager it is given), with preemption by recompute or swap;
`forks` applies what an iteration decided about a group's sequences (a
shared prompt, the chosen beams, a cached prefix). Pure Python,
no torch. May import `pagedbench.engines.sequence`, `pagedbench.engines.batch`, `pagedbench.engines.config`
and `pagedbench.engines.kv`; never the loop or a backend.
"""
