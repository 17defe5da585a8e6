"""Indexed random access: offset indexes, descriptors, ShardListDataset, samplers."""

import io
import json
import os
import subprocess
import sys
import tarfile

import pytest
from hypothesis import given
from hypothesis import strategies as st

import wds_core as wds
from tests.conftest import tar_bytes
from wds_core.errors import ShardOpenError, SpecError, TarFormatError, TruncatedShardError
from wds_core.tar.tarindex import ShardIndex, walk_headers

EXTRA = ("__index__", "__shard__", "__shardindex__")


def streamed(urls):
    return list(wds.WebDataset(urls))


def plain(sample):
    return {k: v for k, v in sample.items() if k not in EXTRA}


def assert_same_as_streaming(ds, urls):
    stream = streamed(urls)
    assert len(ds) == len(stream)
    for i, expected in enumerate(stream):
        got = ds[i]
        assert plain(got) == expected, i
        assert got["__index__"] == i and got["__shard__"] == expected["__url__"]


def tricky_members(prefix):
    """Long names (prefix field, pax, GNU), empty members, dotted dirs, metadata, upper-case extensions."""
    long_dir = "d" * 120
    return [
        ("__meta__.json", b"{}"),
        (f"{prefix}a.txt", b"first"),
        (f"{prefix}a.CLS", b"1"),
        (f"{long_dir}/{prefix}b.txt", b""),  # empty member, 120-char directory
        (f"{long_dir}/{prefix}b.cls", b"2"),
        (f"dir.v2/{prefix}" + "k" * 300 + ".txt", b"pax name"),  # > 255 bytes: pax (or GNU) header
        (f"dir.v2/{prefix}" + "k" * 300 + ".seg.png", b"\x89PNG" + bytes(3000)),
        (f"{prefix}c.txt", bytes(range(256)) * 5),
    ]


@pytest.fixture(params=[tarfile.PAX_FORMAT, tarfile.GNU_FORMAT], ids=["pax", "gnu"])
def tricky(tmp_path, request):
    urls = []
    for s in range(3):
        path = tmp_path / f"t-{s}.tar"
        path.write_bytes(tar_bytes(tricky_members(f"s{s}-"), fmt=request.param))
        urls.append(str(path))
    return urls


def test_random_access_equals_streaming_for_every_index(tricky):
    ds = wds.ShardListDataset(tricky)
    assert_same_as_streaming(ds, tricky)
    assert ds[-1]["__index__"] == len(ds) - 1
    with pytest.raises(IndexError):
        ds[len(ds)]


def test_writer_output_descriptor_and_sidecar_index(tmp_path):
    pattern = str(tmp_path / "w-%03d.tar")
    with wds.ShardWriter(pattern, maxcount=7, descriptor=str(tmp_path / "ds.json")) as sink:
        for i in range(30):
            sink.write({"__key__": f"k{i:04d}" + ("x" * 200 if i % 9 == 0 else ""), "txt": f"v{i}", "cls": i})
    urls = sorted(str(tmp_path / name) for name in os.listdir(tmp_path) if name.endswith(".tar"))
    ds = wds.ShardListDataset(str(tmp_path / "ds.json"))
    assert [s["nsamples"] for s in ds.shards] == [7, 7, 7, 7, 2]
    assert_same_as_streaming(ds, urls)
    # a sidecar index is used when it is up to date, ignored when its size is stale
    index = ShardIndex.build_local(urls[0])
    index.save(urls[0] + ".idx")
    assert wds.ShardListDataset(urls)[3]["txt"] == b"v3"
    stale = json.loads(open(urls[0] + ".idx").read())
    stale["size"] += 512
    stale["members"][0][2] += 1  # would give wrong bytes if it were used
    open(urls[0] + ".idx", "w").write(json.dumps(stale))
    assert_same_as_streaming(wds.ShardListDataset(urls), urls)


def test_built_indexes_are_cached_in_cache_dir(tmp_path, shards):
    spec, paths, _ = shards
    cache = tmp_path / "cache"
    wds.ShardListDataset(spec, cache_dir=cache)
    cached = [os.path.join(root, name) for root, _, names in os.walk(cache) for name in names]
    assert len(cached) == 4 and all(name.endswith(".tar.idx") for name in cached)
    assert ShardIndex.from_json(open(cached[0]).read()).size == os.path.getsize(paths[0])


