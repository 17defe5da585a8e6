"""How well an epoch mixes the storage order (issue 32): the measures and ``wds stats --shuffle``."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.conftest import make_samples, write_shard
from wds_core.observe.shufflestats import expected_distinct, label_mixing, shuffle_quality, storage_order


def test_the_expected_distinct_shards_of_a_global_shuffle_match_drawing_them():
    sizes = [100] * 30 + [7, 250, 1]
    shard_of = np.repeat(np.arange(len(sizes)), sizes)
    rng = np.random.default_rng(0)
    drawn = np.mean([len(np.unique(rng.permutation(shard_of)[:256])) for _ in range(2000)])
    assert expected_distinct(sizes, 256) == pytest.approx(drawn, rel=0.01)
    assert expected_distinct([5, 5], 20) == 2.0 and expected_distinct([], 3) == 0.0


def test_storage_order_reads_no_mixing_and_a_permutation_reads_as_a_global_shuffle():
    stored = storage_order([[f"s{s}-{i}" for i in range(100)] for s in range(40)])
    in_storage = shuffle_quality(list(stored), stored, batch_size=256)
    assert in_storage.displacement == 0 and in_storage.distinct_per_batch <= 4
    assert in_storage.diversity_ratio < 0.1 and in_storage.global_displacement == pytest.approx(1 / 3, rel=1e-3)
    permuted = list(np.random.default_rng(1).permutation(list(stored)))
    quality = shuffle_quality(permuted, stored, batch_size=256)
    assert quality.diversity_ratio == pytest.approx(1.0, abs=0.05)
    assert quality.displacement == pytest.approx(1 / 3, abs=0.02)
    assert quality.samples == 4000 and quality.shards == 40


def test_bad_inputs_say_what_is_wrong():
    stored = storage_order([["a", "b"], ["c"]])
    with pytest.raises(ValueError, match="not in the storage order"):
        shuffle_quality(["a", "z"], stored)
    with pytest.raises(ValueError, match="stored twice"):
        storage_order([["a"], ["a"]])
    with pytest.raises(ValueError, match="batch_size"):
        shuffle_quality(["a"], stored, batch_size=0)
    with pytest.raises(ValueError, match="empty"):
        shuffle_quality([], stored)


@pytest.fixture
def ordered(tmp_path):
    """200 shards of 100 samples, stored in order (no label field)."""
    for s in range(200):
        write_shard(tmp_path / f"o-{s:03d}.tar", make_samples(f"s{s:03d}-", 100, fields=("txt",)), ("txt",))
    return str(tmp_path / "o-{000..199}.tar")


def test_the_common_streaming_shuffle_mixes_a_quarter_as_well_as_a_global_one(ordered, capsys):
    """What the issue measured: shardshuffle=True and shuffle(1000) over 100-sample shards gives batches of 256
    about a quarter of the distinct shards a global shuffle gives; ``wds stats --shuffle`` says so."""
    from wds_core.cli.main import main

    assert main(["stats", ordered, "--shuffle", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)["shuffle"]
    assert report["samples"] == 20000 and report["batch_size"] == 256 and report["shards"] == 200
    assert 0.15 < report["diversity_ratio"] < 0.4  # 0.25 with seed 0
    assert main(["stats", ordered, "--shuffle", "--buffer", "20000"]) == 0
    line, hint = capsys.readouterr().out.splitlines()[-2:]
    assert line.startswith("an epoch of WebDataset(..., shuffle=True).shuffle(20000), batches of 256:")
    assert "--interleave 200 --buffer 19800 (WebDataset(..., interleave=200)).  This counts shards, not" in hint
    assert "shards already shuffled as a whole (wds reshard --shuffle) need no more mixing" in hint
    # a buffer that holds the whole epoch mixes better, but not as a global shuffle: as in webdataset, it starts
    # handing out samples once it holds initial=100 of them (0.72 with seed 0)
    bigger = float(line.split("(diversity ")[1].split(")")[0])
    assert report["diversity_ratio"] < bigger < 0.9


@pytest.mark.slow
def test_reading_every_shard_at_once_mixes_as_a_global_shuffle_with_as_many_samples_held(ordered, capsys):
    """The streaming shuffle of issue 32: 200 shards read at once and shuffle(800), 1,000 samples held, gives
    batches at least 0.8 of a global shuffle's distinct shards (0.98 with seed 0)."""
    from wds_core.cli.main import main

    assert main(["stats", ordered, "--shuffle", "--interleave", "200", "--buffer", "800", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)["shuffle"]
    assert report["pipeline"] == "WebDataset(..., shuffle=True, interleave=200).shuffle(800)"
    assert report["samples"] == 20000 and report["samples_held"] == 1000
    assert report["diversity_ratio"] >= 0.9 and abs(report["displacement"] - report["global_displacement"]) < 0.03


def _labelled(tmp_path, name, order):
    """40 shards of 100 samples of 10 classes (400 each): ``order`` "class" stores them class by class (4 shards
    a class), "shuffled" as ``wds reshard --shuffle`` leaves them."""
    samples = [{"__key__": f"c{c}-{i:04d}", "cls": b"%d" % c} for c in range(10) for i in range(400)]
    if order == "shuffled":
        samples = list(np.random.default_rng(0).permutation(np.array(samples, dtype=object)))
    for s in range(40):
        write_shard(tmp_path / f"{name}-{s:02d}.tar", samples[s * 100 : (s + 1) * 100], ("cls",))
    return str(tmp_path / f"{name}-{{00..39}}.tar")


def test_label_mixing_of_storage_order_a_permutation_and_a_streaming_shuffle():
    labels = [c for c in range(10) for _ in range(400)]
    permuted = list(np.random.default_rng(1).permutation(labels))
    in_storage = label_mixing("cls", labels, labels, batch_size=256)
    assert in_storage.storage_ratio == in_storage.ratio < 0.2 and in_storage.labels == 10
    shuffled = label_mixing("cls", permuted, labels, batch_size=256)
    assert shuffled.ratio == pytest.approx(1.0, abs=0.02) and shuffled.global_effective_per_batch > 9.5
    assert label_mixing("cls", permuted, permuted).storage_ratio == pytest.approx(1.0, abs=0.02)
    half = label_mixing("cls", [0, 1] * 2, [0, 0, 1, 1], batch_size=2)
    assert half.effective_by_batch == (2.0, 2.0) and half.storage_effective_per_batch == 1.0
    with pytest.raises(ValueError, match="empty"):
        label_mixing("cls", [], [])


def test_stats_advice_is_about_the_label_and_says_when_shards_are_already_shuffled(tmp_path, capsys):
    """Issue 45.9: ``wds stats --shuffle`` advised ``--interleave`` for shards already reshuffled as a whole,
    because it counted the shards a batch mixes.  With a label field (``cls`` found by itself, or ``--label``) it
    measures the label's mix, in the epoch and in storage order, and advises on that."""
    from wds_core.cli.main import main

    reshuffled = _labelled(tmp_path, "r", "shuffled")
    assert main(["stats", reshuffled, "--shuffle"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "(diversity 0.6" in out[-3]  # few shards a batch: what the old advice was about
    assert out[-2].startswith("labels (cls, 10 values): 9.") and "read in storage order, 9." in out[-2]
    assert out[-1].startswith("the shards are already shuffled:") and "--interleave" not in "\n".join(out)
    by_class = _labelled(tmp_path, "c", "class")
    assert main(["stats", by_class, "--shuffle", "--label", "cls", "--json"]) == 0
    mixing = json.loads(capsys.readouterr().out)["shuffle"]["labels"]
    assert mixing["field"] == "cls" and mixing["storage_ratio"] < 0.2 and mixing["ratio"] < 0.9
    assert main(["stats", by_class, "--shuffle"]) == 0
    advice = capsys.readouterr().out.splitlines()[-1]
    assert advice == "to mix cls more, read 40 shards at once with as many samples held: --interleave 40 " \
        "--buffer 960 (WebDataset(..., interleave=40))"  # fmt: skip
    assert main(["stats", by_class, "--shuffle", "--interleave", "40", "--buffer", "960"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "cls mixes as in a global shuffle"  # the advice works


def test_stats_shuffle_svg_draws_each_batch_against_a_global_shuffle(tmp_path, capsys):
    """Issue 45.11: ``wds stats --shuffle --svg FILE``, as ``wds profile --svg``."""
    import xml.etree.ElementTree as ET

    from wds_core.cli.main import main

    chart = tmp_path / "shuffle.svg"
    assert main(["stats", _labelled(tmp_path, "c", "class"), "--shuffle", "--svg", str(chart)]) == 0
    capsys.readouterr()
    root = ET.parse(chart).getroot()
    svg = "{http://www.w3.org/2000/svg}"
    lines = root.findall(f"{svg}polyline")
    assert len(lines) == 2 and all(len(line.get("points").split()) == 15 for line in lines)  # 4,000 // 256
    texts = " ".join(text.text or "" for text in root.iter(f"{svg}text"))
    assert "distinct shards a batch" in texts and "effective cls values a batch" in texts and "storage order" in texts
    assert main(["stats", _labelled(tmp_path, "c", "class"), "--svg", str(chart)]) == 1
    assert "add --shuffle" in capsys.readouterr().err


@pytest.mark.repository
def test_the_charts_are_named_in_the_commands_help(capsys):
    """Issue 45.11: ``wds --help`` names the charts (both ``--svg`` options and the benchmark charts' page),
    and the page and the charts it shows exist."""
    import pathlib
    import re

    from wds_core.cli.main import main

    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    assert "wds stats SPEC --shuffle --svg FILE" in text and "wds profile SPEC --svg FILE" in text
    root = pathlib.Path(__file__).resolve().parents[3]
    page = (root / "docs" / "benchmarks.md").read_text()
    assert "docs/benchmarks.md" in text and "benchmarks/README.md" in text
    charts = re.findall(r"\]\(images/([\w.-]+\.svg)\)", page)
    assert len(charts) >= 3 and all((root / "docs" / "images" / c).exists() for c in charts if c != "benchmarks.svg")


def test_a_batch_holding_much_of_a_small_dataset_is_no_evidence_of_mixing(tmp_path, capsys):
    """Issue 67: 300 samples stored class by class in 3 shards, batches of 256: any order mixes such a batch, and
    the verdict was "the shards are already shuffled"; the measure is now made with batches that can tell."""
    from wds_core.cli.main import main

    samples = [{"__key__": f"c{c}-{i:03d}", "cls": b"%d" % c} for c in range(3) for i in range(100)]
    for s in range(3):
        write_shard(tmp_path / f"small-{s}.tar", samples[s * 100 : (s + 1) * 100], ("cls",))
    spec = str(tmp_path / "small-{0..2}.tar")
    assert main(["stats", spec, "--shuffle", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)["shuffle"]
    assert report["batch_size_asked"] == 256 and report["batch_size"] == 37
    assert report["labels"]["storage_ratio"] < 0.9  # stored class by class: not "already shuffled"
    assert main(["stats", spec, "--shuffle"]) == 0
    out = capsys.readouterr().out
    assert "batches of 256 would hold more than 1/8 of the 300 samples" in out and "already shuffled" not in out
