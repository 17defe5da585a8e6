"""The ``wds`` console script on generated data: each command run in this process as the console script runs it
(its ``main``, output captured), and in a subprocess where the process itself is what is tested (its environment,
the storage options it is given, a terminal, a closed pipe): those tests are in the slow tier."""

import contextlib
import io
import json
import os
import subprocess
import sys
import tarfile

import pytest

import wds_core as wds
from tests.conftest import make_samples, tar_bytes, write_shard
from wds_core.cli.main import main

PROCESS_ARGUMENTS = ("--storage-options", "--endpoint-url")  # they set the process's storage: a process of its own


def wds_cli(*args, cwd=None, check=True, env=None):
    """What ``subprocess.run(["wds", *args], capture_output=True)`` gives; run in this process unless ``env`` or
    a storage argument asks for a process of its own."""
    argv = [str(arg) for arg in args]
    if env is not None or any(arg in PROCESS_ARGUMENTS for arg in argv):
        return subprocess.run(["wds", *argv], capture_output=True, cwd=cwd, check=check, env=env)
    out, err = (io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True) for _ in range(2))
    with contextlib.chdir(cwd or os.getcwd()), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exit:  # --help, and usage errors
            code = exit.code if isinstance(exit.code, int) else 2
        sys.stdout.flush()
    result = subprocess.CompletedProcess(["wds", *argv], code, out.buffer.getvalue(), err.buffer.getvalue())
    if check:
        result.check_returncode()
    return result


@pytest.fixture
def data(tmp_path):
    keys = []
    for s in range(3):
        samples = make_samples(f"s{s}-", 7, fields=("txt", "cls", "json"))
        keys += [x["__key__"] for x in samples]
        write_shard(tmp_path / f"d-{s}.tar", samples, ("txt", "cls", "json"))
    return str(tmp_path / "d-{0..2}.tar"), keys


def test_every_command_has_help():
    for command in (
        "create",
        "ls",
        "cat",
        "extract",
        "cp",
        "stats",
        "verify",
        "bench",
        "reshard",
        "transform",
        "index",
        "profile",
    ):
        out = wds_cli(command, "--help").stdout.decode()
        assert out.startswith("usage: wds " + command) and "\n\n" in out


def test_create_from_a_folder_is_sorted_and_deterministic(tmp_path):
    src = tmp_path / "src"
    for key in ("b/002", "a/001", "a/000"):
        (src / os.path.dirname(key)).mkdir(parents=True, exist_ok=True)
        (src / f"{key}.txt").write_text(f"text {key}")
        (src / f"{key}.seg.png").write_bytes(b"png " + key.encode())
    (src / ".hidden").write_text("x")
    for run in ("one", "two"):
        (tmp_path / run).mkdir()
        wds_cli("create", src, "-o", tmp_path / run / "out-%03d.tar", "--maxcount", 2)
    assert sorted(os.listdir(tmp_path / "one")) == ["out-000.tar", "out-001.tar"]
    for name in ("out-000.tar", "out-001.tar"):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()
    samples = list(wds.WebDataset(str(tmp_path / "one" / "out-{000..001}.tar")))
    assert [s["__key__"] for s in samples] == ["a/000", "a/001", "b/002"]
    assert samples[2]["seg.png"] == b"png b/002" and samples[0]["txt"] == b"text a/000"


def test_ls_and_cat(data, tmp_path):
    spec, keys = data
    shard = spec.replace("{0..2}", "0")
    listing = wds_cli("ls", shard).stdout.decode().splitlines()
    assert len(listing) == 21 and listing[1].split() == ["1024", "9", "s0-00000.cls"]  # header offset, size, name
    info = json.loads(wds_cli("ls", "--json", shard).stdout)
    assert info["samples"] == 7 and info["members"][1]["offset"] == 1024 + 512  # data follows the header
    assert wds_cli("cat", shard, "--key", "s0-00003", "--field", "txt").stdout == b"s0--3-txt"
    assert wds_cli("cat", shard).stdout == open(shard, "rb").read()
    missing = wds_cli("cat", shard, "--key", "nope", check=False)
    assert missing.returncode == 1 and b"no sample 'nope'" in missing.stderr
    ambiguous = wds_cli("cat", shard, "--key", "s0-00003", check=False)
    assert ambiguous.returncode == 1 and b"say which with --field" in ambiguous.stderr


