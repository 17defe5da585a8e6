"""Batches decoded and cut where the model runs (issue 48), through a loader on the CPU twin of the GPU path: the
same samples, order and labels as ``crop_images`` in the workers, exact resume; the thread that prepares batches
ahead, and its CUDA calls against a stand-in."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import wds_torch  # noqa: E402
from wds_core.stages.devicecrop import PlannedCrops  # noqa: E402


def test_through_a_dataloader_the_same_samples_order_labels_and_crops(photo_shards):
    def dataset(**device):
        return (wds_torch.WebDataset(photo_shards, seed=3, shuffle=True).shuffle(20)
                .crop_images(96, flip=0.5, layout="chw", interpolation="opencv", **device)
                .to_tuple("__key__", "jpg", "cls").batched(8))  # fmt: skip

    pytest.importorskip("cv2")
    loader = wds_torch.WebLoader(dataset(), batch_size=None, num_workers=2)
    planned_loader = wds_torch.WebLoader(dataset(device="cpu"), batch_size=None, num_workers=2)
    cpu = [(list(keys), images, labels) for keys, images, labels in loader]
    moved = [(list(keys), images, labels) for keys, images, labels in wds_torch.to_device(planned_loader)]
    assert [keys for keys, _, _ in moved] == [keys for keys, _, _ in cpu] and sum(len(k) for k, _, _ in cpu) == 48
    for (_, ours, labels), (_, theirs, their_labels) in zip(moved, cpu):
        assert isinstance(ours, torch.Tensor) and ours.shape[1:] == (3, 96, 96)
        assert list(labels) == list(their_labels)
        assert (ours.int() - torch.as_tensor(theirs).int()).abs().float().mean() < 2.5


def test_the_state_given_is_the_loader_s_after_the_last_batch_given_out(photo_shards):
    """With the next batch prepared ahead (as on CUDA), the state is still that of the batches given out."""
    dataset = (wds_torch.WebDataset(photo_shards, seed=1, shuffle=True).crop_images(32, flip=0.5, layout="chw",
               device="cpu").to_tuple("__key__", "jpg").batched(4))  # fmt: skip
    pytest.importorskip("torchdata")
    full = [list(keys) for keys, _ in wds_torch.WebLoader(dataset, batch_size=None, num_workers=2).to_device()]
    batches = wds_torch.to_device(wds_torch.WebLoader(dataset, batch_size=None, num_workers=2), prefetch=True)
    it = iter(batches)
    first = [list(next(it)[0]) for _ in range(5)]
    state = batches.state_dict()
    resumed = wds_torch.to_device(wds_torch.WebLoader(dataset, batch_size=None, num_workers=2), prefetch=True)
    resumed.load_state_dict(state)
    rest = [list(keys) for keys, _ in resumed]
    assert first + rest == full


def test_without_torchdata_the_device_is_fed_and_only_a_checkpoint_fails(photo_shards, monkeypatch):
    """Issue 60: the preparing thread asked the loader's state every batch, and without torchdata the first batch
    failed with a CheckpointError though no checkpoint was asked for."""
    from wds_core.errors import CheckpointError

    monkeypatch.setattr(wds_torch.datasets, "_Stateful", None)  # a machine without torchdata
    dataset = (wds_torch.WebDataset(photo_shards, seed=1, shuffle=True).crop_images(32, layout="chw", device="cpu")
               .to_tuple("__key__", "jpg").batched(4))  # fmt: skip
    batches = wds_torch.WebLoader(dataset, batch_size=None, num_workers=2).to_device(prefetch=True)
    assert sum(len(keys) for keys, _ in batches) == 48
    it = iter(batches)
    next(it)
    with pytest.raises(CheckpointError):
        batches.state_dict()
    it.close()  # the preparing thread stops


def test_a_large_batch_of_plans_is_handed_over_through_shared_memory(photo_shards):
    from wds_torch import transfer

    dataset = (wds_torch.WebDataset(photo_shards).crop_images(32, device="cpu", split=0.2).to_tuple("jpg", "cls")
               .batched(48))  # fmt: skip
    batches = list(wds_torch.WebLoader(dataset, batch_size=None, num_workers=1))
    planned_batch = batches[0][0]
    assert isinstance(planned_batch, PlannedCrops) and planned_batch.nbytes > transfer.MIN_BATCH_BYTES
    if transfer.HAVE_SLOTS:  # the JPEGs arrive as a view of the worker's slot, not a copy out of a pipe
        assert not planned_batch.data.flags.owndata
    host = int(planned_batch.host.sum())  # the images the worker cut: their pixels came along
    assert 0 < host < 48 and planned_batch.cut.shape == (host, 32, 32, 3)
    assert wds_torch.devicecut.cut_planned(planned_batch, "cpu").shape == (48, 32, 32, 3)  # layout "hwc"


def _preparing_threads():
    import threading

    return [thread for thread in threading.enumerate() if thread.name == "wds-to-device" and thread.is_alive()]


def test_batches_prepared_ahead_by_a_thread_come_in_order_and_no_further_ahead_than_asked():
    import time

    taken = []

    def source():
        for k in range(40):
            taken.append(k)
            yield torch.full((2,), k), np.array([k, k + 1])

    batches = iter(wds_torch.to_device(source(), "cpu", prefetch=3))
    first = next(batches)
    time.sleep(0.3)
    assert len(taken) <= 1 + 3 + 1  # the one given out, three ready, one being taken
    rest = list(batches)
    got = [int(images[0]) for images, _ in [first, *rest]]
    assert got == list(range(40)) and all(isinstance(labels, torch.Tensor) for _, labels in rest)
    assert not _preparing_threads()


@pytest.mark.parametrize("prefetch", [0, 2])
def test_the_feed_report_says_whether_the_loader_the_preparing_or_the_loop_holds_batches_back(prefetch):
    """Issue 60: why a feed delivers less (with more workers, say) is read from where the preparing spends its
    time: waiting for the loader's next batch, preparing it (and how much of that on a CPU), or for the loop."""
    import time

    def source(pause):
        for k in range(8):
            time.sleep(pause)
            yield torch.full((2,), k)

    def taken(batches, pause):
        for _ in batches:
            time.sleep(pause)
        return batches.feed_report()

    slow_loader = taken(wds_torch.to_device(source(0.03), "cpu", prefetch=prefetch), 0.0)
    slow_loop = taken(wds_torch.to_device(source(0.0), "cpu", prefetch=prefetch), 0.03)
    for said in (slow_loader, slow_loop):
        assert said["batches"] == 8
        assert said["preparing_cpu_seconds"] <= said["preparing_seconds"] + 0.01
        parts = said["loader_seconds"] + said["preparing_seconds"] + said["consumer_seconds"]
        assert parts <= said["wall_seconds"] + 0.01
    assert slow_loader["loader_seconds"] > 0.15 > slow_loader["consumer_seconds"]
    assert slow_loop["consumer_seconds"] > 0.1 > slow_loop["loader_seconds"]


