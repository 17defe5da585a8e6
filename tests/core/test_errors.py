"""The error hierarchy: what webdataset code catches still catches ours; messages and pickling."""

import os
import pickle
import tarfile

import pytest
from hypothesis import given
from hypothesis import strategies as st

import wds_core as wds
from wds_core.errors import MissingFieldError, SampleShapeError, TarFormatError


def test_missing_fields_are_key_errors_too():
    samples = [{"__key__": "k1", "__url__": "s.tar", "jpg": b"x"}]
    with pytest.raises(KeyError) as caught:  # webdataset's map_dict raises KeyError
        list(wds.map_dict(txt=str)(iter(samples)))
    assert isinstance(caught.value, wds.SampleError) and "k1" in str(caught.value) and "s.tar" in str(caught.value)
    assert not str(caught.value).startswith("'")  # not KeyError's quoted form
    with pytest.raises(ValueError):  # webdataset's to_tuple and rename raise ValueError
        list(wds.to_tuple("txt")(iter(samples)))
    with pytest.raises(KeyError):
        list(wds.rename(text="txt")(iter(samples)))
    assert list(wds.map_dict(txt=str, handler=wds.ignore_and_continue)(iter(samples))) == []


def test_a_sample_of_the_wrong_kind_is_raised_whatever_the_handler():
    with pytest.raises(AssertionError):  # webdataset asserts there
        list(wds.map_tuple(str, handler=wds.warn_and_continue)(iter([{"a": 1}])))
    with pytest.raises(SampleShapeError, match="dict"):
        list(wds.map_dict(a=str, handler=wds.ignore_and_continue)(iter([(1, 2)])))
    with pytest.raises(TypeError, match="to_tuple"):
        list(wds.decode(handler=wds.ignore_and_continue)(iter([(1, 2)])))


def test_malformed_tars_are_tarfile_read_errors(tmp_path):
    (tmp_path / "bad.tar").write_bytes(b"\x01" * 1024)
    with pytest.raises(tarfile.ReadError) as caught:
        list(wds.WebDataset(str(tmp_path / "bad.tar")))
    assert isinstance(caught.value, TarFormatError) and "bad.tar" in str(caught.value)


def test_errors_pickle_with_their_class_and_place():
    for error in (MissingFieldError("gone", url="s.tar", member="k"), SampleShapeError("shape")):
        back = pickle.loads(pickle.dumps(error))
        assert type(back) is type(error) and str(back) == str(error)


@pytest.mark.parametrize(
    "text,hidden,kept",
    [
        ("GET https://user:pw@host/a.tar?X-Amz-Signature=abc&part=1 failed", ["pw", "abc"], ["part=1", "host/a.tar"]),
        ("pipe:curl -s -H 'Authorization: Bearer s3cr3t' https://h/a.tar", ["s3cr3t"], ["curl", "https://h/a.tar"]),
        ("pipe:AWS_SECRET_ACCESS_KEY=s3cr3t aws s3 cp s3://b/k -", ["s3cr3t"], ["aws s3 cp s3://b/k"]),
        ("pipe:hf download --token s3cr3t repo/x.tar", ["s3cr3t"], ["repo/x.tar"]),
        ("pipe:gsutil cat 'gs://b/k?X-Goog-Credential=s3cr3t'", ["s3cr3t"], ["gs://b/k"]),
        ('pipe:curl -H "X-Api-Key: s3cr3t" http://h/x', ["s3cr3t"], ["http://h/x"]),
        ("KeyError: 'jpg' (shard a.tar)", [], ["KeyError: 'jpg'"]),
    ],
)
def test_one_redaction_for_urls_commands_and_messages(text, hidden, kept):
    from wds_core.errors import redact, redact_url

    shown = redact(text)
    assert all(secret not in shown for secret in hidden), shown
    assert all(part in shown for part in kept), shown
    assert redact_url(text) == shown
    assert all(secret not in str(wds.PipeError("failed", url=text)) for secret in hidden)


