"""Secure mode (issue 21): no commands, no local paths outside the allowed roots, no pickles; each refusal says why."""

import json
import os
import pickle

import pytest

import wds_core as wds
from tests.conftest import make_samples, write_shard
from wds_core import SpecError
from wds_core.io import secure_mode, set_secure


@pytest.fixture
def allowed(tmp_path, monkeypatch):
    root = tmp_path / "allowed"
    root.mkdir()
    write_shard(root / "a.tar", make_samples("a-", 3))
    outside = tmp_path / "outside"
    outside.mkdir()
    write_shard(outside / "b.tar", make_samples("b-", 3))
    monkeypatch.setenv("WDS_SECURE", "1")
    monkeypatch.setenv("WDS_SECURE_ROOTS", str(root))
    return root, outside


def keys(url):
    return [s["__key__"] for s in wds.WebDataset(url)]


def test_local_paths_inside_the_roots_only(allowed):
    root, outside = allowed
    assert secure_mode() and keys(str(root / "a.tar")) == ["a-00000", "a-00001", "a-00002"]
    assert keys(f"file://{root}/a.tar")[0] == "a-00000"
    for url in (str(outside / "b.tar"), f"file://{outside}/b.tar", str(root / ".." / "outside" / "b.tar")):
        with pytest.raises(SpecError, match="not under an allowed root .*WDS_SECURE_ROOTS"):
            keys(url)
    os.symlink(outside / "b.tar", root / "link.tar")  # a link inside a root to a file outside it
    with pytest.raises(SpecError, match="refusing to read the local path"):
        keys(str(root / "link.tar"))


def test_commands_stdin_and_rewrites_to_them_are_refused(allowed, monkeypatch):
    root, outside = allowed
    with pytest.raises(SpecError, match="refuses pipe: commands"):
        keys(f"pipe:cat {root}/a.tar")
    with pytest.raises(SpecError, match="standard input"):
        keys("-")
    wds.register_rewrite("s3://mirror/", str(outside) + "/")  # a rewrite does not get around it
    with pytest.raises(SpecError, match="not under an allowed root"):
        keys("s3://mirror/b.tar")
    monkeypatch.setenv("WDS_ALLOW_PIPE", "1")
    monkeypatch.setenv("WDS_REWRITE", f"s3://cmd/=pipe:cat {outside}/")
    with pytest.raises(SpecError, match="refuses pipe: commands"):
        keys("s3://cmd/b.tar")


def test_writing_is_held_to_the_same_rules(allowed):
    root, outside = allowed
    with wds.TarWriter(str(root / "new.tar")) as sink:
        sink.write({"__key__": "x", "txt": "y"})
    for dest in (str(outside / "new.tar"), "pipe:cat > /dev/null", "-"):
        with pytest.raises(SpecError, match="refusing to write"):
            wds.TarWriter(dest)
    assert not (outside / "new.tar").exists()


def test_pickles_are_refused_even_when_asked_for(allowed):
    with pytest.raises(SpecError, match="refusing allow_pickle=True: secure mode is on"):
        wds.Decoder(allow_pickle=True)
    sample = {"__key__": "k", "x.pyd": pickle.dumps({"a": 1})}
    with pytest.raises(wds.DecodingError, match="allow_pickle"):
        wds.Decoder().decode(sample)


