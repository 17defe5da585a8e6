"""How the drop-in says no: names of webdataset that wds does not provide, with what to use instead.

A refused class or function can still be imported (scripts often import more
than they use); calling it raises ``NotImplementedError`` with the reason.
Other missing attributes raise ``AttributeError`` naming the webdataset module
and, where known, why.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

__all__ = ["refuse_missing", "refused_class", "refused_function"]

_GUIDE = "see wds's docs/guides/moving-from-webdataset.md"


def _public(module: str) -> str:
    return "webdataset" + module.split(".dropin", 1)[1] if ".dropin" in module else module


def _message(name: str, reason: str) -> str:
    return f"webdataset's {name} is not provided by wds: {reason} ({_GUIDE})"


def refused_function(name: str, reason: str) -> Callable[..., NoReturn]:
    """A function that raises ``NotImplementedError`` saying why ``name`` is not provided."""

    def refused(*args: Any, **kw: Any) -> NoReturn:
        raise NotImplementedError(_message(name, reason))

    refused.__name__ = refused.__qualname__ = name.rsplit(".", 1)[-1]
    refused.__doc__ = f"Not provided by wds: {reason}."
    return refused


def refused_class(name: str, reason: str) -> type:
    """A class whose construction raises ``NotImplementedError`` saying why ``name`` is not provided."""

    def __init__(self: Any, *args: Any, **kw: Any) -> NoReturn:
        raise NotImplementedError(_message(name, reason))

    short = name.rsplit(".", 1)[-1]
    return type(short, (), {"__init__": __init__, "__doc__": f"Not provided by wds: {reason}."})


def refuse_missing(module: str, reasons: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__``: missing names are an ``AttributeError`` that says why, when it is known."""

    def __getattr__(name: str) -> Any:
        public = _public(module)
        if name in reasons:
            raise AttributeError(_message(f"{public}.{name}", reasons[name]))
        raise AttributeError(f"module {public!r} (wds's drop-in) has no attribute {name!r} ({_GUIDE})")

    return __getattr__
