import pickle

import pytest

import wds_core
from wds_core.errors import SpecError
from wds_core.io.storage_config import options_for, registered, rewrite_url
from wds_core.sources.tarsamples import TarfileToSamples


def test_longest_registered_prefix_wins():
    wds_core.register_storage("s3://", region="eu-west-1")
    wds_core.register_storage("s3://bucket/", key="k1", anon=False)
    wds_core.register_storage("s3://bucket/private/", key="k2")
    assert options_for("s3://bucket/private/a.tar") == {"key": "k2"}
    assert options_for("s3://bucket/a.tar") == {"key": "k1", "anon": False}
    assert options_for("s3://other/a.tar") == {"region": "eu-west-1"}
    assert options_for("gs://bucket/a.tar") == {}


def test_explicit_beats_registered_beats_file(tmp_path, monkeypatch):
    config = tmp_path / "wds.yaml"
    config.write_text(
        "storage:\n"
        "  - prefix: s3://bucket/\n"
        "    options: {key: from-file, profile: p, client_kwargs: {endpoint_url: 'http://file', region_name: r}}\n"
    )
    monkeypatch.setenv("WDS_CONFIG", str(config))
    assert options_for("s3://bucket/x.tar")["key"] == "from-file"
    wds_core.register_storage("s3://bucket/", key="registered", client_kwargs={"endpoint_url": "http://reg"})
    merged = options_for("s3://bucket/x.tar", {"key": "explicit"})
    assert merged["key"] == "explicit"
    assert merged["profile"] == "p"
    # nested dicts merge one level deep
    assert merged["client_kwargs"] == {"endpoint_url": "http://reg", "region_name": "r"}


def test_explicit_options_keyed_by_prefix():
    explicit = {"s3://a/": {"key": "ka"}, "s3://b/": {"key": "kb"}}
    assert options_for("s3://a/x.tar", explicit) == {"key": "ka"}
    assert options_for("s3://b/x.tar", explicit) == {"key": "kb"}
    assert options_for("s3://c/x.tar", explicit) == {}


def test_rewrites_env_registered_and_file(tmp_path, monkeypatch):
    assert rewrite_url("gs://bucket/a.tar") == "gs://bucket/a.tar"
    wds_core.register_rewrite("gs://bucket/", "/mnt/mirror/")
    assert rewrite_url("gs://bucket/a.tar") == "/mnt/mirror/a.tar"
    monkeypatch.setenv("GOPEN_REWRITE", "gs://bucket/=http://mirror/;s3://=gs://")
    assert rewrite_url("gs://bucket/a.tar") == "http://mirror/a.tar"
    assert rewrite_url("s3://x/a.tar") == "gs://x/a.tar"
    monkeypatch.setenv("WDS_REWRITE", "gs://bucket/=/fast/")
    assert rewrite_url("gs://bucket/a.tar") == "/fast/a.tar"  # WDS_REWRITE is consulted first
    monkeypatch.delenv("WDS_REWRITE")
    monkeypatch.delenv("GOPEN_REWRITE")
    wds_core.unregister_rewrite()
    config = tmp_path / "c.yaml"
    config.write_text("rewrite:\n  - {prefix: 'http://old/', replacement: 'http://new/'}\n")
    monkeypatch.setenv("WDS_CONFIG", str(config))
    assert rewrite_url("http://old/x/y.tar") == "http://new/x/y.tar"
    monkeypatch.setenv("WDS_REWRITE", "no-equals-sign")
    with pytest.raises(SpecError, match="pattern=replacement"):
        rewrite_url("x")
    monkeypatch.setenv("WDS_REWRITE", "gs://([=/mnt/")
    with pytest.raises(SpecError, match="not a valid regular expression"):
        rewrite_url("x")


def test_environment_rules_are_regular_expressions_as_in_webdataset(monkeypatch):
    monkeypatch.setenv("WDS_REWRITE", r"gs://[a-z-]+/(train|val)/=/data/\1-split/")
    assert rewrite_url("gs://my-bucket/train/a.tar") == "/data/train-split/a.tar"
    assert rewrite_url("s3://my-bucket/train/a.tar") == "s3://my-bucket/train/a.tar"
    monkeypatch.setenv("WDS_REWRITE", "gs://=/shared/data/")  # the seed's example
    assert rewrite_url("gs://bucket/x.tar") == "/shared/data/bucket/x.tar"


