"""One run of a pipeline: its stages built, its repetitions and limit, closed when dropped."""

import pytest

import wds_core
from wds_core.pipeline.run import PipelineStage, has_run


class Doubler(PipelineStage):
    def run(self, src):
        for item in src:
            yield item * 2


class Counter(PipelineStage):
    def run(self):
        yield from range(5)


def test_webdatasets_stage_objects_are_run_first_or_in_the_middle():
    assert list(wds_core.DataPipeline(Counter(), Doubler())) == [0, 2, 4, 6, 8]
    assert has_run(Doubler()) and not has_run(lambda src: src)
    with pytest.raises(NotImplementedError, match="Bare must define run"):

        class Bare(PipelineStage):
            pass

        list(wds_core.DataPipeline([1], Bare()))


def test_repetitions_and_an_epoch_limit():
    assert list(wds_core.DataPipeline([1, 2, 3]).repeat(2)) == [1, 2, 3, 1, 2, 3]
    assert list(wds_core.DataPipeline([1, 2, 3]).with_epoch(5)) == [1, 2, 3, 1, 2]


def test_a_run_dropped_midway_is_closed_and_keeps_its_position():
    pipeline = wds_core.DataPipeline(list(range(10)), wds_core.Map(lambda x: x + 1))
    for item in pipeline:
        if item == 3:
            break
    state = pipeline.state_dict()
    again = wds_core.DataPipeline(list(range(10)), wds_core.Map(lambda x: x + 1))
    again.load_state_dict(state)
    assert list(again) == list(range(4, 11))
