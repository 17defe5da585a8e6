"""A registered opener (webdataset's gopen scheme) wins over the registry, for its scheme only."""

import io

import wds_core
from wds_core.io import backends
from wds_core.io.backends.opener import OpenerBackend
from wds_core.io.backends.ranged import RangedBackend
from wds_core.io.storage import remote_url


def test_a_registered_opener_wins_over_the_registry_for_its_scheme_only():
    wds_core.register_opener("s3", lambda url, mode, bufsize: io.BytesIO(b""))
    try:
        assert isinstance(backends.backend_for("s3://b/a.tar"), OpenerBackend)
        assert type(backends.backend_for("gs://b/a.tar")) is RangedBackend
        assert not remote_url("s3://b/a.tar")
    finally:
        wds_core.register_opener("s3", None)
