"""Building a config dataclass from a plain mapping (a YAML preset or a Hydra group)."""
from __future__ import annotations

from dataclasses import MISSING, fields


def build_from_mapping(cls, d, what: str):
    """Build dataclass `cls` from a plain mapping (a YAML preset).

    An unknown key names the valid ones; a missing required key is named too.
    """
    d = dict(d)
    valid = [f.name for f in fields(cls)]
    unknown = sorted(set(d) - set(valid))
    if unknown:
        raise ValueError(f"unknown {what} key(s) {unknown}; valid keys: {valid}")
    missing = [f.name for f in fields(cls)
               if f.default is MISSING and f.default_factory is MISSING and f.init and f.name not in d]
    if missing:
        raise ValueError(f"{what} is missing required key(s) {missing}")
    return cls(**d)
