import pytest

pytest.importorskip("torch")

import wds_torch  # noqa: E402

DESIGN_NAMES = """WebDataset DataPipeline SimpleShardList ResampledShards tarfile_to_samples shuffle decode to_tuple
map map_tuple batched unbatched split_by_node split_by_worker WebLoader TarWriter ShardWriter Decoder
handle_extension cbors_to_samples reraise_exception warn_and_continue ignore_and_continue""".split()


def test_the_webdataset_names_of_the_design_are_here():
    missing = [name for name in DESIGN_NAMES if not hasattr(wds_torch, name)]
    assert missing == []
    assert set(DESIGN_NAMES) <= set(wds_torch.__all__)
    assert all(hasattr(wds_torch, name) for name in wds_torch.__all__)


def test_torch_classes_replace_the_core_ones():
    import torch

    import wds_core

    assert issubclass(wds_torch.WebDataset, wds_core.WebDataset)
    assert issubclass(wds_torch.WebDataset, torch.utils.data.IterableDataset)
    assert issubclass(wds_torch.DataPipeline, torch.utils.data.IterableDataset)


@pytest.mark.slow
def test_importing_the_adapter_loads_no_drop_in_module_until_one_is_asked_for():
    """Issue 59 (3): ``import wds_torch`` loaded the drop-in (17 modules) and overrode five names after it; now
    webdataset's names and modules come when first asked for, by attribute or by import."""
    import subprocess
    import sys

    code = (
        "import sys, wds_torch, wds_core\n"
        "print(sorted(m for m in sys.modules if 'dropin' in m or m.startswith('webdataset')))\n"
        "print(wds_torch.WebDataset.__module__, 'TarWriter' in vars(wds_torch))\n"
        "from wds_torch.filters import _shuffle\n"
        "import wds_torch.tariterators as t\n"
        "import wds_torch.dropin as d\n"
        "print(t is d.MODULES['tariterators'], _shuffle is d.MODULES['filters']._shuffle)\n"
        "print(wds_torch.shuffle is d.NAMESPACE['shuffle'], callable(wds_torch.gopen), bool(wds_torch.Processor))\n"
        "print(all(getattr(wds_torch, n) is d.NAMESPACE[n] for n in wds_torch.WEBDATASET_FORMS))\n"
        "print(sorted(d.MODULES) == sorted(wds_torch.WEBDATASET_MODULES | {'gopen'}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:6] == [
        "[]",
        "wds_torch.datasets False",  # webdataset's TarWriter(fileobj, user, ...) comes from the drop-in when asked
        "True True",
        "True True True",
        "True",
        "True",
    ]
    with pytest.raises(AttributeError, match="no attribute 'shufle'"):
        wds_torch.shufle  # noqa: B018
