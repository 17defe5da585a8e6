"""The switch's modules as importlib sees them: ``webdataset``, ``webdataset.<module>``, ``wids``... each a module of
its own with a ``ModuleSpec``, as an installed package's are.

Code checks whether a package is there before it imports it (``importlib.util.find_spec("webdataset")``, an
``is_module_available(name)`` helper), walks a package's modules (``pkgutil.iter_modules``), reloads one
(``importlib.reload``) or asks where it lives (``inspect.getfile``).  A module made with ``types.ModuleType`` has
no ``__spec__``, and ``find_spec`` raises ``ValueError`` for it.  So each module the switch provides is made by
:func:`stand_in`: its own name, the names of the module it stands for (wds's drop-in module, or an adapter's copy of
it), a spec whose loader (:data:`LOADER`) puts those names back on ``reload``, whose origin (and ``__file__``) is the
source file of wds's module, and, for a package, a path entry (``<wds stand-in>:webdataset``) that a path hook
(:func:`path_hook`, on ``sys.path_hooks`` while the switch is installed) lists the package's submodules under.
The finder of the switch (``wds_core.dropin._RefuseUnknownSubmodules``) answers with these specs for the modules
it installed, so that a reload finds them (not the real webdataset on ``sys.path``).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Iterator
from typing import Any

__all__ = ["LOADER", "PATH_PREFIX", "StandInLoader", "is_stand_in", "path_hook", "stand_in", "stand_in_spec"]

PATH_PREFIX = "<wds stand-in>:"  # a stand-in package's path entry: PATH_PREFIX + its name
_OWN = ("__name__", "__doc__", "__spec__", "__loader__", "__file__", "__package__", "__path__", "__cached__",
        "__builtins__")  # fmt: skip


class StandInLoader(importlib.abc.Loader):
    """The loader of the switch's modules: executing one (``importlib.reload``) puts the names it was made with
    back."""

    def __init__(self) -> None:
        self.names: dict[str, dict[str, Any]] = {}

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None  # the default module; stand-ins are made by stand_in(), not imported

    def exec_module(self, module: types.ModuleType) -> None:
        module.__dict__.update(self.names.get(module.__name__, {}))


LOADER = StandInLoader()


def stand_in(
    name: str, names: dict[str, Any], origin: str | None, package: bool = False, kind: type = types.ModuleType,
    doc: str | None = None,
) -> types.ModuleType:  # fmt: skip
    """A module called ``name`` holding ``names`` (a module's own dunders left out), with its spec: ``origin`` the
    source file it comes from, ``package`` whether it has submodules, ``kind`` the module's class (a drop-in
    module with live attributes has its own)."""
    module = kind(name, doc)
    own = {key: value for key, value in names.items() if key not in _OWN}
    module.__dict__.update(own)
    spec = importlib.machinery.ModuleSpec(name, LOADER, origin=origin, is_package=package)
    spec.has_location = origin is not None
    if package:
        spec.submodule_search_locations = [PATH_PREFIX + name]
        module.__path__ = spec.submodule_search_locations
    module.__spec__, module.__loader__ = spec, LOADER
    module.__package__ = name if package else name.rpartition(".")[0]
    if origin is not None:
        module.__file__ = origin
    LOADER.names[name] = own
    return module


def is_stand_in(module: Any) -> bool:
    """Whether ``module`` is one the switch made."""
    return getattr(getattr(module, "__spec__", None), "loader", None) is LOADER


def stand_in_spec(fullname: str) -> importlib.machinery.ModuleSpec | None:
    """The spec of the installed stand-in ``fullname`` (``None`` for any other name)."""
    module = sys.modules.get(fullname)
    return module.__spec__ if is_stand_in(module) else None  # type: ignore[union-attr]


class _Listing(importlib.abc.PathEntryFinder):
    """The path entry of a stand-in package: it finds and lists the package's installed submodules."""

    def __init__(self, package: str) -> None:
        self.package = package

    def find_spec(self, fullname: str, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        return stand_in_spec(fullname)

    def iter_modules(self, prefix: str = "") -> Iterator[tuple[str, bool]]:
        """``(name, is a package)`` of each submodule, as ``pkgutil.iter_modules`` asks a path entry."""
        start = self.package + "."
        for fullname in sorted(sys.modules):
            short = fullname[len(start) :]
            if fullname.startswith(start) and "." not in short and is_stand_in(sys.modules[fullname]):
                yield prefix + short, hasattr(sys.modules[fullname], "__path__")


def path_hook(entry: str) -> _Listing:
    """The path hook of stand-in packages' path entries (put on ``sys.path_hooks`` by the switch when it installs,
    taken off when it is undone: importing wds changes no import machinery)."""
    if not isinstance(entry, str) or not entry.startswith(PATH_PREFIX):
        raise ImportError("not a stand-in package's path entry")
    return _Listing(entry[len(PATH_PREFIX) :])