def test_stats_table_and_json(data, tmp_path):
    spec, keys = data
    extra = tmp_path / "extra.tar"
    write_shard(extra, make_samples("e-", 2, fields=("txt", "jpg")), ("txt", "jpg"))
    report = json.loads(wds_cli("stats", spec, extra, "--json").stdout)
    assert report["shards"] == 4 and report["samples"] == 23
    assert report["fields"]["jpg"]["count"] == 2 and report["fields"]["jpg"]["missing"] == 21
    assert report["fields"]["cls"]["min"] == len(b"s0--0-cls") and report["fields"]["txt"]["count"] == 23
    table = wds_cli("stats", spec).stdout.decode()
    assert "3 shards, 21 samples" in table and "json" in table


def test_verify_reports_corruption_and_counts(data, tmp_path):
    spec, _ = data
    assert wds_cli("verify", spec).returncode == 0
    good = open(spec.replace("{0..2}", "1"), "rb").read()
    broken = bytearray(good)
    broken[512 * 6 + 100] ^= 0xFF  # inside the 4th member's header: its checksum no longer matches
    broken[512 * 14 + 100] ^= 0xFF  # and the 8th's: verify resumes after the first and reports both
    (tmp_path / "broken.tar").write_bytes(bytes(broken))
    (tmp_path / "short.tar").write_bytes(good[: 512 * 9])
    result = wds_cli("verify", spec, tmp_path / "broken.tar", tmp_path / "short.tar", check=False)
    out = result.stdout.decode()
    assert result.returncode == 1
    assert f"CORRUPT {tmp_path / 'broken.tar'}" in out and "offset 3072" in out and "offset 7168" in out
    assert out.count("CORRUPT") == 3
    (tmp_path / "twice.tar").write_bytes(tar_bytes([("k.txt", b"1"), ("k.txt", b"2")]))
    twice = wds_cli("verify", tmp_path / "twice.tar", check=False)
    assert twice.returncode == 1 and b"field 'txt' occurs twice in sample 'k'" in twice.stdout
    assert f"CORRUPT {tmp_path / 'short.tar'}" in out
    descriptor = tmp_path / "ds.json"
    descriptor.write_text(json.dumps({"wids_version": 1, "shardlist": [{"url": "d-0.tar", "nsamples": 9}]}))
    counted = wds_cli("verify", descriptor, check=False)
    assert counted.returncode == 1 and b"the descriptor says 9 samples, the shard has 7" in counted.stdout
    wds_cli("index", "create", spec, "-o", tmp_path / "md5.json", "--md5")
    assert wds_cli("verify", tmp_path / "md5.json").returncode == 0
    entries = json.loads((tmp_path / "md5.json").read_text())
    entries["shardlist"][1]["md5sum"] = "0" * 32
    (tmp_path / "md5.json").write_text(json.dumps(entries))
    changed = wds_cli("verify", tmp_path / "md5.json", check=False)
    assert changed.returncode == 1 and b"MD5 " in changed.stdout and b"the descriptor says 0000" in changed.stdout


def test_extract_refuses_escaping_members(tmp_path):
    shard = tmp_path / "evil.tar"
    members = [("ok/a.txt", b"fine"), ("../escape.txt", b"no"), ("/etc/abs.txt", b"no"), ("x/../../y.txt", b"no")]
    shard.write_bytes(tar_bytes(members, fmt=tarfile.GNU_FORMAT))
    result = wds_cli("extract", shard, "-C", tmp_path / "out", check=False)
    assert result.returncode == 1 and result.stderr.count(b"refusing member") == 3
    assert (tmp_path / "out" / "ok" / "a.txt").read_bytes() == b"fine"
    assert not (tmp_path / "escape.txt").exists() and not (tmp_path / "y.txt").exists()


