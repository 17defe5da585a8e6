"""The configuration file: where it is, read again when it changes, clear errors, and its sections."""

import pytest

from wds_core.errors import SpecError
from wds_core.io.config import config_exists, config_path, configured
from wds_core.io.storage_config import options_for


def test_config_file_is_reread_when_it_changes(tmp_path, monkeypatch):
    config = tmp_path / "wds.json"
    config.write_text('{"storage": [{"prefix": "gs://g/", "options": {"token": "one"}}]}')
    monkeypatch.setenv("WDS_CONFIG", str(config))
    assert options_for("gs://g/a.tar") == {"token": "one"}
    config.write_text('{"storage": [{"prefix": "gs://g/", "options": {"token": "two!"}}]}')
    assert options_for("gs://g/a.tar") == {"token": "two!"}


def test_default_config_location(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert config_path() == str(tmp_path / "wds" / "config.yaml")
    (tmp_path / "wds").mkdir()
    (tmp_path / "wds" / "config.yaml").write_text("storage:\n  - prefix: s3://d/\n    options: {anon: true}\n")
    assert options_for("s3://d/a.tar") == {"anon": True}


@pytest.mark.parametrize(
    "text, message",
    [
        ("storage: [{options: {}}]", "storage entry 0 needs 'prefix'"),
        ("- just a list", "expected a mapping"),
        ("storage: [{prefix: 's3://x/', options: [1]}]", "'options' mapping"),
        ("rewrite: [{prefix: 's3://x/'}]", "rewrite entry 0 needs"),
        ("storage: {{{", "not valid YAML"),
    ],
)
def test_bad_config_files_are_clear_errors(tmp_path, monkeypatch, text, message):
    config = tmp_path / "bad.yaml"
    config.write_text(text)
    monkeypatch.setenv("WDS_CONFIG", str(config))
    with pytest.raises(SpecError, match=message) as info:
        options_for("s3://x/a.tar")
    assert str(config) in str(info.value)


def test_missing_named_config_file_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setenv("WDS_CONFIG", str(tmp_path / "nope.yaml"))
    with pytest.raises(SpecError, match="does not exist"):
        options_for("s3://x/a.tar")


def test_every_section_is_read_from_the_one_file(tmp_path, monkeypatch):
    config = tmp_path / "all.yaml"
    config.write_text(
        "decode_limits: {field_bytes: 1000}\nsecure: true\nsecure_roots: [/data]\nsecure_protocols: [s3]\n"
    )
    monkeypatch.setenv("WDS_CONFIG", str(config))
    assert config_exists() and config_path() == str(config)
    assert configured("decode_limits") == {"field_bytes": 1000} and configured("secure") is True
    assert configured("secure_roots") == ["/data"] and configured("secure_protocols") == ["s3"]
    assert configured("no_such_section") is None
    config.write_text("decode_limits: {field_bytes: -1}\n")
    with pytest.raises(SpecError, match="decode_limits is a mapping of limit names to positive byte counts"):
        configured("decode_limits")
