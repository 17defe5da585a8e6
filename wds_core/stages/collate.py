"""Collating a list of samples into a batch (numpy by default, no framework import).

Numbers become numpy arrays, equal-shape arrays are stacked, tensors of a
framework that is already imported are stacked with that framework, anything
else stays a list.  Tuple samples give a tuple of columns, dict samples a dict.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from ..errors import SampleError
from .devicecrop import PlannedCrop, PlannedCrops

__all__ = ["collate_column", "default_collation_fn"]


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
        shapes = {v.shape for v in values if isinstance(v, np.ndarray)}
        if len(shapes) == 1 and all(isinstance(v, np.ndarray) for v in values):
            return np.stack(values)
        return list(values)
    tensor = _torch_tensor_type()
    if tensor is not None and isinstance(first, tensor):
        if all(isinstance(v, tensor) and v.shape == first.shape for v in values):
            return sys.modules["torch"].stack(values)
        return list(values)
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
        return {k: collate_column([s[k] for s in samples], combine_tensors, combine_scalars) for k in first}
    if isinstance(first, (list, tuple)):
        width = len(first)
        if any(len(s) != width for s in samples):
            raise SampleError("cannot batch tuples of different lengths")
        return tuple(collate_column([s[i] for s in samples], combine_tensors, combine_scalars) for i in range(width))
    return collate_column(list(samples), combine_tensors, combine_scalars)
