"""The engines, each named once: its config name, label, colour, config class, scheduler builder and place.

    ENGINES                 every engine variant, in the baseline order: weakest first, paged last
    entry("orca_max")       one variant by its name (the `engine=` option that selects it, conf/engine/)
    entry_of_label(label)   one variant by its label (what records, tables and plots name it)
    label("orca_max")       a variant's label; color(label) its plot colour; rank(label) its place in ENGINES
    engine_config(d)        a typed config of an `engine` group (the class its `name` kind says)
    baselines()             the contiguous baselines, closest to paged first: the order of ratio columns

A variant's name is its one spelling in code (`orca_max`); its label is derived from it (`orca-max`, the
`engine` column of every record). The config's `name` is the variant's kind (static, orca, paged), its
`reservation` (orca) picks the variant: `engine=orca engine.reservation=pow2` is the variant orca_pow2.
Everything that names an engine reads this table: the scheduler builder (engines/build.py), the report and its
plots (results/report), the studies.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pagedbench.engines.config import (ContiguousEngineConfig, EngineConfig, PagedEngineConfig, SchedulerLimits,
                                       label_of)
from pagedbench.engines.kv.contiguous import ContiguousKV
from pagedbench.engines.kv.paged import PagedKV
from pagedbench.engines.kv.reservation import Reservation
from pagedbench.engines.protocols import Scheduler
from pagedbench.engines.scheduling.iteration import IterationScheduler
from pagedbench.engines.scheduling.static import StaticScheduler
from pagedbench.engines.specs.mapping import build_from_mapping


def _contiguous_kv(engine: ContiguousEngineConfig, limits: SchedulerLimits, capacity_slots: int) -> ContiguousKV:
    return ContiguousKV(capacity_slots, Reservation(engine.reservation), limits.max_seq_len, engine.allocator)


def build_static(engine: ContiguousEngineConfig, limits: SchedulerLimits, capacity_slots: int,
                 bytes_per_slot: int) -> Scheduler:
    """Request-level batching over a contiguous arena (FasterTransformer)."""
    return StaticScheduler(_contiguous_kv(engine, limits, capacity_slots), limits)


def build_orca(engine: ContiguousEngineConfig, limits: SchedulerLimits, capacity_slots: int,
               bytes_per_slot: int) -> Scheduler:
    """Iteration-level batching over a contiguous arena (Orca), reserving by `engine.reservation`."""
    return IterationScheduler(_contiguous_kv(engine, limits, capacity_slots), limits)


def build_paged(engine: PagedEngineConfig, limits: SchedulerLimits, capacity_slots: int,
                bytes_per_slot: int) -> Scheduler:
    """Iteration-level batching over a block pool (vLLM), preempting by `engine.preemption`."""
    if capacity_slots < engine.block_size:
        raise ValueError(f"the KV budget of {capacity_slots} slots holds no block of {engine.block_size}")
    kv = PagedKV(capacity_slots, engine.block_size, engine.watermark, engine.cpu_blocks(bytes_per_slot))
    return IterationScheduler(kv, limits, engine.preemption)


@dataclass(frozen=True, slots=True)
class EngineEntry:
    """One engine variant."""

    name: str                 # the `engine=` option (conf/engine/NAME.yaml) and its one spelling in code
    kind: str                 # the config's engine.name: static | orca | paged
    reservation: str | None   # a contiguous variant's reservation policy (None: paged)
    color: str                # its colour in every plot
    config_class: type
    build: Callable[..., Scheduler]   # (engine config, limits, capacity_slots, bytes_per_slot) -> scheduler

    @property
    def label(self) -> str:
        return label_of(self.name)

    @property
    def order(self) -> int:
        """Its place in the baseline order (ENGINES)."""
        return ENGINES.index(self)


ENGINES: tuple[EngineEntry, ...] = (
    EngineEntry("static", "static", "max", "#7f7f7f", ContiguousEngineConfig, build_static),
    EngineEntry("orca_max", "orca", "max", "#d62728", ContiguousEngineConfig, build_orca),
    EngineEntry("orca_pow2", "orca", "pow2", "#ff7f0e", ContiguousEngineConfig, build_orca),
    EngineEntry("orca_oracle", "orca", "oracle", "#9467bd", ContiguousEngineConfig, build_orca),
    EngineEntry("paged", "paged", None, "#1f77b4", PagedEngineConfig, build_paged),
)
NAMES = tuple(e.name for e in ENGINES)
LABELS = tuple(e.label for e in ENGINES)
KINDS = tuple(dict.fromkeys(e.kind for e in ENGINES))
OTHER_COLOR = "#17becf"   # a label no engine has (a peer's)


def entry(name: str) -> EngineEntry:
    for e in ENGINES:
        if e.name == name:
            return e
    raise ValueError(f"unknown engine {name!r}; valid: {list(NAMES)}")


def entry_of_label(label: str) -> EngineEntry:
    for e in ENGINES:
        if e.label == label:
            return e
    raise ValueError(f"no engine is labelled {label!r}; the labels: {list(LABELS)}")


def entry_of(engine: EngineConfig) -> EngineEntry:
    """The variant a typed engine config runs."""
    return entry(engine.variant)


def label(name: str) -> str:
    """The label of the engine named `name` (which must be in the table)."""
    return entry(name).label


def color(label_or_peer: str) -> str:
    """The plot colour of an engine's label; one shared colour for anything else (a peer)."""
    return next((e.color for e in ENGINES if e.label == label_or_peer), OTHER_COLOR)


def rank(label_or_peer: str) -> int:
    """The place of an engine's label in the baseline order (ENGINES); anything else (a peer) after them all."""
    return next((i for i, e in enumerate(ENGINES) if e.label == label_or_peer), len(ENGINES))


def baselines(names: tuple[str, ...] | None = None) -> tuple[EngineEntry, ...]:
    """The contiguous baselines, closest to paged first (orca_oracle ... static); only `names` if given."""
    found = tuple(e for e in reversed(ENGINES) if e.kind != "paged")
    return found if names is None else tuple(e for e in found if e.name in names)


def engine_config(d: dict, swap_space: float | None = None) -> EngineConfig:
    """The typed config of an `engine` group (its `name` says which kind), with the run's host `swap_space`
    (GiB) for the paged engine; an unknown key names the kind's valid ones."""
    kind = d.get("name")
    if kind not in KINDS:
        raise ValueError(f"unknown engine {kind!r}; valid: {list(KINDS)}")
    cls = next(e.config_class for e in ENGINES if e.kind == kind)
    if cls is PagedEngineConfig:
        return build_from_mapping(cls, d if swap_space is None else {**d, "swap_space": swap_space}, "engine")
    # `block_size` is in every engine option so that one sweep can cross engines and block sizes; a
    # contiguous engine has no blocks (its `block_size` is None).
    return build_from_mapping(cls, {k: v for k, v in d.items() if k != "block_size"}, f"engine (name={kind})")
