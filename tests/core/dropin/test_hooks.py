"""Replaced hooks are honoured through the switch (issue 57): a toolkit assigns ``webdataset.tariterators.url_opener
= its_opener`` and webdataset 1.0.2 calls it for every shard, where the switch used to call it 0 times (wds's own
opener read the shards, silently bypassing the toolkit's storage).

The table assigns each name webdataset's functions look up when they run (wrapped, to count its calls), runs the
code that looks it up, and records the calls and what came out.  The same table runs on the real webdataset 1.0.2
and through the switch, each in a process of its own, and the two records must be equal.  Names that webdataset
reads only as default arguments (``reraise_exception``, ``base_plus_ext``) are in the table too: 0 calls in both.
"""

import json
import subprocess
import sys
import textwrap

import pytest

from wds_core.dropin import hooks

TABLE = textwrap.dedent(
    """
    import io, json, os, sys, tarfile
    folder, flavour = sys.argv[1], sys.argv[2]
    if flavour != "webdataset":
        __import__(flavour).install_as_webdataset(verbose=False)
    import webdataset as wds
    modules = {name: sys.modules["webdataset." + name] for name in
               ("tariterators", "compat", "cache", "gopen", "writer", "utils", "autodecode", "handlers")}
    URLS = [os.path.join(folder, f"shard-{i}.tar") for i in range(4)]
    CALLS = []

    def counted(module, name):
        original = getattr(modules[module], name)
        if isinstance(original, type):  # a class: count its instances
            return type(original.__name__, (original,),
                        {"__init__": lambda self, *a, **k: (CALLS.append(name), original.__init__(self, *a, **k))[1]})
        def wrapper(*args, **kw):
            CALLS.append(name)
            return original(*args, **kw)
        return wrapper

    def keys(samples):
        return [s["__key__"] for s in samples]

    def dataset_of(urls):
        return keys(wds.WebDataset(urls, shardshuffle=False))

    def dataset():
        return dataset_of(URLS)

    def piped():
        return keys(wds.WebDataset([f"pipe:cat {url}" for url in URLS], shardshuffle=False))

    def tar_samples():
        return keys(modules["tariterators"].tarfile_samples([{"url": url} for url in URLS]))

    def tar_to_samples():
        return keys(wds.DataPipeline(wds.SimpleShardList(URLS), wds.tarfile_to_samples()))

    def read_one():
        with modules["gopen"].reader(URLS[0]) as stream:
            return len(stream.read())

    def gopen_one():
        with modules["gopen"].gopen(URLS[1]) as stream:
            return len(stream.read())

    def write_one():
        with modules["writer"].TarWriter(os.path.join(folder, "out.tar")) as sink:
            sink.write({"__key__": "a", "txt": "x"})
        return os.path.getsize(os.path.join(folder, "out.tar")) > 0

    def worker_seed():
        return modules["utils"].pytorch_worker_seed()

    def decoded():
        return [sorted(s) for s in wds.WebDataset(URLS[:1], shardshuffle=False).decode()]

    def worker_two_of_two(group=None):
        return 0, 1, 1, 2

    TABLE = [
        ("tariterators", "url_opener", tar_samples), ("tariterators", "url_opener", tar_to_samples),
        ("tariterators", "url_opener", dataset), ("tariterators", "tar_file_expander", tar_samples),
        ("tariterators", "tar_file_expander", tar_to_samples), ("tariterators", "tar_file_expander", dataset),
        ("tariterators", "group_by_keys", tar_samples), ("tariterators", "group_by_keys", dataset),
        ("tariterators", "tar_file_iterator", tar_samples), ("tariterators", "tar_file_iterator", dataset),
        ("tariterators", "valid_sample", tar_samples), ("tariterators", "valid_sample", dataset),
        ("tariterators", "base_plus_ext", tar_samples), ("compat", "tar_file_expander", dataset),
        ("compat", "group_by_keys", dataset), ("compat", "group_by_keys", tar_samples),
        ("cache", "StreamingOpen", dataset), ("cache", "StreamingOpen", tar_samples), ("gopen", "gopen", dataset),
        ("gopen", "gopen", piped),
        ("gopen", "gopen", tar_samples), ("gopen", "gopen", read_one), ("gopen", "rewrite_url", gopen_one),
        ("writer", "gopen", write_one), ("handlers", "reraise_exception", dataset),
    ]
    record = {}
    for module, name, run in TABLE:
        original = getattr(modules[module], name)
        setattr(modules[module], name, counted(module, name))
        try:
            result = run()
        finally:
            setattr(modules[module], name, original)
        record[f"{module}.{name} <- {run.__name__}"] = [len(CALLS) > 0, result]
        CALLS.clear()
        assert run() == result  # the original back: the same result, and nothing counted
        assert not CALLS, (module, name)

    # a replaced worker info splits the shards (webdataset's splitters ask utils.pytorch_worker_info)
    original = modules["utils"].pytorch_worker_info
    modules["utils"].pytorch_worker_info = worker_two_of_two
    record["utils.pytorch_worker_info <- dataset"] = dataset()
    record["utils.pytorch_worker_info <- pytorch_worker_seed"] = worker_seed()
    modules["utils"].pytorch_worker_info = original

    # a scheme's opener in gopen's table: every reader of the process opens those URLs with it
    def scheme_opener(url, mode="rb", bufsize=8192, **kw):
        CALLS.append(url)
        return open(os.path.join(folder, url.split("://", 1)[1]), mode)

    modules["gopen"].gopen_schemes["wdstest"] = scheme_opener
    record["gopen.gopen_schemes <- dataset"] = dataset_of([f"wdstest://shard-{i}.tar" for i in range(4)])
    record["gopen.gopen_schemes <- gopen"] = len(modules["gopen"].gopen("wdstest://shard-0.tar").read())
    record["gopen.gopen_schemes calls"] = len(CALLS)
    del modules["gopen"].gopen_schemes["wdstest"]

    # handler lists: a decoder made after they change uses them
    def upper(key, data):
        return data.decode().upper() if key.endswith("txt") else None

    modules["autodecode"].default_post_handlers.insert(0, upper)
    record["autodecode.default_post_handlers <- decode"] = [s["txt"] for s in
                                                            wds.WebDataset(URLS[:1], shardshuffle=False).decode()]
    modules["autodecode"].default_post_handlers.remove(upper)
    saved = modules["autodecode"].default_pre_handlers
    modules["autodecode"].default_pre_handlers = [upper]
    record["autodecode.default_pre_handlers <- Decoder"] = modules["autodecode"].Decoder([])(
        {"__key__": "a", "txt": b"abc"})["txt"]
    modules["autodecode"].default_pre_handlers = saved
    print(json.dumps(record))
    """
)


