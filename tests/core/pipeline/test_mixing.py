"""RandomMix and RoundRobin: proportions, exhaustion, determinism, checkpoints."""

import math

import pytest

import wds_core as wds
from tests.core.test_checkpoint import oracle
from wds_core import CheckpointError, SpecError


def numbers(start, n, seed):
    return wds.DataPipeline(list(range(start, start + n)), wds.shuffle(10), seed=seed)


def test_random_mix_proportions_within_tolerance():
    """10,000 draws with probabilities 0.5/0.3/0.2: each count within 4 standard deviations."""
    sources = [numbers(0, 20000, 1), numbers(100000, 20000, 2), numbers(200000, 20000, 3)]
    mix = wds.RandomMix(sources, probs=[5, 3, 2], seed=7).slice(10000)
    got = list(mix)
    assert len(got) == 10000
    for index, p in enumerate([0.5, 0.3, 0.2]):
        count = sum(1 for x in got if x // 100000 == index)
        sigma = math.sqrt(10000 * p * (1 - p))
        assert abs(count - 10000 * p) < 4 * sigma, (index, count)


def test_shortest_and_longest():
    a, b = numbers(0, 100, 1), numbers(1000, 10, 2)
    short = list(wds.RandomMix([a, b], seed=3))
    assert len(short) < 110 and sum(1 for x in short if x >= 1000) == 10  # ends when b runs out
    full = list(wds.RandomMix([a, b], seed=3, longest=True))
    assert sorted(full) == list(range(100)) + list(range(1000, 1010))
    ea, eb = list(numbers(0, 100, 1)), list(numbers(1000, 10, 2))  # epoch 0 of each
    assert list(wds.RoundRobin([a, b]))[:4] == [ea[0], eb[0], ea[1], eb[1]]
    assert len(list(wds.RoundRobin([a, b]))) == 21  # a b a b ... then b is empty
    assert sorted(wds.RoundRobin([a, b], longest=True)) == sorted(full)


def test_deterministic_with_a_seed_and_new_each_epoch():
    make = lambda: wds.RandomMix([numbers(0, 50, 1), numbers(100, 50, 2)], seed=11)  # noqa: E731
    first, again = make(), make()
    assert list(first) == list(again)
    assert list(first) != list(make())  # the second iter() is epoch 1
    mix = make()
    mix.set_epoch(1)
    second = make()
    list(second)
    assert list(mix) == list(second)


@pytest.mark.parametrize("kind", ["random", "roundrobin", "random-longest", "lists"])
def test_checkpoint_at_every_step(kind):
    def make():
        a, b = numbers(0, 30, 1), numbers(100, 12, 2)
        if kind == "roundrobin":
            return wds.RoundRobin([a, b], longest=True).batched(2, collation_fn=tuple)
        if kind == "lists":
            return wds.RandomMix([list(range(20)), list(range(50, 60))], seed=4, longest=True)
        return wds.RandomMix([a, b], probs=[1, 2], seed=5, longest=kind == "random-longest").shuffle(4)

    oracle(make)


def test_a_different_mix_is_refused():
    a, b = numbers(0, 30, 1), numbers(100, 12, 2)
    ds = wds.RandomMix([a, b], seed=5)
    next(iter(ds))
    state = ds.state_dict()
    with pytest.raises(CheckpointError, match="different pipeline"):
        wds.RandomMix([a, b.compose(wds.batched(2))], seed=5).load_state_dict(state)


def test_arguments_are_checked():
    with pytest.raises(SpecError, match="at least one"):
        list(wds.RandomMix([]))  # when it runs: webdataset's list may be filled in after the mix is made
    with pytest.raises(SpecError, match="2 probabilities for 1"):
        wds.RandomMix([[1]], probs=[1, 2])
    with pytest.raises(SpecError, match="positive sum"):
        wds.RandomMix([[1], [2]], probs=[0, 0])
    with pytest.raises(CheckpointError, match="no state_dict"):
        mix = wds.RandomMix([iter([1, 2]), [3]], seed=1)
        next(iter(mix))
        mix.state_dict()
