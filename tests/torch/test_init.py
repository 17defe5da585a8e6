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
