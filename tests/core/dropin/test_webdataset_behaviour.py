"""Behaviour that webdataset's own test suite pins down, checked on wds (our tests, written from its facts)."""

import glob
import os
import random
import tarfile
import time
from itertools import islice
from pathlib import Path

import pytest

import wds_core as wds
from tests.conftest import make_samples, write_shard


@pytest.fixture
def tgz(tmp_path):
    """A gzipped shard of 47 samples, as webdataset's test data is."""
    path = str(tmp_path / "data.tgz")
    with wds.TarWriter(path) as sink:
        for i in range(47):
            sink.write({"__key__": f"k{i:03d}", "cls": i, "txt": random.Random(i).randbytes(3000).hex()})
    return path


def test_a_list_of_stages_is_flattened_and_a_list_of_data_is_a_source():
    stages = [wds.SimpleShardList("a-{0..2}.tar"), wds.map(lambda x: x["url"])]
    assert list(wds.DataPipeline(stages)) == ["a-0.tar", "a-1.tar", "a-2.tar"]  # webdataset's DataPipeline(list)
    assert list(wds.DataPipeline(stages[:1], [wds.map(lambda x: x["url"][-5:])])) == ["0.tar", "1.tar", "2.tar"]
    assert list(wds.DataPipeline([1, 2, 3], wds.map(lambda x: x * 2))) == [2, 4, 6]


def test_callables_and_generators_as_stages():
    assert list(wds.DataPipeline(lambda: iter([1, 2, 3, 4]), wds.map(lambda x: x + 1))) == [2, 3, 4, 5]
    assert list(wds.DataPipeline(lambda: iter([]), wds.shuffle(10))) == []
    assert list(wds.DataPipeline(lambda: iter([1, 2]), lambda src: (x + 4 for x in src))) == [5, 6]


def test_simple_shard_list_seed_attribute_and_order():
    urls = [str(i) for i in range(10)]
    assert wds.SimpleShardList(urls).seed is None
    assert [x["url"] for x in wds.SimpleShardList(urls)] == urls
    expected = list(urls)
    random.Random(17).shuffle(expected)  # webdataset: SimpleShardList(urls, seed) shuffles with Random(seed)
    assert [x["url"] for x in wds.SimpleShardList(urls, seed=17)] == expected
    pipeline = wds.DataPipeline(wds.SimpleShardList(urls))
    pipeline.stage(0).seed = 17  # set after the fact, read when iterating
    assert [x["url"] for x in pipeline] == expected
    assert [x["url"] for x in pipeline] == expected  # one order every epoch, as webdataset (its test_seed)


def test_detshuffle_epoch_counter():
    one = wds.DataPipeline(wds.SimpleShardList("{000000..000999}"), wds.detshuffle(10))
    two = wds.DataPipeline(wds.SimpleShardList("{000000..000999}"), wds.detshuffle(10))
    first = list(one)
    assert list(two) == first
    second = list(two)
    assert second != first and list(one) == second
    assert two.stage(1).epoch == 1


def test_resampled_shards_attributes():
    urls = ["http://example.com/file1", "http://example.com/file2", "http://example.com/file3"]
    worker_seed = lambda: 1  # noqa: E731
    rs = wds.ResampledShards(urls, 2, 0, worker_seed, False, int(1e6))
    assert (rs.urls, rs.nshards, rs.seed, rs.worker_seed, rs.deterministic, rs.epoch) == (
        urls, 2, 0, worker_seed, False, -1
    )  # fmt: skip
    shards = list(rs)
    assert len(shards) == 2 and all(s["url"] in urls for s in shards)


