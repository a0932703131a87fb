"""Pack-time image preparation (dlfs/image_prep.h, docs/format.md §4.9)
against PIL and torchvision, through dlfs.prepare_image, dlfs.Writer,
dlfs.pack and `dlfs pack`/`dlfs info`.

Tolerances, as measured and asserted here:
- Resize: exactly PIL's Image.resize((w, h), filter) for every filter
  (bilinear, bicubic, lanczos, box, hamming) from PNG sources: the same
  fixed-point arithmetic. From JPEG sources within 1 per channel, which is
  the decode's tolerance (PIL's and TurboJPEG's decoders may differ by 1).
- Geometry: torchvision's Resize(size=None, max_size=N) (>= 0.16; computed
  here as it does), never enlarging.
- Conversion to RGB: exactly PIL's convert("RGB") for palette, gray, 1-bit,
  gray+alpha, RGBA, 16-bit gray (clipped, as PIL) and 16-bit RGB PNGs;
  within 1 for CMYK and gray JPEGs (decode tolerance). EXIF orientation is
  not applied, as torchvision's ImageFolder loader does not apply it.
- Raw samples through ImageLoader: exactly the tensors of the same pixels
  stored as PNG (flips, crops and resizes included).
"""
import io
import json
import struct
import tarfile

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="python3-torch not installed")
Image = pytest.importorskip("PIL.Image", reason="python3-pil not installed")
ImageOps = pytest.importorskip("PIL.ImageOps", reason="python3-pil not installed")
F = pytest.importorskip("torchvision.transforms.functional", reason="torchvision not installed")
dlfs = pytest.importorskip("dlfs", reason="Python module not built")
import dlfs.torch as dt  # noqa: E402
from image_fixtures import encode, png_raw, textured_photo as photo  # noqa: E402

FILTERS = {"bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC, "lanczos": Image.LANCZOS,
           "box": Image.BOX, "hamming": Image.HAMMING}


def pil_rgb(data):
    return Image.open(io.BytesIO(data)).convert("RGB")


def target_size(w, h, n):
    """torchvision >= 0.16 Resize(size=None, max_size=n) without enlarging."""
    if max(w, h) <= n:
        return w, h
    short, long = min(w, h), max(w, h)
    new_short = max(1, int(n * short / long))
    return (n, new_short) if w >= h else (new_short, n)


def raw_pixels(data):
    """The pixels of raw image bytes (docs/format.md §4.9.3), parsed here."""
    assert data[:4] == b"\x89RAW" and data[4] == 1
    c, h, w = data[5], *struct.unpack("<II", data[8:16])
    assert len(data) == 16 + h * w * c
    return np.frombuffer(data[16:], np.uint8).reshape(h, w, c)


# ---- one image ------------------------------------------------------------------

@pytest.mark.parametrize("size", [(211, 301), (301, 211), (64, 640), (97, 97)])
@pytest.mark.parametrize("filt", list(FILTERS))
def test_resize_equals_pil_for_every_filter(size, filt):
    h, w = size
    src = encode(Image.fromarray(photo(h, w, h + w)), "PNG")
    r = dlfs.prepare_image(src, max_side=80, resize_filter=filt, image_format="raw")
    tw, th = target_size(w, h, 80)
    assert (r["width"], r["height"]) == (tw, th) and r["resized"] and r["stored"] == "raw"
    assert r["original"] == {"format": "png", "width": w, "height": h, "channels": 3}
    want = np.array(pil_rgb(src).resize((tw, th), FILTERS[filt]))
    assert np.array_equal(raw_pixels(r["data"]), want)
    if filt == "bilinear":  # torchvision's Resize on a PIL image is PIL's bilinear resize
        assert np.array_equal(want, np.array(F.resize(pil_rgb(src), [th, tw])))


