"""Load a model or hardware preset (conf/model/NAME.yaml, conf/hardware/NAME.yaml) outside Hydra."""
from __future__ import annotations

from omegaconf import OmegaConf

from pagedbench.engines.specs.hardware import HardwareSpec
from pagedbench.engines.specs.model import ModelSpec
from pagedbench.paths import CONF


def available(group: str) -> list[str]:
    """Preset names of a config group ("model" or "hardware")."""
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def _load(group: str, name: str) -> dict:
    names = available(group)
    if name not in names:
        raise ValueError(f"unknown {group} preset {name!r}; available: {names}")
    return OmegaConf.to_container(OmegaConf.load(CONF / group / f"{name}.yaml"), resolve=True)


def load_model(name: str) -> ModelSpec:
    return ModelSpec.from_dict(_load("model", name))


def load_hardware(name: str) -> HardwareSpec:
    return HardwareSpec.from_dict(_load("hardware", name))
