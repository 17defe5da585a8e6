"""wds_core.io.shelltemplate: a rewrite to a command hands the URL's parts to the shell as arguments, never as text."""

import io
import re
import tarfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import wds_core
from wds_core.errors import SpecError
from wds_core.io.commands import PipeStream
from wds_core.io.provenance import CommandURL, command_of
from wds_core.io.shelltemplate import command_template
from wds_core.io.storage_config import rewrite_url


def _run(url: CommandURL) -> bytes:
    stream = PipeStream(command_of(url))
    try:
        return stream.read()
    finally:
        stream.close()


def test_each_reference_is_a_parameter_written_for_the_quoting_around_it():
    match = re.match(r"m://(\w+)/(.*)", "m://b/x y.tar")
    assert command_template(r"pipe:cat /d/\1/\2", match, "") == 'pipe:cat /d/"${1}"/"${2}"'
    assert command_template(r'pipe:cat "/d/\1"', match, "").endswith('"/d/${1}"')
    assert command_template(r"pipe:cat '/d/\g<1>'", match, "").endswith("'/d/'\"${1}\"''")
    made = command_template(r"pipe:cat /d/\1", match, ".tar")
    assert made == 'pipe:cat /d/"${1}""${2}"' and made.args == ("b", ".tar")
    prefix = command_template("pipe:cat /mirror/", None, "x/a.tar")  # a prefix rule: the rest is its one part
    assert prefix == 'pipe:cat /mirror/"${1}"' and prefix.args == ("x/a.tar",)


def test_a_template_that_would_glue_a_part_to_an_escape_or_a_dollar_is_refused():
    match = re.match(r"m://(.*)", "m://x")
    for template in (r"pipe:cat /d/$\1", "pipe:cat /d/\\\\\\1"):
        with pytest.raises(SpecError, match="right before a part of the URL"):
            command_template(template, match, "")


@pytest.mark.parametrize("template", [r'pipe:cat "ROOT/\1"', r"pipe:cat 'ROOT/\1'", r"pipe:cat ROOT/\1"])
def test_a_part_is_read_as_the_file_it_names_whatever_its_characters(tmp_path, monkeypatch, template):
    """The mirror works for every name (spaces, quotes, $, ;) and none of them runs anything."""
    name = "a b'c\"$(touch MARK);`touch MARK`.tar"
    (tmp_path / name).write_bytes(b"the shard")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WDS_ALLOW_PIPE", "1")
    monkeypatch.setenv("WDS_REWRITE", "mirror://(.*)=" + template.replace("ROOT", str(tmp_path)))
    url = rewrite_url("mirror://" + name)
    assert isinstance(url, CommandURL) and name not in url
    assert _run(url) == b"the shard"
    assert not (tmp_path / "MARK").exists()


def test_the_attacks_of_issue_66_run_nothing(tmp_path, monkeypatch):
    """Inside the template's double quotes $(cmd) ran; inside its single quotes ';cmd' ran: no longer."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WDS_ALLOW_PIPE", "1")
    for template, data in ((r'pipe:cat "/mirror/\1"', "$(touch MARK)"), (r"pipe:cat '/mirror/\1'", "x;touch MARK;")):
        monkeypatch.setenv("WDS_REWRITE", "gs://(.*)=" + template)
        reading = wds_core.ShardReadOptions(handler=wds_core.ignore_and_continue)
        assert list(wds_core.WebDataset(f"gs://{data}", reading=reading, empty_check=False)) == []
        assert not (tmp_path / "MARK").exists(), template


def test_reading_through_a_code_rewrite_to_a_command(tmp_path):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        member = tarfile.TarInfo("s1.txt")
        member.size = 2
        tar.addfile(member, io.BytesIO(b"hi"))
    (tmp_path / "odd name;x.tar").write_bytes(buffer.getvalue())
    wds_core.register_rewrite("mirror://", f"pipe:cat {tmp_path}/")
    samples = list(wds_core.WebDataset("mirror://odd name;x.tar"))
    assert [s["txt"] for s in samples] == [b"hi"]


@settings(max_examples=200)
@given(st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40))
def test_any_part_reaches_the_command_unchanged(part):
    """A property: whatever the URL's part holds, the command's argument is exactly it (printf echoes it)."""
    match = re.match(r"m://(.*)", "m://" + part, re.S)
    for template in (r"pipe:printf %s \1", r'pipe:printf %s "\1"', r"pipe:printf %s '\1'"):
        assert _run(command_template(template, match, "")) == part.encode("utf-8", "surrogateescape")
