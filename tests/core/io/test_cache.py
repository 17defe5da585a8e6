import gc
import multiprocessing
import os
import tarfile

import pytest

import wds_core
from tests.conftest import make_samples, write_shard
from tests.core.io.remote.test_rangestream import FAST, contents, local_dataset, small_ranges
from wds_core.errors import ShardOpenError, SpecError
from wds_core.io.cache import ShardCache
from wds_core.io.storage import open_shard


def files_under(directory):
    return sorted(os.path.relpath(os.path.join(r, n), directory) for r, _, ns in os.walk(directory) for n in ns)


def test_cache_names_mirror_urls_and_never_collide(tmp_path):
    cache = ShardCache(tmp_path)
    a = cache.path_for("s3://bucket-a/dir/shard-000.tar")
    assert a == str(tmp_path / "s3" / "bucket-a" / "dir" / "shard-000.tar")
    names = {
        cache.path_for(url)
        for url in [
            "s3://bucket-a/dir/shard-000.tar",
            "s3://bucket-b/dir/shard-000.tar",
            "gs://bucket-a/dir/shard-000.tar",
            "s3://bucket-a/other/shard-000.tar",
            "s3://bucket-a/dir//shard-000.tar",
            "http://host:8080/dir/shard-000.tar?part=1",
            "http://host:8080/dir/shard-000.tar?part=2",
            "http://host/../etc/passwd",
            "http://host/%2E%2E/etc/passwd",
            "s3://bucket-a/dir/shard-000.tar.partial",
        ]
    }
    assert len(names) == 10
    for name in names:
        assert os.path.commonpath([name, str(tmp_path)]) == str(tmp_path) and ".." not in name.split(os.sep)
    long = cache.path_for("s3://b/" + "x" * 400 + ".tar")
    assert max(len(part) for part in long.split(os.sep)) <= 180
    assert long != cache.path_for("s3://b/" + "x" * 401 + ".tar")


def test_url_to_name_is_used_and_checked(tmp_path):
    cache = ShardCache(tmp_path, url_to_name=lambda url: url.rsplit("/", 1)[1])
    assert cache.path_for("s3://b/d/x.tar") == str(tmp_path / "x.tar")
    with pytest.raises(SpecError, match="relative path inside the cache"):
        ShardCache(tmp_path, url_to_name=lambda url: "../x.tar").path_for("s3://b/x.tar")


def test_stream_fills_the_cache_and_the_second_epoch_reads_it(http_server, tmp_path, monkeypatch):
    paths, expected = local_dataset(http_server.root)
    small_ranges(monkeypatch)
    cache_dir = tmp_path / "cache"
    url = http_server.url + "/shard-{000..002}.tar"
    dataset = wds_core.WebDataset(url, storage=wds_core.Storage(cache=wds_core.ShardCache(str(cache_dir))))
    assert contents(dataset) == expected
    cached = files_under(cache_dir)
    assert cached == [f"http/127.0.0.1%3A{http_server.port}/shard-{i:03d}.tar" for i in range(3)]
    for path, name in zip(paths, cached):
        assert open(path, "rb").read() == open(cache_dir / name, "rb").read()
    served = http_server.gets
    assert contents(dataset) == expected
    assert http_server.gets == served  # the second epoch never asked the server


def test_stopping_early_leaves_no_file(http_server, tmp_path):
    local_dataset(http_server.root, nshards=1, size=100_000)  # 4 MB: the reader stops after its first 1 MiB
    cache_dir = tmp_path / "cache"
    stream = iter(
        wds_core.WebDataset(
            http_server.url + "/shard-000.tar",
            storage=wds_core.Storage(cache=wds_core.ShardCache(str(cache_dir))),
        )
    )
    next(stream)
    del stream
    gc.collect()
    assert files_under(cache_dir) == []


def test_a_failed_download_is_never_cached(http_server, tmp_path, monkeypatch):
    local_dataset(http_server.root, nshards=1)
    small_ranges(monkeypatch)
    cache_dir = tmp_path / "cache"
    http_server.faults.fail(100)  # more than the attempts of all the ranges in flight
    http_server.faults.pass_next(10)  # 40 KiB arrive and go to the cache's temporary file first
    dataset = wds_core.WebDataset(
        http_server.url + "/shard-000.tar",
        storage=wds_core.Storage(retry=FAST, cache=wds_core.ShardCache(str(cache_dir))),
    )
    with pytest.raises(ShardOpenError):
        list(dataset)
    assert files_under(cache_dir) == []


def test_restoring_inside_a_shard_does_not_cache_half_of_it(http_server, tmp_path):
    local_dataset(http_server.root, nshards=1)
    cache_dir = tmp_path / "cache"
    url = http_server.url + "/shard-000.tar"
    dataset = wds_core.WebDataset(url)
    stream = iter(dataset)
    for _ in range(10):
        next(stream)
    state = dataset.state_dict()
    fresh = wds_core.WebDataset(url, storage=wds_core.Storage(cache=wds_core.ShardCache(str(cache_dir))))
    fresh.load_state_dict(state)
    assert len(list(fresh)) == 30
    assert files_under(cache_dir) == []
    assert len(list(fresh)) == 40  # the next epoch reads from the start and fills the cache
    assert len(files_under(cache_dir)) == 1


