"""wds_core.testing: the resume oracle users run on their own stages, and that it fails when it should."""

import numpy as np
import pytest

import wds_core as wds
from wds_core.state import Recipe, StageIterator
from wds_core.testing import ResumeMismatch, check_resume, item_key


class Lookahead(Recipe):
    """A user's stage that reads one item ahead; ``keep_state`` decides whether it saves the item it holds."""

    def __init__(self, keep_state):
        self.keep_state = keep_state

    def build(self, src, ctx):
        return LookaheadIterator(src, self.keep_state)


class LookaheadIterator(StageIterator):
    passes_order = False

    def __init__(self, src, keep_state):
        super().__init__(src)
        self.keep_state = keep_state
        self.held = None

    def _run(self):
        for item in self.src:
            previous, self.held = self.held, item
            if previous is not None:
                yield previous
        if self.held is not None:
            last, self.held = self.held, None
            yield last

    def _own_state(self):
        return {"held": self.held} if self.keep_state else {}

    def _load_own_state(self, state):
        self.held = state.get("held")


def make(keep_state):
    return lambda: wds.DataPipeline(list(range(1, 13)), wds.shuffle(4), Lookahead(keep_state), seed=3)


def test_a_stage_that_saves_what_it_holds_resumes_exactly():
    keys = check_resume(make(keep_state=True))
    assert sorted(map(int, keys)) == list(range(1, 13))


def test_a_stage_that_forgets_what_it_holds_is_caught_with_the_position():
    with pytest.raises(ResumeMismatch, match=r"resumed after 1 of 12 items, the run differs at item 1: expected \d+"):
        check_resume(make(keep_state=False))


def test_oversized_states_and_empty_runs_are_refused():
    with pytest.raises(ResumeMismatch, match="bytes of JSON"):
        check_resume(lambda: wds.DataPipeline(list(range(5)), wds.shuffle(4)), max_state_bytes=10)
    with pytest.raises(ResumeMismatch, match="no items"):
        check_resume(lambda: wds.DataPipeline([]))
    with pytest.raises(ValueError, match="outside"):
        check_resume(lambda: wds.DataPipeline(list(range(5))), positions=[9])


def test_item_keys():
    assert item_key({"__key__": "a/b", "jpg": b""}) == "a/b"
    assert item_key((np.arange(3), 4)) == "[[0, 1, 2], 4]"
    assert item_key(7) == "7"


class StaleIterator(LookaheadIterator):
    """Saves what it holds, but keeps the first state it gave and gives it again: right once in a run only."""

    kept = None

    def _own_state(self):
        if self.kept is None:
            self.kept = {"held": self.held}
        return self.kept


class Stale(Lookahead):
    def build(self, src, ctx):
        return StaleIterator(src, True)


def test_a_state_kept_from_an_earlier_step_is_caught_with_positions_given_once():
    def stale():
        return wds.DataPipeline(list(range(1, 13)), Stale(True))

    with pytest.raises(ResumeMismatch, match="with the state taken in a run that went on"):
        check_resume(stale, positions=(k for k in (2, 5, 9)))  # an iterator: gone through once
