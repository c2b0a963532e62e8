"""A peer's run on a trace: its typed config, and what it measured as a `RunRecord` of sequences.

    backend=transformers   transformers' continuous batching (paged KV cache), in process
    backend=http           any OpenAI-compatible endpoint (backend.url), measured by the client

A peer has no iteration rows (its iterations cannot be read), so the record's
memory and batch figures are absent from its summary (NaN / null); what it
has is every request's arrival, send, token times and errors, the figures a
serving benchmark reads (TTFT, TPOT, ITL, end-to-end latency, throughput).
"""
from __future__ import annotations

from collections.abc import Callable

from pagedbench.engines.run_record import IterationRow, RunRecord, ServedRun
from pagedbench.engines.peers.timeline import Measured, to_sequence
from pagedbench.engines.specs.model import ModelSpec
from pagedbench.workloads.request import Request

PEER_BACKENDS = ("transformers", "http")


class PeerUnavailable(Exception):
    """The peer cannot serve at all (an endpoint that cannot be reached): one line, no result."""


def peer_config(d: dict):
    """The typed config of `backend=<peer>` (raises ValueError on a bad value, one line)."""
    if d.get("name") == "transformers":
        from pagedbench.engines.peers.transformers_cb import TransformersBackendConfig

        return TransformersBackendConfig.from_dict(d)
    from pagedbench.engines.peers.http_client import HttpBackendConfig

    return HttpBackendConfig.from_dict(d)


def check_width(requests: list[Request], peer: str) -> None:
    wide = next((r for r in requests if r.width > 1), None)
    if wide is not None:
        raise ValueError(f"backend={peer} serves one sequence per request; request {wide.id} asks for "
                         f"{wide.width} (n / beam search): use sampling=none")


def as_record(measured: list[Measured], wall_s: float) -> tuple[RunRecord, list[str]]:
    seqs = [to_sequence(m) for m in measured]
    record = RunRecord(capacity_slots=0, sequences=seqs, end_s=max(
        (s.token_times_s[-1] for s in seqs if s.token_times_s), default=0.0), wall_s=wall_s)
    return record, [f"request {s.id}: {s.rejected_reason}" for s in seqs if s.status.value == "failed"]


def replay_peer(requests: list[Request], cfg, model: ModelSpec, progress: bool | None) -> ServedRun:
    """Replay `requests` on the peer of `cfg` at their arrival times and record what it measured."""
    check_width(requests, cfg.name)
    if cfg.name == "transformers":
        from pagedbench.engines.peers.transformers_cb import replay_transformers

        measured, wall_s, info = replay_transformers(requests, model, cfg, progress=progress)
        record, failures = as_record(measured, wall_s)
        label = f"transformers-cb ({cfg.attention})"
        fields = {"device": info.get("device"), "dtype": info.get("dtype"), "peer": info}
        return ServedRun(record, label, f"{model.name} on {info.get('device')}", fields, {}, failures, peer=True)
    from pagedbench.engines.peers.http_client import replay_http, server_info

    from pagedbench.engines.peers.http_client import EndpointUnreachable

    try:
        info = server_info(cfg)
    except EndpointUnreachable as err:
        raise PeerUnavailable(str(err)) from None
    measured, wall_s = replay_http(requests, cfg, progress=progress, model=info["model"])   # probed once
    record, failures = as_record(measured, wall_s)
    served = info["model"]              # cfg.model, else the first the server lists (server_info)
    fields = {"url": cfg.url, "endpoint": cfg.endpoint, "served_model": served, "server": info}
    return ServedRun(record, f"http ({served})", cfg.url, fields, {}, failures, peer=True)


class PeerRunner:
    """A peer as a `Runner`: it replays the trace at its arrival times; no iteration is seen while it runs."""

    live = False
    capacity = 0

    def __init__(self, cfg, model: ModelSpec):
        self.cfg = cfg
        self.model = model

    def describe(self) -> str:
        return f"peer backend={self.cfg.name}"

    def serve(self, requests: list[Request], progress: bool | None, stop_at_last_arrival: bool,
              on_iteration: Callable[[IterationRow], None] | None) -> ServedRun:
        return replay_peer(requests, self.cfg, self.model, progress)