def test_an_error_while_preparing_ahead_is_raised_where_its_batch_would_have_been():
    def source():
        for k in range(5):
            yield torch.full((2,), k)
        raise ValueError("shard 7 is not there")

    got = []
    with pytest.raises(ValueError, match="shard 7"):
        for batch in wds_torch.to_device(source(), "cpu", prefetch=True):
            got.append(int(batch[0]))
    assert got == [0, 1, 2, 3, 4]


def test_leaving_the_loop_early_stops_the_preparing_thread():
    def endless():
        k = 0
        while True:
            yield torch.full((4,), k)
            k += 1

    batches = iter(wds_torch.to_device(endless(), "cpu", prefetch=2))
    assert [int(next(batches)[0]) for _ in range(3)] == [0, 1, 2]
    assert _preparing_threads()
    batches.close()
    assert not _preparing_threads()


def test_the_cuda_side_of_the_preparing_thread_against_a_stand_in_for_cuda(monkeypatch):
    """What only runs with a GPU, its calls checked here: the thread names its device, prepares each batch on its
    own stream and records an event there; the caller's stream waits for that event before the batch is given
    out, and owns its tensors (``record_stream``)."""
    import contextlib
    import threading

    calls, lock = [], threading.Lock()

    def note(*call):
        with lock:
            calls.append(call)

    class Stream:
        def __init__(self, device=None):
            self.name = "main" if device is None else "side"
            note("stream", self.name, device)

        def wait_event(self, event):
            note("wait", self.name, event.batch)

    class Event:
        def record(self, stream):
            self.batch = len([c for c in calls if c[0] == "record"])
            note("record", stream.name, self.batch)

    def set_device(device):
        assert torch.device(device).index is not None, "torch.cuda.set_device needs the device's index"
        note("set_device", torch.device(device).index)

    main = Stream()
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "set_device", set_device)
    monkeypatch.setattr(torch.cuda, "Stream", Stream)
    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "stream", lambda stream: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: main)
    owned = lambda tensor, stream: note("owned", stream.name, int(tensor[0]))  # noqa: E731
    monkeypatch.setattr(torch.Tensor, "record_stream", owned)
    monkeypatch.setattr(wds_torch.device.DeviceBatches, "_move", lambda self, batch, device: batch)  # stays here

    got = []
    batches = [(torch.full((2,), k), torch.full((2,), -k)) for k in range(4)]
    for images, _labels in wds_torch.to_device(batches, "cuda"):
        got.append(int(images[0]))
        note("given", int(images[0]))
    assert got == [0, 1, 2, 3]
    assert ("set_device", 0) in calls and ("stream", "side", torch.device("cuda", 0)) in calls
    for k in range(4):
        recorded, waited, given = (calls.index(c) for c in (("record", "side", k), ("wait", "main", k), ("given", k)))
        assert recorded < waited < given
        assert calls.index(("owned", "main", k)) < given and calls.index(("owned", "main", -k)) < given
