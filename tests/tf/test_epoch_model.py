"""``TFSource`` against the model of an epoch (issue 67; tests/epochmodel.py): what a rank's ``tf.data.Dataset``
yields in an epoch, for each configuration hypothesis draws (its copies as worker processes or tf.data threads,
``epoch="all"`` or ``"each"``, batches in the workers), sample by sample; a configuration the model refuses must
be refused when the source is made, and the dataset's cardinality is what it yields."""

from __future__ import annotations

import collections
import os
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

tf = pytest.importorskip("tensorflow")

import wds_tf  # noqa: E402
from tests.conftest import FUZZ_EXAMPLES, counted_shards  # noqa: E402
from tests.epochmodel import SEED, Config, configs, expected  # noqa: E402
from wds_core.errors import SampleError, SpecError  # noqa: E402


def key_row(sample):
    return (sample["__key__"],)


def source_of(cfg: Config, spec: str, threads: bool, drop: bool):
    if cfg.mode in ("pad", "drop"):
        pipeline = wds_tf.WebDataset.balanced(spec, cfg.mode, shuffle=cfg.shuffle, seed=SEED, empty_check=False)
    else:
        pipeline = wds_tf.WebDataset(spec, shuffle=cfg.shuffle, seed=SEED, empty_check=False)
    pipeline = pipeline.map(key_row)
    if cfg.n is not None:
        pipeline = pipeline.with_epoch(cfg.n)
    copies = {"num_parallel_calls": cfg.workers} if threads else {"num_workers": cfg.workers}
    if cfg.workers == 1:
        copies = {}  # one copy: the pipeline read in the training process
    signature = (tf.TensorSpec((), tf.string),)
    epoch = "each" if cfg.mode == "each" else "all"
    return wds_tf.TFSource(pipeline, signature, batch_size=cfg.batch, drop_remainder=drop, epoch=epoch, **copies)


def rank_keys(cfg: Config, rank: int, drop: bool) -> tuple[list[str], int] | None:
    """What the rank's copies yield together by the model, and in how many elements (``None``: refused)."""
    keys_out: list[str] = []
    elements = 0
    for worker in range(cfg.workers):
        want = expected(cfg, rank, worker)
        if want.refused:
            return None
        keys = want.keys or []
        if cfg.batch is not None:
            whole = len(keys) // cfg.batch * cfg.batch
            keys = keys[:whole] if drop else keys
            elements += -(-len(keys) // cfg.batch)
        else:
            elements += len(keys)
        keys_out += keys
    return keys_out, elements


def read_rank(cfg: Config, spec: str, rank: int, threads: bool, drop: bool) -> None:
    if cfg.batch is not None and drop and cfg.n is not None and cfg.n < cfg.batch:
        with pytest.raises(SpecError, match="less than one batch"):
            source_of(cfg, spec, threads, drop)
        return
    model = rank_keys(cfg, rank, drop)
    if model is None:
        with pytest.raises(SpecError, match="shared by"):
            source_of(cfg, spec, threads, drop)
        return
    want, elements = model
    source = source_of(cfg, spec, threads, drop)
    try:
        promised = source.cardinality
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if promised is not None and promised != elements:  # a pass over the data gave nothing: fewer
                with pytest.raises((SampleError, tf.errors.OpError)):
                    list(source.dataset())
                return
            got = [key.decode() for (batch,) in source.dataset() for key in np.asarray(batch.numpy()).reshape(-1)]
    finally:
        source.close()
    assert collections.Counter(got) == collections.Counter(want), (cfg, rank, threads, drop, got)


def check(cfg: Config, threads: bool, drop: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        spec, _ = counted_shards(Path(tmp), cfg.sizes)
        for rank in range(cfg.ranks):
            os.environ.update(RANK=str(rank), WORLD_SIZE=str(cfg.ranks))
            try:
                read_rank(cfg, spec, rank, threads, drop)
            finally:
                os.environ.pop("RANK", None)
                os.environ.pop("WORLD_SIZE", None)


TF_MODES = ("plain", "each", "shared", "pad", "drop")


@settings(max_examples=max(FUZZ_EXAMPLES // 2, 30))
@given(configs(modes=TF_MODES, max_ranks=2, max_workers=3), st.booleans())
@example(Config(sizes=(4, 4, 4), ranks=1, workers=2, mode="shared", n=12, batch=3), False)
@example(Config(sizes=(4, 4, 4, 4), ranks=1, workers=2, mode="shared", n=16, batch=3), False)
def test_tf_threads_read_the_model(cfg, drop):
    check(cfg, threads=True, drop=drop)


@pytest.mark.slow
@settings(max_examples=max(FUZZ_EXAMPLES // 4, 15))
@given(configs(modes=TF_MODES, max_ranks=2, max_workers=3), st.booleans())
@example(Config(sizes=(100, 100, 100), ranks=1, workers=2, mode="shared", n=300, batch=32), False)
@example(Config(sizes=(100, 100, 100, 100), ranks=1, workers=2, mode="shared", n=400, batch=32), False)
def test_tf_workers_read_the_model(cfg, drop):
    """The issue's case among them: 3 shards of 100, 2 workers, with_epoch(300), batches of 32."""
    check(cfg, threads=False, drop=drop)
