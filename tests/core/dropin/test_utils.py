"""webdataset.utils and extradatasets over wds."""

import pytest

import wds_core
from wds_core.dropin import extradatasets, utils


def test_worker_info_and_seed_from_the_environment(monkeypatch):
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("WORKER", "1")
    monkeypatch.setenv("NUM_WORKERS", "3")
    assert utils.pytorch_worker_info() == (2, 4, 1, 3)
    assert utils.pytorch_worker_seed() == 2001


def test_repeatedly():
    assert list(utils.repeatedly([1, 2, 3], nepochs=2)) == [1, 2, 3, 1, 2, 3]
    assert list(utils.repeatedly([1, 2, 3], nbatches=5)) == [1, 2, 3, 1, 2]
    batches = [[[0, 0]], [[0, 0, 0]]]
    assert len(list(utils.repeatedly(batches, nsamples=6))) == 3
    assert list(utils.repeatedly([])) == []  # an empty source ends it instead of looping forever
    assert list(utils.repeatedly0([1, 2, 3], nepochs=2, nbatches=2)) == [1, 2, 1, 2]


def test_small_helpers(monkeypatch, tmp_path):
    assert utils.make_seed(1, 2) == utils.make_seed(1, 2) and utils.make_seed(1, 2) != utils.make_seed(2, 1)
    assert utils.is_iterable([1]) and not utils.is_iterable("abc") and not utils.is_iterable(3)
    (tmp_path / "a1.tar").write_bytes(b"")
    (tmp_path / "b2.tar").write_bytes(b"")
    assert len(utils.glob_with_braces(str(tmp_path / "{a,b}*.tar"))) == 2
    assert utils.fnmatch_with_braces("x.png", "*.{jpg,png}")
    with pytest.warns(DeprecationWarning):
        utils.deprecated(lambda: 1)()

    @utils.obsolete
    def old():
        return 1

    with pytest.raises(utils.ObsoleteException):
        old()
    monkeypatch.setenv("ALLOW_OBSOLETE", "1")
    assert old() == 1
    assert utils.compute_sample_weights([(10, 1.0), (5, 4.0)]).tolist() == [0.5, 1.0]


def test_mock_dataset_with_epoch_and_with_length():
    mock = extradatasets.MockDataset({"x": 1}, 5)
    assert list(mock) == [{"x": 1}] * 5
    from tests.core.test_checkpoint import oracle

    oracle(lambda: wds_core.MockDataset(3, 7).batched(2, collation_fn=list))
    pipeline = wds_core.DataPipeline(list(range(4)))
    longer = extradatasets.with_epoch(pipeline, 10)
    assert list(longer) == [0, 1, 2, 3] * 2 + [0, 1] and list(pipeline) == [0, 1, 2, 3]  # a copy
    assert list(extradatasets.with_epoch([5, 6], 3)) == [5, 6, 5]
    assert list(wds_core.DataPipeline(list(range(9)), extradatasets.with_epoch(4))) == [0, 1, 2, 3]
    sized = extradatasets.with_length(pipeline, 42)
    assert len(sized) == 42 and list(sized) == [0, 1, 2, 3]
    with pytest.raises(TypeError):
        extradatasets.with_epoch(pipeline, 1, 2)
    with pytest.warns(UserWarning, match="len"):
        pipeline.with_length(3)
    pipeline.with_length(3, silent=True)


def test_pipeline_stage_protocol_and_context_manager(shards):
    spec, _, keys = shards

    class Every(wds_core.PipelineStage):
        def __init__(self, n):
            self.n = n

        def run(self, src):
            for i, x in enumerate(src):
                if i % self.n == 0:
                    yield x

    class Source(wds_core.PipelineStage):
        def run(self):
            yield from range(10)

    assert list(wds_core.DataPipeline(Source(), Every(3))) == [0, 3, 6, 9]

    class NotCallable:
        pass

    with pytest.raises(wds_core.SpecError, match="run"):
        list(wds_core.DataPipeline([1], NotCallable()))
    with wds_core.WebDataset(spec) as dataset:
        it = iter(dataset)
        next(it)
    assert dataset._run is None  # closed: the shard being read is closed too
    assert len(list(dataset)) == len(keys)