def test_the_switch_the_config_file_and_the_allowed_protocols(tmp_path, monkeypatch):
    monkeypatch.delenv("WDS_SECURE", raising=False)
    monkeypatch.delenv("WDS_SECURE_ROOTS", raising=False)
    assert not secure_mode()
    write_shard(tmp_path / "c.tar", make_samples("c-", 2))
    config = tmp_path / "wds.json"
    config.write_text(json.dumps({"secure": True, "secure_roots": [str(tmp_path / "data")]}))
    monkeypatch.setenv("WDS_CONFIG", str(config))
    assert secure_mode()
    with pytest.raises(SpecError, match=r"allowed root \(.*data\)"):
        keys(str(tmp_path / "c.tar"))
    monkeypatch.setenv("WDS_SECURE", "0")  # the environment wins over the file
    assert keys(str(tmp_path / "c.tar")) == ["c-00000", "c-00001"]
    monkeypatch.delenv("WDS_CONFIG")
    from tests import synthstore

    synthstore.install(3)
    try:
        set_secure(True, roots=[tmp_path])  # for this process and the workers it starts
        assert os.environ["WDS_SECURE"] == "1" and keys(str(tmp_path / "c.tar")) == ["c-00000", "c-00001"]
        with pytest.raises(SpecError, match="it uses synth, which it does not allow .*WDS_SECURE_PROTOCOLS"):
            keys("synth://bucket/shard-000001.tar")  # not on the allowlist
        set_secure(True, roots=[tmp_path], protocols=["synth"])
        assert len(keys("synth://bucket/shard-000001.tar")) == synthstore.SAMPLES
        config.write_text(json.dumps({"secure": True, "secure_protocols": ["synth"]}))
        monkeypatch.setenv("WDS_CONFIG", str(config))
        set_secure(True, roots=None)
        assert len(keys("synth://bucket/shard-000001.tar")) == synthstore.SAMPLES  # from the file
    finally:
        set_secure(False)


SECRET = b"the secret outside the roots"


@pytest.fixture
def secret(allowed):
    root, outside = allowed
    (outside / "secret.txt").write_bytes(SECRET)
    return root, outside


def test_url_forms_that_got_around_the_check_are_refused(secret, tmp_path):
    """Issue 28: the check returned early for any URL with :// that was not file://."""
    root, outside = secret
    forms = [
        f"local://{outside}/b.tar",
        f"tar://b-00000.txt::file://{outside}/b.tar",
        f"zip://secret.txt::file://{outside}/x.zip",
        f"simplecache::file://{outside}/b.tar",
        f"dir::{outside}/b.tar",
        "memory://b.tar",
        "ftp://127.0.0.1/b.tar",
    ]
    for url in forms:
        with pytest.raises(SpecError, match="refusing to read"):
            keys(url)
        with pytest.raises(SpecError, match="refusing to read"):
            keys([url])  # a list spec
        with pytest.raises(SpecError, match="refusing to read"):
            wds.gopen(url, "rb")


def test_the_drop_in_file_cache_holds_local_shards_to_the_roots(allowed, tmp_path):
    """webdataset's FileCache opens local URLs where they are: those are local paths like any other."""
    from wds_core.dropin.cache import FileCache

    root, outside = allowed
    cache = FileCache(cache_dir=str(root / "cache"))
    with pytest.raises(SpecError, match="refusing to read the local path"):
        list(cache([str(outside / "b.tar")]))
    opened = list(cache([str(root / "a.tar")]))
    assert opened[0]["stream"].read(5) and opened[0]["local_path"] == str(root / "a.tar")
    opened[0]["stream"].close()


def test_descriptors_and_spec_files_are_held_to_it(secret):
    root, outside = secret
    descriptor = root / "dataset.json"
    descriptor.write_text(json.dumps({"base": f"local://{outside}", "shardlist": [{"url": "b.tar", "nsamples": 3}]}))
    with pytest.raises(SpecError, match="refusing to read"):
        wds.ShardListDataset(str(descriptor))[0]
    descriptor.write_text(json.dumps({"shardlist": [{"url": f"file://{outside}/b.tar", "nsamples": 3}]}))
    with pytest.raises(SpecError, match="refusing to read"):
        wds.ShardListDataset(str(descriptor))[0]
    sources = [
        (f"simplecache://{outside}/b.tar", {"target_protocol": "file"}),
        ("dir://b.tar", {"path": str(outside), "target_protocol": "file"}),
        (f"file://{outside}/b.tar", {}),
    ]
    for url, options in sources:
        spec = root / "spec.json"
        spec.write_text(json.dumps({"datasets": [{"shards": [url], "storage_options": options}]}))
        with pytest.raises(SpecError, match="refusing to read"):
            list(wds.WebDataset(str(spec)))