@given(
    members=st.lists(
        st.tuples(
            st.text("abcXYZ_-", min_size=1, max_size=12),
            st.integers(0, 3),
            st.text("abc", min_size=1, max_size=4),
            st.integers(0, 2000),
        ),
        min_size=1,
        max_size=12,
    ),
    fmt=st.sampled_from([tarfile.PAX_FORMAT, tarfile.GNU_FORMAT, tarfile.USTAR_FORMAT]),
)
def test_header_walk_matches_stdlib_tarfile(members, fmt):
    named = []
    for i, (stem, depth, ext, size) in enumerate(members):
        name = (
            "/".join(["sub" * 20] * depth + [f"{stem}{i}.{ext}"]) if fmt != tarfile.USTAR_FORMAT else f"{stem}{i}.{ext}"
        )
        if depth == 3 and fmt != tarfile.USTAR_FORMAT:
            name = "x" * 250 + "/" + name  # past the ustar limits
        named.append((name, bytes([i % 256]) * size))
    data = tar_bytes(named, fmt=fmt)
    ours = list(walk_headers(lambda offset, n: data[offset : offset + n], len(data)))
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        theirs = [(m.name, m.offset, m.offset_data, m.size) for m in archive.getmembers() if m.isfile()]
    assert [(n, d, s) for n, _, d, s in ours] == [(n, d, s) for n, _, d, s in theirs]
    assert [h for _, h, _, _ in ours] == [h for _, h, _, _ in theirs]


def test_broken_shards_name_shard_and_offset(tmp_path):
    good = tar_bytes([("a.txt", b"x" * 2000), ("b.txt", b"y")])
    cut = tmp_path / "cut.tar"
    cut.write_bytes(good[:1500])
    with pytest.raises(TruncatedShardError) as info:
        wds.ShardListDataset([str(cut)])
    assert "cut.tar" in str(info.value) and info.value.offset == 1500
    bad = bytearray(good)
    bad[2560 + 10] ^= 0xFF  # the second header's name: its checksum no longer matches
    corrupt = tmp_path / "corrupt.tar"
    corrupt.write_bytes(bytes(bad))
    with pytest.raises(TarFormatError) as info:
        wds.ShardListDataset([str(corrupt)])
    assert info.value.offset == 2560


@pytest.mark.parametrize("helper", [True, False], ids=["map-copied", "pread"])
def test_a_shard_cut_after_it_was_indexed_is_reported_not_a_crash(tmp_path, monkeypatch, helper):
    """Read through a map, the cut makes the next read past it a SIGBUS, which the compiled copy's guard turns
    into a short read (mapcopy.c); read with pread it comes back short: either way the sample is refused with
    its member and offset, never handed out short, and the samples before the cut still read."""
    from wds_core.io import localfiles as local

    if not helper:
        monkeypatch.setattr(local, "_mapped_copy", lambda: None)
    elif local._mapped_copy() is None:
        if os.environ.get("WDS_REQUIRE_COMPILED") == "1":
            pytest.fail("the compiled map copy (wds_core/io/mapcopy.c) was not built")
        pytest.skip("the compiled map copy is not built here or is turned off (WDS_PURE_PYTHON)")
    path = tmp_path / "s.tar"
    with wds.TarWriter(str(path)) as sink:
        for i in range(40):
            sink.write({"__key__": f"k{i:02d}", "bin": bytes([i]) * 20_000, "cls": i})
    dataset = wds.ShardListDataset([str(path)])
    assert dataset[0]["bin"] == bytes(20_000)
    os.truncate(path, 30 * 22_016 + 2000)  # inside k30.bin (a sample: 20,480 bytes of bin, 512 of cls, 2 headers)
    assert dataset[29]["bin"] == bytes([29]) * 20_000
    for index in (30, 39):
        with pytest.raises(TruncatedShardError) as info:
            dataset[index]
        assert info.value.url == str(path) and info.value.member == f"k{index}.bin"
    assert info.value.offset is not None
    dataset.close()


def test_descriptor_bases_and_nested_datasets(tmp_path, shards):
    spec, paths, _ = shards
    folder = os.path.dirname(paths[0])
    sub = tmp_path / "meta"
    sub.mkdir()
    other = {"wids_version": 1, "name": "other", "base": "..", "shardlist": [{"url": os.path.basename(paths[3])}]}
    (sub / "other.json").write_text(json.dumps(other))
    top = {
        "wids_version": 1,
        "name": "top",
        "shardlist": [{"url": os.path.basename(paths[0]), "nsamples": 25}],
        "datasets": [
            {"name": "inline", "base": folder, "shardlist": [{"url": os.path.basename(p)} for p in paths[1:3]]},
            {"source_url": "meta/other.json", "weight": 2.5},
        ],
    }
    (tmp_path / "top.json").write_text(json.dumps(top))
    ds = wds.ShardListDataset(str(tmp_path / "top.json"))
    assert [s["url"] for s in ds.shards] == paths
    assert ds.shards[3]["weight"] == 2.5 and ds.shards[1]["dataset"] == "inline"
    assert_same_as_streaming(ds, paths)
    top["shardlist"][0]["nsamples"] = 24
    (tmp_path / "top.json").write_text(json.dumps(top))
    with pytest.raises(SpecError, match="out of date"):
        wds.ShardListDataset(str(tmp_path / "top.json"))[0]


