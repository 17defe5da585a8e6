"""Collating a list of samples into a batch (numpy by default, no framework import).

Numbers become numpy arrays, equal-shape arrays are stacked, tensors of a
framework that is already imported are stacked with that framework, anything
else stays a list.  Tuple samples give a tuple of columns, dict samples a dict.

Arrays (or tensors) whose shapes differ are an error naming the field and the shapes, as in webdataset ("all
shapes must be equal in collation"): a list there instead would make a batch's type depend on which samples met in
it (an array when the shapes happened to agree), a failure that comes later and by chance.  ``combine_tensors=False``
(``collation_fn=functools.partial(default_collation_fn, combine_tensors=False)``) keeps every array a list; a
``collation_fn`` of one's own pads them.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from ..errors import SampleError
from .devicecrop import PlannedCrop, PlannedCrops

__all__ = ["ShapeMismatch", "collate_column", "default_collation_fn"]


class ShapeMismatch(SampleError, AssertionError):
    """Arrays of one field of a batch whose shapes differ (an ``AssertionError`` too, as webdataset raises)."""


def _mismatch(shapes: set[Any], where: str = "") -> ShapeMismatch:
    listed = ", ".join(str(tuple(shape)) for shape in sorted(shapes, key=str))
    return ShapeMismatch(
        f"cannot stack the arrays{where} into a batch: all shapes must be equal in collation, got {listed}; crop or "
        "resize them to one shape, pad them in a collation_fn of your own, or keep them lists: "
        "collation_fn=functools.partial(default_collation_fn, combine_tensors=False)"
    )


def _torch_tensor_type() -> Any:
    torch = sys.modules.get("torch")
    return getattr(torch, "Tensor", None) if torch is not None else None


def collate_column(values: list[Any], combine_tensors: bool = True, combine_scalars: bool = True) -> Any:
    """One column of a batch: an array, a stacked tensor, or a list.

    ``combine_scalars=False`` keeps numbers as a list, ``combine_tensors=False``
    keeps arrays and tensors as a list (webdataset's switches).
    """
    first = values[0]
    if isinstance(first, (bool, int, float, np.number)) and all(isinstance(v, type(first)) for v in values):
        return np.array(values) if combine_scalars else list(values)
    if not combine_tensors:
        return list(values)
    if isinstance(first, PlannedCrop):  # crop_images(device=...): one buffer and arrays, cut on the device
        return PlannedCrops.collate(values)
    if isinstance(first, np.ndarray):
        if not all(isinstance(v, np.ndarray) for v in values):
            return list(values)
        shapes = {v.shape for v in values}
        if len(shapes) > 1:
            raise _mismatch(shapes)
        return np.stack(values)
    tensor = _torch_tensor_type()
    if tensor is not None and isinstance(first, tensor):
        if not all(isinstance(v, tensor) for v in values):
            return list(values)
        shapes = {tuple(v.shape) for v in values}
        if len(shapes) > 1:
            raise _mismatch(shapes)
        return sys.modules["torch"].stack(values)
    return list(values)


def default_collation_fn(samples: list[Any], combine_tensors: bool = True, combine_scalars: bool = True) -> Any:
    """Collate tuple/list samples column by column, dict samples field by field (see :func:`collate_column`)."""
    first = samples[0]
    if isinstance(first, dict):
        keys = set(first)
        for sample in samples[1:]:
            if set(sample) != keys:
                raise SampleError(
                    f"cannot batch samples with different fields: {sorted(keys)} vs {sorted(sample)}",
                    member=sample.get("__key__"),
                )
        return {
            k: _column([s[k] for s in samples], combine_tensors, combine_scalars, f" of field {k!r}") for k in first
        }
    if isinstance(first, (list, tuple)):
        width = len(first)
        if any(len(s) != width for s in samples):
            raise SampleError("cannot batch tuples of different lengths")
        return tuple(
            _column([s[i] for s in samples], combine_tensors, combine_scalars, f" of column {i}") for i in range(width)
        )
    return collate_column(list(samples), combine_tensors, combine_scalars)


def _column(values: list[Any], combine_tensors: bool, combine_scalars: bool, where: str) -> Any:
    try:
        return collate_column(values, combine_tensors, combine_scalars)
    except ShapeMismatch as exn:
        shapes = {getattr(v, "shape", None) for v in values}
        raise _mismatch({tuple(s) for s in shapes if s is not None}, where) from exn
