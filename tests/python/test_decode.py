"""The decode module against PIL and torchvision, dlfs.torch.ImageLoader,
VolumeDataset(decode=...), and `dlfs cat/bench --decode`.

Tolerances, as measured and asserted here:
- PNG decode: exactly PIL's (16-bit samples: PIL's 16-bit values >> 8, which
  is what PIL itself does for 16-bit RGB).
- JPEG decode at full scale: PIL's within 1 per channel (both use
  libjpeg-turbo with the same IDCT; equal in practice); at 1/2, 1/4, 1/8:
  PIL's draft() decode within 1.
- Geometry (Resize + CenterCrop, RandomResizedCrop given the same box,
  flips): exactly torchvision's functional ops on PIL images (the same
  fixed-point bilinear filter); float32 output equals ToTensor + Normalize.
"""
import gzip
import io
import math
import os
import struct
import subprocess

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="python3-torch not installed")
Image = pytest.importorskip("PIL.Image", reason="python3-pil not installed")
F = pytest.importorskip("torchvision.transforms.functional", reason="torchvision not installed")
dlfs = pytest.importorskip("dlfs", reason="Python module not built")
import dlfs.torch as dt  # noqa: E402
from image_fixtures import encode, png_raw, photo  # noqa: E402
import torch.utils.data as tud  # noqa: E402

FMNIST = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz"


def pil_rgb(data, mode="RGB"):
    return np.array(Image.open(io.BytesIO(data)).convert(mode))


def fmnist_pngs(n=200):
    if not os.path.exists(FMNIST):
        pytest.skip("dataset-fashion-mnist not installed")
    with gzip.open(FMNIST, "rb") as f:
        _, count, rows, cols = struct.unpack(">IIII", f.read(16))
        images = np.frombuffer(f.read(n * rows * cols), np.uint8).reshape(n, rows, cols)
    return [encode(Image.fromarray(a, "L"), "PNG") for a in images]


# ---- decoding: PNG ------------------------------------------------------------

def test_png_fashion_mnist_equals_pil():
    for data in fmnist_pngs():
        ours = dlfs.decode_image(data)
        assert ours.shape == (28, 28, 1)
        assert np.array_equal(ours[..., 0], pil_rgb(data, "L"))


@pytest.mark.parametrize("mode", ["RGB", "RGBA", "L", "LA", "P", "P-trns", "P-4bit", "1",
                                  "I;16"])