def test_resize_from_jpeg_within_one_of_pil_and_never_enlarges():
    src = encode(Image.fromarray(photo(333, 500, 1)), "JPEG", quality=90)
    r = dlfs.prepare_image(src, max_side=256, image_format="raw")
    want = np.array(pil_rgb(src).resize((256, 170), Image.BILINEAR)).astype(int)
    got = raw_pixels(r["data"]).astype(int)
    assert got.shape == want.shape and np.abs(got - want).max() <= 1
    small = dlfs.prepare_image(src, max_side=1000, image_format="raw")
    assert not small["resized"] and (small["width"], small["height"]) == (500, 333)
    assert np.abs(raw_pixels(small["data"]).astype(int) - np.array(pil_rgb(src))).max() <= 1


def sources():
    a = photo(45, 67, 3)
    g16 = (a[..., 0].astype(np.uint16) * 3 + a[..., 1]).astype(np.uint16)  # above 255 too
    rgb16 = np.random.default_rng(2).integers(0, 65536, (13, 21 * 3), dtype=np.uint16)
    return {
        "P": encode(Image.fromarray(a).convert("P", palette=Image.ADAPTIVE), "PNG"),
        "P-trns": encode(Image.fromarray(a).convert("P", palette=Image.ADAPTIVE, colors=40),
                         "PNG", transparency=3),
        "L": encode(Image.fromarray(a).convert("L"), "PNG"),
        "1": encode(Image.fromarray(a).convert("1"), "PNG"),
        "LA": encode(Image.fromarray(a).convert("LA"), "PNG"),
        "RGBA": encode(Image.fromarray(np.concatenate([a, a[..., :1]], -1), "RGBA"), "PNG"),
        "I;16": encode(Image.fromarray(g16, "I;16"), "PNG"),
        "RGB;16": png_raw(rgb16.astype(">u2").view(np.uint8).reshape(13, -1), 21, 2, 16),
        "CMYK-jpeg": encode(Image.fromarray(a).convert("CMYK"), "JPEG", quality=92),
        "L-jpeg": encode(Image.fromarray(a).convert("L"), "JPEG", quality=92),
    }


@pytest.mark.parametrize("name", list(sources()))
def test_conversion_to_rgb_equals_pil_convert(name):
    src = sources()[name]
    want = np.array(pil_rgb(src)).astype(int)
    got = raw_pixels(dlfs.prepare_image(src, image_format="raw")["data"]).astype(int)
    assert got.shape == want.shape
    tolerance = 1 if name.endswith("jpeg") else 0
    assert np.abs(got - want).max() <= tolerance, name
    if name == "I;16":  # PIL clips 16-bit gray at 255: not the high byte
        assert (want == 255).mean() > 0.5
    # Gray output is PIL's convert("L").
    want_l = np.array(Image.open(io.BytesIO(src)).convert("L")).astype(int)
    got_l = raw_pixels(dlfs.prepare_image(src, image_format="raw", image_color="gray")["data"])
    assert np.abs(got_l[..., 0].astype(int) - want_l).max() <= tolerance


def test_exif_orientation_is_not_applied_as_imagefolder():
    a = photo(40, 90, 4)
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise to display
    src = encode(Image.fromarray(a), "JPEG", quality=95, exif=exif.tobytes())
    assert Image.open(io.BytesIO(src)).getexif()[0x0112] == 6
    got = raw_pixels(dlfs.prepare_image(src, image_format="raw")["data"]).astype(int)
    imagefolder = np.array(pil_rgb(src)).astype(int)  # torchvision's pil_loader
    assert got.shape == imagefolder.shape == (40, 90, 3)
    assert np.abs(got - imagefolder).max() <= 1
    assert ImageOps.exif_transpose(Image.open(io.BytesIO(src))).size == (40, 90)  # would rotate


def psnr(a, b):
    mse = np.mean((a.astype(float) - b.astype(float)) ** 2)
    return 10 * np.log10(255 ** 2 / mse)