def _shards(folder):
    import io
    import tarfile

    for i in range(4):
        with tarfile.open(folder / f"shard-{i}.tar", "w") as tar:
            for j in range(3):
                for ext, data in (("txt", f"text {i} {j}".encode()), ("cls", str(j).encode())):
                    info = tarfile.TarInfo(f"s{i}{j}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))


def _record(folder, flavour):
    out = subprocess.run([sys.executable, "-c", TABLE, str(folder), flavour], capture_output=True, text=True,
                         timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


@pytest.mark.slow  # webdataset 1.0.2 imports torch: two processes of several seconds
@pytest.mark.parametrize("flavour", ["wds_core", "wds_torch"])
def test_each_replaced_hook_is_called_as_in_webdataset_1_0_2(flavour, tmp_path):
    pytest.importorskip("webdataset")
    pytest.importorskip("torch")  # webdataset 1.0.2 imports it
    if flavour == "wds_torch":
        pytest.importorskip("wds_torch")
    _shards(tmp_path)
    expected = _record(tmp_path, "webdataset")
    got = _record(tmp_path, flavour)
    assert {k: v for k, v in got.items() if v != expected[k]} == {}
    # the table has teeth: the replaced openers, expanders and groupers are called, and some names are not
    assert expected["tariterators.url_opener <- tar_samples"][0] and expected["compat.group_by_keys <- dataset"][0]
    assert not expected["tariterators.url_opener <- dataset"][0]
    assert not expected["handlers.reraise_exception <- dataset"][0]
    assert len(expected["utils.pytorch_worker_info <- dataset"]) == 6  # shards 1 and 3 of 4


def test_every_hook_name_is_in_the_modules_and_assignments_reach_wds(tmp_path):
    import wds_core.dropin as dropin

    for module, names in hooks.HOOKS.items():
        for name in names:
            assert hooks.replacement(module, name) is None, (module, name)
            assert name in vars(dropin.MODULES[module]), (module, name)
    code = textwrap.dedent(
        """
        import sys, wds_core, wds_core.dropin.tariterators as core
        from wds_core.dropin import hooks
        wds_core.install_as_webdataset(verbose=False)
        import webdataset.tariterators as ti
        mine = lambda data, **kw: iter(())
        ti.url_opener = mine
        assert core.url_opener is mine and hooks.replacement("tariterators", "url_opener") is mine
        assert list(ti.tarfile_samples(["a.tar"])) == []  # the replaced opener gave no streams
        from unittest import mock
        with mock.patch.object(sys.modules["webdataset.gopen"], "gopen") as opener:
            assert hooks.replacement("gopen", "gopen") is opener
        assert hooks.replacement("gopen", "gopen") is None
        print("ok")
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


@pytest.mark.slow
def test_a_toolkits_opener_is_called_for_every_shard_in_spawned_dataloader_workers(tmp_path):
    pytest.importorskip("torch")
    _shards(tmp_path)
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import glob, os, uuid
            import torch
            import webdataset as wds
            import webdataset.tariterators

            FOLDER = {str(tmp_path)!r}

            def toolkit_opener(data, handler=wds.reraise_exception, **kw):  # the toolkit's own storage
                for sample in data:
                    open(os.path.join(FOLDER, "opened-" + uuid.uuid4().hex), "w").close()
                    sample["stream"] = open(sample["url"], "rb")
                    yield sample

            webdataset.tariterators.url_opener = toolkit_opener

            if __name__ == "__main__":
                urls = sorted(glob.glob(os.path.join(FOLDER, "shard-*.tar")))
                dataset = wds.DataPipeline(wds.SimpleShardList(urls), wds.split_by_worker, wds.tarfile_to_samples())
                loader = torch.utils.data.DataLoader(dataset, num_workers=2, batch_size=None,
                                                     multiprocessing_context="spawn")
                print(len(list(loader)), len(glob.glob(os.path.join(FOLDER, "opened-*"))))
            """
        )
    )
    out = subprocess.run([sys.executable, "-m", "wds_torch.run", "--quiet", str(script)], capture_output=True,
                         text=True, timeout=300, cwd=str(tmp_path))  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["12", "4"]  # every sample, and the toolkit's opener called once a shard