def test_extract_never_writes_through_a_link_in_its_folder(tmp_path):
    """Issue 66: a link planted in the folder overwrote a file outside it, another put a member outside it; the
    folder is now a root that no link it did not make leads out of, in any mode."""
    outside, out = tmp_path / "outside", tmp_path / "out"
    outside.mkdir()
    out.mkdir()
    (outside / "victim.txt").write_bytes(b"victim")
    os.symlink(outside / "victim.txt", out / "a.txt")  # a member written there would overwrite the victim
    os.symlink(outside, out / "sub")  # a member below it would land outside
    (out / "old.txt").write_bytes(b"old")
    shard = tmp_path / "s.tar"
    members = [("a.txt", b"evil"), ("sub/b.txt", b"evil"), ("old.txt", b"new"), ("deep/c.txt", b"fine")]
    shard.write_bytes(tar_bytes(members))
    result = wds_cli("extract", shard, "-C", out, check=False)
    assert result.returncode == 1 and result.stderr.count(b"symbolic link") == 2, result.stderr
    assert (outside / "victim.txt").read_bytes() == b"victim" and sorted(os.listdir(outside)) == ["victim.txt"]
    assert (out / "old.txt").read_bytes() == b"new" and (out / "deep" / "c.txt").read_bytes() == b"fine"
    assert b"2 files written" in result.stderr and b"2 refused" in result.stderr


def test_outputs_replace_a_link_at_their_name_instead_of_writing_through_it(tmp_path):
    """wds create's shards and classes.json and --svg's chart are written beside and renamed into place: a link
    planted at one of their names is replaced, and what it led to is left as it was."""
    outside = tmp_path / "outside"
    outside.mkdir()
    for name in ("victim.tar", "victim.json", "victim.svg"):
        (outside / name).write_bytes(b"victim")
    src = tmp_path / "src"
    (src / "cat").mkdir(parents=True)
    for i in range(3):
        (src / "cat" / f"{i}.txt").write_bytes(b"x")
    dest = tmp_path / "dest"
    dest.mkdir()
    os.symlink(outside / "victim.tar", dest / "t-000000.tar")
    os.symlink(outside / "victim.json", dest / "classes.json")
    os.symlink(outside / "victim.svg", dest / "mix.svg")
    wds_cli("create", src, "-o", dest / "t-%06d.tar", "--label-from-dir", "--overwrite")  # the link is a "shard"
    wds_cli("stats", dest / "t-000000.tar", "--shuffle", "--svg", dest / "mix.svg")
    assert all((outside / name).read_bytes() == b"victim" for name in ("victim.tar", "victim.json", "victim.svg"))
    assert not any(os.path.islink(dest / name) for name in ("t-000000.tar", "classes.json", "mix.svg"))


@pytest.mark.slow
def test_cp_to_a_folder_and_to_s3(data, tmp_path, s3):
    spec, keys = data
    wds_cli("cp", spec, str(tmp_path / "copy") + "/")
    assert sorted(os.listdir(tmp_path / "copy")) == ["d-0.tar", "d-1.tar", "d-2.tar"]
    options = s3["team-a"].client_options("team-a")
    config = tmp_path / "wds.json"
    config.write_text(json.dumps({"storage": [{"prefix": "s3://team-a/", "options": options}]}))
    env = {**os.environ, "WDS_CONFIG": str(config)}
    wds_cli("cp", spec, "s3://team-a/copied/", env=env)
    back = wds_cli("cat", "s3://team-a/copied/d-1.tar", env=env).stdout
    assert back == open(spec.replace("{0..2}", "1"), "rb").read()


def test_reshard_with_a_seeded_shuffle(data, tmp_path):
    spec, keys = data
    for run in ("one", "two"):
        (tmp_path / run).mkdir()
        wds_cli("reshard", spec, "-o", tmp_path / run / "r-%02d.tar", "--maxcount", 10, "--shuffle", "--seed", 3)
    assert sorted(os.listdir(tmp_path / "one")) == ["r-00.tar", "r-01.tar", "r-02.tar"]
    assert (tmp_path / "one" / "r-01.tar").read_bytes() == (tmp_path / "two" / "r-01.tar").read_bytes()
    got = [s["__key__"] for s in wds.WebDataset(str(tmp_path / "one" / "r-{00..02}.tar"))]
    assert sorted(got) == sorted(keys) and got != keys