def test_reencode_quality_and_the_keep_rule():
    pixels = photo(240, 320, 5)
    q98 = encode(Image.fromarray(pixels), "JPEG", quality=98)
    previous = 0
    for q in (50, 75, 90):
        r = dlfs.prepare_image(q98, jpeg_quality=q)
        assert r["changed"] and r["stored"] == "jpeg" and len(r["data"]) < len(q98)
        # Byte for byte what PIL's save(quality=q) writes from the same
        # decoded pixels: the same libjpeg-turbo, standard tables, 4:2:0,
        # accurate integer DCT, a JFIF header.
        assert r["data"] == encode(pil_rgb(q98), "JPEG", quality=q)
        quality = psnr(np.array(pil_rgb(r["data"])), pixels)
        assert 30 < quality and previous < quality  # dB against the original pixels
        previous = quality
    # Re-encoding a q=60 file at 90 would grow it: the original is kept.
    q60 = encode(Image.fromarray(pixels), "JPEG", quality=60)
    kept = dlfs.prepare_image(q60, jpeg_quality=90)
    assert not kept["changed"] and kept["data"] == q60
    forced = dlfs.prepare_image(q60, jpeg_quality=90, always_reencode=True)
    assert forced["changed"] and len(forced["data"]) > len(q60)
    # Without a quality nothing changes a JPEG that fits.
    assert not dlfs.prepare_image(q98, max_side=320)["changed"]


def test_bad_images_and_options_raise():
    with pytest.raises(ValueError, match="not a JPEG or PNG"):
        dlfs.prepare_image(encode(Image.fromarray(photo(8, 8, 1)), "BMP"), image_format="raw")
    with pytest.raises(ValueError, match="JPEG"):
        dlfs.prepare_image(encode(Image.fromarray(photo(32, 32, 1)), "JPEG")[:300],
                           image_format="raw")
    for kw in (dict(jpeg_quality=0), dict(jpeg_quality=101), dict(max_side=0),
               dict(image_format="webp"), dict(resize_filter="nearest"),
               dict(jpeg_probability=2.0), dict(image_color="cmyk")):
        with pytest.raises(ValueError):
            dlfs.prepare_image(encode(Image.fromarray(photo(8, 8, 1)), "PNG"), **kw)


# ---- volumes -----------------------------------------------------------------------

def image_tree(root, n=24):
    """An ImageFolder tree of JPEGs and PNGs, some larger than 64 px."""
    files = {}
    for i in range(n):
        h, w = 30 + (i * 37) % 120, 25 + (i * 53) % 140
        pil = Image.fromarray(photo(h, w, i, channels=1 if i % 5 == 4 else 3))
        data = encode(pil, "PNG") if i % 3 == 0 else encode(pil, "JPEG", quality=92)
        rel = f"{'abc'[i % 3]}/{i:03d}.{'png' if i % 3 == 0 else 'jpg'}"
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
        files[rel] = data
    return files


def stable_bytes(path):
    """A volume's bytes without its uuid, creation time and superblock CRCs."""
    b = bytearray(open(path, "rb").read())
    for sb in (0, len(b) - 4096):
        b[sb + 16:sb + 32] = bytes(16)
        b[sb + 48:sb + 56] = bytes(8)
        b[sb + 4092:sb + 4096] = bytes(4)
    return bytes(b)


def test_writer_and_pack_give_the_same_volume(run, tmp_path):
    root = tmp_path / "tree"
    files = image_tree(root)
    opts = ["--max-side", "64", "--image-format", "smart", "--smart-threshold", "6000",
            "--jpeg-quality", "85"]
    run("pack", root, "-o", tmp_path / "cli.dlfs", "-q", *opts, check=0)
    dlfs.pack(root, tmp_path / "py.dlfs", max_side=64, image_format="smart",
              smart_threshold=6000, jpeg_quality=85, prepare_threads=1)
    # The Writer gets the files in ImageFolder's order with its labels.
    with dlfs.Writer(tmp_path / "w.dlfs", class_names=["a", "b", "c"], max_side=64,
                     image_format="smart", smart_threshold=6000, jpeg_quality=85,
                     prepare_threads=3) as w:
        for rel in sorted(files):
            w.add(rel, files[rel], label=rel[0])
    cli = stable_bytes(tmp_path / "cli.dlfs")
    assert cli == stable_bytes(tmp_path / "py.dlfs")
    assert cli == stable_bytes(tmp_path / "w.dlfs")
    info = dlfs.Volume(str(tmp_path / "w.dlfs")).info()["images"]
    assert info["stored"]["raw"] > 0 and info["stored"]["jpeg"] > 0


