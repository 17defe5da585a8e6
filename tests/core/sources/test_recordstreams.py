"""Concatenated CBOR and MessagePack shards: the seed's example, truncation, writers."""

import cbor2
import msgpack
import numpy as np
import pytest

import wds_core as wds
from wds_core import CborsWriter, MsgpacksWriter, TruncatedShardError


def test_the_seed_example(tmp_path):
    path = str(tmp_path / "test.cbors")
    with open(path, "wb") as stream:
        for i in np.linspace(-5.0, 5.0, 1000):
            cbor2.dump((float(i), str(i)[-5:]), stream)
    dataset = wds.DataPipeline(wds.SimpleShardList(path), wds.cbors_to_samples())
    data = list(iter(dataset))
    assert len(data) == 1000 and data[0] == [-5.0, "-5.0"]


@pytest.mark.parametrize(
    "writer,stage", [(CborsWriter, wds.cbors_to_samples), (MsgpacksWriter, wds.msgpacks_to_samples)]
)
def test_writers_and_readers_round_trip_across_shards(tmp_path, writer, stage):
    paths = []
    for s in range(3):
        paths.append(str(tmp_path / f"part-{s}.bin"))
        with writer(paths[-1]) as sink:
            for i in range(100):
                sink.write({"shard": s, "i": i, "blob": b"x" * i})
    got = list(wds.DataPipeline(wds.SimpleShardList(paths), stage()))
    assert [(o["shard"], o["i"]) for o in got] == [(s, i) for s in range(3) for i in range(100)]
    assert got[-1]["blob"] == b"x" * 99


@pytest.mark.parametrize("fmt", ["cbor", "msgpack"])
def test_a_truncated_shard_names_the_offset_of_the_broken_object(tmp_path, fmt):
    dumps = cbor2.dumps if fmt == "cbor" else msgpack.packb
    objects = [{"i": i, "pad": "p" * 50} for i in range(10)]
    raw = b"".join(dumps(o) for o in objects)
    last_start = len(raw) - len(dumps(objects[-1]))
    path = tmp_path / "cut.bin"
    path.write_bytes(raw[:-5])
    stage = wds.cbors_to_samples if fmt == "cbor" else wds.msgpacks_to_samples
    got = []
    with pytest.raises(TruncatedShardError) as info:
        for obj in wds.DataPipeline(wds.SimpleShardList(str(path)), stage()):
            got.append(obj)
    assert got == objects[:-1]  # everything before the break is delivered
    assert info.value.offset == last_start and str(path) in str(info.value)


def test_gzipped_cbors_are_read(tmp_path):
    import gzip

    path = tmp_path / "a.cbors.gz"
    path.write_bytes(gzip.compress(b"".join(cbor2.dumps([i]) for i in range(50))))
    assert list(wds.DataPipeline(wds.SimpleShardList(str(path)), wds.cbors_to_samples())) == [[i] for i in range(50)]


def test_a_failed_write_leaves_nothing(tmp_path):
    with pytest.raises(RuntimeError):
        with CborsWriter(str(tmp_path / "x.cbors")) as sink:
            sink.write(1)
            raise RuntimeError
    assert list(tmp_path.iterdir()) == []
