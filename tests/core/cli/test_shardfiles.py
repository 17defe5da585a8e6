"""The CLI is one tool (issue 58.6): every command that takes shards takes brace specs (``ls`` and ``cat`` refused
them), every size takes human units (``--maxsize 5MB`` was "invalid float value"), ``cp`` counts only shards as
shards (``classes.json`` was one), and ``--svg`` says where it wrote its chart."""

import json
import os
import tarfile

from tests.conftest import make_samples, write_shard
from tests.core.cli.test_main import data, wds_cli  # noqa: F401  (the fixture)


def test_ls_and_cat_take_brace_specs(data):  # noqa: F811
    spec, keys = data
    listed = [json.loads(line) for line in wds_cli("ls", spec, "--json").stdout.splitlines()]
    assert [row["url"].rsplit("/", 1)[1] for row in listed] == ["d-0.tar", "d-1.tar", "d-2.tar"]
    text = wds_cli("ls", spec).stdout.decode()
    assert text.count(".tar:") == 3 and f"{keys[-1]}.txt" in text
    with tarfile.open(spec.replace("{0..2}", "2")) as last:  # the sample is in d-2.tar
        expected = last.extractfile(f"{keys[-1]}.txt").read()
    assert wds_cli("cat", spec, "-k", keys[-1], "-f", "txt").stdout == expected
    whole = wds_cli("cat", spec).stdout  # the shards one after the other, as cat does
    assert len(whole) == sum(os.path.getsize(spec.replace("{0..2}", str(i))) for i in range(3))
    missing = wds_cli("cat", spec, "-k", "nobody", check=False)
    assert missing.returncode != 0 and b"no sample 'nobody'" in missing.stderr


def test_sizes_take_human_units(tmp_path):
    for i in range(40):
        (tmp_path / "in").mkdir(exist_ok=True)
        (tmp_path / "in" / f"{i:03d}.bin").write_bytes(os.urandom(30_000))
    wds_cli("create", tmp_path / "in", "-o", tmp_path / "out" / "a-%03d.tar", "--maxsize", "0.5MB")
    made = sorted(os.listdir(tmp_path / "out"))
    assert len(made) == 3, made  # 40 samples of 30 kB in shards of at most 500 kB
    refused = wds_cli("create", tmp_path / "in", "-o", tmp_path / "out" / "b-%03d.tar", "--maxsize", "5 apples",
                      check=False)  # fmt: skip
    assert refused.returncode == 2 and b"not a size: '5 apples'" in refused.stderr
    wds_cli("reshard", str(tmp_path / "out" / "a-{000..002}.tar"), "-o", tmp_path / "re" / "r-%03d.tar",
            "--maxsize", "1MiB")  # fmt: skip
    assert len(os.listdir(tmp_path / "re")) == 2


def test_cp_counts_shards_and_other_files_apart(data, tmp_path):  # noqa: F811
    spec, _ = data
    classes = tmp_path / "classes.json"
    classes.write_text('["a", "b"]')
    done = wds_cli("cp", spec, classes, tmp_path / "copy" / "")
    assert b"3 shards and 1 other file," in done.stderr, done.stderr
    assert sorted(os.listdir(tmp_path / "copy")) == ["classes.json", "d-0.tar", "d-1.tar", "d-2.tar"]


def test_svg_says_where_it_went(tmp_path):
    for s in range(2):
        write_shard(tmp_path / f"c-{s}.tar", make_samples(f"c{s}-", 30, fields=("txt", "cls")), ("txt", "cls"))
    done = wds_cli("stats", str(tmp_path / "c-{0..1}.tar"), "--shuffle", "--svg", tmp_path / "mix.svg", cwd=tmp_path)
    assert f"wrote the chart of the epoch's batches to {tmp_path / 'mix.svg'}".encode() in done.stderr
    assert (tmp_path / "mix.svg").read_text().startswith("<svg")
