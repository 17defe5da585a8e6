"""wds_core.stages.sampling: keeping items with a probability, drawing with replacement; both resumable."""

import pytest

import wds_core as wds
from wds_core.errors import SpecError
from wds_core.stages.sampling import RandomSample, Resample
from wds_core.testing import check_resume

ITEMS = [{"__key__": f"k{i:03d}", "i": i} for i in range(400)]


def keys(*stages, seed=1):
    return [item["__key__"] for item in wds.DataPipeline(list(ITEMS), *stages, seed=seed)]


def test_each_item_is_kept_with_its_probability_in_order():
    kept = keys(RandomSample(0.25))
    assert 60 < len(kept) < 140 and kept == sorted(kept)
    assert keys(RandomSample(0.25)) == kept and keys(RandomSample(0.25), seed=2) != kept
    assert keys(RandomSample(1.0)) == [item["__key__"] for item in ITEMS] and keys(RandomSample(0.0)) == []


@pytest.mark.parametrize("p", [-0.1, 1.5])
def test_a_probability_outside_0_1_is_refused(p):
    with pytest.raises(SpecError, match="between 0 and 1"):
        RandomSample(p)


def test_draws_with_replacement():
    drawn = keys(Resample(1000))
    assert len(drawn) == 1000 and len(set(drawn)) < 400 and set(drawn) <= {item["__key__"] for item in ITEMS}
    assert keys(Resample(1000)) == drawn
    assert list(wds.DataPipeline([], Resample(5))) == []
    with pytest.raises(SpecError, match=">= 0"):
        Resample(-1)


@pytest.mark.parametrize("stage", [RandomSample(0.3), Resample(150)], ids=["rsample", "resampled"])
def test_resume_at_every_step(stage):
    check_resume(lambda: wds.DataPipeline(list(ITEMS[:60]), stage, seed=4), step=3)
