"""webdataset.tariterators over wds: webdataset's shapes, for code written against 0.2.x and 1.x."""

import tarfile

import pytest

import wds_core
from tests.conftest import make_samples, tar_bytes, write_shard
from wds_core.dropin import tariterators as ti

webdataset = pytest.importorskip("webdataset")


@pytest.fixture
def two_shards(tmp_path):
    """Two shards whose boundary has the same key on both sides (a sample must not span them)."""
    write_shard(tmp_path / "a.tar", make_samples("x", 3))  # x00000 .. x00002
    write_shard(tmp_path / "b.tar", make_samples("x", 4)[2:])  # x00002, x00003
    return [str(tmp_path / "a.tar"), str(tmp_path / "b.tar")]


def _ours(urls, **kw):
    return list(ti.group_by_keys(ti.tar_file_expander(ti.url_opener([{"url": u} for u in urls]), **kw)))


def test_reader_pieces_give_webdataset_samples(two_shards):
    wt = webdataset.tariterators
    theirs = list(wt.group_by_keys(wt.tar_file_expander(wt.url_opener([{"url": u} for u in two_shards]))))
    ours = _ours(two_shards)
    assert ours == theirs  # the same fields too: url_opener gives no local_path, so no __local_path__ (issue 44)
    assert len(ours) == 5  # x00002 of a.tar and x00002 of b.tar stay apart
    assert list(ti.tarfile_samples([{"url": u} for u in two_shards])) == ours


def test_expander_items_have_webdataset_shape_and_markers_only_on_request(two_shards):
    items = list(ti.tar_file_expander(ti.url_opener([{"url": u} for u in two_shards])))
    assert all(set(item) == {"fname", "data", "__url__"} for item in items)  # 0.2.x: no marker
    marked = list(ti.tar_file_expander(ti.url_opener([{"url": u} for u in two_shards]), eof_value={}))
    assert [i for i, item in enumerate(marked) if item == {}] == [6, 11]  # 1.x: {} after each shard
    assert len(_ours(two_shards, eof_value={})) == 5


def test_user_grouping_written_for_0_2_reads_fname_of_every_item(two_shards):
    def group(data):
        current = None
        for item in data:
            key, ext = ti.base_plus_ext(item["fname"])  # KeyError on 1.x's {} markers
            if current is None or key != current["__key__"]:
                if ti.valid_sample(current):
                    yield current
                current = {"__key__": key, "__url__": item["__url__"]}
            current[ext] = item["data"]
        if ti.valid_sample(current):
            yield current

    samples = list(group(ti.tar_file_expander(ti.url_opener([{"url": u} for u in two_shards]))))
    assert len(samples) == 4  # as on 0.2.x: the boundary keys merge in this user's own grouping


def test_url_opener_streams_pipes_and_handles_errors(tmp_path, two_shards):
    opened = list(ti.url_opener([{"url": f"pipe:cat {two_shards[0]}"}, {"url": two_shards[1], "extra": 1}]))
    assert [set(x) for x in opened] == [{"url", "stream"}, {"url", "stream", "extra"}]
    assert len(list(ti.group_by_keys(ti.tar_file_expander(opened)))) == 5
    missing = [{"url": str(tmp_path / "missing.tar")}, {"url": two_shards[1]}]
    with pytest.raises(FileNotFoundError):
        list(ti.url_opener(missing))
    assert [x["url"] for x in ti.url_opener(missing, handler=wds_core.ignore_and_continue)] == [two_shards[1]]


def test_corrupt_and_truncated_tars_reach_the_handler(tmp_path, two_shards):
    data = bytearray(tar_bytes([("k1.txt", b"a" * 100), ("k2.txt", b"b" * 100)], fmt=tarfile.USTAR_FORMAT))
    data[1024 + 10] ^= 0xFF  # the second header
    (tmp_path / "bad.tar").write_bytes(bytes(data))
    urls = [{"url": str(tmp_path / "bad.tar")}, {"url": two_shards[1]}]
    with pytest.raises(tarfile.ReadError) as caught:  # what webdataset users catch
        list(ti.tar_file_expander(ti.url_opener(urls)))
    assert isinstance(caught.value, wds_core.TarFormatError) and "bad.tar" in str(caught.value)
    items = list(ti.tar_file_expander(ti.url_opener(urls), handler=wds_core.ignore_and_continue))
    assert [x["fname"] for x in items] == ["k1.txt", "x00002.txt", "x00002.cls", "x00003.txt", "x00003.cls"]
    (tmp_path / "cut.tar").write_bytes(tar_bytes([("k1.txt", b"a" * 1000)])[:900])
    files = list(ti.tar_file_iterator(open(tmp_path / "cut.tar", "rb"), handler=wds_core.ignore_and_continue))
    assert files == []
    with pytest.raises(wds_core.TruncatedShardError):
        list(ti.tar_file_iterator(open(tmp_path / "cut.tar", "rb")))


def test_group_by_keys_options_and_duplicates():
    files = [
        {"fname": "a.JPG", "data": 1, "__url__": "u"},
        {"fname": "a.txt", "data": 2, "__url__": "u"},
        {"fname": "nodot", "data": 0, "__url__": "u"},
        {"fname": "b.txt", "data": 3, "__url__": "u"},
        {"fname": "b.txt", "data": 4, "__url__": "u"},
    ]
    with pytest.raises(ValueError, match="twice"):
        list(ti.group_by_keys(iter(files)))
    kept = list(ti.group_by_keys(iter(files), handler=wds_core.ignore_and_continue))
    assert kept == [{"__key__": "a", "__url__": "u", "jpg": 1, "txt": 2}, {"__key__": "b", "__url__": "u", "txt": 3}]
    assert list(ti.group_by_keys(iter(files[:2]), lcase=False, suffixes={"JPG"})) == [
        {"__key__": "a", "__url__": "u", "JPG": 1}
    ]


def test_select_rename_and_meta_members(tmp_path):
    members = [("__meta__", b"m"), ("k.jpg", b"j"), ("k.txt", b"t"), ("dir/__skip__/x.txt", b"s")]
    (tmp_path / "m.tar").write_bytes(tar_bytes(members))
    names = [f["fname"] for f in ti.tar_file_iterator(open(tmp_path / "m.tar", "rb"))]
    assert names == ["k.jpg", "k.txt", "dir/__skip__/x.txt"]
    renamed = ti.tar_file_iterator(
        open(tmp_path / "m.tar", "rb"), rename_files=lambda n: n.upper(), select_files=lambda n: n.endswith("JPG")
    )
    assert [f["fname"] for f in renamed] == ["K.JPG"]
    assert ti.base_plus_ext("dir.v2/abc.seg.png") == ("dir.v2/abc", "seg.png")
    assert ti.base_plus_ext("noext") == (None, None)
    assert [x["url"] for x in ti.shardlist("s-{0..2}.tar")] == ["s-0.tar", "s-1.tar", "s-2.tar"]
