"""wds_core.sources.lists: a list as a pipeline's source, its position its state."""

import json

import wds_core as wds
from wds_core.sources.lists import ListSource
from wds_core.testing import check_resume


def test_a_list_is_read_in_order_and_again_each_epoch():
    pipeline = wds.DataPipeline([3, 1, 2], wds.map(lambda x: x * 10))
    assert list(pipeline) == [30, 10, 20] and list(pipeline) == [30, 10, 20]


def test_its_position_is_its_state():
    source = ListSource(["a", "b", "c", "d"])
    it = iter(source)
    assert [next(it), next(it)] == ["a", "b"]
    state = json.loads(json.dumps(source.state_dict()))
    assert state == {"index": 2}
    fresh = ListSource(["a", "b", "c", "d"])
    fresh.load_state_dict(state)
    assert list(fresh) == ["c", "d"]


def test_resume_at_every_step_through_stages():
    items = [{"__key__": f"k{i:02d}", "i": i} for i in range(30)]
    check_resume(lambda: wds.DataPipeline(items, wds.shuffle(5), wds.batched(4, collation_fn=None), seed=2))
