"""A peer's run on a trace: its typed config, and what it measured as a `RunRecord` of sequences.

    backend=transformers   transformers' continuous batching (paged KV cache), in process
    backend=http           any OpenAI-compatible endpoint (backend.url), measured by the client

A peer has no iteration rows (its iterations cannot be read), so the record's
memory and batch figures are absent from its summary (NaN / null); what it
has is every request's arrival, send, token times and errors, the figures a
serving benchmark reads (TTFT, TPOT, ITL, end-to-end latency, throughput).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from engines.loop import RunRecord
from engines.peers.timeline import Measured, to_sequence
from engines.specs.model import ModelSpec
from workloads.request import Request

PEER_BACKENDS = ("transformers", "http")


@dataclass(slots=True)
class PeerRun:
    """What a peer's replay gave: the record our tables read, and the summary's keys for the peer."""

    record: RunRecord
    label: str                                   # the summary's `engine`
    fields: dict                                 # the summary's backend keys, known before the replay
    after_run: dict = field(default_factory=dict)   # known once it has ended
    failures: list[str] = field(default_factory=list)   # each failed request's reason, in id order


class PeerUnavailable(Exception):
    """The peer cannot serve at all (an endpoint that cannot be reached): one line, no result."""


def peer_config(d: dict):
    """The typed config of `backend=<peer>` (raises ValueError on a bad value, one line)."""
    if d.get("name") == "transformers":
        from engines.peers.transformers_cb import TransformersBackendConfig

        return TransformersBackendConfig.from_dict(d)
    from engines.peers.http_client import HttpBackendConfig

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


def replay_peer(requests: list[Request], cfg, model: ModelSpec, progress: bool | None) -> PeerRun:
    """Replay `requests` on the peer of `cfg` at their arrival times and record what it measured."""
    check_width(requests, cfg.name)
    if cfg.name == "transformers":
        from engines.peers.transformers_cb import replay_transformers

        measured, wall_s, info = replay_transformers(requests, model, cfg, progress=progress)
        record, failures = as_record(measured, wall_s)
        label = f"transformers-cb ({cfg.attention})"
        fields = {"device": info.get("device"), "dtype": info.get("dtype"), "peer": info}
        return PeerRun(record, label, fields, {}, failures)
    from engines.peers.http_client import replay_http, server_info

    from engines.peers.http_client import EndpointUnreachable

    try:
        info = server_info(cfg)
    except EndpointUnreachable as err:
        raise PeerUnavailable(str(err)) from None
    measured, wall_s = replay_http(requests, cfg, progress=progress, model=info["model"])   # probed once
    record, failures = as_record(measured, wall_s)
    served = info["model"]              # cfg.model, else the first the server lists (server_info)
    fields = {"url": cfg.url, "endpoint": cfg.endpoint, "served_model": served, "server": info}
    return PeerRun(record, f"http ({served})", fields, {}, failures)
