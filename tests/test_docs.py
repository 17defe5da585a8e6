"""The documentation site: its benchmark chart, its pages, and a strict build (with the ``docs`` extra)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SVG = "{http://www.w3.org/2000/svg}"


def _hooks():
    spec = importlib.util.spec_from_file_location("wds_docs_hooks", ROOT / "docs" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks itself up there
    spec.loader.exec_module(module)
    return module


TABLES = """# Benchmarks

## Raw read: `python benchmarks/bench_local.py --rows read`

| dataset | samples | wds samples/s | webdataset samples/s | speedup | target |
|---|---|---|---|---|---|
| small | 200,000 | 148,341 | 10,060 | **14.7×** | ≥ 12× — met |
| image | 20,000 | 46,790 | 9,044 | 0.9× | not met |

## Decoding: `python benchmarks/bench_local.py --rows decode`

| pipeline | images/s | vs webdataset |
|---|---|---|
| Pillow alone | 1,569 | 1.02× |
| webdataset `decode("rgb8")` | 1,535 | 1.00× |
| wds `decode("rgb8")` | 1,816 | **1.18×** |

## Remote

| reader | seconds | MB/s |
|---|---:|---:|
| wds | 0.3 | 790 |

## Loader

| images | DataLoader workers | reader | wds samples/s | webdataset samples/s | ratio |
|---|---|---|---:|---:|---:|
| bytes | 2 | library | 15,345 | 11,273 | 1.36× |
"""


def test_chart_has_one_bar_per_recorded_wds_ratio():
    bars = _hooks().parse(TABLES)
    assert [(b.section, b.label, b.ratio, b.text) for b in bars] == [
        ("Raw read", "small", 14.7, "14.7×"),
        ("Raw read", "image", 0.9, "0.9×"),
        ("Decoding", 'wds decode("rgb8")', 1.18, "1.18×"),  # the Pillow and webdataset rows are not wds
        ("Loader", "bytes · DataLoader workers 2 · library", 1.36, "1.36×"),
    ]


def test_chart_is_an_svg_with_a_bar_and_a_value_per_ratio():
    hooks = _hooks()
    tree = ET.fromstring(hooks.svg(hooks.parse(TABLES)))
    bars = tree.findall(f"{SVG}rect")[1:]  # the first is the background
    assert len(bars) == 4
    widths = [float(rect.get("width")) for rect in bars]
    assert widths[0] == max(widths) and widths[1] < widths[2]  # 14.7× longest; 0.9× shorter than 1.18×
    assert bars[1].get("fill") != bars[0].get("fill")  # slower than webdataset is shown differently
    texts = [text.text for text in tree.iter(f"{SVG}text")]
    assert {"14.7×", "0.9×", "1.18×", "1.36×", "Raw read", "Decoding", "Loader"} <= set(texts)


def test_chart_of_the_recorded_benchmarks():
    hooks = _hooks()
    readme = (ROOT / "benchmarks" / "README.md").read_text()
    bars = hooks.parse(readme)
    recorded = re.findall(r"\|\s*\*{0,2}(\d+(?:\.\d+)?)×\*{0,2}\s*\|", readme)
    assert bars and len(bars) <= len(recorded)
    assert {"Raw read", "Writing", "Decoding"} <= {bar.section for bar in bars}
    ET.fromstring(hooks.chart())


def test_chart_refuses_a_readme_without_ratios():
    hooks = _hooks()
    with pytest.raises(ValueError, match="no wds/webdataset ratios"):
        hooks.svg(hooks.parse("# nothing\n\n| a | b |\n|---|---|\n| 1 | 2 |\n"))


def _nav_pages(text: str) -> list[str]:
    return re.findall(r":\s*([\w/.-]+\.md)\s*$", text, flags=re.M)


def test_every_page_is_in_the_nav_and_every_nav_entry_exists():
    pages = _nav_pages((ROOT / "mkdocs.yml").read_text())
    docs = ROOT / "docs"
    assert all((docs / page).is_file() for page in pages)
    assert sorted(pages) == sorted(str(p.relative_to(docs)) for p in docs.rglob("*.md"))


def test_the_readme_is_one_screen_of_pitch_install_quickstart_and_links():
    """Issue 45.8: the README was 867 dense lines, and the guides were 7-line files that included slices of it.
    It is now a pitch, the two commands, the install, a quickstart and links; every guide is a page of its own
    (none includes the README), and every page the README links to exists."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 80 and "--8<--" not in readme
    for page in (ROOT / "docs").rglob("*.md"):
        assert '--8<-- "README.md' not in page.read_text(), page
    links = re.findall(r"\]\(((?:docs/)[\w/.-]+\.md)\)", readme)
    assert "docs/guides/first-hour.md" in links and len(links) >= 15
    assert all((ROOT / link).is_file() for link in links), [link for link in links if not (ROOT / link).is_file()]
    nav = set(_nav_pages((ROOT / "mkdocs.yml").read_text()))
    assert {str(Path(link).relative_to("docs")) for link in links} <= nav


