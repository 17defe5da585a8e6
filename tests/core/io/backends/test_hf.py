"""hf:// shards (issue 69, item 4): the Hub resolves each shard once, the token goes to the Hub's host only, a glob
is listed once, and the Hub's rate limit slows the reader down.  Against tests/hubserver.py's stand-in (HF_ENDPOINT):
a Hub that redirects to a second host with signed URLs that expire, lists trees, checks a bearer token and answers
429 with Retry-After past a rate."""

import json
import pickle
import sys
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

import wds_core
from tests.conftest import make_samples, write_shard
from tests.hubserver import HubServer
from wds_core.errors import ShardNotFoundError, ShardOpenError, SpecError
from wds_core.io.backends import hf
from wds_core.io.remote.retries import RetryPolicy, retry_stats

TOKEN = "hf_secret_token_123"
REPO = "team/shards"


@pytest.fixture()
def hub(tmp_path, monkeypatch):
    server = HubServer(token=TOKEN)
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # no token saved by a real login is read
    hf.RESOLVED.clear()
    yield server
    hf.RESOLVED.clear()
    server.stop()


def put_shards(server, tmp_path, n=3, per=20, kind="dataset", repo=REPO, folder="data", size=3000):
    """``n`` shards in the repository; the samples they hold, sorted."""
    expected = []
    for s in range(n):
        samples = make_samples(f"s{s}-", per)
        for i, sample in enumerate(samples):
            sample["bin"] = bytes([i % 251]) * (size + i)
        path = write_shard(str(tmp_path / f"shard-{s:03d}.tar"), samples, ("txt", "cls", "bin"))
        server.add(kind, repo, f"{folder}/shard-{s:03d}.tar", open(path, "rb").read())
        expected += [sample["__key__"] for sample in samples]
    return sorted(expected)


def keys(dataset):
    return sorted(sample["__key__"] for sample in dataset)


SMALL = wds_core.ReadAhead(first_range=4096, range_bytes=8192, in_flight=4, max_range=8192)  # many ranges a shard


@pytest.mark.parametrize(
    ("url", "resolved"),
    [
        ("hf://datasets/org/repo/a/b.tar", "E/datasets/org/repo/resolve/main/a/b.tar"),
        ("hf://datasets/org/repo@v1.0/b.tar", "E/datasets/org/repo/resolve/v1.0/b.tar"),
        ("hf://datasets/org/repo@refs%2Fconvert%2Fparquet/b.tar",
         "E/datasets/org/repo/resolve/refs%2Fconvert%2Fparquet/b.tar"),
        ("hf://org/model/w.tar", "E/org/model/resolve/main/w.tar"),
        ("hf://models/org/model/w.tar", "E/org/model/resolve/main/w.tar"),
        ("hf://spaces/org/app/x y.tar", "E/spaces/org/app/resolve/main/x%20y.tar"),
        ("hf://buckets/ns/bucket/ckpt/0.tar", "E/buckets/ns/bucket/resolve/ckpt/0.tar"),
    ],
)  # fmt: skip
def test_hf_urls_name_the_hubs_resolve_urls(url, resolved):
    assert hf.parse_hf(url).resolve_url("E") == resolved
    where = hf.parse_hf(url)
    assert hf.parse_hf(where.url()) == where  # written back, read again: the same file


@pytest.mark.parametrize(
    "url", ["hf://datasets/org", "hf://datasets/org/repo", "hf://datasets/org/repo/../x.tar", "hf://buckets/n/b@v/x"]
)
def test_an_hf_url_that_names_no_file_is_refused(url):
    with pytest.raises(SpecError):
        hf.parse_hf(url)


@given(st.text(alphabet="abc/@.%-_", max_size=30))
def test_parsing_any_hf_url_is_a_path_or_a_spec_error(text):
    try:
        where = hf.parse_hf("hf://" + text)
    except SpecError:
        return
    assert ".." not in where.path.split("/") and where.path and "/" in where.repo


