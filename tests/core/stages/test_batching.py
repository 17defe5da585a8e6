"""wds_core.stages.batching: batches, their inverse, and slices, each resumable."""

import numpy as np
import pytest

import wds_core as wds
from wds_core.errors import SpecError
from wds_core.stages.batching import Batch, Slice, Unbatch, batches_of
from wds_core.testing import check_resume


def run(*stages, items=range(10)):
    return list(wds.DataPipeline(list(items), *stages))


@pytest.mark.parametrize(("items", "size", "partial", "count"), [(10, 3, True, 4), (10, 3, False, 3), (9, 3, False, 3),
                                                                 (0, 5, True, 0), (4, 5, False, 0)])  # fmt: skip
def test_how_many_batches(items, size, partial, count):
    assert batches_of(items, size, partial) == count
    assert len(run(Batch(size, collation_fn=None, partial=partial), items=range(items))) == count


def test_batches_and_a_short_last_one():
    assert run(Batch(4, collation_fn=None)) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert run(Batch(4, collation_fn=None, partial=False)) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert run(Batch(3, collation_fn=sum)) == [3, 12, 21, 9]


def test_the_default_collation_stacks_columns():
    items = [(np.full((2,), i), i, f"t{i}") for i in range(5)]
    images, labels, texts = run(Batch(5), items=items)[0]
    assert images.shape == (5, 2) and list(labels) == [0, 1, 2, 3, 4] and texts == ["t0", "t1", "t2", "t3", "t4"]


def test_unbatch_gives_the_items_back():
    items = [(i, f"t{i}") for i in range(7)]
    assert [tuple(x) for x in run(Batch(3, collation_fn=None), Unbatch(lists="items"), items=items)] == items
    columns = run(Batch(3), Unbatch(), items=items)
    assert [(int(a), b) for a, b in columns] == items
    with pytest.raises(SpecError, match="lists must be"):
        Unbatch(lists="rows")


@pytest.mark.parametrize(("args", "expected"), [((3,), [0, 1, 2]), ((2, 8, 3), [2, 5]), ((8, None), [8, 9])])
def test_slices(args, expected):
    assert run(Slice(*args)) == expected


@pytest.mark.parametrize("args", [(-1,), (0, -5), (-2, 5)])
def test_slices_that_make_no_sense_are_refused(args):
    with pytest.raises(SpecError):
        Slice(*args)


@pytest.mark.parametrize("stages", [[Batch(4, collation_fn=None)], [Batch(3, collation_fn=None), Unbatch("items")],
                                    [Slice(2, 40, 3)]])  # fmt: skip
def test_resume_at_every_step(stages):
    items = [{"__key__": f"k{i:03d}", "i": i} for i in range(50)]
    check_resume(lambda: wds.DataPipeline(list(items), *stages))
