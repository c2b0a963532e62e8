"""Serving: our engines behind an OpenAI-compatible HTTP endpoint, for deployment-style benchmarks.

`online_loop` is the engine loop for requests that arrive while it runs: an
`Inbox` that HTTP threads submit to, and `serve_loop`, which steps the same
`engines.engine.Engine` as `engines.loop.run_engine` but takes requests as
they come and reports each new token as it is made.
`openai_server` is a stdlib-only (`http.server`) server over one backend's
scheduler and executor: `/v1/models`, `/health`, `/v1/completions` and
`/v1/chat/completions`, streamed as server-sent events, one token per chunk.
May import `engines` (engine, run_record, sequence, protocols: never a backend's
internals), `workloads.request` and `workloads.tokenizer`; nothing of
`results` or `studies`, and no web framework. `serve.py` at the repository
root turns a Hydra config into a running server.
"""
