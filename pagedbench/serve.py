"""Serve one of our engines on the real backend behind an OpenAI-compatible streaming HTTP API.

    python serve.py engine=paged model=tiny serve.port=8001
    python serve.py engine=orca_oracle serve.host=0.0.0.0 serve.tokenizer=hf:/path/to/tokenizer

The config is run.py's (the same groups, parsed and checked by `RunConfig.parse`, the backend built by
`build_backend`), so `engine=`, `model=`, `limits.*`, `backend.*` mean what they mean for a run; only
backend=real can serve. The server's own settings sit under `serve` (conf/serve.yaml, which composes
conf/config.yaml and adds them): serve.host (127.0.0.1), serve.port (8000; 0 picks a free one) and
serve.tokenizer (cl100k_base: a `pagedbench.workloads.tokenizer` spec, for text prompts and the text of generated
tokens) and serve.api_key (null; a key, or a list `serve.api_key=[k1,k2]`: every /v1/ request then needs
`Authorization: Bearer KEY` with one of them; $VLLM_API_KEY is one more, as vLLM reads it) and
serve.served_model_name (null: pagedbench-ENGINE-MODEL; a name or a list, `+serve.served_model_name=[a,b]`, the
first in every response; a request naming another model gets vLLM's 404) and serve.engine_process (true: the
engine runs in a process of its own, built and warmed up there, as vLLM splits its API server from its engine
core, so the server's Python never holds up a step; `+serve.engine_process=false` runs it on this process's
main thread beside the event loop's, engines/serving/engine_process.py). Once bound it
prints one line, "serving <engine> on http://host:port"; SIGTERM or SIGINT (Ctrl-C) end every open stream
with a reason and shut it down. Hydra's log of the session goes to outputs/serve/, apart from the runs. The
server (FastAPI under uvicorn), its endpoints and the stream's format: engines/serving/asgi_server.py.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
import logging
import sys

import hydra
from omegaconf import DictConfig

from pagedbench.engines.specs.mapping import build_from_mapping
from pagedbench.paths import CONF
from pagedbench.run import RunConfig, bad_group_choice, plain

log = logging.getLogger("pagedbench")


@dataclass(slots=True)
class ServeConfig:
    host: str = "127.0.0.1"
    port: int = 8000                   # 0: a free port, printed once bound
    tokenizer: str = "cl100k_base"     # a pagedbench.workloads.tokenizer spec: a bpe_openai encoding or hf:/local/dir
    api_key: str | list[str] | None = None   # a key or several: /v1/ requests need `Authorization: Bearer KEY` (401)
    served_model_name: str | list[str] | None = None   # the names requests may ask for (the first answers); null:
                                                       # pagedbench-ENGINE-MODEL. Another name: 404, as vLLM
    engine_process: bool = True        # the engine in a process of its own (vLLM's split); false: on this one's
                                       # main thread, beside the event loop's (engines/serving/engine_process.py)

    def __post_init__(self) -> None:
        if not isinstance(self.host, str) or not self.host:
            raise ValueError(f"serve.host must be a host name or address, got {self.host!r}")
        if isinstance(self.port, bool) or not isinstance(self.port, int) or not 0 <= self.port <= 65535:
            raise ValueError(f"serve.port must be an integer in [0, 65535], got {self.port!r}")
        if not isinstance(self.tokenizer, str) or not self.tokenizer:
            raise ValueError(f"serve.tokenizer must be a tokenizer spec, got {self.tokenizer!r}")
        keys = [self.api_key] if isinstance(self.api_key, str) else self.api_key
        if keys is not None and (not isinstance(keys, (list, tuple)) or not keys
                                 or not all(isinstance(k, str) and k for k in keys)):
            raise ValueError(f"serve.api_key must be null, a non-empty string or a list of them, got {self.api_key!r}")
        names = [self.served_model_name] if isinstance(self.served_model_name, str) else self.served_model_name
        if names is not None and (not isinstance(names, (list, tuple)) or not names
                                  or not all(isinstance(n, str) and n for n in names)):
            raise ValueError(f"serve.served_model_name must be null, a name or a list of names, "
                             f"got {self.served_model_name!r}")
        if not isinstance(self.engine_process, bool):
            raise ValueError(f"serve.engine_process must be true or false, got {self.engine_process!r}")

    @property
    def model_names(self) -> list[str] | None:
        names = self.served_model_name
        return [names] if isinstance(names, str) else names

    @classmethod
    def from_dict(cls, d: dict) -> "ServeConfig":
        return build_from_mapping(cls, d, "serve")


def refuse(message: str, status: int) -> None:
    print(f"error: {message}", file=sys.stderr, flush=True)
    sys.exit(status)


def served_backend(rc: RunConfig, gpu_memory_utilization: float):
    """The backend `rc` describes (in the engine's process, when it has one of its own)."""
    return rc.build_backend(gpu_memory_utilization)


@hydra.main(version_base=None, config_path=str(CONF), config_name="serve")
def main(cfg: DictConfig) -> None:
    from pagedbench.engines.serving.asgi_server import EngineService, build_app, serve as run_server   # after the checks
    from pagedbench.engines.serving.engine_process import EngineFailed, EngineProcess

    if cfg.backend.name != "real":
        refuse(f"serve.py serves the real backend only (backend=real), got backend={cfg.backend.name}", 2)
    try:
        settings = ServeConfig.from_dict(plain(cfg.serve))
        rc = RunConfig.parse(cfg)
        if settings.engine_process:
            service = EngineProcess(partial(served_backend, rc, cfg.gpu_memory_utilization), rc.model.name,
                                    rc.engine.label, settings.tokenizer, max_seq_len=rc.limits.max_seq_len,
                                    served_model_names=settings.model_names)
        else:
            backend = served_backend(rc, cfg.gpu_memory_utilization)
            service = EngineService(backend, rc.model.name, rc.engine.label, settings.tokenizer,
                                    max_seq_len=rc.limits.max_seq_len, served_model_names=settings.model_names)
            service.described = [backend.describe(), backend.scheduler.kv.describe()]
    except ValueError as err:          # a bad value in the config: one line, no stack trace
        refuse(str(err), 2)
    app = build_app(service, api_key=settings.api_key)

    def bound(url: str) -> None:
        backend_line, kv_line = service.described
        log.info("%s", backend_line)
        log.info("engine %s: %s", rc.engine.label, kv_line)
        print(f"serving {rc.engine.label} on {url}", flush=True)
    try:                               # the engine started (built and warmed up in its process), the server next
        run_server(app, service, settings.host, settings.port, on_bound=bound)
    except OSError as err:
        service.stop()
        refuse(f"cannot listen on {settings.host}:{settings.port}: {err}", 1)
    except ValueError as err:          # a bad value the engine's builder found
        service.stop()
        refuse(str(err), 2)
    except EngineFailed as err:
        service.stop()
        refuse(str(err), 1)
    service.stop()
    if service.engine_error:
        refuse(f"the engine stopped: {service.engine_error}", 1)
    log.info("server stopped")


def entry(argv: list[str] | None = None) -> int:
    """The serve command: `python serve.py ARGS` (`argv`, default sys.argv[1:]); its exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    problem = bad_group_choice(argv)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    saved = sys.argv
    sys.argv = [saved[0] if saved else "serve.py", *argv]
    try:
        main()
    finally:
        sys.argv = saved
    return 0


if __name__ == "__main__":
    sys.exit(entry())
