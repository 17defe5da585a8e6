"""wds_core.mock: webdataset's MockDataset, one sample repeated, with a position to checkpoint."""

import pytest

import wds_core as wds


def test_the_sample_repeated_each_epoch():
    sample = {"__key__": "x", "cls": 1}
    dataset = wds.MockDataset(sample, 5)
    assert list(dataset) == [sample] * 5 and list(dataset) == [sample] * 5
    assert [batch for batch in dataset.batched(2, collation_fn=None)] == [[sample] * 2, [sample] * 2, [sample]]


def test_its_position_restores():
    dataset = wds.MockDataset(("a", 1), 6)
    it = iter(dataset)
    next(it), next(it)
    state = dataset.state_dict()
    again = wds.MockDataset(("a", 1), 6)
    again.load_state_dict(state)
    assert len(list(again)) == 4


@pytest.mark.parametrize("length", [-1, 2.5, "3"])
def test_a_length_that_is_no_count_is_refused(length):
    with pytest.raises(ValueError, match="length must be an integer"):
        wds.MockDataset({}, length)