class TestDirectoryShardList:
    @staticmethod
    def make(folder, n, start=0):
        for i in range(start, start + n):
            Path(folder, f"file{i}.tar").touch()
            time.sleep(0.01)

    def test_oldest_first_and_unlink(self, tmp_path):
        self.make(tmp_path, 5)
        ds = wds.DirectoryShardList(str(tmp_path) + "/", pattern="*.tar", select="oldest", mode="unlink", poll=None)
        files = [f["url"] for f in islice(ds, 3)]
        assert files == [f"{tmp_path}/file{i}.tar._{os.getpid()}_" for i in range(3)]
        assert len(glob.glob(f"{tmp_path}/*.tar")) == 2

    def test_new_files_are_picked_up_and_claims_survive_abandoned_iterators(self, tmp_path):
        self.make(tmp_path, 5)
        ds = wds.DirectoryShardList(str(tmp_path) + "/", pattern="*.tar", mode="unlink", poll=None)
        src = iter(ds)
        seen = {next(src)["url"] for _ in range(3)}
        self.make(tmp_path, 5, 10)
        seen |= {f["url"] for f in ds}
        assert len(seen) == 10 and glob.glob(f"{tmp_path}/*.tar") == []
        self.make(tmp_path, 2, 20)
        claimed = {next(iter(ds))["url"] for _ in range(2)}  # each iterator abandoned after one shard
        for name in claimed:
            os.remove(name)  # still there: only asking for the next shard gives one back
        with pytest.raises(StopIteration):
            next(iter(ds))

    def test_keep_and_dead_claims(self, tmp_path):
        self.make(tmp_path, 1)
        ds = wds.DirectoryShardList(str(tmp_path) + "/", pattern="*.tar", poll=None, mode="keep")
        src = iter(ds)
        assert Path(next(src)["url"]).exists()
        with pytest.raises(StopIteration):
            next(src)
        assert (tmp_path / "file0.tar._done_").exists()
        self.make(tmp_path, 1, 5)
        ds = wds.DirectoryShardList(str(tmp_path) + "/", pattern="*.tar", poll=None)
        claimed = next(iter(ds))["url"]
        os.rename(claimed, claimed + "._99999999_")
        ds.cleanup_files_without_processes()
        assert not Path(claimed + "._99999999_").exists()


def test_pipe_cleaner_cases():
    assert wds.pipe_cleaner("foobar") == "foobar"
    assert wds.pipe_cleaner("pipe:foobar") == "foobar"
    for scheme in ("http", "https", "ais", "gs", "s3"):
        assert wds.pipe_cleaner(f"pipe:curl {scheme}://foo a b c") == f"{scheme}://foo"
    assert wds.pipe_cleaner("pipe:curl xxx://foo a b c") == "curl xxx://foo a b c"


def test_cached_reader_names_files_like_webdataset(tmp_path, tgz, monkeypatch):
    monkeypatch.chdir(os.path.dirname(tgz))
    name = os.path.basename(tgz)
    cache_dir = tmp_path / "cache"
    dataset = wds.DataPipeline(
        wds.SimpleShardList([name] * 3),
        wds.resampled(10),
        wds.cached_tarfile_to_samples(cache_dir=str(cache_dir), verbose=False, always=True),
        wds.to_tuple("txt", "cls"),
    )
    assert len(list(dataset)) == 470 and len(list(dataset)) == 470
    assert (cache_dir / name).read_bytes() == Path(tgz).read_bytes()


def test_lru_cleanup_removes_the_oldest(tmp_path):
    for i in range(20):
        (tmp_path / f"{i:06d}").write_bytes(b"x" * 4096)
        time.sleep(0.02)
    wds.lru_cleanup(str(tmp_path), 20 * 4096 / 2)
    names = os.listdir(tmp_path)
    assert sum(os.path.getsize(tmp_path / n) for n in names) <= 10 * 4096
    assert "000000" not in names and "000019" in names


def test_a_cut_compressed_shard_is_a_tarfile_read_error(tgz):
    cut = f"pipe:dd if={tgz} bs=1024 count=10 2>/dev/null"
    with pytest.raises(tarfile.ReadError):
        list(wds.DataPipeline(wds.SimpleShardList(cut), wds.tarfile_to_samples(), wds.shuffle(5)))
    got = list(wds.DataPipeline(wds.SimpleShardList(cut), wds.tarfile_to_samples(handler=wds.ignore_and_stop)))
    assert 0 < len(got) < 47
    assert len(list(wds.DataPipeline(wds.SimpleShardList(tgz), wds.tarfile_samples))) == 47