def test_png_modes_equal_pil(mode):
    a = photo(37, 61, 3)
    if mode == "P-trns":
        im = Image.fromarray(a).convert("P", palette=Image.ADAPTIVE, colors=50)
        data = encode(im, "PNG", transparency=3)
    elif mode == "P-4bit":
        im = Image.fromarray(a).convert("P", palette=Image.ADAPTIVE, colors=16)
        data = encode(im, "PNG", bits=4)
    elif mode == "P":
        data = encode(Image.fromarray(a).convert("P", palette=Image.ADAPTIVE), "PNG")
    elif mode == "I;16":
        g = (a[..., 0].astype(np.uint16) * 257 + a[..., 1] // 3).astype(np.uint16)
        data = encode(Image.fromarray(g, "I;16"), "PNG")
    elif mode == "RGBA":
        rgba = np.concatenate([a, a[..., :1]], -1)
        data = encode(Image.fromarray(rgba, "RGBA"), "PNG")
    else:
        data = encode(Image.fromarray(a).convert(mode), "PNG")
    info = dlfs.ImagePipeline(8).probe(data)
    assert info["format"] == "png" and (info["width"], info["height"]) == (61, 37)
    pil = Image.open(io.BytesIO(data))
    if mode == "I;16":  # PIL keeps 16 bits; we keep the high byte
        want_gray = (np.array(pil).astype(np.uint32) >> 8).astype(np.uint8)
        assert np.array_equal(dlfs.decode_image(data)[..., 0], want_gray)
        assert np.array_equal(dlfs.decode_image(data, color="rgb"),
                              np.repeat(want_gray[..., None], 3, -1))
        return
    gray = mode in ("L", "LA", "1")
    auto = dlfs.decode_image(data)
    assert auto.shape[-1] == (1 if gray else 3)
    assert np.array_equal(dlfs.decode_image(data, color="rgb"), pil_rgb(data, "RGB"))
    want_l = pil_rgb(data, "L")
    assert np.array_equal(dlfs.decode_image(data, color="gray")[..., 0], want_l)


@pytest.mark.parametrize("color_type,depth", [(2, 16), (6, 16), (4, 16), (0, 16), (0, 2),
                                               (0, 4)])
def test_png_other_depths_equal_pil(color_type, depth):
    rng = np.random.default_rng(depth + color_type)
    h, w = 13, 21
    if depth == 16:
        ch = {0: 1, 2: 3, 4: 2, 6: 4}[color_type]
        v = rng.integers(0, 65536, (h, w * ch), dtype=np.uint16)
        rows = v.astype(">u2").view(np.uint8).reshape(h, -1)
    else:
        per = 8 // depth
        v = rng.integers(0, 1 << depth, (h, w + (-w) % per), dtype=np.uint8)
        rows = np.zeros((h, v.shape[1] // per), np.uint8)
        for k in range(per):
            rows |= (v[:, k::per] << (8 - depth * (k + 1))).astype(np.uint8)
    data = png_raw(rows, w, color_type, depth)
    pil = Image.open(io.BytesIO(data))
    gray = color_type in (0, 4)
    if color_type == 0 and depth == 16:  # PIL: I;16 (16-bit values); we keep the high byte
        want = (np.array(pil).astype(np.uint32) >> 8).astype(np.uint8)
    else:
        want = np.array(pil.convert("L" if gray else "RGB"))
    ours = dlfs.decode_image(data, color="gray" if gray else "rgb")
    assert np.array_equal(ours.reshape(want.shape), want)


# ---- decoding: JPEG -----------------------------------------------------------

def jpegs():
    a = photo(301, 457, 1)
    out = {
        "420-q90": encode(Image.fromarray(a), "JPEG", quality=90),
        "444-q95": encode(Image.fromarray(a), "JPEG", quality=95, subsampling=0),
        "422-q75": encode(Image.fromarray(a), "JPEG", quality=75, subsampling=1),
        "progressive": encode(Image.fromarray(a), "JPEG", quality=90, progressive=True),
        "gray": encode(Image.fromarray(photo(123, 77, 2, channels=1), "L"), "JPEG", quality=90),
        "cmyk": encode(Image.fromarray(a).convert("CMYK"), "JPEG", quality=90),
        "odd": encode(Image.fromarray(photo(33, 17, 5)), "JPEG", quality=85),
    }
    return out


@pytest.mark.parametrize("name", list(jpegs()))
def test_jpeg_equals_pil_full_and_draft(name):
    data = jpegs()[name]
    pil = Image.open(io.BytesIO(data))
    mode = "L" if pil.mode == "L" else "RGB"
    want = np.array(pil.convert(mode)).astype(int)
    ours = dlfs.decode_image(data, color="gray" if mode == "L" else "rgb").astype(int)
    assert ours.reshape(want.shape).shape == want.shape
    assert np.abs(ours.reshape(want.shape) - want).max() <= 1
    if pil.mode == "CMYK":
        return  # PIL's draft() does not reduce CMYK images
    w, h = pil.size
    for d in (2, 4, 8):
        im = Image.open(io.BytesIO(data))
        im.draft(mode, (w // d, h // d))
        want = np.array(im.convert(mode)).astype(int)
        ours = dlfs.decode_image(data, color="gray" if mode == "L" else "rgb",
                                 scale=d).astype(int)
        assert ours.shape[:2] == want.shape[:2], (d, ours.shape, want.shape)
        assert np.abs(ours.reshape(want.shape) - want).max() <= 1, d


# ---- geometry vs torchvision ---------------------------------------------------

def test_random_resized_crop_and_flip_equal_torchvision():
    rng = np.random.default_rng(0)
    for t in range(40):
        h, w = (int(v) for v in rng.integers(20, 320, 2))
        pil = Image.fromarray(photo(h, w, t))
        data = encode(pil, "PNG")
        size = int(rng.integers(8, 130))
        p = dlfs.ImagePipeline(size, crop="random-resized", flip=True, seed=t)
        plan = p.plan(w, h, epoch=1, index=t, format="png")
        i, j, hh, ww = plan["box"]
        want = F.resized_crop(pil, i, j, hh, ww, [size, size])
        if plan["flip"]:
            want = F.hflip(want)
        assert np.array_equal(p(data, 1, t), np.array(want)), (t, h, w, size, plan)


def test_resize_center_crop_equal_torchvision_uint8_and_float():
    rng = np.random.default_rng(1)
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    for t in range(30):
        h, w = (int(v) for v in rng.integers(16, 300, 2))
        pil = Image.fromarray(photo(h, w, 100 + t))
        data = encode(pil, "PNG")
        size = int(rng.integers(4, min(h, w) + 20))
        resize = size + int(rng.integers(0, 40))
        want = F.center_crop(F.resize(pil, [resize]), [size, size])
        p = dlfs.ImagePipeline(size, crop="center", resize=resize)
        assert np.array_equal(p(data), np.array(want)), (t, h, w, size, resize)
        pf = dlfs.ImagePipeline(size, crop="center", resize=resize, dtype="float32",
                                layout="NCHW", mean=mean, std=std)
        want_f = F.normalize(F.to_tensor(want), mean, std)
        got = torch.from_numpy(pf(data))
        assert got.shape == want_f.shape
        assert torch.equal(got, want_f), (got - want_f).abs().max()


@pytest.mark.parametrize("name", list(jpegs()))
def test_jpeg_crops_decode_only_the_region_and_equal_torchvision(name):
    # Crops are decoded with libjpeg's partial decoding (only the rows and
    # columns around the crop): the result must still be exactly
    # torchvision's on PIL's full decode.
    data = jpegs()[name]
    pil = Image.open(io.BytesIO(data))
    mode = "L" if pil.mode == "L" else "RGB"
    pil = pil.convert(mode)
    w, h = pil.size
    for size, crop in [(24, "random-resized"), (64, "random-resized"), (16, "center")]:
        p = dlfs.ImagePipeline(size, crop=crop, flip=True, dct_scaling=False,
                               color="gray" if mode == "L" else "rgb", resize=size + 7)
        for index in range(12):
            plan = p.plan(w, h, epoch=0, index=index)
            if crop == "center":
                want = F.center_crop(F.resize(pil, [size + 7]), [size, size])
            else:
                i, j, hh, ww = plan["box"]
                want = F.resized_crop(pil, i, j, hh, ww, [size, size])
            if plan["flip"]:
                want = F.hflip(want)
            got = p(data, 0, index)
            assert np.array_equal(got.reshape(np.array(want).shape), np.array(want)), \
                (name, size, crop, plan)


def test_jpeg_geometry_with_and_without_dct_scaling():
    a = photo(900, 1200, 7)
    data = encode(Image.fromarray(a), "JPEG", quality=90)
    pil = Image.open(io.BytesIO(data)).convert("RGB")
    want = np.array(F.center_crop(F.resize(pil, [224]), [224, 224])).astype(int)
    exact = dlfs.ImagePipeline(224, dct_scaling=False)
    assert np.abs(exact(data).astype(int) - want).max() <= 1
    scaled = dlfs.ImagePipeline(224)
    assert scaled.plan(1200, 900)["scale_denom"] == 4
    # Reduced-scale decoding changes the pixels a little, not the picture.
    diff = np.abs(scaled(data).astype(int) - want)
    assert diff.mean() < 2.0 and np.percentile(diff, 99) < 12, (diff.mean(), diff.max())


# ---- the random stream, re-derived from its specification ----------------------

M = (1 << 64) - 1


def _splitmix(x):
    z = (x + 0x9E3779B97F4A7C15) & M
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
    return z ^ (z >> 31)


class _Rng:
    def __init__(self, seed, epoch, index):
        h = _splitmix(seed ^ 0x6A09E667F3BCC909)
        h = _splitmix(h ^ epoch)
        h = _splitmix(h ^ index)
        self.s = []
        for _ in range(4):
            self.s.append(_splitmix(h))
            h = (h + 0x9E3779B97F4A7C15) & M

    def next(self):
        s = self.s
        rotl = lambda x, k: ((x << k) | (x >> (64 - k))) & M  # noqa: E731
        result = (rotl((s[1] * 5) & M, 7) * 9) & M
        t = (s[1] << 17) & M
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = rotl(s[3], 45)
        return result

    def uniform(self, a, b):
        return a + (b - a) * ((self.next() >> 11) * 2.0 ** -53)

    def below(self, bound):
        m = self.next() * bound
        if (m & M) < bound:
            threshold = ((1 << 64) - bound) % bound
            while (m & M) < threshold:
                m = self.next() * bound
        return m >> 64


def reference_choices(seed, epoch, index, width, height):
    rng = _Rng(seed, epoch, index)
    flip = bool(rng.next() >> 63)
    area = float(width) * height
    lo, hi = math.log(3 / 4), math.log(4 / 3)
    for _ in range(10):
        target = area * rng.uniform(0.08, 1.0)
        ar = math.exp(rng.uniform(lo, hi))
        w = int(round(math.sqrt(target * ar)))
        h = int(round(math.sqrt(target / ar)))
        if 0 < w <= width and 0 < h <= height:
            top = rng.below(height - h + 1)
            left = rng.below(width - w + 1)
            return (top, left, h, w), flip
    ratio = width / height
    w, h = width, height
    if ratio < 3 / 4:
        h = int(round(w / (3 / 4)))
    elif ratio > 4 / 3:
        w = int(round(h * (4 / 3)))
    return ((height - h) // 2, (width - w) // 2, h, w), flip


def test_random_choices_match_the_specification():
    for seed in (0, 7):
        p = dlfs.ImagePipeline(224, crop="random-resized", flip=True, seed=seed)
        for epoch in (0, 3):
            for index in range(0, 3000, 37):
                w, h = 100 + index % 400, 80 + (index * 7) % 500
                plan = p.plan(w, h, epoch=epoch, index=index)
                box, flip = reference_choices(seed, epoch, index, w, h)
                assert plan["box"] == box and plan["flip"] == flip, (seed, epoch, index)
    # Extreme aspect ratios exercise the central fallback.
    p = dlfs.ImagePipeline(8, crop="random-resized")
    for index in range(50):
        assert p.plan(2000, 3, index=index)["box"] == reference_choices(0, 0, index, 2000, 3)[0]


# ---- ImageLoader and VolumeDataset -----------------------------------------------

@pytest.fixture(scope="module")
def png_volume(tmp_path_factory, dlfs_bin):
    """120 PNG images of 3 classes, sizes varying; pixel (0, 0) holds the
    label in its red channel, so labels can be checked against images."""
    root = tmp_path_factory.mktemp("pngs") / "tree"
    rng = np.random.default_rng(5)
    for i in range(120):
        label = i % 3
        h, w = (int(v) for v in rng.integers(30, 90, 2))
        a = photo(h, w, i)
        a[:, :, 0] = label * 100  # a constant red plane: survives any crop
        p = root / f"class{label}" / f"{i:04d}.png"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(encode(Image.fromarray(a), "PNG"))
    vol = root.parent / "v.dlfs"
    subprocess.run([dlfs_bin, "pack", root, "-o", vol, "-q"], check=True)
    return str(vol)


def _epoch(loader):
    xs, ys, idx = [], [], []
    for x, y, i in loader:
        xs.append(x.clone())
        ys.append(y)
        idx.append(i)
    return torch.cat(xs), torch.cat(ys), torch.cat(idx)


def test_image_loader_deterministic_across_threads_every_sample_once(png_volume):
    runs = []
    for threads in (1, 2, 4):
        loader = dt.ImageLoader(png_volume, 16, size=24, crop="random-resized", flip=True,
                                dtype="float32", layout="NCHW", mean=[0.5] * 3, std=[0.5] * 3,
                                seed=4, decode_threads=threads, return_indices=True)
        assert len(loader) == 8 and loader.decode_threads == threads
        loader.set_epoch(3)
        x, y, idx = _epoch(loader)
        assert x.shape == (120, 3, 24, 24) and x.dtype == torch.float32
        assert sorted(idx.tolist()) == list(range(120))
        # Labels aligned with their images: red plane = label * 100.
        red = ((x[:, 0] * 0.5 + 0.5) * 255).round()
        assert torch.equal(red.amin(dim=(1, 2)), y.double().mul(100).float())
        runs.append((x, idx))
    for x, idx in runs[1:]:
        assert torch.equal(idx, runs[0][1]) and torch.equal(x, runs[0][0])
    # Another epoch: another order and other crops.
    loader.set_epoch(4)
    x4, _, idx4 = _epoch(loader)
    assert not torch.equal(idx4, runs[0][1])


def test_image_loader_matches_single_sample_pipeline_and_ranks(png_volume):
    vol = dlfs.Volume(png_volume)
    seen = []
    for rank in range(2):
        loader = dt.ImageLoader(png_volume, 10, size=20, crop="center", rank=rank, world_size=2,
                                seed=1, return_indices=True, color="rgb")
        loader.set_epoch(2)
        x, y, idx = _epoch(loader)
        assert x.shape == (60, 20, 20, 3) and x.dtype == torch.uint8
        p = dlfs.ImagePipeline(20, crop="center", seed=1)
        for k in range(0, 60, 7):
            i = int(idx[k])
            assert np.array_equal(x[k].numpy(), p(vol.read(i), 2, i))
            assert int(y[k]) == vol.label(i)
        seen += idx.tolist()
    assert sorted(seen) == list(range(120))


def test_image_loader_zero_copy_writable_tensors(png_volume):
    loader = dt.ImageLoader(png_volume, 32, size=16)
    images, labels = next(iter(loader))
    assert images.shape == (32, 16, 16, 3) and labels.dtype == torch.int64
    images[0].zero_()  # writable, in the loader's own buffer
    assert int(images[0].sum()) == 0
    # The tensor outlives the loader.
    del loader
    assert images.sum() > 0


def test_image_loader_rejects_bad_options(png_volume):
    with pytest.raises(ValueError, match="crop"):
        dt.ImageLoader(png_volume, 8, size=16, crop="middle")
    with pytest.raises(ValueError, match="mean and std need float32"):
        dt.ImageLoader(png_volume, 8, size=16, mean=[0.5])
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour' \(did you mean 'color'\?\)"):
        dt.ImageLoader(png_volume, 8, size=16, colour="rgb")


def test_volume_dataset_decode_with_workers(png_volume):
    decode = dict(size=20, crop="random-resized", flip=True, dtype="float32", layout="NCHW",
                  seed=9)
    ds = dt.VolumeDataset(png_volume, decode=decode)
    ds.set_epoch(5)
    dl = tud.DataLoader(ds, batch_size=16, num_workers=2, shuffle=False)
    xs = torch.cat([x for x, _ in dl])
    assert xs.shape == (120, 3, 20, 20)
    p = dlfs.ImagePipeline(**decode)
    vol = dlfs.Volume(png_volume)
    for i in (0, 17, 119):
        want = torch.from_numpy(p(vol.read(i), 5, i))
        assert torch.equal(xs[i], want)


@pytest.fixture
def bad_volume(tmp_path, dlfs_bin):
    root = tmp_path / "tree"
    a = photo(40, 50, 1)
    good = encode(Image.fromarray(a), "JPEG", quality=90)
    huge = bytearray(good)
    sof = huge.index(b"\xff\xc0")
    huge[sof + 5:sof + 9] = struct.pack(">HH", 60000, 60000)
    files = {"a/000.jpg": good, "a/001.jpg": good[: len(good) // 2], "a/002.jpg": bytes(huge),
             "a/003.jpg": b"GIF89a not a jpeg", "a/004.jpg": good}
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    vol = tmp_path / "bad.dlfs"
    subprocess.run([dlfs_bin, "pack", root, "-o", vol, "-q"], check=True)
    return str(vol)


def test_bad_samples_raise_naming_them_or_are_skipped(bad_volume):
    loader = dt.ImageLoader(bad_volume, 1, size=16, shuffle=False)
    it = iter(loader)
    assert next(it)[0].shape == (1, 16, 16, 3)
    with pytest.raises(ValueError) as e:
        next(it)
    msg = str(e.value)
    assert "bad.dlfs: sample 1 (a/001.jpg): JPEG: truncated" in msg, msg
    # Per sample, through VolumeDataset(decode=...): each problem named.
    ds = dt.VolumeDataset(bad_volume, decode=dict(size=16))
    assert ds[0][0].shape == (16, 16, 3)
    for i, words in [(1, "JPEG: truncated"), (2, "60000x60000 image has 3600000000 pixels"),
                     (3, "neither JPEG nor PNG")]:
        with pytest.raises(ValueError, match=words):
            ds[i]
    loader = dt.ImageLoader(bad_volume, 2, size=16, shuffle=False, skip_bad_samples=True,
                            return_indices=True)
    got = [i for _, _, idx in loader for i in idx.tolist()]
    assert got == [0, 4]
    stats = loader.stats()  # a method, as dlfs.Loader.stats() (issue 41)
    assert stats["skipped"] == 3 and stats["images"] == 2
    assert any("sample 2 (a/002.jpg)" in m for m in stats["skipped_examples"])
    assert type(stats) is dict
    # Read as an attribute, as before: the same numbers, for one release, with a warning.
    with pytest.warns(DeprecationWarning, match=r"call it \(loader.stats\(\)\)"):
        assert loader.stats["skipped"] == 3


# ---- CLI -------------------------------------------------------------------------

def test_cli_cat_decode_writes_png(run, png_volume, tmp_path):
    out = tmp_path / "x.png"
    run("cat", png_volume, "class1/0001.png", "--decode", "-o", out, check=0)
    vol = dlfs.Volume(png_volume)
    i = vol.lookup("class1/0001.png")
    assert np.array_equal(np.array(Image.open(out)), pil_rgb(vol.read(i)))
    out2 = tmp_path / "y.png"
    run("cat", png_volume, "class1/0001.png", "--decode", "--size", "24", "--crop",
        "random-resized", "--flip", "--epoch", "2", "--seed", "3", "-o", out2, check=0)
    p = dlfs.ImagePipeline(24, crop="random-resized", flip=True, seed=3)
    assert np.array_equal(np.array(Image.open(out2)), p(vol.read(i), 2, i))
    raw = run("cat", png_volume, "--index", "5", "--decode", "--size", "8", check=0).stdout
    assert len(raw) == 8 * 8 * 3


def test_cli_bench_decode(run, png_volume, bad_volume):
    import json
    r = json.loads(run("bench", png_volume, "--decode", "--size", "32", "--crop",
                       "random-resized", "--flip", "--dtype", "float32", "--layout", "NCHW",
                       "--decode-threads", "2", "--json", check=0).stdout)
    assert r["images"] == 120 and r["images_per_s"] > 0 and r["cpu_ms_per_image"] > 0
    assert r["decode_threads"] == 2 and r["channels"] == 3
    proc = run("bench", bad_volume, "--decode", "--size", "16", "--batch", "1", check=2)
    err = proc.stderr.decode()
    assert "bad.dlfs: sample " in err and any(f"(a/00{i}.jpg)" in err for i in (1, 2, 3)), err
    proc = run("bench", bad_volume, "--decode", "--size", "16", "--skip-bad", check=0)
    assert b"skipped      3 undecodable samples" in proc.stdout
    # An option of the decode stage without --decode is refused, not ignored.
    for option in (["--size", "16"], ["--dtype", "float32"], ["--skip-bad"], ["--flip"]):
        err = run("bench", png_volume, *option, check=2).stderr.decode()
        assert f"{option[0]} requires --decode" in err, err
    err = run("bench", png_volume, "--window", "4", check=2).stderr.decode()
    assert "--window and --read-ahead need --shard-local or --cluster-cache" in err, err
    err = run("cat", png_volume, "--index", "0", "--flip", check=2).stderr.decode()
    assert "--flip requires --decode" in err, err
    err = run("cat", png_volume, "--index", "0", "--decode", "--seed", "3", check=2).stderr.decode()
    assert "--seed requires --size" in err, err