def test_hf_shards_stream_with_one_resolution_each_and_the_token_stays_on_the_hubs_host(hub, tmp_path):
    expected = put_shards(hub, tmp_path)
    hub.private.add(REPO)
    spec = "hf://datasets/team/shards/data/shard-{000..002}.tar"
    storage = wds_core.Storage(read_ahead=SMALL)
    dataset = wds_core.WebDataset(spec, storage=storage)
    assert keys(dataset) == expected
    assert hub.resolves == 3  # one a shard, though each shard took several ranges
    ranges = [r for r in hub.storage.requests if r[0] == "GET"]
    assert len(ranges) > 3 * 3
    assert all(headers.get("Authorization") == f"Bearer {TOKEN}" for _, _, headers in hub.hub.requests)
    assert not any("Authorization" in headers or TOKEN in json.dumps(headers) for *_, headers in hub.storage.requests)
    # the next epoch in this process: the redirects are kept (signed for ten minutes), the Hub is not asked again
    assert keys(wds_core.WebDataset(spec, storage=storage)) == expected
    assert hub.resolves == 3


@pytest.mark.slow  # waits for a signed URL to expire
def test_a_signed_url_that_expires_is_resolved_again_mid_shard(hub, tmp_path):
    hub.expires = 1  # each signed URL holds one second; kept for less than the margin: asked again at each open
    expected = put_shards(hub, tmp_path, n=2, size=6000)
    spec = "hf://datasets/team/shards/data/shard-{000..001}.tar"
    few = wds_core.ReadAhead(4096, 8192, 2, 32768, shards_ahead=0, max_range=8192)  # 32 KB ahead of the reader
    slow = wds_core.WebDataset(spec, storage=wds_core.Storage(read_ahead=few))
    got = []
    for sample in slow:
        got.append(sample["__key__"])
        if len(got) == 5:
            time.sleep(2.1)  # the first shard's signed URL has expired under the reader
    assert sorted(got) == expected
    assert hub.resolves >= 3  # both shards, and the first again after its URL expired
    refused = [r for r in hub.storage.requests if "Expires=" in r[1]]
    assert refused


def test_no_token_anywhere_a_user_sees(hub, tmp_path):
    put_shards(hub, tmp_path, n=1)
    hub.private.add(REPO)
    spec = "hf://datasets/team/shards/data/shard-000.tar"
    dataset = wds_core.WebDataset(spec, storage=wds_core.Storage(cache=wds_core.ShardCache(str(tmp_path / "c"))))
    stream = iter(dataset)
    next(stream)
    state = json.dumps(dataset.state_dict())
    assert TOKEN not in state and TOKEN not in repr(dataset)
    list(stream)
    assert not [p for p in (tmp_path / "c").rglob("*") if TOKEN in str(p)]
    with pytest.raises(ShardNotFoundError) as missing:
        list(wds_core.WebDataset("hf://datasets/team/shards/data/none.tar"))
    assert TOKEN not in str(missing.value)
    with pytest.raises(ShardOpenError) as refused:  # a wrong token: the Hub's 401, said without the token
        list(wds_core.WebDataset(spec, storage=wds_core.Storage({"hf://": {"token": "hf_wrong_token_456"}})))
    assert "hf_wrong_token_456" not in str(refused.value) and TOKEN not in str(refused.value)


@pytest.mark.parametrize("with_hub_library", [True, False])
def test_the_token_comes_from_the_options_then_the_environment_then_the_saved_file(
    tmp_path, monkeypatch, with_hub_library
):
    saved = tmp_path / "token"
    if with_hub_library:
        constants = pytest.importorskip("huggingface_hub.constants")
        monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(saved))  # read once, when huggingface_hub is imported
    else:
        monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # not installed
        monkeypatch.setenv("HF_TOKEN_PATH", str(saved))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    assert hf.hf_token() is None
    assert hf.hf_token({"token": "given"}) == "given"
    saved.write_text("saved\n")
    assert hf.hf_token() == "saved"
    monkeypatch.setenv("HF_TOKEN", "named")
    assert hf.hf_token() == "named"
    assert hf.hf_token({"token": False}) is None