def test_an_exception_named_for_credentials_keeps_its_message():
    """Issue 45: `NoCredentialsError: Unable to locate credentials` read as `NoCredentialsError: ***` (the type's
    name looked like a header); secrets in headers, URLs and assignments are still hidden."""
    from wds_core.errors import redact
    from wds_core.io.remote.retries import describe_error

    kept = "NoCredentialsError: Unable to locate credentials"
    assert redact(kept) == kept
    assert redact("PartialCredentialsError: Partial credentials found in env") == (
        "PartialCredentialsError: Partial credentials found in env"
    )
    assert redact("x-amz-security-token: abc Authorization: Bearer xyz") == "x-amz-security-token: ***"
    assert redact("aws_secret_access_key=abc") == "aws_secret_access_key=***"

    class NoCredentialsError(Exception):
        pass

    said = describe_error(NoCredentialsError("Unable to locate credentials"))
    assert said.startswith(kept) and "storage_options=" in said and "AWS_ENDPOINT_URL" in said
    assert describe_error(ConnectionResetError("reset")) == "ConnectionResetError: reset"


def test_brace_patterns_that_do_not_expand_say_where(tmp_path):
    """Issue 45: `{000000...000005}` (three dots) was read as a shard of that name ("shard not found"), and a
    missing `}` raised braceexpand's own error; both are SpecErrors (WdsErrors) naming the group and where."""
    import wds_core as wds
    from wds_core.errors import SpecError, WdsError

    with pytest.raises(SpecError, match=r"brace group \{000000\.\.\.000005\} at 13 .* does not expand.*two dots"):
        wds.WebDataset("shards/train-{000000...000005}.tar")
    with pytest.raises(WdsError, match=r"a '\{' \(at 2\) that is never closed"):
        wds.expand_urls("a-{00..03.tar")
    with pytest.raises(SpecError, match=r"'\}' without its '\{'"):
        wds.ShardListDataset("a-00..03}.tar")
    assert wds.expand_urls("x-{a,b{1..2}}.tar::d-{a..b}-{0..4..2}.tar")[-1] == "d-b-4.tar"
    assert wds.expand_urls("pipe:awk '{print}' f") == ["pipe:awk '{print}' f"]  # a command's braces are its own


def test_a_missing_local_shard_is_found_before_any_is_read(tmp_path):
    """Issue 45: a range one past the end failed only after the other shards were read; the epoch now starts by
    checking its local shards (with the default handler; a handler that goes on still reads the others)."""
    import wds_core as wds
    from tests.conftest import make_samples, write_shard
    from wds_core.errors import ShardNotFoundError

    for s in range(4):
        write_shard(tmp_path / f"p-{s}.tar", make_samples(f"s{s}-", 5))
    spec = str(tmp_path / "p-{0..4}.tar")
    got = []
    with pytest.raises(ShardNotFoundError, match=r"1 of the 5 shards of this epoch do not exist .*p-4\.tar"):
        for sample in wds.WebDataset(spec):
            got.append(sample)
    assert got == []
    with pytest.warns(UserWarning):
        kept = list(wds.WebDataset(spec, reading=wds.ShardReadOptions(handler=wds.warn_and_continue)))
    assert len(kept) == 20
    # the check is the reader's: the shard list alone (webdataset's test_shuffle_seed cuts the pipeline there)
    # names shards that need not exist
    listed = wds.WebDataset(str(tmp_path / "none-{0..3}.tar"), seed=0, shuffle=True)
    del listed.pipeline[1:]
    assert len(list(listed)) == 4


