"""wds_core.io.provenance: a URL from data keeps where it came from, and no process starts from its text.

The property test writes URLs drawn from a grammar of the characters and forms that have led to commands before
(braces and their escapes, quotes, separators, ``pipe:``, ``$(...)``, backticks, URLs that rewrites pass on or make
commands of) into a spec file, a dataset descriptor and a checkpoint state, reads each back as a user would (with a
handler that goes on past every error), and checks that the marker file the commands would make never appears.
"""

import json
import os
import pickle
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import wds_core
from tests.conftest import FUZZ_EXAMPLES, make_samples, write_shard
from wds_core.errors import SpecError, WdsError
from wds_core.io.commands import PipeStream
from wds_core.io.provenance import DataURL, check_command, command_of, from_data, same_origin
from wds_core.io.urls import expand_urls, join_url

ROOT = tempfile.mkdtemp(prefix="wds-provenance-")
MARK = os.path.join(ROOT, "MARK")
ATOMS = [
    "pipe:", f"touch {MARK}", f"touch {MARK} #", ";", "|", "&&", "$(", ")", "`", "'", '"', "\\", "\\{", "\\}", "{",
    "}", ",", "..", "#", "://", "::", "${X}", "/", " ", "a.tar", "mirror://", "cmd://", "regex://", "quoted://",
    "pass://", "0", "%20", "\n",
]  # fmt: skip
ATTACKS = [
    f"\\{{pipe:touch {MARK} #://,a.tar\\}}",  # issue 66: expanded twice, it became a command
    f"mirror://pipe:touch {MARK}",  # a rewrite that passes the URL on
    f"pass://pipe:touch {MARK}",
    f"regex://$(touch {MARK})",  # inside the template's double quotes
    f"quoted://x';touch {MARK};'",  # inside its single quotes
    f"cmd://x;touch {MARK}",
    f"cmd://`touch {MARK}`",
    f"pipe:touch {MARK}",
    f"{{pipe:touch {MARK},a.tar}}",
    f"${{X}}pipe:touch {MARK}",
]
URLS = st.one_of(
    st.lists(st.sampled_from(ATOMS), min_size=1, max_size=10).map("".join),
    st.tuples(
        st.sampled_from(["", "x", "{", "\\", "mirror://"]), st.sampled_from(ATTACKS), st.sampled_from(["", "}", ".tar"])
    ).map("".join),
)


@pytest.fixture()
def rewrites(monkeypatch):
    """Rewrites of every kind in force: code's to a command and one that passes the URL on, the environment's to
    commands (allowed) and one that passes the URL on."""
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("WDS_X", "pipe:")
    wds_core.register_rewrite("mirror://", "")
    wds_core.register_rewrite("cmd://", f"pipe:cat {ROOT}/")
    monkeypatch.setenv("WDS_ALLOW_PIPE", "1")
    monkeypatch.setenv(
        "WDS_REWRITE", f"regex://(.*)=pipe:cat \"{ROOT}/\\1\";quoted://(.*)=pipe:cat '{ROOT}/\\1';pass://(.*)=\\1"
    )


def _read(dataset, limit=3):
    try:
        for _, _sample in zip(range(limit), dataset):
            pass
    except (WdsError, OSError, ValueError):
        pass


GO_ON = wds_core.ShardReadOptions(handler=wds_core.ignore_and_continue)


def _spec_file(url):
    path = os.path.join(ROOT, "spec.json")
    with open(path, "w") as out:
        json.dump({"datasets": [{"shards": url}, {"shards": [url, "a.tar"]}]}, out)
    try:
        _read(wds_core.WebDataset.from_spec(path, reading=GO_ON, empty_check=False))
    except (WdsError, OSError, ValueError):
        pass