def test_provenance_in_info(run, tmp_path):
    root = tmp_path / "tree"
    files = image_tree(root)
    vol = tmp_path / "v.dlfs"
    out = run("pack", root, "-o", vol, "--max-side", "64", "--image-format", "raw",
              "--resize-filter", "bicubic", check=0).stdout.decode()
    assert "prepared 24 images (max side 64 (bicubic), raw pixels, RGB)" in out
    text = run("info", vol, check=0).stdout.decode()
    assert "images (compat)" in text
    assert "images       prepared: max side 64 (bicubic), raw pixels, RGB" in text
    doc = json.loads(run("info", "--json", vol, check=0).stdout)
    assert doc == dlfs.Volume(str(vol)).info()  # one document for both
    images = doc["images"]
    assert doc["compat_flags"] == ["images"]
    assert images["max_side"] == 64 and images["filter"] == "bicubic" and images["mode"] == "raw"
    assert images["images"] == images["changed"] == images["stored"]["raw"] == 24
    sizes = {rel: Image.open(io.BytesIO(d)).size for rel, d in files.items()}
    assert images["resized"] == sum(max(s) > 64 for s in sizes.values())
    assert images["largest_original_side"] == max(max(s) for s in sizes.values())
    # Per sample, `dlfs ls --json` gives what it holds now and the original's size.
    rows = [json.loads(l) for l in run("ls", "-r", "--json", vol, check=0).stdout.splitlines()]
    assert len(rows) == 24
    for row in rows:
        w, h = sizes[row["path"]]
        assert row["prepared"] == [{"field": "", "stored": "raw", "resized": max(w, h) > 64,
                                    "width": w, "height": h}]
    # Every sample is raw, at most 64 px, PIL's resize of the original.
    v = dlfs.Volume(str(vol))
    for i in range(len(v)):
        data, _ = v[i]
        src = files[v.path(i)]
        w, h = sizes[v.path(i)]
        tw, th = target_size(w, h, 64)
        got = raw_pixels(data).astype(int)
        want = np.array(pil_rgb(src).resize((tw, th), Image.BICUBIC)).astype(int)
        assert got.shape == want.shape
        assert np.abs(got - want).max() <= (0 if v.path(i).endswith("png") else 1)
    # An unprepared volume has neither.
    run("pack", root, "-o", tmp_path / "plain.dlfs", "-q", check=0)
    plain = json.loads(run("info", "--json", tmp_path / "plain.dlfs", check=0).stdout)
    assert plain["images"] is None and plain["compat_flags"] == []


def test_raw_volume_gives_the_png_volumes_tensors(tmp_path):
    rng = np.random.default_rng(9)
    arrays = [photo(int(rng.integers(40, 90)), int(rng.integers(40, 90)), k) for k in range(20)]
    with dlfs.Writer(tmp_path / "png.dlfs") as w:
        for k, a in enumerate(arrays):
            w.add(f"{k:02d}", encode(Image.fromarray(a), "PNG"), label=k % 2)
    with dlfs.Writer(tmp_path / "raw.dlfs", image_format="raw") as w:
        for k, a in enumerate(arrays):
            w.add(f"{k:02d}", encode(Image.fromarray(a), "PNG"), label=k % 2)
    for kw in (dict(crop="random-resized", flip=True), dict(crop="center", resize=48)):
        outs = []
        for name in ("png", "raw"):
            loader = dt.ImageLoader(str(tmp_path / f"{name}.dlfs"), 5, size=32, seed=3,
                                    dtype="float32", layout="NCHW", mean=[0.5], std=[0.25],
                                    decode_threads=2, **kw)
            loader.set_epoch(1)
            outs.append([(x.clone(), y.clone()) for x, y in loader])
        for (xa, ya), (xb, yb) in zip(*outs):
            assert torch.equal(xa, xb) and torch.equal(ya, yb)
    v = dlfs.Volume(str(tmp_path / "raw.dlfs"))
    for k, a in enumerate(arrays):
        assert np.array_equal(dlfs.decode_image(v[k][0]), a)