# Issue 56, case 7: the commonest credentials, each in a URL or a command, with what must stay visible.
CREDENTIALS = [
    ("azure SAS", "https://acct.blob.core.windows.net/c/x.tar?sv=2021-08-06&sr=b&sp=r&sig=AbC%2BSeCrEt%3D",
     "SeCrEt", "acct.blob.core.windows.net/c/x.tar"),
    ("aws presigned", "https://b.s3.amazonaws.com/x.tar?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential="
     "AKIASECRETID%2F20240101%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Security-Token=SeCrEtToKeN&X-Amz-Signature="
     "5ecre7519", "SECRETID", "b.s3.amazonaws.com/x.tar"),
    ("aws presigned", "https://b.s3.amazonaws.com/x.tar?X-Amz-Security-Token=SeCrEtToKeN&X-Amz-Expires=60",
     "SeCrEtToKeN", "X-Amz-Expires=60"),
    ("aws presigned", "https://b.s3.amazonaws.com/x.tar?X-Amz-Date=1&X-Amz-Signature=5ecre7519", "5ecre7519",
     "X-Amz-Date=1"),
    ("gcs signed", "https://storage.googleapis.com/b/x.tar?X-Goog-Algorithm=GOOG4-RSA-SHA256&X-Goog-Credential="
     "svc%40SeCrEt.iam&X-Goog-Signature=dEaDbEeF", "SeCrEt", "storage.googleapis.com/b/x.tar"),
    ("gcs signed", "https://storage.googleapis.com/b/x.tar?X-Goog-Signature=dEaDbEeF", "dEaDbEeF", "x.tar"),
    ("cloudfront", "https://d1.cloudfront.net/x.tar?Expires=1700000000&Signature=SiGnAtUrE~&Key-Pair-Id=APKASeCrEt",
     "SiGnAtUrE", "Expires=1700000000"),
    ("cloudfront", "https://d1.cloudfront.net/x.tar?Key-Pair-Id=APKASeCrEt", "APKASeCrEt", "d1.cloudfront.net"),
    ("cloudfront", "https://d1.cloudfront.net/x.tar?Policy=eyJTdGF0ZW1lbnQiSeCrEt&Signature=x", "eyJTdGF0",
     "x.tar"),
    ("oauth", "https://api.example.com/x.tar?access_token=ya29.SeCrEt&alt=media", "ya29", "alt=media"),
    ("oauth", "https://example.com/callback?code=4/0AXSeCrEt&state=abc", "0AXSeCrEt", "state=abc"),
    ("userinfo", "https://alice:PaSsWoRd@host/x.tar", "PaSsWoRd", "host/x.tar"),
    ("userinfo", "s3://AKIDSECRET:wJalrSeCrEt@bucket/x.tar", "wJalrSeCrEt", "bucket/x.tar"),
    ("userinfo", "ftp://u:PaSsWoRd@ftp.example.com/x.tar", "PaSsWoRd", "ftp.example.com"),
    ("curl -u", "pipe:curl -s -u alice:PaSsWoRd https://h/x.tar", "PaSsWoRd", "https://h/x.tar"),
    ("curl --user", "pipe:curl --user alice:PaSsWoRd https://h/x.tar", "PaSsWoRd", "https://h/x.tar"),
    ("curl --user=", "pipe:curl --user=alice:PaSsWoRd https://h/x.tar", "PaSsWoRd", "https://h/x.tar"),
    ("curl -uuser", "pipe:curl -ualice:PaSsWoRd https://h/x.tar", "PaSsWoRd", "https://h/x.tar"),
    ("curl --proxy-user", "pipe:curl --proxy-user bob:PaSsWoRd https://h/x.tar", "PaSsWoRd", "https://h/x.tar"),
    ("curl -H", "pipe:curl -H 'Authorization: Bearer SeCrEtToKeN' https://h/x.tar", "SeCrEtToKeN", "https://h/x.tar"),
    ("curl -H", 'pipe:curl -H "Authorization: Basic YWxpY2U6cHc=" https://h/x.tar', "YWxpY2U6", "https://h/x.tar"),
    ("curl --oauth2-bearer", "pipe:curl --oauth2-bearer SeCrEtToKeN https://h/x.tar", "SeCrEtToKeN",
     "https://h/x.tar"),
    ("wget --password", "pipe:wget --password PaSsWoRd -O - https://h/x.tar", "PaSsWoRd", "https://h/x.tar"),
    ("wget --http-password=", "pipe:wget --http-password=PaSsWoRd -O - https://h/x.tar", "PaSsWoRd",
     "https://h/x.tar"),
]  # fmt: skip


@pytest.mark.parametrize("what, text, secret, kept", CREDENTIALS, ids=[row[0] for row in CREDENTIALS])
def test_credentials_are_hidden_in_urls_commands_reprs_and_log_lines(what, text, secret, kept, tmp_path, capsys):
    from wds_core.errors import redact
    from wds_core.io import ShardCache, Storage
    from wds_core.io.commands import PipeStream

    assert secret in text  # the table's own check
    shown = redact(text)
    assert secret not in shown and kept in shown, shown
    messages = [
        str(wds.ShardNotFoundError("shard not found", url=text)),
        str(wds.SpecError(f"cannot read {text}: it is gone")),  # a message that quotes its URL itself
        repr(Storage({"endpoint_url": text, "headers": {"Authorization": text}, "client_kwargs": {"auth": text}})),
    ]
    if text.startswith("pipe:"):
        stream = PipeStream(f"exit 3; {text[len('pipe:') :]}")
        messages.append(repr(stream))
        with pytest.raises(wds.PipeError) as failed:
            stream.read()
        messages.append(str(failed.value))
    cache = ShardCache(tmp_path / "cache", verbose=True)
    messages.append(cache.path_for(text))
    with cache.open(text, lambda: __import__("io").BytesIO(b"x" * 10)) as stream:
        stream.read()
    messages.append(capsys.readouterr().out)  # the cache's log lines
    for message in messages:
        assert secret not in message, message


