"""What a :class:`~wds_tf.TFSource` element looks like, in plain Python: checked and batched without TensorFlow.

A :class:`SampleFormat` is made from an ``output_signature`` by the adapter
and travels (pickled) into :class:`wds_core.Loader` workers, which check each
sample against it and, with ``batch_size``, stack samples into batches there;
importing TensorFlow in every worker would cost seconds and gain nothing.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from wds_core.errors import SampleError

__all__ = ["SampleFormat"]


class SampleFormat:
    """The fields of an element: how they are reached, their shapes (``None`` for a dimension that varies)
    and numpy dtypes (``None`` for strings)."""

    def __init__(self, kind: str, fields: list[tuple[Any, tuple[int | None, ...] | None, str | None]]) -> None:
        if kind not in ("tuple", "dict", "single"):
            raise ValueError(f"kind must be 'tuple', 'dict' or 'single', got {kind!r}")
        self.kind, self.fields = kind, fields

    def where(self, key: Any) -> str:
        return repr(key) if self.kind == "dict" else f"#{key}"

    def fixed(self) -> bool:
        """Whether every field has one shape, so that samples stack into batches."""
        return all(shape is not None and None not in shape for _, shape, _ in self.fields)

    def check(self, sample: Any) -> Any:
        """``sample`` unchanged when it fits; a :class:`SampleError` naming the field otherwise."""
        if self.kind == "tuple":
            if not isinstance(sample, tuple) or len(sample) != len(self.fields):
                raise SampleError(f"expected a tuple of {len(self.fields)} fields, got {type(sample).__name__}")
        elif self.kind == "dict":
            names = {key for key, _, _ in self.fields}
            if not isinstance(sample, dict) or set(sample) != names:
                got = sorted(sample) if isinstance(sample, dict) else type(sample).__name__
                raise SampleError(f"expected the fields {sorted(names)}, got {got}")
        for key, shape, _ in self.fields:
            value = sample if self.kind == "single" else sample[key]
            have = np.shape(value) if isinstance(value, (np.ndarray, np.generic)) else ()
            if shape is not None and not _compatible(shape, have):
                said = tuple(shape)
                raise SampleError(
                    f"field {self.where(key)} has shape {tuple(have)}, the output signature says {said}; "
                    "give output_signature with None for the dimensions that vary",
                    member=sample.get("__key__") if isinstance(sample, dict) else None,
                )
        return sample

    def collate(self, samples: list[Any]) -> Any:
        """Checked samples as one batch: each field stacked (strings as a list), shaped like the sample."""
        columns = []
        for key, _, dtype in self.fields:
            values = samples if self.kind == "single" else [sample[key] for sample in samples]
            columns.append(_column(values, dtype))
        if self.kind == "single":
            return columns[0]
        if self.kind == "tuple":
            return tuple(columns)
        return {key: column for (key, _, _), column in zip(self.fields, columns)}


def _compatible(expected: tuple[int | None, ...], have: tuple[int, ...]) -> bool:
    return len(expected) == len(have) and all(e is None or e == h for e, h in zip(expected, have))


def _column(values: list[Any], dtype: str | None) -> Any:
    if dtype is None:
        return list(values)  # strings: TensorFlow makes a string tensor of the list
    if isinstance(values[0], np.ndarray):
        return np.stack(values)  # a dtype other than the signature's is TensorFlow's error, as one by one
    return np.asarray(values, dtype=dtype)  # Python numbers become the signature's dtype, as TensorFlow does