def test_tar_padding_after_the_end_is_cached_too(http_server, tmp_path):
    path = os.path.join(http_server.root, "padded.tar")
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
        for name in ("a.txt", "a.cls"):
            info = tarfile.TarInfo(name)
            info.size = 3
            tar.addfile(info, __import__("io").BytesIO(b"abc"))
    assert os.path.getsize(path) == 10240  # record padding after the end-of-archive blocks
    cache_dir = tmp_path / "cache"
    assert (
        len(
            list(
                wds_core.WebDataset(
                    http_server.url + "/padded.tar",
                    storage=wds_core.Storage(cache=wds_core.ShardCache(str(cache_dir))),
                )
            )
        )
        == 1
    )
    cached = cache_dir / "http" / f"127.0.0.1%3A{http_server.port}" / "padded.tar"
    assert cached.read_bytes() == open(path, "rb").read()


def test_least_recently_used_files_are_evicted(http_server, tmp_path):
    paths, _ = local_dataset(http_server.root, nshards=4)
    size = os.path.getsize(paths[0])
    cache = ShardCache(tmp_path / "cache", cache_size=int(size * 2.5))

    def read(i):
        with open_shard(f"{http_server.url}/shard-{i:03d}.tar", cache=cache) as stream:
            while stream.read(1 << 20):
                pass

    for i in (0, 1):
        read(i)
    os.utime(cache.path_for(f"{http_server.url}/shard-000.tar"), (1, 1))  # shard 0 used long ago
    read(1)
    read(2)  # over budget: shard 0, the least recently used, goes
    names = [os.path.basename(n) for n in files_under(tmp_path / "cache")]
    assert names == ["shard-001.tar", "shard-002.tar"]
    read(3)
    names = [os.path.basename(n) for n in files_under(tmp_path / "cache")]
    assert "shard-003.tar" in names and len(names) == 2


def test_local_shards_opt_in(tmp_path, shards):
    cache_dir = tmp_path / "cache"
    spec, paths, keys = shards
    assert [
        s["__key__"]
        for s in wds_core.WebDataset(spec, storage=wds_core.Storage(cache=wds_core.ShardCache(str(cache_dir))))
    ] == keys
    assert files_under(cache_dir) == []
    dataset = wds_core.WebDataset(
        spec, storage=wds_core.Storage(cache=wds_core.ShardCache(str(cache_dir), cache_local=True))
    )
    assert [s["__key__"] for s in dataset] == keys
    assert len(files_under(cache_dir)) == 4
    assert all(name.startswith("file" + os.sep) for name in files_under(cache_dir))


def _read_all(args):
    url, cache_dir = args
    return [
        (s["__key__"], s["bin"])
        for s in wds_core.WebDataset(url, storage=wds_core.Storage(cache=wds_core.ShardCache(cache_dir)))
    ]


@pytest.mark.slow
def test_processes_sharing_a_cache_directory(http_server, tmp_path):
    local_dataset(http_server.root, nshards=3)
    url = http_server.url + "/shard-{000..002}.tar"
    cache_dir = str(tmp_path / "cache")
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        results = pool.map(_read_all, [(url, cache_dir)] * 4)
    assert all(result == results[0] for result in results) and len(results[0]) == 120
    assert [os.path.basename(n) for n in files_under(cache_dir)] == [f"shard-{i:03d}.tar" for i in range(3)]
    assert _read_all((url, cache_dir)) == results[0]


def test_unwritable_cache_still_reads(http_server, tmp_path):
    local_dataset(http_server.root, nshards=1)
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.warns(UserWarning, match="not writable"):
        samples = list(
            wds_core.WebDataset(
                http_server.url + "/shard-000.tar",
                storage=wds_core.Storage(cache=wds_core.ShardCache(str(blocker / "cache"))),
            )
        )
    assert len(samples) == 40


def test_cached_samples_keep_their_remote_url(http_server, tmp_path):
    write_shard(os.path.join(http_server.root, "one.tar"), make_samples("k", 3))
    url = http_server.url + "/one.tar"
    for _ in range(2):
        samples = list(
            wds_core.WebDataset(url, storage=wds_core.Storage(cache=wds_core.ShardCache(str(tmp_path / "c"))))
        )
        assert [s["__url__"] for s in samples] == [url] * 3


def test_pipe_shards_are_cached_under_their_command(tmp_path, shards, capsys, monkeypatch):
    spec, paths, keys = shards
    cache = ShardCache(tmp_path / "cache")
    name = cache.path_for("pipe:curl -s -L http://host/dir/shard-000.tar")
    parts = os.path.relpath(name, tmp_path / "cache").split(os.sep)
    assert parts[0] == "pipe" and parts[2:] == ["http", "host", "dir", "shard-000.tar"]
    assert name != cache.path_for("pipe:curl -s -L http://host/dir/shard-000.tar | gunzip")
    assert cache.path_for("pipe:cat /some/file.tar").endswith("cat%20%2Fsome%2Ffile.tar")

    monkeypatch.setenv("WDS_VERBOSE_CACHE", "1")
    urls = [f"pipe:cat {p}" for p in paths]
    dataset = wds_core.WebDataset(urls, storage=wds_core.Storage(cache=wds_core.ShardCache(str(tmp_path / "cache"))))
    assert [s["__key__"] for s in dataset] == keys
    assert len(files_under(tmp_path / "cache")) == 4
    assert capsys.readouterr().out.count("[wds cache] cached") == 4
    for path in paths:
        os.rename(path, path + ".moved")  # the commands now fail: only the cache can serve them
    assert [s["__key__"] for s in dataset] == keys
    assert capsys.readouterr().out.count("[wds cache] cache hit") == 4


def test_a_failing_pipe_is_not_cached(tmp_path, shards):
    spec, paths, keys = shards
    url = f"pipe:cat {paths[0]}; exit 3"
    with pytest.raises(wds_core.PipeError):
        list(wds_core.WebDataset(url, storage=wds_core.Storage(cache=wds_core.ShardCache(str(tmp_path / "cache")))))
    assert files_under(tmp_path / "cache") == []
