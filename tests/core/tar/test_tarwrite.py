"""The member packer: what stdlib tarfile and GNU tar read back, with the right offsets."""

import io
import subprocess
import tarfile

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wds_core.tar.tario import iter_members
from wds_core.tar.tarwrite import MemberPacker, encode_member, end_of_archive

segment = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="/\x00"), min_size=1, max_size=40)
names = st.lists(segment, min_size=1, max_size=8).map("/".join)


@given(st.lists(st.tuples(names, st.binary(max_size=1500)), min_size=1, max_size=6))
def test_tarfile_reads_what_we_write_at_the_offsets_we_report(members):
    raw = b"".join(encode_member(name, data) for name, data in members) + end_of_archive()
    with tarfile.open(fileobj=io.BytesIO(raw)) as tf:
        infos = tf.getmembers()
        assert [(i.name, tf.extractfile(i).read()) for i in infos] == members
    ours = list(iter_members(io.BytesIO(raw), "t.tar"))
    assert [(n, d) for n, d, _ in ours] == members
    assert [o for _, _, o in ours] == [i.offset for i in infos]


@pytest.mark.parametrize(
    "name,pax",
    [
        ("a" * 100, False),  # fills the name field
        ("d" * 150 + "/" + "n" * 100, False),  # fits prefix + name
        ("d" * 156 + "/x", True),  # the prefix cannot hold 156 bytes
        ("x" * 101, True),  # no slash to split at
        ("é" * 60, True),  # 120 bytes of UTF-8
    ],
)
def test_long_names_use_prefix_or_pax_only_when_needed(name, pax):
    raw = encode_member(name, b"data")
    assert len(raw) == (4 if pax else 2) * 512  # pax: its header and records, then the member
    assert [n for n, _, _ in iter_members(io.BytesIO(raw + end_of_archive()), "t")] == [name]


def test_fixed_header_fields_and_gnu_tar_listing(tmp_path):
    packer = MemberPacker(mtime=1_700_000_000, mode=0o640, uid=1000, gid=100, uname="alice", gname="staff")
    path = tmp_path / "t.tar"
    path.write_bytes(b"".join(packer.pack("dir/k.txt", b"hello")) + end_of_archive())
    with tarfile.open(path) as tf:
        info = tf.getmember("dir/k.txt")
    assert (info.mtime, info.mode, info.uid, info.gid, info.uname, info.gname) == (
        1_700_000_000,
        0o640,
        1000,
        100,
        "alice",
        "staff",
    )
    listing = subprocess.run(["tar", "tvf", str(path)], capture_output=True, text=True, check=True).stdout
    assert "alice/staff" in listing and "dir/k.txt" in listing


def test_bad_header_values_are_refused():
    with pytest.raises(ValueError, match="mtime"):
        MemberPacker(mtime=-1)
    with pytest.raises(ValueError, match="32-byte"):
        MemberPacker(uname="u" * 40)
