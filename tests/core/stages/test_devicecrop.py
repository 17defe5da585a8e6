"""wds_core.stages.devicecrop: crops planned in the workers, batched as one buffer and arrays for the device."""

import io
import pickle

import numpy as np
import PIL.Image
import pytest

import wds_core
from wds_core.errors import DecodingError, SampleError, SpecError
from wds_core.stages.crop import Uniform, image_crop
from wds_core.stages.devicecrop import HostShare, PlannedCrop, PlannedCrops, is_jpeg_data


def jpeg(height: int = 120, width: int = 160, seed: int = 0) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 255, (height, width, 3), dtype=np.uint8)
    out = io.BytesIO()
    PIL.Image.fromarray(pixels).save(out, format="JPEG")
    return out.getvalue()


def test_a_plan_reads_the_header_only_and_draws_the_cpu_path_s_crop():
    data = jpeg(120, 160)
    plan = image_crop(64, flip=0.5, device="cuda").planned(data, Uniform(7), "k7", "s.tar")
    box, out, flip = image_crop(64, flip=0.5).plan(120, 160, Uniform(7))
    assert (plan.size, plan.box, plan.out, plan.flip) == ((120, 160), tuple(map(float, box)), out, flip)
    assert plan.data == data and plan.key == "k7" and plan.finish.device == "cuda" and "k7" in repr(plan)


def test_a_batch_is_one_buffer_and_arrays():
    datas = [jpeg(100 + 10 * k, 90, k) for k in range(5)]
    crop = image_crop(32, "center", layout="chw", mean=(0.5, 0.5, 0.5), std=(0.2, 0.2, 0.2), device="cuda:1")
    batch = PlannedCrops.collate([crop.planned(data, Uniform(k), f"k{k}") for k, data in enumerate(datas)])
    assert len(batch) == 5 and batch.data.dtype == np.uint8 and batch.offsets.tolist()[-1] == sum(map(len, datas))
    assert [bytes(batch.image(k)) for k in range(5)] == datas
    assert batch.sizes.tolist() == [[100 + 10 * k, 90] for k in range(5)] and batch.boxes.shape == (5, 4)
    assert batch.out == (32, 32) and batch.finish.device == "cuda:1" and batch.finish.layout == "chw"
    again = pickle.loads(pickle.dumps(batch))
    assert bytes(again.image(3)) == datas[3] and again.keys == batch.keys and np.array_equal(again.boxes, batch.boxes)
    assert len(pickle.dumps(batch)) < sum(map(len, datas)) + 2000
    assert batch.where(2) == "sample 'k2'"


def test_the_default_collation_batches_plans():
    crop = image_crop(16, device="cpu")
    samples = [(crop.planned(jpeg(seed=k), Uniform(k)), k) for k in range(3)]
    images, labels = wds_core.default_collation_fn(samples)
    assert isinstance(images, PlannedCrops) and len(images) == 3 and labels.tolist() == [0, 1, 2]


def test_plans_for_different_outputs_do_not_batch():
    a = image_crop(8, device="cpu").planned(jpeg(), Uniform(0))
    b = image_crop(16, device="cpu").planned(jpeg(), Uniform(0))
    with pytest.raises(SampleError, match="different outputs"):
        PlannedCrops.collate([a, b])
    with pytest.raises(SampleError, match="cannot batch a planned crop with"):
        PlannedCrops.collate([a, "text"])  # type: ignore[list-item]


@pytest.mark.parametrize(
    ("options", "message"), [({"policy": "shorter"}, "policy"), ({"spec": "pil"}, "spec"), ({"device": ""}, "device")]
)
def test_what_a_device_cannot_do_is_refused(options, message):
    with pytest.raises(SpecError, match=message):
        image_crop(224, **{"device": "cuda", **options})


def test_a_lying_header_is_refused_in_the_worker_naming_the_sample():
    huge = bytearray(jpeg())
    at = huge.index(b"\xff\xc0")  # SOF0: height and width
    huge[at + 5 : at + 9] = (60000).to_bytes(2, "big") + (60000).to_bytes(2, "big")
    samples = [{"__key__": "huge", "__url__": "s.tar", "jpg": bytes(huge)}, {"__key__": "fine", "jpg": jpeg()}]
    with pytest.raises(DecodingError, match="huge") as caught:
        list(wds_core.DataPipeline(samples, wds_core.crop_images(32, device="cpu")))
    assert "s.tar" in str(caught.value)
    skipping = wds_core.crop_images(32, device="cpu", handler=wds_core.warn_and_continue)
    with pytest.warns(UserWarning):
        kept = list(wds_core.DataPipeline(samples, skipping))
    assert [sample["__key__"] for sample in kept] == ["fine"] and isinstance(kept[0]["jpg"], PlannedCrop)


def test_decoded_images_are_refused_and_jpegs_known():
    with pytest.raises(DecodingError, match="encoded images"):
        image_crop(8, device="cpu").planned(np.zeros((8, 8, 3), np.uint8), Uniform(0))
    assert is_jpeg_data(jpeg()) and not is_jpeg_data(b"\x89PNG\r\n")


