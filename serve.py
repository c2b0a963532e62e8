"""Serve one of our engines on the real backend behind an OpenAI-compatible streaming HTTP API.

    python serve.py engine=paged model=tiny serve.port=8001
    python serve.py engine=orca_oracle serve.host=0.0.0.0 serve.tokenizer=hf:/path/to/tokenizer

The config is run.py's (the same groups, parsed and checked by `RunConfig.parse`, the backend built by
`build_backend`), so `engine=`, `model=`, `limits.*`, `backend.*` mean what they mean for a run; only
backend=real can serve. The server's own settings sit under `serve` (conf/serve.yaml, which composes
conf/config.yaml and adds them): serve.host (127.0.0.1), serve.port (8000; 0 picks a free one) and
serve.tokenizer (cl100k_base: a `workloads.tokenizer` spec, for text prompts and the text of generated
tokens). Once bound it prints one line, "serving <engine> on http://host:port"; SIGTERM or SIGINT (Ctrl-C)
shut it down cleanly. Hydra's log of the session goes to outputs/serve/, apart from the runs. Endpoints and the stream's format: engines/serving/openai_server.py.
"""
from __future__ import annotations

from dataclasses import dataclass
import logging
import signal
import sys
import threading

import hydra
from omegaconf import DictConfig

from engines.specs.mapping import build_from_mapping
from run import RunConfig, bad_group_choice, plain

log = logging.getLogger("pagedbench")


@dataclass(slots=True)
class ServeConfig:
    host: str = "127.0.0.1"
    port: int = 8000                   # 0: a free port, printed once bound
    tokenizer: str = "cl100k_base"     # a workloads.tokenizer spec: a bpe_openai encoding or hf:/local/dir

    def __post_init__(self) -> None:
        if not isinstance(self.host, str) or not self.host:
            raise ValueError(f"serve.host must be a host name or address, got {self.host!r}")
        if isinstance(self.port, bool) or not isinstance(self.port, int) or not 0 <= self.port <= 65535:
            raise ValueError(f"serve.port must be an integer in [0, 65535], got {self.port!r}")
        if not isinstance(self.tokenizer, str) or not self.tokenizer:
            raise ValueError(f"serve.tokenizer must be a tokenizer spec, got {self.tokenizer!r}")

    @classmethod
    def from_dict(cls, d: dict) -> "ServeConfig":
        return build_from_mapping(cls, d, "serve")


def refuse(message: str, status: int) -> None:
    print(f"error: {message}", file=sys.stderr, flush=True)
    sys.exit(status)


@hydra.main(version_base=None, config_path="conf", config_name="serve")
def main(cfg: DictConfig) -> None:
    from engines.serving.openai_server import OpenAIServer   # torch loads after the config is checked

    if cfg.backend.name != "real":
        refuse(f"serve.py serves the real backend only (backend=real), got backend={cfg.backend.name}", 2)
    try:
        serve = ServeConfig.from_dict(plain(cfg.serve))
        rc = RunConfig.parse(cfg)
        backend = rc.build_backend(cfg.gpu_memory_utilization)
        server = OpenAIServer(backend, rc.model.name, rc.engine.label, serve.tokenizer, serve.host, serve.port,
                              max_seq_len=rc.limits.max_seq_len)
    except ValueError as err:          # a bad value in the config: one line, no stack trace
        refuse(str(err), 2)
    log.info("%s", backend.describe())
    log.info("engine %s: %s", rc.engine.label, backend.scheduler.kv.describe())
    try:
        server.start()                 # warms the executor up and starts its clock, then binds
    except OSError as err:
        refuse(f"cannot listen on {serve.host}:{serve.port}: {err}", 1)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    http = threading.Thread(target=server.serve_forever, name="pagedbench-http", daemon=True)
    http.start()
    print(f"serving {rc.engine.label} on http://{serve.host}:{server.port}", flush=True)
    while not stop.wait(0.5) and server.healthy:
        pass
    error = server.engine_error
    server.shutdown()
    http.join(timeout=5)
    if error:
        refuse(f"the engine stopped: {error}", 1)
    log.info("server stopped")


if __name__ == "__main__":
    problem = bad_group_choice(sys.argv[1:])
    if problem:
        refuse(problem, 2)
    main()