def _descriptor(url):
    path = os.path.join(ROOT, "dataset.json")
    for body in (
        {"wids_version": 1, "shardlist": [{"url": url, "nsamples": 1}]},
        {"wids_version": 1, "base": url, "shardlist": [{"url": "a.tar", "nsamples": 1}]},
        {"wids_version": 1, "shardlist": [], "datasets": [{"source_url": url}]},
    ):
        with open(path, "w") as out:
            json.dump(body, out)
        try:
            dataset = wds_core.ShardListDataset(path)
            dataset[0]
        except (WdsError, OSError, ValueError, KeyError, IndexError):
            pass
        try:
            _read(wds_core.WebDataset([s["url"] for s in wds_core.load_descriptor(path)["shardlist"]], reading=GO_ON,
                                      empty_check=False))  # fmt: skip
        except (WdsError, OSError, ValueError):
            pass


def _edited(state, text):
    if isinstance(state, dict):
        return {k: _edited(v, text) for k, v in state.items()}
    if isinstance(state, list):
        return [_edited(v, text) for v in state]
    return text if isinstance(state, str) else state


def _state(url):
    shard = os.path.join(ROOT, "a.tar")
    if not os.path.exists(shard):
        write_shard(shard, make_samples("s", 3))
    dataset = wds_core.WebDataset(shard)
    stream = iter(dataset)
    next(stream)
    state = _edited(dataset.state_dict(), url)
    again = wds_core.WebDataset(shard, reading=GO_ON, empty_check=False)
    try:
        again.load_state_dict(state)
        _read(again)
    except (WdsError, OSError, ValueError, KeyError, TypeError):
        pass


@settings(max_examples=max(300, FUZZ_EXAMPLES), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(URLS)  # the fixture's rewrites hold for every example; nothing an example does changes them
def test_no_url_from_data_starts_a_process(rewrites, url):
    for read in (_spec_file, _descriptor, _state):
        made = os.path.exists(MARK)
        if made:  # by an earlier example that failed (hypothesis then tries smaller ones)
            os.remove(MARK)
        read(url)
        assert not os.path.exists(MARK), f"{read.__name__} of {url!r} ran a command"


def test_the_grammar_reaches_commands_when_they_are_allowed(rewrites):
    """The property test's own check: where commands from data are allowed, its marker is made."""
    path = os.path.join(ROOT, "allowed.json")
    with open(path, "w") as out:
        json.dump({"datasets": [{"shards": f"pipe:touch {MARK}"}]}, out)
    try:
        _read(wds_core.WebDataset.from_spec(path, reading=GO_ON, empty_check=False, allow_pipe=True))
        assert os.path.exists(MARK)
    finally:
        if os.path.exists(MARK):
            os.remove(MARK)


def test_a_data_url_keeps_its_origin_through_lists_pickles_and_rewrites():
    url = from_data("mirror://pipe:true", "spec.yaml: source 0")
    assert isinstance(url, DataURL) and url.origin == "spec.yaml: source 0" and not url.commands
    back = pickle.loads(pickle.dumps([url]))[0]
    assert isinstance(back, DataURL) and back.origin == url.origin
    assert expand_urls([url]) == [url] and isinstance(expand_urls([url])[0], DataURL)
    braces = from_data("a-{0..1}.tar", "data")
    assert expand_urls(braces) == ["a-{0..1}.tar"]  # a URL from data is never expanded again
    assert wds_core.SimpleShardList([braces]).urls == ["a-{0..1}.tar"]
    wds_core.register_rewrite("mirror://", "")
    rewritten = wds_core.io.Storage().rewrite(url)
    assert rewritten == "pipe:true" and isinstance(rewritten, DataURL)
    with pytest.raises(SpecError, match="spec.yaml: source 0.*runs a command.*allow_pipe=True"):
        PipeStream(command_of(rewritten))
    assert isinstance(same_origin(url, "x"), DataURL) and not isinstance(same_origin("code", "x"), DataURL)
    assert isinstance(join_url(from_data("/data/", "d"), "x.tar"), str)


def test_commands_from_data_run_where_their_reader_allowed_them(tmp_path):
    allowed = from_data("pipe:echo hi", "spec", commands=True)
    check_command(command_of(allowed))
    stream = PipeStream(command_of(allowed))
    assert stream.read() == b"hi\n"
    stream.close()
    with pytest.raises(SpecError, match="runs a command"):
        from_data("pipe:echo hi", "spec")
