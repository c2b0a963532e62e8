"""The engine registry is the one table of engine variants: every `engine=` option is one of its variants, labels
and colours derive from it, and the scheduler each variant runs is the builder it names."""
import pytest
from omegaconf import OmegaConf

from pagedbench.engines import registry
from pagedbench.engines.build import build_scheduler
from pagedbench.engines.config import SchedulerLimits
from pagedbench.engines.kv.contiguous import ContiguousKV
from pagedbench.engines.kv.paged import PagedKV
from pagedbench.engines.scheduling.iteration import IterationScheduler
from pagedbench.engines.scheduling.static import StaticScheduler
from pagedbench.paths import CONF

ENGINE_GROUP = CONF / "engine"
OPTIONS = sorted(p.stem for p in ENGINE_GROUP.glob("*.yaml"))


def composed(option: str) -> dict:
    """The `engine` group's option as Hydra composes it: its defaults (options of the same group) first, then
    its own keys (`_self_`, where the defaults list puts it; last when it does not name it)."""
    node = OmegaConf.load(ENGINE_GROUP / f"{option}.yaml")
    defaults = list(node.pop("defaults", []))
    if "_self_" not in defaults:
        defaults.append("_self_")
    parts = [node if d == "_self_" else OmegaConf.create(composed(d)) for d in defaults]
    return OmegaConf.to_container(OmegaConf.merge(*parts), resolve=True)


def test_the_engine_group_has_options():
    assert len(OPTIONS) >= len(registry.ENGINES)


@pytest.mark.parametrize("option", OPTIONS)
def test_every_engine_option_is_a_registry_variant(option):
    config = registry.engine_config(composed(option))
    assert config.variant in registry.NAMES
    entry = registry.entry(config.variant)
    assert type(config) is entry.config_class
    assert config.name == entry.kind
    assert registry.entry_of(config) is entry
    assert config.label == entry.label
    if option in registry.NAMES:   # an option named like a variant selects that variant
        assert config.variant == option


def test_every_variant_has_its_option():
    assert set(registry.NAMES) <= set(OPTIONS)
    assert {registry.engine_config(composed(o)).variant for o in OPTIONS} == set(registry.NAMES)


def test_labels_are_the_names_with_hyphens():
    assert registry.LABELS == tuple(n.replace("_", "-") for n in registry.NAMES)
    assert registry.LABELS == ("static", "orca-max", "orca-pow2", "orca-oracle", "paged")
    for e in registry.ENGINES:
        assert registry.label(e.name) == e.label
        assert registry.entry_of_label(e.label) is e
    with pytest.raises(ValueError, match="unknown engine"):
        registry.entry("orca-max")
    with pytest.raises(ValueError, match="no engine is labelled"):
        registry.entry_of_label("orca_max")


def test_colours_are_distinct_and_a_peer_has_its_own():
    colours = [registry.color(label) for label in registry.LABELS]
    assert len(set(colours)) == len(colours)
    assert registry.OTHER_COLOR not in colours
    assert registry.color("transformers-cb") == registry.OTHER_COLOR


def test_rank_is_the_table_order_and_anything_else_comes_last():
    assert [registry.rank(label) for label in registry.LABELS] == list(range(len(registry.ENGINES)))
    assert registry.rank("transformers-cb") == len(registry.ENGINES)
    assert [e.order for e in registry.ENGINES] == list(range(len(registry.ENGINES)))


def test_baselines_are_the_contiguous_variants_closest_to_paged_first():
    assert [e.name for e in registry.baselines()] == ["orca_oracle", "orca_pow2", "orca_max", "static"]
    assert [e.name for e in registry.baselines(("orca_max", "orca_oracle"))] == ["orca_oracle", "orca_max"]
    assert "paged" not in [e.name for e in registry.baselines(registry.NAMES)]


@pytest.mark.parametrize("option", OPTIONS)
def test_build_scheduler_uses_the_entrys_builder(option, monkeypatch):
    config = registry.engine_config(composed(option))
    entry = registry.entry(config.variant)
    called = []

    def spy(*args):
        called.append(args)
        return entry.build(*args)

    monkeypatch.setattr(registry, "ENGINES", tuple(
        registry.EngineEntry(e.name, e.kind, e.reservation, e.color, e.config_class, spy) if e is entry else e
        for e in registry.ENGINES))
    limits = SchedulerLimits()
    build_scheduler(config, limits, 4096, 8)
    assert called == [(config, limits, 4096, 8)]


@pytest.mark.parametrize("name, scheduler, kv, reservation", [
    ("static", StaticScheduler, ContiguousKV, "max"),
    ("orca_max", IterationScheduler, ContiguousKV, "max"),
    ("orca_pow2", IterationScheduler, ContiguousKV, "pow2"),
    ("orca_oracle", IterationScheduler, ContiguousKV, "oracle"),
    ("paged", IterationScheduler, PagedKV, None),
])
def test_each_variant_builds_its_scheduler_over_its_kv(name, scheduler, kv, reservation):
    built = build_scheduler(registry.engine_config(composed(name)), SchedulerLimits(), 4096)
    assert type(built) is scheduler and type(built.kv) is kv
    assert registry.entry(name).reservation == reservation
    if reservation is not None:
        assert built.kv.reservation.value == reservation