@pytest.mark.slow
def test_a_widsindex_descriptor_loads(tmp_path, shards):
    pytest.importorskip("wids")
    spec, paths, _ = shards
    out = tmp_path / "wids.json"
    script = "import sys; from wids.wids_index import main; sys.argv[0] = 'widsindex'; main()"
    subprocess.run([sys.executable, "-c", script, "create", "-o", str(out), *paths], check=True, capture_output=True)
    ds = wds.ShardListDataset(str(out))
    assert [s["nsamples"] for s in ds.shards] == [25] * 4 and "md5sum" in ds.shards[0]
    assert_same_as_streaming(ds, paths)


def test_compressed_shards_are_decompressed_into_the_cache_or_refused(tmp_path):
    members = tricky_members("z-")
    path = tmp_path / "c.tgz"
    path.write_bytes(tar_bytes(members, compress="gz"))
    with pytest.raises(ShardOpenError, match="compressed"):
        wds.ShardListDataset([str(path)])
    ds = wds.ShardListDataset([str(path)], cache_dir=tmp_path / "cache")
    assert_same_as_streaming(ds, [str(path)])


def test_in_secure_mode_the_cache_is_written_only_under_the_roots(tmp_path, monkeypatch):
    """Issue 56, case 1: a compressed shard's decompressed copy and a built index went into cache_dir wherever it
    was."""
    root, elsewhere = tmp_path / "root", tmp_path / "elsewhere"
    root.mkdir()
    path = root / "c.tgz"
    path.write_bytes(tar_bytes(tricky_members("z-"), compress="gz"))
    monkeypatch.setenv("WDS_SECURE", "1")
    monkeypatch.setenv("WDS_SECURE_ROOTS", str(root))
    with pytest.raises(SpecError, match="not under an allowed root"):
        wds.ShardListDataset([str(path)], cache_dir=elsewhere)
    assert not elsewhere.exists()
    ds = wds.ShardListDataset([str(path)], cache_dir=root / "cache")
    assert_same_as_streaming(ds, [str(path)])


def test_decode_and_transformations(shards):
    spec, _, _ = shards
    ds = wds.ShardListDataset(spec, decode=wds.Decoder(only="txt"), transformations=[lambda s: (s["txt"], s["cls"])])
    assert ds[26] == ("s1--1-txt", b"s1--1-cls")


def test_remote_ranges_and_download_against_s3(s3, tmp_path, shards):
    import s3fs

    spec, paths, _ = shards
    options = s3["team-a"].client_options("team-a")
    fs = s3fs.S3FileSystem(skip_instance_cache=True, **options)
    for path in paths:
        fs.put_file(path, f"team-a/idx/{os.path.basename(path)}")
    urls = [f"s3://team-a/idx/{os.path.basename(p)}" for p in paths]
    local = wds.ShardListDataset(paths)
    ranged = wds.ShardListDataset(urls, storage=options)

    def fields(sample):
        return {k: v for k, v in plain(sample).items() if k not in ("__url__", "__local_path__")}

    before = sum(s3["team-a"].requests.values())
    sample = ranged[60]
    assert sum(s3["team-a"].requests.values()) - before == 1  # one ranged read per sample, no download
    assert fields(sample) == fields(local[60]) and sample["__url__"] == urls[2]
    assert all(fields(ranged[i]) == fields(local[i]) for i in range(len(local)))
    cache = tmp_path / "cache"
    downloaded = wds.ShardListDataset(urls, storage=options, remote="download", cache_dir=cache)
    assert downloaded[99]["txt"] == local[99]["txt"]
    assert len([n for _, _, names in os.walk(cache) for n in names if n.endswith(".tar")]) == 4
    # a descriptor stored next to the shards, with relative URLs, loads through the same options
    body = {"wids_version": 1, "shardlist": [{"url": os.path.basename(p), "nsamples": 25} for p in paths]}
    with fs.open("team-a/idx/ds.json", "w") as out:
        out.write(json.dumps(body))
    described = wds.ShardListDataset("s3://team-a/idx/ds.json", storage=options)
    assert [s["url"] for s in described.shards] == urls and described[77]["txt"] == local[77]["txt"]