@pytest.mark.slow
def test_site_builds_with_warnings_as_errors(tmp_path):
    pytest.importorskip("mkdocs", reason="the docs extra: pip install -e '.[docs]'")
    pytest.importorskip("mkdocstrings")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    site = tmp_path / "site"
    assert (site / "images" / "benchmarks.svg").is_file() and (site / "images" / "dataflow.svg").is_file()
    api = (site / "api" / "pipelines" / "index.html").read_text()
    assert 'id="wds_core.dataset.WebDataset"' in api and 'id="wds_core.pipeline.fluid.FluidInterface.batched"' in api
    guide = (site / "guides" / "streaming" / "index.html").read_text()
    assert "--8&lt;--" not in guide and "state_dict" in guide


def _extras() -> set[str]:
    import tomllib

    return set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])


def test_every_install_line_installs_this_repository_with_extras_it_has():
    """Issue 45: the docs said `pip install "wds[torch]"`, which fails (wds is not on PyPI) while the README said
    `pip install -e .`.  One story everywhere, the README, the docs and the install hints of errors: the clone
    itself, with extras pyproject.toml defines."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    sources = sorted(p for d in ("wds_core", "wds_torch", "wds_jax", "wds_tf") for p in (ROOT / d).rglob("*.py"))
    extras, found = _extras(), 0
    for path in pages + sources:
        text = path.read_text()
        assert not re.search(r"\bwds\[[a-z]", text), f"{path}: installs wds[...] from PyPI, where it is not"
        for line in re.findall(r"pip install[^\n`]*", text):
            for named in re.findall(r'-e\s+"?\.\[([a-z0-9,]+)\]', line):
                found += 1
                assert set(named.split(",")) <= extras, f"{path}: {line!r} names an extra pyproject.toml lacks"
    assert found >= 10
    from wds_core.errors import install_hint

    assert install_hint("s3fs", "s3") == 'pip install s3fs (or pip install -e ".[s3]" in your clone of wds)'


def test_a_long_label_is_wrapped_not_cut():
    hooks = _hooks()
    label = "wds crop_images(224, ...), simplejpeg, opencv resize, num_threads=2 · set imagenet"
    bars = [hooks.Bar("Decode and augment", label, 4.08, "4.08×")]
    texts = [text.text for text in ET.fromstring(hooks.svg(bars)).iter(f"{SVG}text")]
    assert " ".join(t for t in texts if t and ("crop_images" in t or "num_threads" in t or "imagenet" in t)) == label
    assert not any(t and t.endswith("…") for t in texts)
    assert hooks.wrapped(label, 58) == [label[: label.index(" num_threads")], label[label.index("num_threads") :]]


def test_every_api_page_says_how_to_read_it_in_a_clone():
    """Issue 67: the API reference was `:::` lines when read in a clone; each page says it is built, how to build
    it, and how to read a module without building it."""
    for page in sorted((ROOT / "docs" / "api").glob("*.md")):
        text = page.read_text()
        assert "*Read built:*" in text and "mkdocs serve" in text and "python -m pydoc" in text, page
