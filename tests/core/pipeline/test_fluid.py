"""The chainable methods: each gives a new pipeline with one stage more, the original unchanged."""

import pytest

import wds_core


def samples():
    return [{"__key__": f"k{i}", "cls": i, "txt": f"t{i}"} for i in range(10)]


def source():
    return wds_core.FluidWrapper(samples())


def test_each_method_adds_one_stage_to_a_copy():
    base = source()
    chained = base.select(lambda s: s["cls"] % 2 == 0).map_dict(cls=lambda c: c * 10).to_tuple("cls", "txt")
    assert len(base.pipeline) == 1 and len(chained.pipeline) == 4
    assert list(chained) == [(c * 10, f"t{c}") for c in range(0, 10, 2)]
    assert [s["cls"] for s in source()] == list(range(10)) and len(base.pipeline) == 1  # the original as before


def test_batching_renaming_and_slicing_chain_as_their_stages_do():
    batches = list(source().rename(label="cls").to_tuple("label").batched(4, collation_fn=list))
    assert [len(b) for b in batches] == [4, 4, 2]
    assert list(source().batched(4, partial=False).unbatched().map(lambda s: s["cls"])) == list(range(8))
    assert [s["cls"] for s in source().slice(2, 8, 3)] == [2, 5]
    assert [s for s in source().to_tuple("cls").map_tuple(lambda c: -c)] == [(-c,) for c in range(10)]


def test_a_seeded_shuffle_is_a_function_of_the_seed():
    once = [s["cls"] for s in source().shuffle(5, seed=3)]
    assert once == [s["cls"] for s in source().shuffle(5, seed=3)] and sorted(once) == list(range(10))


def test_compose_takes_a_plain_generator_stage():
    def doubled(items):
        for item in items:
            yield item
            yield item

    assert len(list(source().compose(doubled))) == 20


def test_what_wds_does_not_provide_says_what_to_use():
    with pytest.raises(NotImplementedError, match="ShardCache"):
        source().lmdb_cached("x.lmdb")
