"""``wds doctor``: what this installation runs with, the first thing a bug report needs.

    wds doctor            # a table: versions, compiled helpers, JPEG decoding, storage packages, frameworks
    wds doctor --json     # the same as one JSON object

It says which compiled helpers were built and which are used (``WDS_PURE_PYTHON=1`` and the per-helper switches
turn them off), which JPEG decoder fields get and whether crops decode only their region, the versions of Pillow
(and whether it is Pillow-SIMD), libjpeg-turbo, OpenCV and simplejpeg, the storage packages (fsspec, s3fs, gcsfs,
aiohttp, botocore), the frameworks (torch, torchdata, torchvision, jax, tensorflow), secure mode, the
configuration file and the remote engine's budget.  Packages are looked up by their installed metadata, not
imported (a framework's import takes seconds), except Pillow, whose build says which libjpeg it uses.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from importlib import metadata
from typing import Any

from .common import subcommand

__all__ = ["add_parser", "report"]

_STORAGE = ("fsspec", "s3fs", "gcsfs", "aiohttp", "botocore")
_FRAMEWORKS = ("torch", "torchdata", "torchvision", "jax", "tensorflow", "tensorflow-cpu")
_IMAGES = ("opencv-python", "opencv-python-headless", "simplejpeg")


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _pillow() -> dict[str, Any]:
    try:
        import PIL
        from PIL import features
    except ImportError:  # pragma: no cover - a dependency
        return {"version": None}
    version = getattr(PIL, "__version__", None)
    return {
        "version": version,
        "simd": _version("Pillow-SIMD") is not None or ".post" in str(version),
        "libjpeg_turbo": features.version("libjpeg_turbo") if features.check("libjpeg_turbo") else None,
    }


def report() -> dict[str, Any]:
    """What this installation runs with (see the module doc), as plain data."""
    from .._native import native_status
    from ..fieldcodecs.jpeg import jpeg_decoder, region_decoding
    from ..io.config import config_exists, config_path
    from ..io.remote.engine import ENGINE
    from ..io.secure import secure_mode
    from ..stages.crop import slow_path
    from ..version import __version__

    config = config_path()
    return {
        "wds": __version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cores": os.cpu_count(),
        "native": native_status(),
        "pure_python": os.environ.get("WDS_PURE_PYTHON", "") not in ("", "0"),
        "jpeg": {"decoder": jpeg_decoder(), "region_crops": region_decoding(), "pillow": _pillow()},
        "crop_images_slow_path": slow_path(),
        "images": {name: _version(name) for name in _IMAGES},
        "storage": {name: _version(name) for name in _STORAGE},
        "frameworks": {name: _version(name) for name in _FRAMEWORKS},
        "secure_mode": secure_mode(),
        "config_file": {"path": config, "exists": config_exists()},
        "io_budget_bytes": ENGINE.budget,
    }


def _lines(found: dict[str, Any]) -> list[str]:
    def shown(value: Any) -> str:
        return "not installed" if value is None else str(value)

    lines = [
        f"wds {found['wds']}, Python {found['python']}, {found['platform']}, {found['cores']} cores",
        "compiled helpers" + (" (WDS_PURE_PYTHON is set: none used)" if found["pure_python"] else "") + ":",
    ]
    for name, state in found["native"].items():
        what = "used" if state["used"] else "built, turned off" if state["built"] else "not built (pure Python)"
        lines.append(f"  {name:14s} {what}")
    jpeg, pillow = found["jpeg"], found["jpeg"]["pillow"]
    lines.append(
        f"JPEG fields: {jpeg['decoder']}; crops decode only their region: {'yes' if jpeg['region_crops'] else 'no'}"
    )
    slow = found["crop_images_slow_path"]
    lines.append(f"crop_images: {'slow path, without ' + ' and '.join(slow) if slow else 'fast path'}")
    simd = " (Pillow-SIMD)" if pillow.get("simd") else ""
    lines.append(f"  Pillow {shown(pillow['version'])}{simd}, libjpeg-turbo {shown(pillow.get('libjpeg_turbo'))}")
    for title, key in (("images", "images"), ("storage", "storage"), ("frameworks", "frameworks")):
        lines.append(f"{title}:")
        lines.extend(f"  {name:24s} {shown(version)}" for name, version in found[key].items())
    config = found["config_file"]
    lines.append(f"secure mode: {'on' if found['secure_mode'] else 'off'}")
    lines.append(f"config file: {config['path']} ({'found' if config['exists'] else 'none'})")
    lines.append(f"remote engine budget: {found['io_budget_bytes'] / (1 << 20):,.0f} MiB (WDS_IO_BUDGET)")
    return lines


def run(args: argparse.Namespace) -> int:
    found = report()
    print(json.dumps(found, indent=1) if args.json else "\n".join(_lines(found)))
    return 0


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = subcommand(commands, "doctor", "what this installation runs with (for a bug report)", run, __doc__)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
