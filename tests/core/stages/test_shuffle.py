"""wds_core.stages.shuffle: a buffer that permutes, reproducibly, and whose checkpoints hold no samples."""

import json
import random

import pytest

import wds_core as wds
from wds_core.errors import SpecError
from wds_core.stages.shuffle import DetShuffle, Shuffle
from wds_core.testing import check_resume


def run(*stages, items=range(500), seed=1, epoch=None):
    pipeline = wds.DataPipeline(list(items), *stages, seed=seed)
    if epoch is not None:
        pipeline.set_epoch(epoch)
    return list(pipeline)


def test_every_item_once_in_another_order_the_same_for_the_same_seed():
    first = run(Shuffle(100))
    assert sorted(first) == list(range(500)) and first != list(range(500))
    assert run(Shuffle(100)) == first and run(Shuffle(100), seed=2) != first


def test_each_epoch_its_own_order():
    assert run(Shuffle(100), epoch=0) != run(Shuffle(100), epoch=1)
    assert run(DetShuffle(100, seed=3, epoch=5)) == run(DetShuffle(100, seed=3, epoch=5), seed=9)


def test_a_buffer_of_one_keeps_the_order_and_items_move_at_most_a_buffer_early():
    assert run(Shuffle(1)) == list(range(500))
    order = run(Shuffle(50, initial=50))
    assert all(item - position < 50 for position, item in enumerate(order))


@pytest.mark.parametrize("bufsize", [0, -3, 2.5, "10", True])
def test_a_buffer_size_that_is_no_positive_integer_is_refused(bufsize):
    with pytest.raises(SpecError, match="bufsize must be an integer >= 1"):
        Shuffle(bufsize)


def test_a_random_generator_given_is_drawn_from_as_webdataset_draws():
    filters = pytest.importorskip("webdataset.filters")
    ours = list(Shuffle(20, initial=5, rng=random.Random(42))(iter(range(200))))
    theirs = list(filters._shuffle(iter(range(200)), 20, 5, random.Random(42)))
    assert ours == theirs
    with pytest.raises(SpecError, match="seed= or rng="):
        Shuffle(10, seed=1, rng=random.Random(1))
    with pytest.raises(SpecError, match="must be a random.Random"):
        Shuffle(10, rng=object())


def test_resume_at_every_step_with_states_that_hold_no_samples():
    big = [{"__key__": f"k{i:04d}", "data": "x" * 10_000} for i in range(300)]
    check_resume(lambda: wds.DataPipeline(big, Shuffle(64, initial=16), seed=5), step=7,
                 max_state_bytes=4096)  # fmt: skip


def test_the_state_after_the_end_restores_an_ended_run():
    pipeline = wds.DataPipeline(list(range(50)), Shuffle(10), seed=1)
    it = iter(pipeline)
    assert len(list(it)) == 50
    state = json.loads(json.dumps(pipeline.state_dict()))
    again = wds.DataPipeline(list(range(50)), Shuffle(10), seed=1)
    again.load_state_dict(state)
    assert list(again) == []
