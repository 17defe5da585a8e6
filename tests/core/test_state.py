"""wds_core.state: the checkpoint protocol every built-in iterator shares, and what it says when it cannot."""

import json
from collections.abc import Iterator
from typing import Any

import pytest

from wds_core.errors import CheckpointError
from wds_core.state import (
    Recipe,
    RunContext,
    StageIterator,
    Stateless,
    close_chain,
    count_items,
    describe,
    load_state,
    stage_names,
    state_of,
    state_or_error,
)


class Numbers(StageIterator):
    """A source: 0..n-1, its position its state."""

    passes_order = True

    def __init__(self, n: int) -> None:
        super().__init__(None)
        self.n, self.at = n, 0

    def _run(self) -> Iterator[int]:
        while self.at < self.n:
            self.at += 1
            yield self.at - 1

    def _own_state(self) -> dict[str, Any]:
        return {"at": self.at}

    def _load_own_state(self, state: dict[str, Any]) -> None:
        self.at = state["at"]


class Doubled(Recipe):
    def __init__(self, factor: int = 2) -> None:
        self.factor = factor

    def build(self, src: Any, ctx: RunContext) -> StageIterator:
        return Stateless(src, lambda items: (item * self.factor for item in items))


def test_a_state_nests_its_upstream_and_restores_a_fresh_chain_where_it_was_taken():
    chain = Doubled().build(Numbers(10), RunContext())
    it = iter(chain)
    assert [next(it) for _ in range(4)] == [0, 2, 4, 6]
    state = json.loads(json.dumps(chain.state_dict()))
    assert state == {"parent": {"at": 4}}
    fresh = Doubled().build(Numbers(10), RunContext())
    fresh.load_state_dict(state)
    assert list(fresh) == [8, 10, 12, 14, 16, 18]


def test_restoring_is_refused_once_started_or_with_a_state_of_another_shape():
    chain = Doubled().build(Numbers(3), RunContext())
    with pytest.raises(CheckpointError, match="expected a dict state"):
        chain.load_state_dict([1, 2])
    with pytest.raises(CheckpointError, match="no 'parent' entry"):
        chain.load_state_dict({})
    next(iter(chain))
    with pytest.raises(CheckpointError, match="must come before iteration starts"):
        chain.load_state_dict({"parent": {"at": 0}})


def test_a_plain_generator_upstream_is_named_when_asked_for_its_state():
    def user_stage():
        yield 1

    chain = Stateless(user_stage(), lambda items: items)
    with pytest.raises(CheckpointError, match=r"generator user_stage\(\)"):
        chain.state_dict()
    assert isinstance(state_or_error(user_stage()), CheckpointError)
    with pytest.raises(CheckpointError, match="cannot be restored"):
        load_state(user_stage(), {})
    assert state_of(Numbers(2)) == {"at": 0}


def test_a_dataloader_iterator_upstream_says_what_checkpoints_instead():
    class _MultiProcessingDataLoaderIter:
        pass

    with pytest.raises(CheckpointError, match="WebLoader"):
        state_of(_MultiProcessingDataLoaderIter())


def test_names_of_stages_for_reports_and_repr():
    assert Doubled(3).stage_name() == "doubled" and repr(Doubled(3)) == "doubled(factor=3)"
    assert stage_names([Doubled(), Doubled(), len]) == ["doubled#1", "doubled#2", "len"]
    assert describe(Numbers(1)) == "Numbers"


def test_items_are_counted_only_while_asked():
    quiet = Numbers(5)
    list(quiet)
    assert quiet.report() == {"items": None}
    with count_items():
        counted = Numbers(5)
        it = iter(counted)
        next(it), next(it), next(it)
    assert counted.report() == {"items": 3}
    assert list(it) == [3, 4] and counted.report() == {"items": 5}


def test_closing_a_chain_runs_every_generator_s_finally():
    closed = []

    class Source(StageIterator):
        passes_order = True

        def _run(self) -> Iterator[int]:
            try:
                yield from range(100)
            finally:
                closed.append("source")

    chain = Doubled().build(Source(), RunContext())
    next(iter(chain))
    close_chain(chain)
    assert closed == ["source"]


def test_a_stage_used_on_its_own_as_webdataset_allows():
    assert list(Doubled()(iter([1, 2, 3]))) == [2, 4, 6]
    assert RunContext(seed=5).for_stage(2, per_reader=True) == RunContext(5, 0, 2, True, True)