def test_bench_and_errors_go_to_stderr(data):
    spec, _ = data
    out = wds_cli("bench", spec).stdout.decode()
    assert "21 samples" in out and "samples/s" in out
    failed = wds_cli("stats", "/nonexistent/x.tar", check=False)
    assert failed.returncode == 1 and failed.stderr.startswith(b"wds stats:") and not failed.stdout


def test_bench_prints_the_local_rows_beside_webdataset(tmp_path):
    from PIL import Image

    image = io.BytesIO()
    Image.new("RGB", (32, 24), (200, 30, 90)).save(image, format="JPEG")
    with wds.TarWriter(str(tmp_path / "images.tar")) as sink:
        for i in range(20):
            sink.write({"__key__": f"k{i:02d}", "jpg": image.getvalue(), "cls": i % 3, "txt": "a caption"})
    spec = str(tmp_path / "images.tar")
    out = wds_cli("bench", spec, "--rows", "raw,decoded").stdout.decode()
    table = [line.split("|")[1:-1] for line in out.splitlines() if line.startswith("| ") and "---" not in line]
    assert [cells[0].strip() for cells in table] == ["row", "raw", "raw", "decoded", "decoded"]
    assert [cells[1].strip() for cells in table[1:]] == ["wds", "webdataset"] * 2
    assert all(float(cells[2].replace(",", "")) > 0 for cells in table[1:])  # samples/s
    assert [cells[4].strip() for cells in table[1:]][1::2] == ["1.00x", "1.00x"]  # webdataset against itself
    refused = wds_cli("bench", spec, "--rows", "raw,train", check=False)
    assert refused.returncode == 2 and b"no row train; the rows are raw, decoded" in refused.stderr


@pytest.mark.slow
def test_progress_on_a_terminal_and_quiet_when_piped(data):
    import pty

    spec, _ = data
    leader, follower = pty.openpty()
    subprocess.run(["wds", "verify", spec], stdout=subprocess.DEVNULL, stderr=follower, check=True)
    os.close(follower)
    drawn = os.read(leader, 65536)
    os.close(leader)
    assert b"\rverified 3/3, 21 samples" in drawn and b"ETA" in drawn
    piped = wds_cli("verify", spec).stderr
    assert b"\r" not in piped and piped.startswith(b"OK: 3 shards, 21 samples read")


def test_index_create_in_parallel_and_resumed(data, tmp_path):
    spec, keys = data
    wds_cli("index", "create", spec, "-o", tmp_path / "serial.json")
    wds_cli("index", "create", spec, "-o", tmp_path / "parallel.json", "--workers", "2")
    serial = json.loads((tmp_path / "serial.json").read_text())["shardlist"]
    assert json.loads((tmp_path / "parallel.json").read_text())["shardlist"] == serial
    assert [e["nsamples"] for e in serial] == [7, 7, 7]
    for s in range(3):
        (tmp_path / f"d-{s}.tar.idx").unlink()
    good = (tmp_path / "d-1.tar").read_bytes()
    (tmp_path / "d-1.tar").write_bytes(good[:700])  # cut inside a member
    failed = wds_cli("index", "create", spec, "-o", tmp_path / "resumed.json", "--workers", "2", check=False)
    assert failed.returncode == 1 and b"d-1.tar" in failed.stderr and b"1 of 3 shards" in failed.stderr
    assert not (tmp_path / "resumed.json").exists()  # never a descriptor missing shards
    kept = {s: (tmp_path / f"d-{s}.tar.idx").stat().st_mtime_ns for s in (0, 2)}
    assert not (tmp_path / "d-1.tar.idx").exists()
    (tmp_path / "d-1.tar").write_bytes(good)
    wds_cli("index", "create", spec, "-o", tmp_path / "resumed.json", "--resume")
    assert json.loads((tmp_path / "resumed.json").read_text())["shardlist"] == serial
    assert {s: (tmp_path / f"d-{s}.tar.idx").stat().st_mtime_ns for s in (0, 2)} == kept  # taken, not rewritten
    assert (tmp_path / "d-1.tar.idx").exists()