def test_a_glob_is_listed_once_and_travels_with_the_dataset(hub, tmp_path):
    pytest.importorskip("huggingface_hub")
    hub.page = 2  # the listing comes in pages
    expected = put_shards(hub, tmp_path, n=5)
    hub.add("dataset", REPO, "data/README.md", b"not a shard")
    hub.add("dataset", REPO, "other/shard-000.tar", b"elsewhere")
    hub.private.add(REPO)
    dataset = wds_core.WebDataset("hf://datasets/team/shards/data/shard-*.tar")
    listed = [r for r in hub.hub.requests if "/tree/" in r[1]]
    assert len(listed) >= 3  # five entries in pages of two
    copy = pickle.loads(pickle.dumps(dataset))  # what a worker receives
    assert keys(copy) == expected
    assert [r for r in hub.hub.requests if "/tree/" in r[1]] == listed  # the worker did not list again
    with pytest.raises(SpecError, match="no file"):
        wds_core.WebDataset("hf://datasets/team/shards/data/*.parquet")


@pytest.mark.slow  # three resolutions a second
def test_the_hubs_rate_limit_slows_the_reader_and_loses_nothing(hub, tmp_path):
    expected = put_shards(hub, tmp_path, n=8, per=5, size=500)
    hub.window.rate = 3  # three resolutions a second, then 429 with Retry-After
    before = retry_stats()
    spec = "hf://datasets/team/shards/data/shard-{000..007}.tar"
    got = keys(wds_core.WebDataset(spec, storage=wds_core.Storage(retry=RetryPolicy(attempts=2))))
    assert got == expected  # two attempts a request, and no request failed: a 429 spends none
    assert hub.window.refused > 0 and retry_stats()["throttled"] > before["throttled"]


def test_hf_shards_read_by_offset_and_through_gopen(hub, tmp_path):
    put_shards(hub, tmp_path, n=1)
    url = "hf://datasets/team/shards/data/shard-000.tar"
    data = hub.files[("dataset", REPO, "data/shard-000.tar")]
    from wds_core.dropin.gopen import gopen_hf

    with gopen_hf(url) as stream:  # webdataset's gopen_hf: through wds's engine, not curl
        assert stream.read() == data
    storage = wds_core.io.storage.Storage()
    assert storage.size(url) == len(data)
    access = storage.random_access(url)
    assert access.read_at(512, 100) == data[512:612]
    access.close()


def test_a_file_the_hub_serves_itself_is_asked_for_once(hub, tmp_path):
    """A small file the Hub answers without a redirect: its ranges go to the Hub, with no HEAD before each."""
    expected = put_shards(hub, tmp_path, n=1)
    data = hub.files[("dataset", REPO, "data/shard-000.tar")]
    hub.direct = True
    got = keys(wds_core.WebDataset("hf://datasets/team/shards/data/shard-000.tar", storage=wds_core.Storage(
        read_ahead=SMALL)))  # fmt: skip
    assert got == expected
    heads = [r for r in hub.hub.requests if r[0] == "HEAD"]
    assert len(heads) == 1 and len([r for r in hub.hub.requests if r[0] == "GET"]) >= len(data) // 8192


def test_buckets_are_read_without_a_revision(hub, tmp_path):
    expected = put_shards(hub, tmp_path, n=2, kind="bucket", repo="ns/ckpts", folder="run1")
    got = keys(wds_core.WebDataset("hf://buckets/ns/ckpts/run1/shard-{000..001}.tar"))
    assert got == expected
    assert any("/buckets/ns/ckpts/resolve/run1/shard-000.tar" in r[1] for r in hub.hub.requests)


def test_secure_mode_allows_hf(hub, tmp_path, monkeypatch):
    expected = put_shards(hub, tmp_path, n=1)
    monkeypatch.setenv("WDS_SECURE", "1")
    assert keys(wds_core.WebDataset("hf://datasets/team/shards/data/shard-000.tar")) == expected
