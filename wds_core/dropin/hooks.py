"""The names webdataset's functions look up when they run, so that replacing one changes what they do.

webdataset 1.0.2's ``tarfile_samples`` calls ``url_opener``, ``tar_file_expander`` and ``group_by_keys`` by their
module-level names, its ``WebDataset`` reads ``compat.tar_file_expander``, ``compat.group_by_keys`` and
``cache.StreamingOpen`` when it is built, its openers call ``gopen.gopen``...  Code that adds its own storage or
grouping assigns one (``webdataset.tariterators.url_opener = mine``) and expects every later read to go through it.

:data:`HOOKS` lists them, per module.  The switch gives each such module (``webdataset.tariterators``, the
adapters' copies) a class whose assignments of these names reach wds's drop-in module of the same name
(:func:`write_through`), where wds's functions look them up: :func:`replacement` says whether code replaced one,
and wds's fast path gives way to webdataset's composition only then.  Names webdataset looks up that are not
listed here are internal helpers (``tenbin.roundup``...) or classes wds builds its own way, and the guide says so.
"""

from __future__ import annotations

import types
import weakref
from typing import Any

__all__ = ["HOOKS", "register", "replaced_any", "replacement", "track", "write_through"]

HOOKS: dict[str, tuple[str, ...]] = {
    "tariterators": ("url_opener", "tar_file_expander", "tar_file_iterator", "group_by_keys", "valid_sample"),
    "compat": ("tar_file_expander", "group_by_keys"),
    "cache": ("StreamingOpen",),
    "gopen": ("gopen", "rewrite_url"),
    "writer": ("gopen",),
    "utils": ("pytorch_worker_info",),
    "autodecode": ("default_pre_handlers", "default_post_handlers"),
}

_homes: dict[str, types.ModuleType] = {}  # module name -> wds's drop-in module, where wds's functions look
_originals: dict[tuple[str, str], tuple[Any, Any]] = {}  # (module, name) -> (object, a copy of a list's items)
_copies: dict[str, weakref.WeakSet[types.ModuleType]] = {}
_kinds: dict[type, type] = {}


def register(modules: dict[str, types.ModuleType]) -> None:
    """Record the drop-in's modules and the objects their hook names hold as shipped."""
    for short, names in HOOKS.items():
        module = modules[short]
        _homes[short] = module
        for name in names:
            value = module.__dict__[name]
            _originals[(short, name)] = (value, list(value) if isinstance(value, list) else None)


def replacement(module: str, name: str) -> Any:
    """What code put in place of ``module.name`` (a handler list changed in place counts), or ``None``."""
    if module not in _homes:
        return None  # the drop-in is being imported: nothing was replaced yet
    value = _homes[module].__dict__.get(name)
    original, items = _originals[(module, name)]
    if value is original and (items is None or value == items):
        return None
    return value


def replaced_any(pairs: tuple[tuple[str, str], ...]) -> bool:
    """Whether any of ``(module, name)`` was replaced."""
    return any(replacement(module, name) is not None for module, name in pairs)


def _short(module: types.ModuleType) -> str:
    return module.__name__.rpartition(".")[2]


def write_through(kind: type) -> type:
    """A subclass of the module class ``kind`` whose assignments of hook names also reach wds's module and its
    other copies (``mock.patch`` and ``monkeypatch`` assign too, and assign the original back)."""
    if issubclass(kind, _HookedBase):
        return kind
    if kind not in _kinds:
        _kinds[kind] = type(f"Hooked{kind.__name__}", (_HookedBase, kind), {})
    return _kinds[kind]


class _HookedBase(types.ModuleType):
    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)  # the module class write_through() extended (a property's setter...)
        short = _short(self)
        if name in HOOKS.get(short, ()):
            for module in (_homes[short], *_copies.get(short, ())):
                module.__dict__[name] = value


def track(module: types.ModuleType) -> types.ModuleType:
    """Let ``module`` (a copy of a drop-in module) see the assignments made through its other copies."""
    if _short(module) in HOOKS:
        _copies.setdefault(_short(module), weakref.WeakSet()).add(module)
    return module
