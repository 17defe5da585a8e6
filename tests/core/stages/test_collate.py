"""wds_core.stages.collate: samples into a batch, column by column, numpy unless a framework's tensors come."""

import numpy as np
import pytest

from wds_core.errors import SampleError
from wds_core.stages.collate import ShapeMismatch, collate_column, default_collation_fn


def test_numbers_become_arrays_and_equal_arrays_stack():
    assert collate_column([1, 2, 3]).tolist() == [1, 2, 3]
    assert collate_column([0.5, 1.5]).dtype == np.float64
    stacked = collate_column([np.zeros((2, 3)), np.ones((2, 3))])
    assert stacked.shape == (2, 2, 3)


def test_arrays_of_different_shapes_are_an_error_naming_the_field_and_shapes():
    """Issue 68.4: a list there made a batch's type depend on which samples met in it (webdataset raises)."""
    with pytest.raises(ShapeMismatch, match=r"all shapes must be equal in collation, got \(2,\), \(3,\)"):
        collate_column([np.zeros(2), np.zeros(3)])
    with pytest.raises(
        AssertionError,
        match=r"arrays of field 'npy' into a batch: .*partial\(default_collation_fn, combine_tensors=False\)",
    ):
        default_collation_fn([{"npy": np.zeros((2, 2))}, {"npy": np.zeros((3, 2))}])
    with pytest.raises(SampleError, match=r"arrays of column 0 into a batch"):
        default_collation_fn([(np.zeros(2), 1), (np.zeros(3), 2)])
    assert isinstance(collate_column([np.zeros(2), np.zeros(3)], combine_tensors=False), list)


def test_what_does_not_stack_stays_a_list():
    assert collate_column(["a", "b"]) == ["a", "b"]
    assert collate_column([1, "x"]) == [1, "x"]  # mixed types
    assert collate_column([1, 2], combine_scalars=False) == [1, 2]
    assert isinstance(collate_column([np.zeros(2), np.zeros(2)], combine_tensors=False), list)


def test_tuples_give_columns_and_dicts_fields():
    images, labels = default_collation_fn([(np.zeros(2), 1), (np.ones(2), 2)])
    assert images.shape == (2, 2) and labels.tolist() == [1, 2]
    batch = default_collation_fn([{"__key__": "a", "cls": 1}, {"__key__": "b", "cls": 2}])
    assert batch["__key__"] == ["a", "b"] and batch["cls"].tolist() == [1, 2]


def test_samples_that_do_not_match_are_refused_naming_one():
    with pytest.raises(SampleError, match="different fields") as caught:
        default_collation_fn([{"__key__": "a", "cls": 1}, {"__key__": "b", "txt": "x"}])
    assert caught.value.member == "b"
    with pytest.raises(SampleError, match="tuples of different lengths"):
        default_collation_fn([(1, 2), (1, 2, 3)])


def test_tensors_stack_with_their_framework():
    torch = pytest.importorskip("torch")
    stacked = collate_column([torch.zeros(3), torch.ones(3)])
    assert isinstance(stacked, torch.Tensor) and stacked.shape == (2, 3)
    with pytest.raises(ShapeMismatch, match=r"got \(3,\), \(4,\)"):
        collate_column([torch.zeros(3), torch.zeros(4)])
    assert isinstance(collate_column([torch.zeros(3), torch.zeros(4)], combine_tensors=False), list)