def test_writing_through_any_alias_is_refused(secret):
    root, outside = secret
    for dest in (f"local://{outside}/x.tar", f"file://{outside}/x.tar", f"simplecache::file://{outside}/x.tar"):
        with pytest.raises(SpecError, match="refusing to write"):
            wds.TarWriter(dest)
        with pytest.raises(SpecError, match="refusing to write"):
            wds.gopen(dest, "wb")
    assert sorted(p.name for p in outside.iterdir()) == ["b.tar", "secret.txt"]


class _Payload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))  # creates the marker file when unpickled


def test_pickle_is_refused_on_every_decoder_path(allowed, tmp_path, monkeypatch):
    marker = tmp_path / "ran"
    payload = pickle.dumps(_Payload(str(marker)))
    sample = {"__key__": "k", "x.pyd": payload}
    from wds_core.dropin.autodecode import unpickle_loads
    from wds_core.fieldcodecs import basic_decoders

    with pytest.raises(SpecError, match="refusing allow_pickle=True"):
        wds.WebDataset(str(allowed[0] / "a.tar")).xdecode(allow_pickle=True)
    with pytest.raises(SpecError, match="refusing allow_pickle=True"):
        basic_decoders(allow_pickle=True)
    with pytest.raises(SpecError, match="Unpickling is not allowed"):
        unpickle_loads(payload)
    monkeypatch.setenv("WDS_SECURE", "0")  # made before secure mode was turned on: refused when used
    decoder, xdecode = wds.Decoder(allow_pickle=True), wds.xdecode(allow_pickle=True)
    monkeypatch.setenv("WDS_SECURE", "1")
    with pytest.raises(wds.DecodingError, match="refusing unpickling a field"):
        decoder.decode(sample)
    with pytest.raises(wds.DecodingError, match="refusing unpickling a field"):
        next(iter(xdecode([dict(sample)])))
    assert not marker.exists()


@pytest.mark.slow
def test_a_link_flipped_while_it_is_opened_never_reads_outside(secret):
    """Checked, then opened by name, used to read the secret 2,424 times in 60,000 opens."""
    import threading

    from wds_core.io.storage import open_shard

    root, outside = secret
    (root / "inside.txt").write_bytes(b"inside")
    link = root / "flip.txt"
    os.symlink(root / "inside.txt", link)
    stop = threading.Event()

    def flip():
        targets = [outside / "secret.txt", root / "inside.txt"]
        i = 0
        while not stop.is_set():
            temporary = root / f".flip{i % 2}"
            os.symlink(targets[i % 2], temporary)
            os.replace(temporary, link)
            i += 1

    flipper = threading.Thread(target=flip)
    flipper.start()
    read = {"inside": 0, "refused": 0, "secret": 0}
    try:
        for _ in range(5000):
            try:
                with open_shard(str(link)) as stream:
                    data = stream.read()
            except SpecError:
                read["refused"] += 1
                continue
            except FileNotFoundError:
                continue
            read["secret" if data == SECRET else "inside"] += 1
    finally:
        stop.set()
        flipper.join()
    assert read["secret"] == 0 and read["inside"] > 0 and read["refused"] > 0, read


def test_enforce_security_through_the_switch_is_live(tmp_path, monkeypatch):
    """webdataset.utils.enforce_security = True turns secure mode on at once; gopen('-') and ais: are refused."""
    monkeypatch.delenv("WDS_SECURE", raising=False)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    marker = tmp_path / "ais-ran"
    (bin_dir / "ais").write_text(f"#!/bin/sh\ntouch {marker}\n")
    (bin_dir / "ais").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    (tmp_path / "x.txt").write_bytes(b"hello")
    from wds_core import dropin

    utils, gopen = dropin.MODULES["utils"], dropin.MODULES["gopen"]
    assert utils.enforce_security is False
    try:
        utils.enforce_security = True
        assert secure_mode() and os.environ["WDS_SECURE"] == "1" and utils.enforce_security is True
        for url in ("-", "ais://bucket/x.tar", f"pipe:cat {tmp_path}/x.txt"):
            with pytest.raises(SpecError, match="refusing"):
                gopen.gopen(url, "rb")
        with pytest.raises(SpecError, match="gopen: unsafe_gopen is False, cannot open local files"):
            gopen.gopen(str(tmp_path / "x.txt"), "rb")
        with pytest.raises(SpecError, match="gopen_pipe: unsafe_gopen is False"):
            gopen.gopen("pipe:true", "rb")
        monkeypatch.setenv("GOPEN_REWRITE", "http://a/=http://b/")
        with pytest.raises(SpecError, match="rewrite_url: unsafe_gopen is False"):
            gopen.rewrite_url("http://a/x.tar")
        monkeypatch.delenv("GOPEN_REWRITE")
        assert not marker.exists()
        utils.enforce_security = False
        assert not secure_mode()
        with gopen.gopen(str(tmp_path / "x.txt"), "rb") as stream:
            assert stream.read() == b"hello"
    finally:
        set_secure(False)


