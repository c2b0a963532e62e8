"""Serving: our engines behind an OpenAI-compatible HTTP endpoint, for deployment-style benchmarks.

`online_loop` is the engine loop for requests that arrive while it runs: an
`Inbox` that the server submits to, and `serve_loop`, which steps the same
`pagedbench.engines.engine.Engine` as `pagedbench.engines.loop.run_engine` but takes requests as
they come, drops those whose clients went away, and reports each new token
as it is made. `asgi_server` is the server, as vLLM's: a FastAPI app under
uvicorn over one backend's scheduler and executor (`/v1/completions` and
`/v1/chat/completions` streamed as server-sent events, `/v1/models`,
`/health`, `/ping`, `/version`, `/tokenize`, `/detokenize`, `/metrics`); `openai_api` its wire format,
`choices` each choice's output as its tokens arrive (a row of a request for n), `stops` where one stops.
May import `engines` (engine, run_record, sequence, protocols: never a backend's
internals), `pagedbench.workloads.request` and `pagedbench.workloads.tokenizer`; nothing of
`results` or `studies`. `serve.py` at the repository root turns a Hydra
config into a running server.
"""
