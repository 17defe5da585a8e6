"""webdataset.filters over wds: same picks as webdataset for seeded shuffles, same outputs for its helpers."""

import io
import itertools
import pickle
import random

import numpy as np
import pytest

import wds_core
from wds_core import dropin
from wds_core.dropin import filters

webdataset = pytest.importorskip("webdataset")
wf = webdataset.filters


def _samples(n=12):
    return [
        {"__key__": f"k{i:02d}", "__url__": "u", "a.jpg": b"J%d" % i, "b.cls": b"%d" % i, "txt": b"t%d" % i}
        for i in range(n)
    ]


def test_shuffle_with_a_random_generator_picks_as_webdataset_does():
    data = list(range(500))
    for bufsize, initial in [(100, 10), (7, 100), (1000, 0)]:
        ours = list(filters._shuffle(iter(data), bufsize, initial, random.Random(5)))
        theirs = list(wf._shuffle(iter(data), bufsize, initial, random.Random(5)))
        assert ours == theirs
    assert list(filters._shuffle(iter(data), 50, seed=3)) == list(wf._shuffle(iter(data), 50, seed=3))
    assert sorted(filters._shuffle(iter(data), 50)) == data  # unseeded: a permutation


def test_detshuffle_gives_webdataset_order_for_each_epoch():
    data = list(range(300))
    stage = wf.detshuffle(40, 5, seed=11)
    expected = [list(stage.run(iter(data))) for _ in range(3)]  # its own epoch counter: 0, 1, 2
    pipeline = wds_core.DataPipeline(data, dropin.detshuffle(40, 5, seed=11))
    assert [list(pipeline) for _ in range(3)] == expected


def test_rng_shuffle_checkpoints_exactly_and_restores_the_generator():
    def make():
        return wds_core.DataPipeline(list(range(200)), wds_core.shuffle(30, 5, rng=random.Random(4)), seed=0)

    from tests.core.test_checkpoint import oracle

    oracle(make)
    with pytest.raises(wds_core.SpecError, match="seed= or rng="):
        wds_core.shuffle(10, seed=1, rng=random.Random(1))
    with pytest.raises(wds_core.SpecError, match="random.Random"):
        wds_core.shuffle(10, rng=42)
    with pytest.raises(TypeError, match="bogus"):
        wds_core.shuffle(10, bogus=1)  # no keyword is ignored


def test_pipelinefilter_curries_user_stages_and_pickles():
    stage = filters.pipelinefilter(_take_every)(3)
    assert list(stage(iter(range(10)))) == [0, 3, 6, 9]
    assert list(wds_core.DataPipeline(list(range(10)), stage)) == [0, 3, 6, 9]
    assert list(pickle.loads(pickle.dumps(stage))(iter(range(7)))) == [0, 3, 6]
    assert filters.compose(lambda x: x + 1, lambda x: x * 2)(3) == 8
    assert filters.pipeline([1, 2], lambda s: (x * 10 for x in s)) is not None


def _take_every(data, n):
    for i, x in enumerate(data):
        if i % n == 0:
            yield x


