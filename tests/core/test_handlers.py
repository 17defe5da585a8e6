"""wds_core.handlers: webdataset's policies for bad data (raise, skip, stop), in a pipeline."""

import pytest

import wds_core as wds
from wds_core import handlers


def failing_on_three(x):
    if x == 3:
        raise ValueError("three")
    return x


def run(handler):
    return list(wds.DataPipeline(list(range(6)), wds.map(failing_on_three, handler=handler)))


def test_raise_by_default():
    with pytest.raises(ValueError, match="three"):
        run(handlers.reraise_exception)


def test_skip_the_item_quietly_or_with_a_warning():
    assert run(handlers.ignore_and_continue) == [0, 1, 2, 4, 5]
    with pytest.warns(UserWarning, match="skipped after ValueError: three"):
        assert run(handlers.warn_and_continue) == [0, 1, 2, 4, 5]


def test_stop_the_stream_quietly_or_with_a_warning():
    assert run(handlers.ignore_and_stop) == [0, 1, 2]
    with pytest.warns(UserWarning, match="stopped after ValueError"):
        assert run(handlers.warn_and_stop) == [0, 1, 2]


def test_the_names_webdataset_code_imports():
    for name in handlers.__all__:
        if name != "Handler":
            assert getattr(wds, name) is getattr(handlers, name)