def test_rewrites_to_shell_commands_need_permission(tmp_path, monkeypatch):
    monkeypatch.setenv("WDS_REWRITE", "gs://=pipe:ssh proxyhost gsutil cat gs://")
    with pytest.raises(SpecError, match="WDS_ALLOW_PIPE=1"):
        rewrite_url("gs://bucket/x.tar")
    monkeypatch.setenv("WDS_ALLOW_PIPE", "1")
    command = rewrite_url("gs://bucket/x.tar")  # the rest of the URL is the command's argument, never shell text
    assert command == 'pipe:ssh proxyhost gsutil cat gs://"${1}"' and command.args == ("bucket/x.tar",)
    monkeypatch.delenv("WDS_ALLOW_PIPE")
    monkeypatch.delenv("WDS_REWRITE")
    config = tmp_path / "c.yaml"
    config.write_text("rewrite:\n  - {prefix: 'http://', replacement: 'pipe:curl -s http://'}\n")
    monkeypatch.setenv("WDS_CONFIG", str(config))
    with pytest.raises(SpecError, match="WDS_ALLOW_PIPE"):
        rewrite_url("http://host/x.tar")
    wds_core.register_rewrite("http://host/", "pipe:cat /tmp/")  # code may rewrite to a command
    assert rewrite_url("http://host/x.tar").shown() == "pipe:cat /tmp/\"${1}\" 'x.tar'"


def test_rewrite_applies_when_reading(tmp_path, shards, monkeypatch):
    mirror, name = shards[1][0].rsplit("/", 1)
    monkeypatch.setenv("WDS_REWRITE", f"gs://nowhere/={mirror}/")
    samples = list(wds_core.WebDataset(f"gs://nowhere/{name}"))
    assert len(samples) == 25 and samples[0]["__url__"] == f"gs://nowhere/{name}"


def test_storage_options_repr_hides_secrets():
    options = wds_core.StorageOptions(
        key="AKID", secret="s3cr3t", client_kwargs={"aws_session_token": "T0KVALUE"}, anon=0
    )
    text = repr(options)
    assert "s3cr3t" not in text and "AKID" not in text and "T0KVALUE" not in text and "anon" in text
    stage = TarfileToSamples(storage={"secret": "s3cr3t"})
    assert "s3cr3t" not in repr(stage.options.storage.options)


def test_registered_options_travel_with_pickled_reading_stage():
    """The stage's storage context carries them as data; the receiving process's registry is left alone."""
    wds_core.register_storage("s3://travel/", key="k", secret="s")
    wds_core.register_rewrite("gs://x/", "/y/")
    data = pickle.dumps(TarfileToSamples())
    wds_core.unregister_storage()
    wds_core.unregister_rewrite()
    stage = pickle.loads(data)
    assert registered() == {"storage": {}, "rewrite": {}}
    assert stage.options.storage.options_for("s3://travel/a") == {"key": "k", "secret": "s"}
    assert stage.options.storage.rewrite("gs://x/a.tar") == "/y/a.tar"
    assert options_for("s3://travel/a") == {} and rewrite_url("gs://x/a.tar") == "gs://x/a.tar"
    wds_core.register_storage("s3://travel/", key="local-wins")  # what the receiving process registers wins
    assert stage.options.storage.options_for("s3://travel/a") == {"key": "local-wins"}
    again = pickle.loads(pickle.dumps(stage))  # carried on when pickled again (a worker's worker)
    wds_core.unregister_storage()
    assert again.options.storage.options_for("s3://travel/a") == {"key": "local-wins"}
    assert again.options.storage.rewrite("gs://x/a.tar") == "/y/a.tar"


def test_prefix_must_be_a_string():
    with pytest.raises(SpecError, match="non-empty URL prefix"):
        wds_core.register_storage("", key="x")