def test_chunked_sampler_covers_everything_once_with_local_chunks():
    sampler = wds.ChunkedSampler(1000, chunksize=100, seed=3)
    first = list(sampler)
    assert sorted(first) == list(range(1000)) and first != list(range(1000))
    assert all(len({i // 100 for i in first[c : c + 100]}) == 1 for c in range(0, 1000, 100))
    assert list(sampler) == first
    sampler.set_epoch(1)
    assert list(sampler) != first and sorted(sampler) == list(range(1000))
    assert list(wds.ChunkedSampler(10, shuffle=False)) == list(range(10))


@pytest.mark.parametrize("drop_last", [False, True])
def test_distributed_sampler_gives_equal_disjoint_shares(drop_last, monkeypatch):
    monkeypatch.setenv("RANK", "3")  # explicit rank/num_replicas win over the environment
    monkeypatch.setenv("WORLD_SIZE", "8")
    shares = [list(wds.DistributedChunkedSampler(103, num_replicas=4, rank=r, drop_last=drop_last)) for r in range(4)]
    sizes = {len(share) for share in shares}
    assert sizes == ({25} if drop_last else {26})
    together = [i for share in shares for i in share]
    if drop_last:
        assert len(set(together)) == 100
    else:
        assert set(together) == set(range(103)) and len(together) == 104
    from_env = wds.DistributedChunkedSampler(103)
    assert (from_env.rank, from_env.num_replicas) == (3, 8)
    with pytest.raises(SpecError):
        wds.DistributedChunkedSampler(10, num_replicas=2, rank=2)


def wds_cli(*args, cwd=None, check=True):
    return subprocess.run(["wds", *args], capture_output=True, cwd=cwd, check=check)


@pytest.mark.slow
def test_cli_index_create_info_sample(tmp_path):
    with wds.ShardWriter(str(tmp_path / "c-%03d.tar"), maxcount=10, index=True) as sink:
        for i in range(25):
            sink.write({"__key__": f"k{i:03d}", "txt": f"text {i}", "bin": bytes([i]) * i})
    assert sorted(n for n in os.listdir(tmp_path) if n.endswith(".idx")) == [f"c-00{i}.tar.idx" for i in range(3)]
    for name in os.listdir(tmp_path):
        if name.endswith(".idx"):
            os.remove(tmp_path / name)
    wds_cli("index", "create", "c-{000..002}.tar", "-o", "ds.json", "--name", "demo", "--md5", cwd=tmp_path)
    body = json.loads((tmp_path / "ds.json").read_text())
    assert body["name"] == "demo" and [s["url"] for s in body["shardlist"]] == [f"c-00{i}.tar" for i in range(3)]
    assert [s["nsamples"] for s in body["shardlist"]] == [10, 10, 5] and len(body["shardlist"][0]["md5sum"]) == 32
    assert (tmp_path / "c-000.tar.idx").exists()
    info = json.loads(wds_cli("index", "info", "--json", str(tmp_path / "ds.json")).stdout)
    assert (info["shards"], info["samples"], info["name"]) == (3, 25, "demo")
    text = wds_cli("index", "info", str(tmp_path / "ds.json")).stdout.decode()
    assert "samples  25" in text
    shown = wds_cli("index", "sample", str(tmp_path / "ds.json"), "23").stdout.decode()
    assert "'k023'" in shown and "b'text 23'" in shown
    raw = wds_cli("index", "sample", str(tmp_path / "ds.json"), "7", "--field", "bin").stdout
    assert raw == bytes([7]) * 7
    missing = wds_cli("index", "sample", str(tmp_path / "ds.json"), "99", check=False)
    assert missing.returncode == 1 and b"out of range" in missing.stderr


def test_a_descriptor_given_as_an_open_file(tmp_path, shards):
    import io

    spec, paths, keys = shards
    body = {"wids_version": 1, "shardlist": [{"url": os.path.basename(p), "nsamples": 25} for p in paths]}
    (tmp_path / "ds.json").write_text(json.dumps(body))
    with open(tmp_path / "ds.json") as stream:  # relative URLs resolve against the file's folder
        ds = wds.ShardListDataset(stream)
    assert len(ds) == len(keys) and ds[30]["__key__"] == keys[30]
    absolute = {"wids_version": 1, "shardlist": [{"url": p, "nsamples": 25} for p in paths]}
    assert len(wds.ShardListDataset(io.StringIO(json.dumps(absolute)))) == len(keys)
    with pytest.raises(wds.SpecError, match="not a JSON"):
        wds.ShardListDataset(io.StringIO(paths[0]))  # a stream of URLs is not a descriptor
    assert wds.ShardListDataset[list] is not None  # subscriptable in annotations, as wids' class is