@pytest.mark.slow
def test_index_create_writes_sidecars_beside_remote_shards(data, tmp_path, s3):
    spec, keys = data
    options = s3["team-a"].client_options("team-a")
    config = tmp_path / "wds.json"
    config.write_text(json.dumps({"storage": [{"prefix": "s3://team-a/", "options": options}]}))
    env = {**os.environ, "WDS_CONFIG": str(config)}
    wds_cli("cp", spec, "s3://team-a/indexed/", env=env)
    remote = "s3://team-a/indexed/d-{0..2}.tar"
    wds_cli("index", "create", remote, "-o", tmp_path / "remote.json", "--workers", "2", env=env)
    wds_cli("index", "create", spec, "-o", tmp_path / "local.json")
    local = json.loads((tmp_path / "local.json").read_text())["shardlist"]
    described = json.loads((tmp_path / "remote.json").read_text())["shardlist"]
    assert [(e["url"], e["nsamples"], e["filesize"]) for e in described] == [
        (f"s3://team-a/indexed/d-{s}.tar", e["nsamples"], e["filesize"]) for s, e in enumerate(local)
    ]
    for s in range(3):  # the same index as the local shard's
        remote_index = wds.io.read_bytes(f"s3://team-a/indexed/d-{s}.tar.idx", options)
        assert json.loads(remote_index) == json.loads((tmp_path / f"d-{s}.tar.idx").read_text())
    resumed = wds_cli("index", "create", remote, "-o", tmp_path / "again.json", "--resume", env=env)
    assert json.loads((tmp_path / "again.json").read_text())["shardlist"] == described, resumed.stderr


def test_byte_sizes_of_the_command_line():
    import argparse

    from wds_core.cli.common import byte_size

    assert [byte_size(t) for t in ("4GB", "512MiB", "1e9", "100", "2k", "1.5 GiB")] == [
        4 * 10**9, 512 * 2**20, 10**9, 100, 2000, int(1.5 * 2**30)
    ]  # fmt: skip
    with pytest.raises(argparse.ArgumentTypeError, match="not a size"):
        byte_size("lots")


def test_index_create_writes_a_counts_file_that_balanced_readers_take(data, tmp_path, monkeypatch):
    spec, keys = data
    wds_cli("index", "create", spec, "-o", tmp_path / "d.json")
    from wds_core.sources.counts import ShardCounts

    stored = ShardCounts(str(tmp_path / "d.counts.npz"))
    described = json.loads((tmp_path / "d.json").read_text())["shardlist"]
    assert stored.counts.tolist() == [e["nsamples"] for e in described] == [7, 7, 7]
    assert stored.sizes.tolist() == [e["filesize"] for e in described]
    monkeypatch.setenv("WORLD_SIZE", "2")
    for rank in range(2):
        monkeypatch.setenv("RANK", str(rank))
        read = {}
        for counts in ("d.json", "d.counts.npz"):
            dataset = wds.WebDataset.balanced(spec, seed=1, sample_counts=tmp_path / counts, how="pad", shuffle=True)
            read[counts] = [s["__key__"] for s in dataset]
        assert read["d.json"] == read["d.counts.npz"] and len(read["d.json"]) == 11
    wds_cli("index", "create", spec, "-o", tmp_path / "e.json", "--no-counts")
    assert not (tmp_path / "e.counts.npz").exists()


def test_verify_clean_removes_what_killed_writers_left(data, tmp_path):
    spec, keys = data
    child = subprocess.Popen(["true"])
    child.wait()  # a pid whose process is gone
    stale = tmp_path / f".d-3.tar.{child.pid}.0123abcd.partial"
    stale.write_bytes(b"half a shard")
    live = tmp_path / f".d-4.tar.{os.getpid()}.0123abcd.partial"
    live.write_bytes(b"still being written")
    done = wds_cli("verify", spec, "--clean")
    assert f"REMOVED {stale}".encode() in done.stdout and b"1 temporary file of killed writers" in done.stderr
    assert not stale.exists() and live.exists()