def test_pack_refusals_and_unreadable_images(run, tmp_path):
    root = tmp_path / "tree"
    image_tree(root, n=6)
    (root / "a" / "broken.jpg").write_bytes(encode(Image.fromarray(photo(40, 40, 1)), "JPEG")[:200])
    (root / "b" / "bitmap.bmp").write_bytes(encode(Image.fromarray(photo(20, 20, 1)), "BMP"))
    proc = run("pack", root, "-o", tmp_path / "v.dlfs", "--image-format", "raw", check=2)
    err = proc.stderr.decode()
    assert "a/broken.jpg" in err and "--skip-unreadable" in err, err
    assert not (tmp_path / "v.dlfs").exists()
    out = run("pack", root, "-o", tmp_path / "v.dlfs", "--image-format", "raw",
              "--skip-unreadable", check=0).stdout.decode()
    assert "skipped 2 unreadable sources" in out and "bitmap.bmp" in out
    assert len(dlfs.Volume(str(tmp_path / "v.dlfs"))) == 6
    stats = dlfs.pack(root, tmp_path / "w.dlfs", image_format="raw", skip_unreadable=True)
    assert stats["skipped"] == 2 and stats["images"]["as_raw"] == 6
    # The Writer: an image that cannot be prepared is named by a later call.
    with pytest.raises(ValueError, match="sample 'x/broken.jpg'.*skip_unreadable=True"):
        with dlfs.Writer(tmp_path / "x.dlfs", image_format="raw") as w:
            w.add("x/broken.jpg", (root / "a" / "broken.jpg").read_bytes())
    assert not (tmp_path / "x.dlfs").exists()
    # Sources that hold no encoded images.
    idx = tmp_path / "idx"
    idx.mkdir()
    (idx / "train-images-idx3-ubyte").write_bytes(struct.pack(">IIII", 2051, 1, 2, 2) + bytes(4))
    (idx / "train-labels-idx1-ubyte").write_bytes(struct.pack(">II", 2049, 1) + bytes(1))
    err = run("pack", idx, "-o", tmp_path / "i.dlfs", "--max-side", "8", check=2).stderr
    assert b"IDX images are raw pixels already" in err
    for flag in (["--jpeg-quality", "0"], ["--jpeg-quality", "101"], ["--max-side", "0"],
                 ["--image-format", "webp"], ["--resize-filter", "nearest"]):
        run("pack", root, "-o", tmp_path / "z.dlfs", *flag, check=2)


def test_tar_image_fields_are_prepared_and_others_kept(run, tmp_path):
    shards = tmp_path / "shards"
    shards.mkdir()
    with tarfile.open(shards / "a.tar", "w") as tar:
        for k in range(8):
            for field, data in {"jpg": encode(Image.fromarray(photo(70, 90, k)), "JPEG"),
                                "cls": str(k % 2).encode(),
                                "seg.png": encode(Image.fromarray(photo(70, 90, k, 1)), "PNG")
                                }.items():
                ti = tarfile.TarInfo(f"{k:04d}.{field}")
                ti.size = len(data)
                tar.addfile(ti, io.BytesIO(data))
    vol = tmp_path / "t.dlfs"
    run("pack", shards, "-o", vol, "--max-side", "45", "--image-format", "raw", check=0)
    v = dlfs.Volume(str(vol))
    assert v.fields == ["cls", "jpg", "seg.png"]
    assert v.info()["images"]["images"] == 8  # only the jpg fields
    for i in range(len(v)):
        f = v.read_fields(i)
        assert raw_pixels(f["jpg"]).shape == (35, 45, 3)
        assert f["seg.png"][:4] == b"\x89PNG" and Image.open(io.BytesIO(f["seg.png"])).size == (90, 70)
        assert v.label(i) == int(f["cls"])
    # The decode stage reads the raw jpg field as it reads JPEGs.
    x, _ = next(iter(dt.ImageLoader(str(vol), 8, size=16, field="jpg", shuffle=False)))
    assert x.shape == (8, 16, 16, 3)