def test_underscored_functions_run_stages_on_iterators():
    samples = _samples()
    got = list(filters._to_tuple(filters._map(iter(samples), lambda s: {**s, "n": 1}), "__key__", "n"))
    assert got == [(s["__key__"], 1) for s in samples]
    assert len(list(filters._select(iter(samples), lambda s: s["__key__"] < "k05"))) == 5
    batches = list(filters._batched(iter(range(10)), 4))
    assert [b.tolist() for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert list(filters._unlisted(iter([[1, 2], [3]]))) == [1, 2, 3]


@pytest.mark.parametrize(
    "name,args,kw",
    [
        ("extract_keys", ("*.jpg", "cls;*.cls"), {}),
        ("extract_keys", ("*.png", "txt"), {"ignore_missing": True}),
        ("rename_keys", (("image", "*.jpg"),), {"label": "*.cls", "keep_unselected": True}),
        ("rename_keys", (), {"image": "*.jpg", "text": "txt"}),
    ],
)
def test_field_stages_match_webdataset(name, args, kw):
    ours = list(getattr(filters, "_" + name)(iter(_samples()), *args, **kw))
    theirs = list(getattr(wf, "_" + name)(iter(_samples()), *args, **kw))
    assert ours == theirs


def test_field_stage_errors_name_the_sample():
    with pytest.raises(wds_core.MissingFieldError, match="k00"):
        list(filters._extract_keys(iter(_samples()), "*.png"))
    with pytest.raises(KeyError):  # webdataset's type is ValueError; ours is both
        list(filters._rename_keys(iter(_samples()), image="*.png"))
    with pytest.raises(ValueError, match="several fields"):
        list(filters._extract_keys(iter(_samples()), "*"))


def test_xdecode_and_pickle_stays_off():
    sample = {"__key__": "k", "a.txt": b"hello", "b.bin": b"\x00\x01", "d.odd": b"?"}
    got = next(filters._xdecode(iter([sample]), must_decode=False))
    assert got["a.txt"] == "hello" and got["b.bin"] == b"\x00\x01" and got["d.odd"] == b"?"
    with pytest.raises(wds_core.DecodingError, match="allow_pickle"):
        next(filters._xdecode(iter([{**sample, "c.pyd": pickle.dumps({"x": 1})}]), must_decode=False))
    with pytest.raises(wds_core.DecodingError, match="no xdecode decoder"):
        next(filters._xdecode(iter([sample])))
    got = next(filters._xdecode(iter([sample]), ("*.odd", lambda s: s.read().decode())))
    assert got["d.odd"] == "?"
    allowed = {"__key__": "k", "c.pyd": pickle.dumps([1, 2])}
    assert next(filters._xdecode(iter([allowed]), allow_pickle=True))["c.pyd"] == [1, 2]


def test_rsample_is_seeded_and_keeps_about_p():
    data = list(range(4000))
    first = list(wds_core.DataPipeline(data, filters.rsample(0.25), seed=3))
    again = list(wds_core.DataPipeline(data, filters.rsample(0.25), seed=3))
    assert first == again and 850 < len(first) < 1150
    assert list(wds_core.DataPipeline(data, filters.rsample(1.0), seed=1)) == data
    assert list(wds_core.DataPipeline(data, filters.rsample(0.0), seed=1)) == []
    with pytest.raises(wds_core.SpecError):
        filters.rsample(1.5)


def test_associate_info_and_log_keys(tmp_path, capsys):
    extra = {"k01": {"label": 5}}
    got = list(filters._associate(iter(_samples(3)), extra))
    assert got[1]["label"] == 5 and "label" not in got[0]
    got = list(filters._associate(iter(_samples(2)), lambda key: {"len": len(key)}))
    assert got[0]["len"] == 3
    out = io.StringIO()
    list(filters._info(iter(_samples(5)), n=2, stream=out, name="here"))
    assert out.getvalue().count("--- here") == 2
    log = tmp_path / "keys.log"
    list(filters._log_keys(iter(_samples(4)), str(log)))
    assert [line.split("\t")[-1] for line in log.read_text().splitlines()] == ["k00", "k01", "k02", "k03"]


def test_collation_switches_and_helpers():
    rows = [(1, np.zeros(2), "a"), (2, np.ones(2), "b")]
    ints, arrays, strs = filters.default_collation_fn(rows)
    assert ints.tolist() == [1, 2] and arrays.shape == (2, 2) and strs == ["a", "b"]
    ints, arrays, _ = filters.default_collation_fn(rows, combine_tensors=False, combine_scalars=False)
    assert ints == [1, 2] and isinstance(arrays, list)
    assert filters.transform_with([1, 2, 3], [None, str]) == [1, "2", 3]
    assert filters.parse_field_spec("jpg;png cls") == [["jpg", "png"], ["cls"]]
    assert filters.getfirst({"png": 1}, "jpg;png") == 1
    assert filters.find_decoder(filters.default_decoders, "x/y.TXT") is filters.decode_text


def test_cached_replays_the_first_epoch_and_lmdb_is_refused():
    read = []

    def source():
        for i in range(5):
            read.append(i)
            yield i

    pipeline = wds_core.DataPipeline(source, filters.Cached())
    assert list(pipeline) == list(pipeline) == list(range(5))
    assert read == list(range(5))  # the second epoch came from memory
    with pytest.raises(wds_core.CheckpointError, match="memory"):
        it = iter(pipeline)
        next(it)
        pipeline.state_dict()
    with pytest.raises(NotImplementedError, match="LMDBCached is not provided.*cache_dir"):
        filters.LMDBCached("/tmp/nowhere")


@pytest.mark.parametrize("bufsize", [0, 1, -3])
def test_a_buffer_under_two_keeps_the_order_in_every_form(bufsize):
    """Issue 44: a PipelineStage whose run() called ``_shuffle(src, 0, 0, rng)`` got a SpecError; webdataset keeps the
    order for any bufsize under 2 (and still draws from rng once an item).  The same for ``shuffle``,
    ``detshuffle`` and the fluid method."""
    data = list(range(20))
    ours_rng, theirs_rng = random.Random(9), random.Random(9)
    ours = list(filters._shuffle(iter(data), bufsize, 0, ours_rng))
    assert ours == list(wf._shuffle(iter(data), bufsize, 0, theirs_rng)) == data
    assert ours_rng.random() == theirs_rng.random()  # the same draws were taken
    assert list(filters.shuffle(bufsize, 0, rng=random.Random(2))(iter(data))) == data
    expected = list(webdataset.DataPipeline(lambda: iter(data), wf.detshuffle(bufsize, 0, seed=5)))
    assert list(wds_core.DataPipeline(data, dropin.detshuffle(bufsize, 0, seed=5))) == expected == data

    class Stage(dropin.PipelineStage):  # as the training code that found it wrote it
        def run(self, src):
            return filters._shuffle(src, bufsize, 0, random.Random(1))

    assert list(wds_core.DataPipeline(data, Stage())) == data


def _counted(log, n):
    for i in range(n):
        log.append(i)
        yield i


def test_batched_reads_one_item_ahead_as_webdataset_does_in_every_form():
    """Issue 44: webdataset hands a full batch on only once the next item has come, so after k batches its
    upstream has made k*n + 1 items; code that stops after k batches and keeps a seeded generator alive across
    epochs relies on that count.  Every batching form of the webdataset tree does the same; wds's own
    ``batched`` hands the batch on at once (k*n)."""

    def forms(mod, fil):
        return {
            "_batched": lambda up: fil._batched(up(), 4, collation_fn=None),
            "stage": lambda up: iter(mod.DataPipeline(up, mod.batched(4, collation_fn=None))),
            "stage, partial=False": lambda up: iter(mod.DataPipeline(up, mod.batched(4, None, partial=False))),
            "fluid": lambda up: iter(mod.FluidWrapper(mod.DataPipeline(up)).batched(4, collation_fn=None)),
            "listed": lambda up: iter(mod.FluidWrapper(mod.DataPipeline(up)).listed(4)),
            "subclass": lambda up: iter(type("P", (mod.DataPipeline, mod.FluidInterface), {})(up).batched(4, None)),
        }

    theirs, ours = forms(webdataset, wf), forms(dropin, filters)
    for name in theirs:
        for total, taken in [(100, 5), (20, 5), (21, 5), (22, 6)]:
            made: list[list[int]] = [[], []]
            got = [
                list(itertools.islice(form[name](lambda log=log, total=total: _counted(log, total)), taken))
                for form, log in zip((theirs, ours), made)
            ]
            assert got[1] == got[0] and len(made[1]) == len(made[0]), (name, total, taken)
            assert len(made[0]) == min(total, 4 * taken + 1)
    native: list[int] = []
    assert (
        len(
            list(
                itertools.islice(
                    wds_core.FluidWrapper(wds_core.DataPipeline(lambda: _counted(native, 100))).batched(4), 5
                )
            )
        )
        == 5
    )
    assert len(native) == 20  # wds's own batching asks for no item it does not hand on


def test_a_generator_kept_across_epochs_draws_as_under_webdataset(tmp_path):
    """Issue 44's report: five batches of four an epoch from a shuffle with a ``random.Random`` that lives on
    across epochs; webdataset makes 21 draws an epoch, so epoch 2's order depends on the item read ahead."""
    from tests.conftest import make_samples, write_shard

    for s in range(3):
        write_shard(tmp_path / f"e-{s}.tar", make_samples(f"s{s}-", 30))
    spec = str(tmp_path / "e-{0..2}.tar")

    def epochs(mod):
        rng = random.Random(7)
        dataset = (
            mod.WebDataset(spec, shardshuffle=False)
            .shuffle(10, initial=10, rng=rng)
            .to_tuple("__key__")
            .batched(4, collation_fn=None)
            .with_epoch(5)
        )
        return [[key for batch in dataset for (key,) in batch] for _ in range(2)], rng.random()

    assert epochs(dropin) == epochs(webdataset)
