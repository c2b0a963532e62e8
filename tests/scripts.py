"""A script of scripts/ loaded as a module, for the tests of its functions."""
import importlib.util
import sys
from types import ModuleType

from pagedbench.paths import ROOT


def load_script(name: str) -> ModuleType:
    """scripts/NAME.py as the module NAME, registered in sys.modules (dataclasses look their module up by name,
    and a script that imports a sibling finds it there)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
