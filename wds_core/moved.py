"""Old module paths of wds_core, kept importable after the ``io/`` and ``tar/`` grouping.

``import wds_core.storage`` (and ``wds_core.tario``, ``wds_core.samples``...)
gives the module's new home with a :class:`DeprecationWarning` naming it.  A
module that was split (``samples`` became :mod:`wds_core.grouping` and
:mod:`wds_core.shardreader`) is offered as one module holding the public
names of both.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
import warnings
from typing import Any

__all__ = ["MOVED", "core_attribute", "install", "old_module"]

_IO = ("cache", "decompress", "remote", "sinks", "storage", "storage_config", "streams", "urls")
_TAR = ("tario", "tarindex", "tarwrite")

# old path -> where its names live now
MOVED: dict[str, tuple[str, ...]] = {
    **{f"wds_core.{name}": (f"wds_core.io.{name}",) for name in _IO},
    **{f"wds_core.{name}": (f"wds_core.tar.{name}",) for name in _TAR},
    "wds_core.samples": ("wds_core.shardreader", "wds_core.grouping"),
    "wds_core.samplers": ("wds_core.index_samplers",),
    "wds_core.stages": ("wds_core.per_sample",),
    "wds_core.cli.inspect": ("wds_core.cli.inspect_shards",),
}


def old_module(old: str) -> types.ModuleType:
    """The module (or, for a split one, a module of the parts' public names) behind the old path ``old``."""
    homes = MOVED[old]
    warnings.warn(f"{old} is now {' and '.join(homes)}; import it from there", DeprecationWarning, stacklevel=3)
    modules = [importlib.import_module(home) for home in homes]
    if len(modules) == 1:
        return modules[0]
    merged = types.ModuleType(old, f"The names of {' and '.join(homes)} (the old {old}).")
    names: list[str] = []
    for module in reversed(modules):
        public = getattr(module, "__all__", [n for n in vars(module) if not n.startswith("_")])
        merged.__dict__.update({name: getattr(module, name) for name in public})
        names.extend(public)
    merged.__all__ = sorted(set(names))  # type: ignore[attr-defined]
    return merged


class _OldPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the old paths; the import system then stores the module under the old name too."""

    def __init__(self) -> None:
        self.specs: dict[str, Any] = {}  # the real module's own spec, which importing sets over

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = old_module(spec.name)
        self.specs[spec.name] = getattr(module, "__spec__", None)
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        # already the module it names; give it back its own spec
        own = self.specs.pop(module.__spec__.name, None) if module.__spec__ is not None else None
        if own is not None:
            module.__spec__ = own


def install() -> None:
    """Let the old paths be imported (done when ``wds_core`` is imported)."""
    if not any(isinstance(finder, _OldPaths) for finder in sys.meta_path):
        sys.meta_path.append(_OldPaths())


def core_attribute(module: str, name: str) -> Any:
    """For an adapter's ``__getattr__``: a ``wds_core`` name outside ``__all__`` (``open_shard``...), or AttributeError.

    The adapters re-export ``wds_core.__all__``; this keeps ``wds_torch.open_shard``
    and the other names that moved to :mod:`wds_core.io` / :mod:`wds_core.tar`
    working there as well.
    """
    core = sys.modules["wds_core"]
    value = core.__dict__.get(name) if not name.startswith("_") else None
    if value is None or isinstance(value, types.ModuleType):
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    return value
