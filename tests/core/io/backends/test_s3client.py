"""S3 errors say what is wrong as the store says it (issue 58.1): no such bucket, no such key, access denied with
the credential hint, wrong region or endpoint; on read, write, ``ls`` and ``cp``, in Python and in the CLI, through
both of wds's S3 clients (the signed HTTP reader and botocore's).  A newcomer's ``wds cp`` into a bucket nobody made
was ``ShardNotFoundError: shard not found`` naming the destination."""

import pytest

import wds_core as wds
from tests.conftest import make_samples, write_shard
from wds_core.errors import ShardNotFoundError, ShardOpenError
from wds_core.io.backends.s3client import store_error

pytest.importorskip("s3fs")

KEY = "AKIDWDSERRORS"
BOTOCORE = {"config_kwargs": {"connect_timeout": 5}}  # an option only botocore's client takes: wds uses it


@pytest.fixture(scope="module")
def server():
    from tests.servers import S3Server

    server = S3Server({"made": KEY, "never-made": KEY})
    server.moved["elsewhere"] = "ap-south-1"
    options = server.client_options("made")
    import s3fs

    s3fs.S3FileSystem(skip_instance_cache=True, **options).mkdir("made")
    yield server
    server.stop()


def options(server, wrong_key=False, client=None):
    found = server.client_options("made")
    if wrong_key:
        found["key"] = "AKIDNOBODYKNOWS"
    if client:
        found.update(client)
    return found


def read(server, url, **kw):
    return list(wds.WebDataset(url, storage=options(server, **kw)))


@pytest.mark.parametrize("client", [None, BOTOCORE], ids=["signed", "botocore"])
def test_reading_says_which_of_bucket_and_key_is_missing(server, client):
    with pytest.raises(ShardNotFoundError, match=r"no such bucket 'never-made'.*create it first") as caught:
        read(server, "s3://never-made/train/a.tar", client=client)
    assert "s3://never-made/train/a.tar" in str(caught.value)
    with pytest.raises(ShardNotFoundError, match=r"no such key 'train/none.tar' in bucket 'made'"):
        read(server, "s3://made/train/none.tar", client=client)


@pytest.mark.parametrize("client", [None, BOTOCORE], ids=["signed", "botocore"])
def test_a_wrong_access_key_is_access_denied_with_the_hint_and_no_secret(server, client):
    with pytest.raises(ShardOpenError) as caught:
        read(server, "s3://made/train/a.tar", wrong_key=True, client=client)
    message = str(caught.value)
    assert "the store knows no such access key ID (InvalidAccessKeyId, 403)" in message
    assert "AWS_ACCESS_KEY_ID" in message and "secret-of-made" not in message


def test_a_bucket_in_another_region_says_so(server):
    with pytest.raises(ShardOpenError, match=r"wrong region or endpoint.*'elsewhere' is in region 'ap-south-1'"):
        read(server, "s3://elsewhere/a.tar")


def test_writing_into_a_missing_bucket_says_the_bucket_not_the_shard(server):
    writer = wds.TarWriter("s3://never-made/train/out.tar", storage=options(server))
    writer.write({"__key__": "a", "txt": "x"})
    with pytest.raises(ShardOpenError, match=r"cannot upload the shard: no such bucket 'never-made'"):
        writer.close()
    writer = wds.TarWriter("s3://made/train/out.tar", storage=options(server, wrong_key=True))
    writer.write({"__key__": "a", "txt": "x"})
    with pytest.raises(ShardOpenError, match=r"access denied: the store knows no such access key ID"):
        writer.close()


@pytest.mark.parametrize(
    ("status", "code", "region", "expected"),
    [
        (403, "SignatureDoesNotMatch", "", "the secret key does not match the access key ID"),
        (403, "AccessDenied", "", "these credentials may not do this"),
        (400, "ExpiredToken", "", "the session token has expired"),
        (403, "", "", "wrong credentials, or no permission"),
        (301, "PermanentRedirect", "eu-west-1", "'b' is in region 'eu-west-1'"),
        (400, "AuthorizationHeaderMalformed", "", "wrong region or endpoint"),
        (404, "NoSuchBucket", "", "no such bucket 'b'"),
        (404, "", "", "no such key 'k' in bucket 'b'"),
    ],
)
def test_each_answer_of_the_store_in_its_words(status, code, region, expected):
    assert expected in str(store_error(status, code, region, "b", "k"))


def test_the_cli_names_the_missing_bucket_on_cp_ls_and_cat(server, tmp_path, monkeypatch):
    from tests.core.cli.test_main import wds_cli

    monkeypatch.setenv("AWS_ENDPOINT_URL", server.endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "any")
    write_shard(tmp_path / "train-000000.tar", make_samples("s", 3))
    done = wds_cli("cp", tmp_path / "train-000000.tar", "s3://never-made/train/", check=False)
    assert done.returncode != 0 and b"no such bucket 'never-made'" in done.stderr, done.stderr
    assert b"shard not found" not in done.stderr
    for command in ("ls", "cat"):
        done = wds_cli(command, "s3://never-made/train/train-000000.tar", check=False)
        assert done.returncode != 0 and b"no such bucket 'never-made'" in done.stderr, (command, done.stderr)
    done = wds_cli("ls", "s3://made/train/missing.tar", check=False)
    assert b"no such key 'train/missing.tar' in bucket 'made'" in done.stderr, done.stderr
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDNOBODYKNOWS")
    done = wds_cli("ls", "s3://made/train/train-000000.tar", check=False)
    assert b"no such access key ID" in done.stderr and b"AWS_ACCESS_KEY_ID" in done.stderr, done.stderr
