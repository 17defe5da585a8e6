"""wds_core.io.registry: one table by URL scheme of openers and backends, and one reading of a URL's scheme."""

import pytest

from wds_core.io import registry


@pytest.fixture(autouse=True)
def clean():
    saved = {scheme: dict(entry) for scheme, entry in registry._TABLE.items()}
    yield
    registry._TABLE.clear()
    registry._TABLE.update(saved)


def opener(url, mode="rb", bufsize=8192):
    return url


def test_an_opener_is_found_by_its_scheme_with_or_without_slashes():
    registry.register_opener("mystore", opener)
    assert registry.registered_scheme("mystore://bucket/a.tar") == "mystore"
    assert registry.registered_scheme("mystore:/data/a.tar") == "mystore"  # as webdataset's gopen reads it
    assert registry.scheme_opener("mystore:/data/a.tar") is opener
    assert registry.registered_scheme("other://bucket/a.tar") is None and registry.scheme_opener("a.tar") is None
    assert "mystore" in registry.OPENERS and registry.OPENERS["mystore"] is opener


def test_a_default_opener_takes_other_remote_urls_but_not_files():
    registry.register_opener("__default__", opener)
    assert registry.registered_scheme("zz://host/a.tar") == "__default__"
    assert registry.registered_scheme("file:///data/a.tar") is None
    assert registry.registered_scheme("/data/a.tar") is None


def test_openers_and_backends_share_a_scheme_and_go_away():
    backend = object()
    registry.set_backend("mystore", backend)
    registry.register_opener("mystore", opener)
    assert registry.registered_backend("mystore") is backend and registry.OPENERS["mystore"] is opener
    registry.register_opener("mystore", None)
    assert "mystore" not in registry.OPENERS and registry.registered_backend("mystore") is backend
    registry.set_backend("mystore", None)
    assert "mystore" not in registry._TABLE and len(registry.OPENERS) == len(list(registry.OPENERS))
    with pytest.raises(KeyError):
        registry.OPENERS["mystore"]


def test_an_opener_must_be_callable():
    with pytest.raises(TypeError, match="an opener is a function"):
        registry.register_opener("mystore", "not callable")