def test_which_images_the_device_takes_and_their_decoded_sizes_are_read_from_the_arrays_at_once():
    """Issue 60: no Python call per image on the device's hot path: which images are JPEGs the device decodes
    (not PNGs, not the ones their plan reduces) and the sizes all decode at come from the batch's arrays."""
    png = io.BytesIO()
    PIL.Image.fromarray(np.zeros((50, 70, 3), np.uint8)).save(png, format="PNG")
    datas = [jpeg(100, 90, 0), png.getvalue(), jpeg(60, 80, 1), jpeg(70, 70, 2)]
    crop = image_crop(32, "center", device="cuda")
    plans = [crop.planned(data, Uniform(k), f"k{k}") for k, data in enumerate(datas)]
    plans[3] = PlannedCrop(plans[3].data, plans[3].size, plans[3].box, plans[3].out, plans[3].flip, plans[3].finish,
                           reduced=(35, 35))  # fmt: skip
    batch = PlannedCrops.collate(plans)
    assert batch.jpeg_rows(range(4)).tolist() == [True, False, True, False]
    assert batch.jpeg_rows(range(1, 3)).tolist() == [False, True]
    assert [is_jpeg_data(batch.image(i)) for i in range(4)] == [True, False, True, True]
    assert batch.decoded_sizes().tolist() == [list(batch.decoded_size(i)) for i in range(4)]
    assert batch.decoded_sizes().tolist()[:3] == [[100, 90], [50, 70], [60, 80]] and batch.decoded_sizes()[3, 0] < 70
    short = PlannedCrops.collate([PlannedCrop(b"\xff\xd8", (8, 8), (0.0, 0.0, 8.0, 8.0), (4, 4), False, crop.planned(
        datas[0], Uniform(0)).finish)])  # fmt: skip
    assert short.jpeg_rows(range(1)).tolist() == [False]  # two bytes: not even a JPEG's start


def test_the_host_share_picks_images_by_shard_and_key_in_proportion():
    share = HostShare(0.3)
    keys = [("s.tar", f"k{i:04d}") for i in range(4000)]
    taken = [share.takes(url, key) for url, key in keys]
    assert abs(sum(taken) / len(keys) - 0.3) < 0.03
    assert taken == [HostShare(0.3).takes(url, key) for url, key in keys]  # the same images, whoever asks
    share.set(0.6)
    more = [share.takes(url, key) for url, key in keys]
    assert all(m for t, m in zip(taken, more) if t)  # a larger share keeps the images of a smaller one
    share.set(0.0)
    assert not any(share.takes(url, key) for url, key in keys[:100])
    share.set(1.0)
    assert all(share.takes(url, key) for url, key in keys[:100])
    with pytest.raises(SpecError, match="between 0 and 1"):
        share.set(1.5)


def test_the_host_share_is_found_by_its_token_and_pickles_as_its_value():
    share = HostShare(0.25)
    assert HostShare.find(share.token) is share and HostShare.find("elsewhere") is None and HostShare.find(None) is None
    copy = pickle.loads(pickle.dumps(share))
    assert copy.token == share.token and copy.get() == 0.25
    share.set(0.5)
    assert copy.get() == 0.25  # pickled outside a worker's start: the value, no longer shared


def _read_share_after(share, ready, done, out):
    ready.set()
    done.wait(10)
    out.put(share.get())


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_workers_see_the_share_set_after_they_started(method):
    """The loader's workers (forked, or spawned with the pipeline) read the number the main process turns."""
    import multiprocessing

    context = multiprocessing.get_context(method)
    share = HostShare(0.1)
    ready, done, out = context.Event(), context.Event(), context.Queue()
    worker = context.Process(target=_read_share_after, args=(share, ready, done, out))
    worker.start()
    assert ready.wait(60)
    share.set(0.7)
    done.set()
    assert out.get(timeout=60) == 0.7
    worker.join(10)


def test_an_image_cut_on_the_host_is_the_cpu_path_s_cut_of_the_same_box_and_flip():
    data = jpeg(120, 160, 3)
    crop = image_crop(48, flip=0.5, device="cpu", split=1.0)
    planned = crop.planned(data, Uniform(11), "k", "s.tar", host=True)
    cpu = image_crop(48, flip=0.5).cut(data, Uniform(11))
    assert planned.pixels is not None and np.array_equal(planned.pixels, cpu) and planned.data == b""
    assert "cut on the host" in repr(planned)


def test_a_batch_of_images_cut_on_the_host_and_not_collates_selects_and_pickles():
    crop = image_crop(24, device="cpu")
    plans = [crop.planned(jpeg(seed=k), Uniform(k), f"k{k}", host=k % 2 == 1) for k in range(5)]
    batch = PlannedCrops.collate(plans)
    assert batch.host.tolist() == [False, True, False, True, False] and batch.cut.shape == (2, 24, 24, 3)
    assert np.array_equal(batch.cut[1], plans[3].pixels)
    again = pickle.loads(pickle.dumps(batch))
    assert np.array_equal(again.cut, batch.cut) and again.host.tolist() == batch.host.tolist()
    device = batch.select([0, 2, 4])
    assert [bytes(device.image(i)) for i in range(3)] == [bytes(batch.image(k)) for k in (0, 2, 4)]
    assert device.keys == ["k0", "k2", "k4"] and not device.host.any() and len(device.cut) == 0
    scattered = batch.select([4, 3, 0])  # not one after the other: copied
    assert [bytes(scattered.image(i)) for i in (0, 2)] == [bytes(batch.image(4)), bytes(batch.image(0))]
    assert scattered.host.tolist() == [False, True, False] and np.array_equal(scattered.cut[0], plans[3].pixels)


def test_a_split_needs_a_device():
    with pytest.raises(SpecError, match="give device= too"):
        image_crop(24, split=0.5)
    with pytest.raises(SpecError, match="between 0 and 1"):
        image_crop(24, device="cpu", split=2.0)
