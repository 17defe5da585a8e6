"""Every compiled helper of wds_core, behind one loader (setup.py builds each when it can and leaves it out
otherwise; each has a Python twin with the same results, which the tests compare):

* ``tarscan`` -- the common case of the tar walk, plain regular members (:mod:`wds_core.tar.compiled`);
* ``groupfast`` -- the common case of grouping members into samples (:mod:`wds_core.tar.grouping`);
* ``mapcopy`` -- bytes copied out of a map of a local shard for indexed access (:mod:`wds_core.io.localfiles`);
* ``sigbus_guard`` -- the process's one guard of those copies against a file cut under its map, which the two
  above reach through ``sigbus_guard.h``;
* ``jpegregion`` -- decoding a region of a JPEG with libjpeg-turbo (:mod:`wds_core.fieldcodecs.jpeg`).

``WDS_PURE_PYTHON=1`` leaves all of them unused; ``WDS_TARSCAN=python``, ``WDS_GROUPFAST=python`` and
``WDS_MAPCOPY=pread`` turn off one each, for debugging and measuring (:func:`load` reads them all).  Whether JPEG
regions are decoded also follows the JPEG decoder chosen (``WDS_JPEG``, ``set_jpeg_decoder``:
:func:`wds_core.fieldcodecs.jpeg.region_decoding`).  :func:`native_status` says which are built and which are
loaded.  This package lies below every other: it imports nothing of wds_core.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import Any

__all__ = ["HELPERS", "load", "native_status", "pure_python"]

HELPERS = ("tarscan", "groupfast", "mapcopy", "sigbus_guard", "jpegregion")
_SWITCHES = {  # helper: (variable, the value that turns it off)
    "tarscan": ("WDS_TARSCAN", "python"),
    "groupfast": ("WDS_GROUPFAST", "python"),
    "mapcopy": ("WDS_MAPCOPY", "pread"),
}


def pure_python() -> bool:
    """Whether ``WDS_PURE_PYTHON=1`` leaves every compiled helper unused."""
    return os.environ.get("WDS_PURE_PYTHON", "").strip().lower() in ("1", "true", "yes")


def _import(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(f"{__name__}.{name}")
    except ImportError:
        return None


def _turned_off(name: str) -> bool:
    switch = _SWITCHES.get(name)
    return pure_python() or (switch is not None and os.environ.get(switch[0], "").lower() == switch[1])


def load(name: str) -> ModuleType | None:
    """The compiled helper ``name`` (one of :data:`HELPERS`), or ``None`` when it was not built or is turned off
    (``WDS_PURE_PYTHON=1``, or its own switch)."""
    if name not in HELPERS:
        raise ValueError(f"no compiled helper {name!r}; they are {', '.join(HELPERS)}")
    return None if _turned_off(name) else _import(name)


def native_status() -> dict[str, dict[str, Any]]:
    """``{helper: {"built": bool, "used": bool}}``: whether each was built by the install, and whether :func:`load`
    gives it in this process (built, and turned off neither by ``WDS_PURE_PYTHON`` nor by its own switch)."""
    status = {}
    for name in HELPERS:
        built = _import(name) is not None
        status[name] = {"built": built, "used": built and not _turned_off(name)}
    return status
