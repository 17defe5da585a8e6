"""Codecs from other packages: claimed through ``wds.codecs`` entry points, loaded when first needed.

Each test installs a small package in a temporary folder (a module and a
``.dist-info`` with ``entry_points.txt``) and runs Python in a subprocess
with that folder on its path, as a pip-installed plugin would be seen.
"""

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.slow  # Python in subprocesses


def install_plugin(root, entry_points, module_source):
    (root / "zzcodecs.py").write_text(textwrap.dedent(module_source))
    info = root / "zzcodecs-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: zzcodecs\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[wds.codecs]\n" + textwrap.dedent(entry_points))


def run(root, code):
    env_path = f"import sys; sys.path.insert(0, {str(root)!r})\n"
    return subprocess.run(
        [sys.executable, "-c", env_path + textwrap.dedent(code)], capture_output=True, text=True, check=True
    ).stdout.split()


PLUGIN = """
    import numpy as np
    from wds_core.fieldcodecs import ImageSpec, register_decoder, register_image_spec

    LOADS = []

    def register():
        LOADS.append(1)
        register_image_spec("zzgrey", ImageSpec("L", lambda a: a.sum(), array=True))
        register_decoder("zzz", lambda data: data.decode().upper())
"""


def test_a_claimed_spec_and_extension_load_their_package_once_on_first_need(tmp_path):
    install_plugin(tmp_path, "spec:zz* = zzcodecs:register\next:zzz = zzcodecs:register\n", PLUGIN)
    out = run(
        tmp_path,
        """
        import io, sys, numpy as np, PIL.Image
        from wds_core import Decoder
        buf = io.BytesIO(); PIL.Image.fromarray(np.full((2, 3), 5, np.uint8)).save(buf, format="PNG")
        print("zzcodecs" in sys.modules)
        print(Decoder().decode1("txt", b"x"), "zzcodecs" in sys.modules)  # a built-in: nothing loaded
        print(Decoder().decode1("zzz", b"abc"))
        print(Decoder("zzgrey").decode1("png", buf.getvalue()))
        print(sys.modules["zzcodecs"].LOADS)
        """,
    )
    assert out == ["False", "x", "False", "ABC", "30", "[1]"]


def test_a_provider_that_does_not_import_is_named_and_its_fields_stay_bytes(tmp_path):
    install_plugin(
        tmp_path, "spec:zz* = zzcodecs:register\next:zzz = zzcodecs:register\n", "import no_such_framework_here\n"
    )
    out = run(
        tmp_path,
        """
        from wds_core import Decoder, SpecError
        print(Decoder().decode1("zzz", b"abc"))
        try:
            Decoder("zzgrey")
        except SpecError as exn:
            print(str(exn).replace(" ", "_"))
        """,
    )
    assert out[0] == "b'abc'"
    assert "zzcodecs:register_does_not_import" in out[1] and "no_such_framework_here" in out[1]


def test_unclaimed_names_import_nothing(tmp_path):
    install_plugin(tmp_path, "spec:zz* = zzcodecs:register\n", "raise SystemExit('must not be imported')\n")
    out = run(
        tmp_path,
        """
        import sys
        from wds_core import Decoder, SpecError
        print(Decoder().decode1("unknownext", b"abc"))
        try:
            Decoder("nosuchspec")
        except SpecError as exn:
            print("unknown" in str(exn), "zzcodecs" in sys.modules)
        """,
    )
    assert out == ["b'abc'", "True", "False"]
