"""wds_torch.split: a share of each batch cut on the host by the workers, the rest on the device (issue 60), on
the CPU twin: the same samples, order, labels and crops; a fixed share cuts the same images on the host in every
run; the tuner of ``split="auto"`` climbs to the share the training loop takes batches fastest at."""

import pytest

torch = pytest.importorskip("torch")

import wds_core  # noqa: E402
import wds_torch  # noqa: E402
from wds_core.errors import SpecError  # noqa: E402
from wds_core.stages.devicecrop import HostShare  # noqa: E402
from wds_torch.split import SplitTuner  # noqa: E402


def dataset(urls, **device):
    return (wds_torch.WebDataset(urls, seed=5, shuffle=True).shuffle(20)
            .crop_images(64, flip=0.5, layout="chw", interpolation="opencv", **device)
            .to_tuple("__key__", "jpg", "cls").batched(8))  # fmt: skip


def run(loader, **options):
    return [(list(keys), images, list(labels)) for keys, images, labels in wds_torch.to_device(loader, **options)]


def by_key(batches):
    return {key: (image, label) for keys, images, labels in batches for key, image, label in zip(keys, images, labels)}


def test_what_the_host_cuts_is_the_cpu_path_s_and_the_rest_is_the_device_s(photo_shards):
    pytest.importorskip("cv2")
    cpu = [(list(k), torch.as_tensor(i), list(c)) for k, i, c in dataset(photo_shards)]
    device = run(dataset(photo_shards, device="cpu"))
    host = run(dataset(photo_shards, device="cpu", split=1.0))
    halves = run(dataset(photo_shards, device="cpu", split=0.5))
    in_workers = run(
        wds_torch.WebLoader(dataset(photo_shards, device="cpu", split=0.5), batch_size=None, num_workers=2)
    )
    assert [k for k, _, _ in halves] == [k for k, _, _ in host] == [k for k, _, _ in device] == [k for k, _, _ in cpu]
    assert [c for _, _, c in halves] == [c for _, _, c in cpu] and sum(len(k) for k, _, _ in cpu) == 48
    for (_, theirs, _), (_, all_host, _) in zip(cpu, host):
        assert torch.equal(all_host, theirs)  # the whole batch cut on the host: the CPU path's pixels
    theirs, ours, on_device, workers = by_key(cpu), by_key(halves), by_key(device), by_key(in_workers)
    assert workers.keys() == theirs.keys()
    exact = 0
    for key, (image, label) in ours.items():
        if torch.equal(image, theirs[key][0]):
            exact += 1
            assert torch.equal(workers[key][0], image)  # cut on the host by a worker too: a fixed share's choice
        else:  # cut on the device (sampled as finely as its part's largest shrink asks)
            assert (image.int() - on_device[key][0].int()).abs().float().mean() < 1.0
        assert label == theirs[key][1] == workers[key][1]
    assert 12 <= exact <= 36  # about half the images were cut on the host


def test_to_device_turns_the_share_and_says_it(photo_shards):
    """The share in force shows in ``split_report()``, the starvation report and a profile of the dataset (its
    table too): fixed, or the tuner's with its last choices."""
    data = dataset(photo_shards, device="cpu")
    loader = wds_torch.WebLoader(data, batch_size=None, num_workers=0)
    batches = wds_torch.to_device(loader, split=1.0)
    watched = wds_core.Starvation(batches)
    assert batches.split_report() is None  # nothing known before the first batch
    with wds_core.Profile(data) as profile:
        for _ in watched:
            pass
    assert batches.split_report() == {"mode": "fixed", "share": 1.0}
    assert watched.report()["device_split"] == profile.report()["device_split"] == {"mode": "fixed", "share": 1.0}
    assert "device split: the workers cut 100% of each batch on the host, the device the rest (fixed)" in (
        profile.table())  # fmt: skip
    with pytest.raises(SpecError, match="from 0 to 1"):
        wds_torch.to_device(loader, split=1.5)
    with pytest.raises(SpecError, match="hold no planned crops"):
        list(wds_torch.to_device([torch.zeros(2)], "cpu", split=0.5))
    auto = wds_torch.to_device(loader, split="auto")
    assert sum(len(keys) for keys, _, _ in auto) == 48 and auto.split_report()["mode"] == "auto"
    with wds_core.Profile(data) as profile:
        list(auto)
    assert profile.report()["device_split"] == auto.split_report()
    assert "(auto" in profile.table()
    list(wds_torch.to_device(loader, split=0.25))
    assert auto.split_report() == {"mode": "fixed", "share": 0.25}  # the share is fixed again: no tuner's


class Clock:
    """A training loop whose rate depends on the share cut on the host: fastest at ``best``."""

    def __init__(self, share: HostShare, best: float) -> None:
        self.share, self.best, self.now = share, best, 0.0

    def __call__(self) -> float:
        self.now += 0.01 * (1 + 3 * abs(self.share.get() - self.best))  # one batch's time at the share in force
        return self.now


@pytest.mark.parametrize("best, start", [(0.4, 0.0), (0.0, 0.5), (0.95, 0.2)])
def test_the_tuner_climbs_to_the_fastest_share_and_stays_near_it(best, start):
    share = HostShare(start)
    tuner = SplitTuner(share, window=4, settle=2, clock=Clock(share, best))
    seen = []
    for _ in range(400):
        tuner.given()
        seen.append(share.get())
    assert all(abs(s - best) <= 0.1 + 1e-9 for s in seen[-100:])
    assert tuner.report()["mode"] == "auto" and len(tuner.report()["choices"]) == 32


def test_the_tuner_refuses_nonsense():
    with pytest.raises(SpecError, match="bad split tuning"):
        SplitTuner(HostShare(0.0), window=0)
