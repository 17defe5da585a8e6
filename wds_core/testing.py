"""Check that a pipeline resumes exactly: the oracle wds's own tests run on every stateful stage.

Give :func:`check_resume` a function that builds your pipeline afresh (with
your own stages in it).  For every ``k`` it reads ``k`` items, takes
``state_dict()``, sends the state through JSON (as a checkpoint file would),
loads it into a newly built pipeline and reads the rest; the ``k`` items plus
the rest must be the uninterrupted run, item for item.  A stage that loses,
repeats or reorders items on resume fails with the position it went wrong::

    from wds_core.testing import check_resume

    def make():
        return wds.WebDataset("shards-{0..3}.tar", seed=1).shuffle(100).compose(my_stage)

    check_resume(make)               # every k; step=10 for long streams

Items are compared by :func:`item_key`: a sample's ``__key__``, otherwise the
item's ``repr`` with arrays and tensors as lists.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["ResumeMismatch", "check_resume", "item_key"]


class ResumeMismatch(AssertionError):
    """A pipeline restored after ``k`` items did not give the rest of the uninterrupted run."""


def item_key(item: Any) -> str:
    """What identifies an item when comparing runs: a sample's ``__key__``, else a ``repr`` of its values."""
    if isinstance(item, dict) and "__key__" in item:
        return str(item["__key__"])
    return repr(_plain(item))


def _plain(value: Any) -> Any:
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if hasattr(value, "tolist") and hasattr(value, "shape"):  # numpy arrays, torch tensors, jax arrays
        return value.tolist()
    return value


def check_resume(
    make: Callable[[], Any],
    *,
    step: int = 1,
    positions: Iterable[int] | None = None,
    key: Callable[[Any], str] = item_key,
    through_json: bool = True,
    max_state_bytes: int | None = 64 * 1024,
) -> list[str]:
    """Stop after each ``k`` items, restore into ``make()``'s fresh pipeline, and compare with the full run.

    ``make`` must build the same pipeline each time (same seeds).  ``positions``
    lists the ``k`` to try (default ``0, step, 2*step, ...`` up to the end);
    ``max_state_bytes`` bounds the JSON size of every state (``None``: no
    bound).  The same states are then taken in one run, one after the other,
    and each restored: a state that disturbs the run, or that a stage keeps
    from an earlier step, fails there.  Returns the keys of the uninterrupted
    run; raises
    :class:`ResumeMismatch` at the first ``k`` that differs, naming the first
    differing item.
    """
    expected = [key(item) for item in make()]
    if not expected:
        raise ResumeMismatch("the pipeline gave no items: there is nothing to resume")
    ks = list(range(0, len(expected) + 1, step) if positions is None else positions)  # gone through twice
    for k in ks:
        if not 0 <= k <= len(expected):
            raise ValueError(f"position {k} is outside the run of {len(expected)} items")
        pipeline = make()
        items = iter(pipeline)
        head = [key(next(items)) for _ in range(k)]
        state = pipeline.state_dict()
        text = json.dumps(state)
        if max_state_bytes is not None and len(text) > max_state_bytes:
            raise ResumeMismatch(f"the state after {k} items is {len(text)} bytes of JSON (limit {max_state_bytes})")
        _check_restored(make, json.loads(text) if through_json else state, head, expected, key)
    _check_states_of_one_run(make, sorted(ks), expected, key, through_json)
    return expected


def _check_states_of_one_run(
    make: Callable[[], Any], ks: list[int], expected: list[str], key: Callable[[Any], str], through_json: bool
) -> None:
    """The states after each ``k`` taken in one run that goes on after each: taking them must not change the
    run, and each must resume where it was taken (a state kept from an earlier step shows here)."""
    pipeline = make()
    items = iter(pipeline)
    seen: list[str] = []
    states = {}
    for k in ks:
        seen += [key(next(items)) for _ in range(k - len(seen))]
        state = pipeline.state_dict()
        states[k] = json.loads(json.dumps(state)) if through_json else state
    seen += [key(item) for item in items]
    if seen != expected:
        raise ResumeMismatch("taking states during a run changed the run: " + _difference(0, expected, seen))
    for k, state in states.items():
        _check_restored(make, state, expected[:k], expected, key, " (with the state taken in a run that went on)")


def _check_restored(
    make: Callable[[], Any], state: Any, head: list[str], expected: list[str], key: Callable[[Any], str], note: str = ""
) -> None:
    """``head`` (the items before ``state`` was taken), then what ``make()`` gives with ``state`` loaded, is
    ``expected``."""
    fresh = make()
    fresh.load_state_dict(state)
    got = head + [key(item) for item in fresh]
    if got != expected:
        raise ResumeMismatch(_difference(len(head), expected, got) + note)


def _difference(k: int, expected: list[str], got: list[str]) -> str:
    first = next((i for i, (a, b) in enumerate(zip(expected, got)) if a != b), min(len(expected), len(got)))
    want = expected[first] if first < len(expected) else "(the end)"
    have = got[first] if first < len(got) else "(the end)"
    return (
        f"resumed after {k} of {len(expected)} items, the run differs at item {first}: "
        f"expected {want}, got {have} ({len(got)} items in all)"
    )