def _no_aws_environment(tmp_path):
    """An environment with no AWS credentials to find (nor an instance metadata service to ask)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "WDS_CONFIG"))}
    env.update(AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"), AWS_CONFIG_FILE=str(tmp_path / "none"))
    env["AWS_EC2_METADATA_DISABLED"] = "true"
    return env


@pytest.mark.slow
def test_storage_options_and_endpoint_on_the_command_line(data, tmp_path, s3):
    """Issue 45: credentials and an endpoint without a configuration file, on every subcommand; a missing
    credential says so (it read as `NoCredentialsError: ***`) and how to give one."""
    spec, keys = data
    options = s3["team-a"].client_options("team-a")
    endpoint = options["client_kwargs"]["endpoint_url"]
    creds = json.dumps(
        {"key": options["key"], "secret": options["secret"], "client_kwargs": {"region_name": "eu-west-1"}}
    )
    env = _no_aws_environment(tmp_path)
    wds_cli("cp", spec, "s3://team-a/cli/", "--storage-options", creds, "--endpoint-url", endpoint, env=env)
    by_prefix = json.dumps({"s3://team-a/": options})
    listed = wds_cli("ls", "s3://team-a/cli/d-1.tar", "--storage-options", by_prefix, env=env).stdout.decode()
    assert keys[len(keys) // 3] in listed
    wds_cli("index", "create", "s3://team-a/cli/d-{0..2}.tar", "--storage-options", by_prefix, "-o",
            tmp_path / "ds.json", env=env)  # fmt: skip
    assert json.loads((tmp_path / "ds.json").read_text())["shardlist"][0]["nsamples"] > 0
    refused = wds_cli("ls", "s3://team-a/cli/d-1.tar", "--endpoint-url", endpoint, env=env, check=False)
    said = refused.stderr.decode()
    assert refused.returncode == 1 and "Unable to locate credentials" in said, said
    assert "***" not in said and "--storage-options" in said and "AWS_ENDPOINT_URL" in said
    bad = wds_cli("ls", spec, "--storage-options", "{oops", check=False)
    assert bad.returncode == 1 and b"--storage-options is not JSON" in bad.stderr


@pytest.mark.slow
def test_a_closed_pipe_ends_quietly_and_help_has_no_markup(data, tmp_path):
    """Issue 45: `wds ls x.tar | head -1` ended in a BrokenPipeError traceback with exit 1; --help showed
    ``code`` and :class:`~a.b.C` markup."""
    spec, _ = data
    shards = [spec.replace("{0..2}", str(s)) for s in range(3)] * 200  # far more than a pipe buffer holds
    listing = subprocess.Popen(["wds", "ls", *shards], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert listing.stdout.readline()
    listing.stdout.close()  # as head does after its line
    _, err = listing.communicate(timeout=120)
    assert listing.returncode == 141 and b"Traceback" not in err and b"BrokenPipe" not in err, err
    for command in (["--help"], ["ls", "--help"], ["profile", "--help"], ["index", "create", "--help"]):
        text = wds_cli(*command).stdout.decode()
        assert "``" not in text and ":class:" not in text and ":func:" not in text, command
    assert "Profile and prints each stage" in wds_cli("profile", "--help").stdout.decode()


def test_create_labels_from_class_folders(tmp_path):
    """Issue 45: `wds create train/` over train/<class>/<n>.jpg gave keys like cat/0 with only a jpg field."""
    for name in ("zebra", "ant", "mole"):
        (tmp_path / "train" / name).mkdir(parents=True)
        for i in range(3):
            (tmp_path / "train" / name / f"{i}.jpg").write_bytes(b"JPEG " + name.encode())
    (tmp_path / "out").mkdir()
    made = wds_cli("create", tmp_path / "train", "-o", tmp_path / "out" / "t-%03d.tar", "--label-from-dir")
    assert b"3 classes" in made.stderr
    classes = json.loads((tmp_path / "out" / "classes.json").read_text())
    assert classes == ["ant", "mole", "zebra"]
    samples = list(wds.WebDataset(str(tmp_path / "out" / "t-000.tar")).decode())
    assert len(samples) == 9
    assert all(classes[s["cls"]] == s["__key__"].split("/")[0] for s in samples)
    (tmp_path / "train" / "stray.jpg").write_bytes(b"x")
    refused = wds_cli("create", tmp_path / "train", "-o", tmp_path / "out" / "u-%03d.tar", "--label-from-dir",
                      check=False)  # fmt: skip
    assert refused.returncode == 1 and b"'stray' is not in one" in refused.stderr


def test_create_in_secure_mode_refuses_a_link_out_of_the_roots(tmp_path, monkeypatch):
    """Issue 56, case 4: `wds create --label-from-dir` read the tree with a plain open(), so dog/b.jpg linked to a
    file outside the roots was packed into the shard (exit 0)."""
    root = tmp_path / "root"
    for name in ("cat", "dog"):
        (root / "train" / name).mkdir(parents=True)
        (root / "train" / name / "a.jpg").write_bytes(b"JPEG " + name.encode())
    (tmp_path / "secret.txt").write_bytes(b"the secret")
    os.symlink(tmp_path / "secret.txt", root / "train" / "dog" / "b.jpg")
    (root / "out").mkdir()
    monkeypatch.setenv("WDS_SECURE", "1")
    monkeypatch.setenv("WDS_SECURE_ROOTS", str(root))
    refused = wds_cli("create", root / "train", "-o", root / "out" / "t-%03d.tar", "--label-from-dir", check=False)
    assert refused.returncode == 1 and b"refusing to read the local path" in refused.stderr
    assert b"b.jpg" in refused.stderr
    assert not any(b"the secret" in p.read_bytes() for p in (root / "out").iterdir() if p.is_file())
    os.unlink(root / "train" / "dog" / "b.jpg")
    os.symlink(root / "train" / "cat" / "a.jpg", root / "train" / "dog" / "b.jpg")  # a link inside them is read
    assert wds_cli("create", root / "train", "-o", root / "out" / "t-%03d.tar", "--label-from-dir").returncode == 0


def test_cp_checks_every_source_and_destination_before_copying(tmp_path):
    """Issue 56, case 5: `wds cp "{a,b}/shard.tar" out/` copied both to out/shard.tar (the second over the
    first, "2 shards copied", exit 0), and a missing source failed the copy half way."""
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        write_shard(tmp_path / folder / "shard.tar", make_samples(folder, 2))
    write_shard(tmp_path / "a" / "other.tar", make_samples("o", 2))
    out = tmp_path / "out"
    same = wds_cli("cp", f"{tmp_path}/{{a,b}}/shard.tar", f"{out}/", check=False)
    assert same.returncode == 1 and b"would both be copied to" in same.stderr and b"nothing was copied" in same.stderr
    assert not out.exists()
    missing = wds_cli("cp", f"{tmp_path}/a/{{other,shard,gone}}.tar", f"{out}/", check=False)
    assert missing.returncode == 1 and b"gone.tar" in missing.stderr and b"no such shard" in missing.stderr
    assert not out.exists()
    onto = wds_cli("cp", tmp_path / "a" / "shard.tar", tmp_path / "a" / "shard.tar", check=False)
    assert onto.returncode == 1 and b"onto itself" in onto.stderr
    wds_cli("cp", f"{tmp_path}/a/{{other,shard}}.tar", f"{out}/")
    assert sorted(os.listdir(out)) == ["other.tar", "shard.tar"]


def test_wrong_inputs_get_one_clear_line_each(data, tmp_path, capsys):
    """Issue 67: a missing shard among others is one problem of `wds verify`, which verifies the rest; a missing
    field is named with the sample's fields; a mistyped option is the command's own usage with the option meant;
    `wds --version`; a quoted wildcard is expanded for local paths and refused, with the spelling that works, for
    remote ones."""
    spec, keys = data
    first = spec.replace("{0..2}", "0")
    verified = wds_cli("verify", tmp_path / "nosuch.tar", first, check=False)
    assert verified.returncode == 1 and f"MISSING {tmp_path / 'nosuch.tar'}: no such shard".encode() in verified.stdout
    assert b"1 problem: 2 shards, 7 samples read" in verified.stderr
    field = wds_cli("cat", first, "--key", keys[0], "--field", "png", check=False)
    assert b"has no field 'png'; its fields are ['cls', 'json', 'txt']" in field.stderr
    typo = wds_cli("ls", "--jsn", first, check=False)
    assert typo.returncode == 2 and b"usage: wds ls" in typo.stderr and b"did you mean --json?" in typo.stderr
    version = wds_cli("--version")
    assert version.stdout.decode().strip() == f"wds {wds.__version__}"
    listed = wds_cli("ls", str(tmp_path / "d-*.tar"), "--json")
    assert [json.loads(line)["url"] for line in listed.stdout.splitlines()] == [
        str(tmp_path / f"d-{s}.tar") for s in range(3)
    ]
    remote = wds_cli("ls", "s3://bucket/d-*.tar", check=False)
    assert b"expanded for local paths only" in remote.stderr and b"{000000..000099}" in remote.stderr
    with pytest.raises(wds.ShardNotFoundError, match=r"wildcards are not expanded .* braces"):
        list(wds.WebDataset(str(tmp_path / "x-*.tar")))


def test_create_into_a_folder_with_an_earlier_run_refuses_or_replaces_it(tmp_path):
    """Issue 67: a second `wds create` with fewer shards left the first run's others, and `wds stats` over the
    pattern counted 500 samples for 300 images; it is refused now, `--overwrite` replaces the set, and the
    command prints the spec of what it wrote."""
    src = tmp_path / "src"
    for c in range(3):
        (src / f"c{c}").mkdir(parents=True)
        for i in range(10):
            (src / f"c{c}" / f"{i}.txt").write_bytes(b"x")
    out = tmp_path / "out" / "t-%06d.tar"
    first = wds_cli("create", src, "-o", out, "--maxcount", "5")
    assert f"in 6 shards: {tmp_path / 'out'}/t-{{000000..000005}}.tar".encode() in first.stderr, first.stderr
    assert first.stdout.decode() == f"{tmp_path / 'out'}/t-{{000000..000005}}.tar\n"  # SPEC=$(wds create ...)
    refused = wds_cli("create", src, "-o", out, "--maxcount", "20", check=False)
    assert refused.returncode == 1 and b"6 shards of the pattern" in refused.stderr and b"--overwrite" in refused.stderr
    done = wds_cli("create", src, "-o", out, "--maxcount", "20", "--overwrite")
    assert f"in 2 shards: {tmp_path / 'out'}/t-{{000000..000001}}.tar".encode() in done.stderr
    assert sorted(os.listdir(tmp_path / "out")) == ["t-000000.tar", "t-000001.tar"]
    resharded = wds_cli("reshard", str(tmp_path / "out" / "t-{000000..000001}.tar"), "-o", out, "--overwrite",
                        "--maxcount", "30")  # fmt: skip
    assert f"into 1 shards: {tmp_path / 'out'}/t-000000.tar".encode() in resharded.stderr


def test_transform_into_an_earlier_runs_outputs_refuses_or_replaces_them(data, tmp_path):
    """Issue 67: `wds transform` into a pattern holding more shards than it writes refuses (naming them and
    --overwrite), replaces the set with --overwrite, and prints the spec of its outputs."""
    spec = data[0]
    out = tmp_path / "tr"
    out.mkdir()
    for old in range(5):
        write_shard(out / f"o-{old:03d}.tar", make_samples(f"old{old}-", 2))
    args = ["transform", "tests.core.tools.shard_functions:shout", spec, "-o", out / "o-%03d.tar", "--engine", "serial"]
    refused = wds_cli(*args, check=False)
    assert refused.returncode == 1 and b"2 shards of the outputs" in refused.stderr
    assert b"o-003.tar" in refused.stderr and b"--overwrite" in refused.stderr
    done = wds_cli(*args, "--overwrite")
    assert done.stdout.decode() == f"{out}/o-{{000..002}}.tar\n", done.stdout
    assert sorted(os.listdir(out)) == ["o-000.tar", "o-001.tar", "o-002.tar"]
    assert sum(1 for _ in wds.WebDataset(f"{out}/o-{{000..002}}.tar")) == 21
