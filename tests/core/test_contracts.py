"""The declared contracts between iterators (wds_core.state) that elastic resume relies on."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import wds_core
from tests.conftest import counted_shards
from wds_core import CheckpointError, merge_states
from wds_core.state import BalancedPart, Recipe, ReportsDelivered, StageIterator, implements


def _all_iterator_classes() -> list[type]:
    for module in pkgutil.walk_packages(wds_core.__path__, "wds_core."):
        importlib.import_module(module.name)
    found, todo = [], [StageIterator]
    while todo:
        cls = todo.pop()
        for sub in cls.__subclasses__():
            if sub.__module__.startswith("wds_core."):
                found.append(sub)
            todo.append(sub)
    return found


def test_every_iterator_declares_whether_it_passes_order():
    classes = _all_iterator_classes()
    assert len(classes) >= 20
    undeclared = [f"{cls.__module__}.{cls.__qualname__}" for cls in classes if cls.passes_order is None]
    assert not undeclared, f"declare passes_order (True or False) on {undeclared}"


def test_stages_that_hold_samples_back_report_what_they_delivered_and_do_not_pass_order():
    holders = [cls for cls in _all_iterator_classes() if "delivered_positions" in dir(cls)]
    names = {cls.__qualname__ for cls in holders}
    assert {"_ShuffleIterator", "_ThreadedDecode", "ShardReader"} <= names
    for cls in holders:
        assert isinstance(getattr(cls, "in_order", None), bool), cls
        assert cls.passes_order is False, cls


def test_the_balanced_split_is_the_declared_part():
    from wds_core.sources.balanced import BalancedIterator, BalancedSplit

    it = BalancedSplit("pad").build(iter([]), None)
    assert isinstance(it, BalancedIterator) and isinstance(it, BalancedPart)
    assert not isinstance(it, ReportsDelivered)


class _Undeclared(StageIterator):
    """A new stage that forgot to declare its order contract."""

    def _run(self):
        yield from self.src


class _UndeclaredStage(Recipe):
    def build(self, src, ctx):
        return _Undeclared(src)


class _PassesOrder(_Undeclared):
    passes_order = True


class _DeclaredStage(Recipe):
    def build(self, src, ctx):
        return _PassesOrder(src)


def _stopped_states(spec, stage):
    ds = wds_core.WebDataset.balanced(spec, seed=2, how="pad", shuffle=True).compose(stage)
    it = iter(ds)
    for _ in range(5):
        next(it)
    return ds.state_dict()


def test_elastic_resume_through_an_undeclared_stage_is_refused_naming_it(tmp_path):
    spec, _ = counted_shards(tmp_path, [6, 4])
    state = _stopped_states(spec, _UndeclaredStage())
    assert "_Undeclared" in state["position"]["unavailable"]
    with pytest.raises(CheckpointError, match="_Undeclared"):
        merge_states([state])


def test_a_stage_declaring_passes_order_carries_the_position(tmp_path):
    spec, _ = counted_shards(tmp_path, [6, 4])
    state = _stopped_states(spec, _DeclaredStage())
    merged = merge_states([state])
    rest = wds_core.WebDataset.balanced(spec, seed=2, how="pad", shuffle=True).compose(_DeclaredStage())
    rest.load_state_dict(merged)
    assert len(list(rest)) == 10 - 5


def test_protocol_checks_are_decided_per_class_and_agree_with_isinstance():
    class Reports:
        in_order = True

        def delivered_positions(self):
            return 0, []

    for obj in (Reports(), object(), _PassesOrder(None)):
        for protocol in (ReportsDelivered, BalancedPart):
            assert implements(obj, protocol) == isinstance(obj, protocol)
    assert implements(Reports(), ReportsDelivered) and not implements(Reports(), BalancedPart)