def test_shard_lists_split_and_check(tmp_path):
    pipeline = wds.DataPipeline(
        wds.SimpleShardList([str(i) for i in range(10)]), wds.split_by_node, wds.split_by_worker
    )
    assert [x["url"] for x in pipeline][:1] == ["0"]
    write_shard(tmp_path / "s.tar", make_samples("a", 3))
    with pytest.raises(ValueError):
        list(wds.DataPipeline(wds.SimpleShardList(str(tmp_path / "s.tar")), lambda src: iter([]), wds.non_empty))


def test_a_cut_stream_under_ignore_and_stop_delivers_the_members_read_whole(tgz):
    """webdataset's test_dataset_eof_handler and test_dataset_missing_totuple_raises: the sample at the cut comes
    with what was read of it, and the stage that needs a missing field says so."""
    cut = f"pipe:dd if={tgz} bs=1024 count=10 2>/dev/null"
    got = list(wds.WebDataset(cut, reading=wds.ShardReadOptions(handler=wds.ignore_and_stop)))
    assert 0 < len(got) < 47 and "cls" in got[-1]
    with pytest.raises(ValueError):
        list(wds.DataPipeline(
            wds.SimpleShardList(cut), wds.tarfile_to_samples(handler=wds.ignore_and_stop), wds.to_tuple("foo", "bar")
        ))  # fmt: skip
    with pytest.raises(ValueError):
        list(wds.DataPipeline(
            wds.SimpleShardList(cut), wds.tarfile_to_samples(handler=wds.ignore_and_stop), wds.rename(x="foo")
        ))  # fmt: skip


def test_webdatasets_positional_signatures(tmp_path):
    from wds_core.dropin import autodecode, cache, tariterators, writer

    path = str(tmp_path / "pos.tar")
    with writer.TarWriter(path, "bigdata", "bigdata", 0o444, None, True) as sink:  # fileobj, user, group, mode...
        sink.write({"__key__": "a", "txt": "x", "cls": 3})
    with tarfile.open(path) as tar:
        assert {m.uname for m in tar.getmembers()} == {"bigdata"} and {m.mtime for m in tar.getmembers()} == {0}
    upper = wds.handle_extension("txt", lambda data: data.decode().upper())
    decoder = autodecode.Decoder([upper], None, None, ["txt"])  # handlers, pre, post, only
    assert decoder({"__key__": "a", "txt": b"hi", "cls": b"1"}) == {"__key__": "a", "txt": "HI", "cls": b"1"}
    with pytest.raises(TypeError, match="multiple values"):
        autodecode.Decoder([upper], None, pre=[])
    opened = list(tariterators.url_opener([path], bufsize=1 << 16))  # gopen's options: accepted
    assert opened[0]["stream"].read(3) and opened[0]["url"] == path
    opened[0]["stream"].close()
    with pytest.raises(AssertionError):  # webdataset asserts the URL is text
        cache.url_to_cache_name(123)


def test_the_decoders_table_maps_pickles_to_unpickle_loads(monkeypatch):
    import pickle

    from wds_core.dropin import autodecode

    assert autodecode.decoders["pkl"](pickle.dumps({"a": 1})) == {"a": 1}
    assert {"pkl", "pickle", "pyd"} <= set(autodecode.decoders) and "pyd" in autodecode.decoders
    with pytest.raises(wds.DecodingError, match="allow_pickle=True"):  # never by default
        wds.Decoder()({"__key__": "k", "pkl": pickle.dumps(1)})
    monkeypatch.setenv("WDS_SECURE", "1")
    with pytest.raises(ValueError, match="Unpickling is not allowed"):
        autodecode.decoders["pkl"](pickle.dumps({"a": 1}))