def test_a_non_wds_error_about_a_shard_names_it_redacted(tmp_path):
    shard = tmp_path / "x.tar"
    shard.write_bytes(b"\x00" * 1024)
    url = f"file://{shard}?sig=SeCrEt"
    with pytest.raises(Exception) as failed:
        list(wds.WebDataset(url))
    assert "SeCrEt" not in str(failed.value)


# ---------------------------------------------------------------- issue 66: secrets planted everywhere, found nowhere

WORDS = ["key", "token", "secret", "sig", "auth", "password", "passwd", "credential", "session", "cookie"]
SEPARATORS = ["", "-", "_", "."]
NAMES = st.builds(
    lambda before, word, after, sep, upper: (
        sep.join(filter(None, [before, word.upper() if upper else word, after]))
    ),
    st.sampled_from(["", "x", "X-Functions", "Ocp-Apim-Subscription", "x-amz-server-side-encryption-customer",
                     "aws", "my", "api"]),
    st.sampled_from(WORDS),
    st.sampled_from(["", "id", "value", "Id"]),
    st.sampled_from(SEPARATORS),
    st.booleans(),
)  # fmt: skip
SECRETS = st.text("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", min_size=10, max_size=24).map(
    lambda s: "Zq" + s
)
POSITIONS = {
    "user info": lambda name, secret: f"https://alice:{secret}@127.0.0.1:9/x.tar",
    "query": lambda name, secret: f"https://127.0.0.1:9/x.tar?part=1&{name}={secret}&n=2",
    "fragment": lambda name, secret: f"/data/x.tar#{name}={secret}",
    "header": lambda name, secret: f"pipe:curl -s -H '{name}: {secret}' https://127.0.0.1:9/x.tar",
    "header, double quotes": lambda name, secret: f'pipe:curl -H "{name}:{secret}" https://127.0.0.1:9/x.tar',
    "environment": lambda name, secret: f"pipe:{name.replace('-', '_').replace('.', '_')}={secret} tool get x.tar",
    "flag": lambda name, secret: f"pipe:tool --{name} {secret} x.tar",
    "flag=": lambda name, secret: f"pipe:tool --{name}={secret} x.tar",
}


@given(NAMES, SECRETS, st.sampled_from(sorted(POSITIONS)))
def test_a_secret_planted_anywhere_is_shown_nowhere(name, secret, position):
    """Every name that contains one of the words, in every position: error messages, reprs, the shard cache's file
    name and the command's own failure never hold the secret."""
    import io as stdio
    import tempfile

    from wds_core.errors import redact
    from wds_core.io import ShardCache, Storage
    from wds_core.io.commands import PipeStream

    text = POSITIONS[position](name, secret)
    shown = [
        redact(text),
        str(wds.ShardNotFoundError("shard not found", url=text)),
        str(wds.SpecError(f"cannot read {text}")),
        repr(Storage({name: secret, "headers": {name: secret}, "client_kwargs": {"x": {name: secret}}})),
        repr(wds.StorageOptions({name: secret})),
        str(wds.SpecError(f"unknown options { ({name: secret})!r}")),  # a mapping quoted in a message
    ]
    with tempfile.TemporaryDirectory() as folder:
        cache = ShardCache(folder)
        shown.append(cache.path_for(text))
        with cache.open(text, lambda: stdio.BytesIO(b"x")) as stream:
            stream.read()
        shown.extend(os.path.join(root, f) for root, _, names in os.walk(folder) for f in names)
    if text.startswith("pipe:"):
        stream = PipeStream(f"exit 3; : {text[len('pipe:') :]}")
        shown.append(repr(stream))
        try:
            stream.read()
        except wds.PipeError as failed:
            shown.append(str(failed))
        stream.close()
    for message in shown:
        assert secret not in message, (position, message)


def test_the_command_line_and_the_handlers_warnings_hide_a_secret(tmp_path, capsys):
    """A failure that is not wds's own (an OSError quoting its path) is redacted where the `wds` command prints it
    and where warn_and_continue warns about it."""
    from wds_core.cli.main import main

    url = str(tmp_path / "x.tar") + "?access_token=ZqSeCrEt"
    main(["ls", url])
    assert "ZqSeCrEt" not in capsys.readouterr().err
    with pytest.warns(UserWarning) as warned:
        wds.warn_and_continue(OSError(f"cannot open {url}"))
    assert "ZqSeCrEt" not in str(warned[0].message)
