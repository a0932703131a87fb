"""Images for the decode and image-preparation tests (test_decode.py,
test_image_prep.py, and the mixtures' in test_mixture.py and test_s3.py):
photograph-like pixels, flat ones, and their encodings. Shared so
that both test the same inputs' bytes (a fixture copied per file drifts),
as tests/image_fixtures.h is for the C++ tests."""
import io
import struct
import zlib

import numpy as np


def _photo(h, w, seed, channels, texture):
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    img = np.stack([x / w * 200 + 30, y / h * 180 + 40, (x + y) / (w + h) * 150 + 60], -1)
    if texture:
        img += 25 * np.sin(x / 3.0 + y / 5.0)[..., None]
    shapes, smallest, noise = (5, 3, 5) if texture else (4, 5, 4)
    for _ in range(shapes):
        cy, cx = rng.integers(0, h), rng.integers(0, w)
        r = rng.integers(smallest, max(smallest + 1, min(h, w) // 3))
        img[(y - cy) ** 2 + (x - cx) ** 2 < r * r] = rng.integers(0, 255, 3)
    img += rng.normal(0, noise, img.shape)
    img = np.clip(img, 0, 255).astype(np.uint8)
    return img[..., 0] if channels == 1 else img


def photo(h, w, seed, channels=3):
    """Photograph-like pixels (h, w[, 3]) uint8: gradients, a few shapes,
    mild noise. A pure function of its arguments."""
    return _photo(h, w, seed, channels, texture=False)


def textured_photo(h, w, seed, channels=3):
    """As photo, with a fine texture and more noise: a resize has detail to
    lose and a re-encode something to cost. A pure function of its arguments."""
    return _photo(h, w, seed, channels, texture=True)


def encode(pil, fmt, **kw):
    """The bytes of PIL image `pil` saved as `fmt` (PIL's save options in kw)."""
    buf = io.BytesIO()
    pil.save(buf, fmt, **kw)
    return buf.getvalue()


def png_raw(rows, width, color_type, bit_depth):
    """A PNG written by hand (PIL cannot write 16-bit RGB or 2/4-bit gray):
    `rows` holds each row's packed, big-endian bytes, shape (h, row_bytes)."""
    raw = b"".join(b"\x00" + r.tobytes() for r in rows)

    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))

    ihdr = struct.pack(">IIBBBBB", width, len(rows), bit_depth, color_type, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw))
            + chunk(b"IEND", b""))


def flat_png(value):
    """An 8x8 gray PNG of one value."""
    import dlfs
    return dlfs.encode_png(np.full((8, 8), value, np.uint8))


def flat_png_volume(path, n, value):
    """Writes a volume of `n` flat_png(value) samples (c/000.png, ...) at
    `path`: a mixture's tests tell a sample's volume by its pixels."""
    import dlfs
    with dlfs.Writer(path) as w:
        for i in range(n):
            w.add(f"c/{i:03d}.png", flat_png(value))
    return path