def test_local_path_only_where_webdataset_gives_it(tmp_path, http_server):
    """Issue 44: the ``tarfile_to_samples()`` stage added ``__local_path__`` to every sample of a local shard; a
    collation turning every key into a batch field gained a column.  webdataset 1.0.2 gives it only where its
    opener says where the shard is: ``WebDataset`` (a local shard's path, or the file its cache keeps) and
    ``cached_tarfile_to_samples``.  The same fields as webdataset on each path."""
    webdataset = pytest.importorskip("webdataset")
    from wds_core import dropin

    local = write_shard(tmp_path / "l.tar", make_samples("l", 4))
    write_shard(os.path.join(http_server.root, "r.tar"), make_samples("r", 4))
    remote = http_server.url + "/r.tar"

    def fields(module, url, how, cache):
        if how == "WebDataset":
            dataset = module.WebDataset(url, shardshuffle=False, cache_dir=cache)
        elif how == "tarfile_to_samples":
            dataset = module.DataPipeline(module.SimpleShardList(url), module.tarfile_to_samples())
        else:  # webdataset's reader rebuilt from its pieces, through its file cache
            pieces, tree = module.filters.pipelinefilter, module.tariterators
            dataset = module.DataPipeline(
                module.SimpleShardList(url), module.cache.FileCache(cache_dir=cache),
                pieces(tree.tar_file_expander)(), pieces(tree.group_by_keys)(),
            )  # fmt: skip
        samples = list(dataset)
        return [{k: (v if k != "__local_path__" else os.path.basename(v)) for k, v in s.items()} for s in samples]

    cases = [
        (local, "WebDataset", None),
        (local, "tarfile_to_samples", None),
        (remote, "tarfile_to_samples", None),
        (remote, "WebDataset", None),
        (remote, "WebDataset", "c"),
        (remote, "cached", "c"),
        (local, "cached", "c"),
    ]
    (tmp_path / "theirs").mkdir()
    (tmp_path / "ours").mkdir()
    for url, how, cache in cases:
        theirs = fields(webdataset, url, how, cache and str(tmp_path / "theirs"))  # http through its curl
        ours = fields(dropin, url, how, cache and str(tmp_path / "ours"))
        assert [set(s) for s in ours] == [set(s) for s in theirs], (url, how, cache)
        if "__local_path__" in theirs[0]:
            assert [s["__local_path__"] for s in ours] == [s["__local_path__"] for s in theirs], (url, how, cache)


@pytest.mark.filterwarnings("ignore:WebDataset\\(shardshuffle=:UserWarning")  # webdataset's own, about its call
def test_a_dataset_of_shards_is_the_source_as_in_webdataset_0_2(tmp_path):
    """Issue 57: 0.2.x code builds ``wds.WebDataset(wds.SimpleShardList([...]))`` and gets that dataset as the shard
    source (no node or worker split, no shard shuffle: webdataset 0.2.86 ``append``s it after ``assert not
    resampled``); through the switch it was ``SpecError: shard URLs must be strings, got dict``.  webdataset 1.0.2
    refuses it with an ``AssertionError``, so accepting it breaks no 1.0.2 code."""
    from wds_core import dropin

    real = pytest.importorskip("webdataset")
    paths = []
    for s in range(3):
        paths.append(write_shard(tmp_path / f"s{s}.tar", make_samples(f"s{s}-", 4)))
    with pytest.raises(AssertionError):
        list(real.WebDataset(real.SimpleShardList(paths)))
    keys = [s["__key__"] for s in dropin.WebDataset(dropin.SimpleShardList(paths), shardshuffle=True, seed=3)]
    assert keys == [f"s{s}-{i:05d}" for s in range(3) for i in range(4)]  # the list's own order, all of it
    decoded = dropin.WebDataset(dropin.SimpleShardList(paths[:1])).decode(only="txt").to_tuple("__key__", "txt")
    assert [key for key, _ in decoded] == [f"s0-{i:05d}" for i in range(4)]
    with pytest.raises(wds.SpecError, match="resampled"):
        dropin.WebDataset(dropin.SimpleShardList(paths), resampled=True)
    from wds_core.testing import check_resume

    keys = check_resume(lambda: dropin.WebDataset(dropin.SimpleShardList(paths)).shuffle(3, seed=1), step=4)
    assert len(keys) == 12  # checkpointable as any shard list is