def test_rewrites_apply_once_per_open(tmp_path, monkeypatch):
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "x.txt").write_bytes(b"once")
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "x.txt").write_bytes(b"twice")
    monkeypatch.setenv("GOPEN_REWRITE", f"{tmp_path}/a/={tmp_path}/b/;{tmp_path}/b/={tmp_path}/c/")
    with wds.gopen(f"{tmp_path}/a/x.txt", "rb") as stream:
        assert stream.read() == b"once"


def _open_after_colon(url, mode, bufsize):
    """An opener as webdataset users register them in ``gopen_schemes``: the path after ``scheme:``."""
    path = url.split(":", 1)[1]
    return open(path[2:] if path.startswith("//") else path, mode)


@pytest.mark.parametrize("register", ["register_opener", "gopen_schemes"])
def test_a_registered_scheme_without_slashes_is_that_schemes_url(allowed, monkeypatch, register):
    """Issue 43: ``mystore:/outside.tar`` (no //) was checked as a relative local path under the working directory,
    and then opened by the opener registered for ``mystore``: read (and written) outside the roots.  One reading
    of the URL decides both: it is ``mystore``'s, refused unless ``mystore`` is an allowed protocol."""
    root, outside = allowed
    monkeypatch.chdir(root)  # the working directory inside an allowed root
    if register == "register_opener":
        wds.register_opener("mystore", _open_after_colon)
    else:
        from wds_core.dropin.gopen import gopen_schemes

        gopen_schemes["mystore"] = _open_after_colon
    try:
        for url in (f"mystore:{outside}/b.tar", f"mystore://{outside}/b.tar"):
            with pytest.raises(SpecError, match="it uses mystore, which it does not allow"):
                keys(url)
            with pytest.raises(SpecError, match="refusing to read"):
                wds.gopen(url, "rb")
        with pytest.raises(SpecError, match="refusing to write"):
            wds.TarWriter(f"mystore:{outside}/written.tar")
        assert not (outside / "written.tar").exists()
        monkeypatch.setenv("WDS_SECURE_PROTOCOLS", "mystore")  # allowed by name: the opener's, as asked
        assert keys(f"mystore:{outside}/b.tar") == ["b-00000", "b-00001", "b-00002"]
    finally:
        wds.register_opener("mystore", None)


def test_the_shard_cache_is_held_to_the_roots(allowed, tmp_path, http_server):
    """Issue 43: a cache_dir outside the allowed roots was written and read back later in secure mode."""
    root, outside = allowed
    write_shard(os.path.join(http_server.root, "c.tar"), make_samples("c-", 3))
    url = http_server.url + "/c.tar"
    with pytest.raises(SpecError, match="refusing to read the local path .*cache"):
        list(wds.WebDataset(url, storage=wds.Storage(cache=wds.ShardCache(str(outside / "cache")))))
    assert not (outside / "cache").exists()
    got = [s["__key__"] for s in wds.WebDataset(url, storage=wds.Storage(cache=wds.ShardCache(str(root / "cache"))))]
    assert got == ["c-00000", "c-00001", "c-00002"] and any((root / "cache").rglob("c.tar"))
    again = [
        s["__key__"] for s in wds.WebDataset(url, storage=wds.Storage(cache=wds.ShardCache(str(root / "cache"))))
    ]  # read back from the cache
    assert again == got
