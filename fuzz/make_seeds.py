#!/usr/bin/python3
"""Writes the seed corpora of the fuzz harnesses (fuzz/*_fuzzer.cc).

  fuzz/make_seeds.py OUT_DIR DLFS_BIN

OUT_DIR/<harness>/ gets a few small valid inputs each (volumes packed by
DLFS_BIN, LMDB files written with python3-lmdb, IDX pairs, tar shards with
labels, hard links and special members, JPEGs and PNGs of every kind the
decoder handles and their truncations), plus the committed regression
inputs of fuzz/regressions/<harness>/ and tests/data/hostile/. Nothing is
random: the same inputs every run.
"""
import gzip
import io
import math
import os
import pathlib
import shutil
import struct
import subprocess
import sys
import tarfile
import tempfile
import zlib

import lmdb
from PIL import Image

REPO = pathlib.Path(__file__).resolve().parents[1]
HARNESSES = ["volume_file", "volume_metadata", "volume_resealed", "volume_compact", "lmdb", "idx",
             "tar", "decode", "prepare"]


def write(out, harness, name, data):
    (out / harness).mkdir(parents=True, exist_ok=True)
    (out / harness / name).write_bytes(data)


def pack(dlfs, tmp, files, *args):
    src = tmp / "src"
    shutil.rmtree(src, ignore_errors=True)
    for rel, data in files.items():
        p = src / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    vol = tmp / "v.dlfs"
    if vol.exists():
        vol.unlink()
    # --all-files: the seeds' samples are not images, which ImageFolder would skip.
    subprocess.run([dlfs, "pack", str(src), "-o", str(vol), "-q", "--all-files", *args],
                   check=True, capture_output=True)
    return vol.read_bytes()


def metadata_input(volume, reseal):
    """Flag byte, the superblock, then the directory region it names."""
    sb = volume[:4096]
    region_count = struct.unpack_from("<I", sb, 100)[0]
    for r in range(min(region_count, 16)):
        kind, _target, offset, length = struct.unpack_from("<IIQQ", sb, 128 + 32 * r)
        if kind == 2:
            return bytes([1 if reseal else 0]) + sb + volume[offset:offset + length]
    raise SystemExit("no directory region in a packed volume")


def volumes(out, dlfs, tmp):
    sets = {
        "classes": ({"cat/1.png": b"cat one", "cat/2.png": b"cat two", "dog/x/3.png": b"dog",
                     "root.txt": b"no label"}, []),
        "empty-sample": ({"a/empty": b"", "a/b": b"b"}, []),
        "aligned": ({"k/%02d" % i: bytes([i]) * (i * 7) for i in range(6)}, ["--align", "512"]),
        "flat": ({"%03d" % i: b"x" * i for i in range(20)}, []),
    }
    for name, (files, args) in sets.items():
        vol = pack(dlfs, tmp, files, "--layout", "tree", *args)
        write(out, "volume_file", name, vol)
        write(out, "volume_resealed", name, vol)
        write(out, "volume_metadata", name + "-sealed", metadata_input(vol, False))
        write(out, "volume_metadata", name + "-reseal", metadata_input(vol, True))
        # Format v3 (docs/format.md §10): the compact directory.
        compact = pack(dlfs, tmp, files, "--layout", "compact", *args)
        write(out, "volume_file", name + "-v3", compact)
        write(out, "volume_compact", name, compact)
    # Two blocks of samples (1,024 per block); names out of byte order (the
    # importer adds class "c" before "c-x", whose paths sort first).
    many = {"%s/%04d" % (("c", "c-x")[i % 2], i): bytes([i % 251]) for i in range(1100)}
    write(out, "volume_compact", "two-blocks", pack(dlfs, tmp, many, "--layout", "compact"))


def datum(label, data, channels=3, height=2, width=2, encoded=False):
    def varint(v):
        b = bytearray()
        while True:
            byte = v & 0x7F
            v >>= 7
            b.append(byte | (0x80 if v else 0))
            if not v:
                return bytes(b)

    def field(num, wire):
        return varint(num << 3 | wire)

    m = field(1, 0) + varint(channels) + field(2, 0) + varint(height) + field(3, 0) + varint(width)
    m += field(4, 2) + varint(len(data)) + data + field(5, 0) + varint(label)
    if encoded:
        m += field(7, 0) + varint(1)
    return m


def lmdbs(out, tmp):
    cases = {
        "datums": [(b"%08d_img.jpg" % i, datum(i % 10, bytes([i]) * 12)) for i in range(40)],
        "overflow": [(b"big%d" % i, datum(1, b"j" * (5000 + i), encoded=True)) for i in range(3)],
        "plain-keys": [(b"key%03d" % i, b"value %d" % i) for i in range(300)],
        "empty": [],
    }
    for name, records in cases.items():
        d = tmp / ("lmdb-" + name)
        shutil.rmtree(d, ignore_errors=True)
        env = lmdb.open(str(d), map_size=1 << 24)
        with env.begin(write=True) as txn:
            for k, v in records:
                txn.put(k, v)
        env.close()
        data = (d / "data.mdb").read_bytes()
        page = struct.unpack_from("<I", data, 16 + 24)[0]
        newer = max((0, page), key=lambda m: struct.unpack_from("<Q", data, m + 16 + 128)[0])
        last = struct.unpack_from("<Q", data, newer + 16 + 120)[0]
        write(out, "lmdb", name, data[:(last + 1) * page])
    write(out, "lmdb", "datum", datum(7, b"abcdef"))


def idx_input(images, labels, flags=0):
    return bytes([flags]) + struct.pack("<H", len(labels)) + labels + images


def idxs(out):
    def pair(n, rows, cols):
        images = struct.pack(">IIII", 0x803, n, rows, cols) + bytes(
            (i * 7 + j) & 0xFF for i in range(n) for j in range(rows * cols))
        labels = struct.pack(">II", 0x801, n) + bytes(i % 10 for i in range(n))
        return images, labels

    images, labels = pair(5, 3, 4)
    write(out, "idx", "plain", idx_input(images, labels))
    write(out, "idx", "gzip", idx_input(gzip.compress(images, mtime=0),
                                        gzip.compress(labels, mtime=0), 3))
    write(out, "idx", "gzip-in-harness", idx_input(images, labels, 4))
    images, labels = pair(1, 28, 28)
    write(out, "idx", "mnist-one", idx_input(images, labels))


def tar_bytes(members, fmt=tarfile.GNU_FORMAT, mode="w"):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode, format=fmt) as t:
        for m in members:
            name, data = m[0], m[1]
            info = tarfile.TarInfo(name)
            info.mtime = 0
            kind = m[2] if len(m) > 2 else tarfile.REGTYPE
            info.type = kind
            if kind in (tarfile.LNKTYPE, tarfile.SYMTYPE):
                info.linkname = m[3]
            if kind == tarfile.REGTYPE:
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
            else:
                t.addfile(info)
    return buf.getvalue()


def tars(out):
    wds = [("s/000.cls", b"3\n"), ("s/000.jpg", b"jpeg-0"), ("s/001.jpg", b"jpeg-1"),
           ("s/001.cls", b" 7 "), ("s/001.json", b"{}"), ("s/002.seg.png", b"png")]
    write(out, "tar", "webdataset", tar_bytes(wds))
    write(out, "tar", "pax", tar_bytes(wds, tarfile.PAX_FORMAT))
    write(out, "tar", "ustar-gz", gzip.compress(tar_bytes(wds, tarfile.USTAR_FORMAT), mtime=0))
    write(out, "tar", "links", tar_bytes([
        ("d", b"", tarfile.DIRTYPE),
        ("d/a.jpg", b"bytes of a"), ("d/a.cls", b"5"),
        ("d/b.jpg", b"", tarfile.LNKTYPE, "d/a.jpg"),
        ("d/b.cls", b"", tarfile.LNKTYPE, "d/a.cls"),
        ("d/c.jpg", b"", tarfile.LNKTYPE, "d/b.jpg"),
        ("d/l.jpg", b"", tarfile.SYMTYPE, "a.jpg"),
        ("d/p.fifo", b"", tarfile.FIFOTYPE),
    ]))
    write(out, "tar", "big-member", tar_bytes([("x/0.bin", bytes(range(256)) * 40)]))


# ---- decode: JPEGs, PNGs and raw pixels behind the harness's option bytes ----

def gradient(width, height, mode):
    """A smooth image with some detail, in a PIL mode (L, RGB, RGBA, LA, CMYK)."""
    bands = len(mode)
    img = Image.new(mode, (width, height))
    img.putdata([tuple((x * 255 // max(width - 1, 1) + y * 97 // max(height - 1, 1) + 60 * b
                        + ((x * y) % 7) * 5) % 256 for b in range(bands))
                 if bands > 1 else (x * 255 // max(width - 1, 1) + y * 53 + (x ^ y) % 9) % 256
                 for y in range(height) for x in range(width)])
    return img


def pil_bytes(img, fmt, **kw):
    buf = io.BytesIO()
    img.save(buf, fmt, **kw)
    return buf.getvalue()


# A baseline JPEG encoder, for what PIL 9 cannot write: restart markers
# (DRI + RSTn every `restart` MCUs). Huffman tables of equal code lengths
# (every symbol a code, so no optimisation is needed), YCbCr 4:4:4 or 4:2:0.
def zigzag():
    order = []
    for s in range(15):
        cells = [(r, s - r) for r in range(max(0, s - 7), min(s, 7) + 1)]
        order += cells if s % 2 else cells[::-1]
    return order


ZIGZAG = zigzag()
COS = [[math.cos((2 * x + 1) * u * math.pi / 16) for x in range(8)] for u in range(8)]
QUANT = [[2 + (r + c) * 2 for c in range(8)] for r in range(8)]
DC_SYMBOLS = list(range(12))  # all 4 bits long
AC_SYMBOLS = [0x00, 0xF0] + [r << 4 | s for r in range(16) for s in range(1, 11)]  # all 8 bits


def dht(cls, ident, symbols, length):
    counts = [0] * 16
    counts[length - 1] = len(symbols)
    body = bytes([cls << 4 | ident]) + bytes(counts) + bytes(symbols)
    return b"\xff\xc4" + struct.pack(">H", len(body) + 2) + body


class BitWriter:
    def __init__(self):
        self.out, self.acc, self.n = bytearray(), 0, 0

    def put(self, value, bits):
        for i in range(bits - 1, -1, -1):
            self.acc = self.acc << 1 | (value >> i & 1)
            self.n += 1
            if self.n == 8:
                self.out.append(self.acc)
                if self.acc == 0xFF:
                    self.out.append(0)  # byte stuffing
                self.acc, self.n = 0, 0

    def flush(self):  # pad with ones to a byte boundary
        if self.n:
            self.put((1 << (8 - self.n)) - 1, 8 - self.n)


def encode_block(bw, block, pred):
    coef = {}
    for u in range(8):
        for v in range(8):
            cu, cv = (math.sqrt(0.5) if u == 0 else 1), (math.sqrt(0.5) if v == 0 else 1)
            f = sum(block[y][x] * COS[v][x] * COS[u][y] for y in range(8) for x in range(8))
            coef[(u, v)] = round(0.25 * cu * cv * f / QUANT[u][v])
    zz = [coef[rc] for rc in ZIGZAG]

    def magnitude(v):
        s = abs(v).bit_length()
        return s, (v if v >= 0 else v + (1 << s) - 1)

    s, bits = magnitude(zz[0] - pred)
    bw.put(DC_SYMBOLS.index(s), 4)
    bw.put(bits, s)
    run = 0
    for v in zz[1:]:
        if v == 0:
            run += 1
            continue
        while run > 15:
            bw.put(AC_SYMBOLS.index(0xF0), 8)
            run -= 16
        s, bits = magnitude(v)
        bw.put(AC_SYMBOLS.index(run << 4 | s), 8)
        bw.put(bits, s)
        run = 0
    if run:
        bw.put(AC_SYMBOLS.index(0x00), 8)
    return zz[0]


def jpeg_with_restarts(img, restart, subsample=False):
    """img: PIL L or RGB. Every `restart` MCUs a restart marker."""
    gray = img.mode == "L"
    w, h = img.size
    planes = [img] if gray else list(img.convert("YCbCr").split())
    hs = 2 if subsample and not gray else 1
    mcu = 8 * hs
    comps = [(1, hs, hs, 0)] + ([] if gray else [(2, 1, 1, 1), (3, 1, 1, 1)])
    q = bytes(QUANT[r][c] for r, c in ZIGZAG)
    head = b"\xff\xd8" + b"\xff\xdb" + struct.pack(">H", 67) + b"\x00" + q
    head += b"\xff\xdb" + struct.pack(">H", 67) + b"\x01" + q
    sof = struct.pack(">BHHB", 8, h, w, len(comps)) + b"".join(
        bytes([cid, hh << 4 | vv, tq]) for cid, hh, vv, tq in comps)
    head += b"\xff\xc0" + struct.pack(">H", len(sof) + 2) + sof
    head += dht(0, 0, DC_SYMBOLS, 4) + dht(1, 0, AC_SYMBOLS, 8)
    head += b"\xff\xdd" + struct.pack(">HH", 4, restart)
    sos = bytes([len(comps)]) + b"".join(bytes([c[0], 0x00]) for c in comps) + b"\x00\x3f\x00"
    head += b"\xff\xda" + struct.pack(">H", len(sos) + 2) + sos

    def sample(plane, x, y, factor):  # edge-replicated, averaged when subsampled
        px = plane.load()
        pw, ph = plane.size
        vals = [px[min(x * factor + i, pw - 1), min(y * factor + j, ph - 1)]
                for j in range(factor) for i in range(factor)]
        return sum(vals) / len(vals) - 128

    bw = BitWriter()
    preds = [0] * len(comps)
    mcus_x, mcus_y = -(-w // mcu), -(-h // mcu)
    for m in range(mcus_x * mcus_y):
        if m and m % restart == 0:
            bw.flush()
            bw.out += bytes([0xFF, 0xD0 + (m // restart - 1) % 8])
            preds = [0] * len(comps)
        mx, my = m % mcus_x, m // mcus_x
        for ci, (_cid, hh, vv, _tq) in enumerate(comps):
            factor = hs // hh
            for by in range(vv):
                for bx in range(hh):
                    x0, y0 = (mx * hh + bx) * 8, (my * vv + by) * 8
                    block = [[sample(planes[ci], x0 + x, y0 + y, factor) for x in range(8)]
                             for y in range(8)]
                    preds[ci] = encode_block(bw, block, preds[ci])
    bw.flush()
    return head + bytes(bw.out) + b"\xff\xd9"


def png_bytes(width, height, color_type, depth, pixel, palette=None, interlace=False, trns=None):
    """A PNG written by hand (PIL 9 writes neither 16-bit RGB nor interlaced
    files): pixel(x, y) gives the samples; rows use filters 0-4 in turn."""
    channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[color_type]

    def row_bytes(xs, y):
        if depth >= 8:
            return b"".join(v.to_bytes(depth // 8, "big") for x in xs for v in pixel(x, y))
        bits = "".join(format(pixel(x, y)[0], "0%db" % depth) for x in xs)
        bits += "0" * (-len(bits) % 8)
        return bytes(int(bits[i:i + 8], 2) for i in range(0, len(bits), 8))

    def filtered(rows):
        bpp = max(1, channels * depth // 8)
        out, prev = bytearray(), None
        for i, r in enumerate(rows):
            kind = i % 5
            up = prev or bytes(len(r))
            f = bytearray()
            for j, v in enumerate(r):
                a = r[j - bpp] if j >= bpp else 0
                b = up[j]
                c = up[j - bpp] if j >= bpp else 0
                if kind == 0:
                    p = 0
                elif kind == 1:
                    p = a
                elif kind == 2:
                    p = b
                elif kind == 3:
                    p = (a + b) // 2
                else:
                    pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                    p = a if pa <= pb and pa <= pc else b if pb <= pc else c
                f.append((v - p) & 0xFF)
            out += bytes([kind]) + f
            prev = r
        return bytes(out)

    if interlace:  # Adam7
        raw = b""
        for x0, y0, dx, dy in [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4),
                               (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]:
            xs = list(range(x0, width, dx))
            if xs:
                raw += filtered([row_bytes(xs, y) for y in range(y0, height, dy)])
    else:
        raw = filtered([row_bytes(range(width), y) for y in range(height)])

    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(
            ">I", zlib.crc32(kind + body))

    ihdr = struct.pack(">IIBBBBB", width, height, depth, color_type, 0, 0, 1 if interlace else 0)
    out = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr)
    if palette:
        out += chunk(b"PLTE", bytes(v for rgb in palette for v in rgb))
    if trns:
        out += chunk(b"tRNS", trns)
    return out + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")


def repeat_smallest_scan(jpeg, copies):
    """A progressive JPEG with its smallest scan repeated `copies` times
    before the end (libjpeg calls the repeats a bogus progression; beyond 500
    scans the file is a CPU bomb)."""
    end = len(jpeg) - 2
    starts, at = [], jpeg.find(b"\xff\xda")
    while at != -1:
        starts.append(at)
        at = jpeg.find(b"\xff\xda", at + 2)
    scans = [jpeg[a:b] for a, b in zip(starts, starts[1:] + [end])]
    return jpeg[:end] + min(scans, key=len) * copies + jpeg[end:]


def decode_input(image, flags=0, size=16, resize=0, limit=14, fmt=0, raw_height=0, seed=0,
                 epoch=0, index=0, crop=0, decode=0):
    return bytes([flags, size, resize, limit | fmt << 4, raw_height, seed, epoch, index, crop,
                  decode]) + image


def decode_seeds(out):
    images = {}
    for mode, w, h in [("RGB", 48, 32), ("L", 33, 17), ("CMYK", 24, 24)]:
        img = gradient(w, h, mode)
        tag = mode.lower()
        images[f"jpeg-{tag}-baseline"] = pil_bytes(img, "JPEG", quality=85)
        images[f"jpeg-{tag}-progressive"] = pil_bytes(img, "JPEG", quality=85, progressive=True)
        if mode == "RGB":
            for sub in (0, 1, 2):  # 4:4:4, 4:2:2, 4:2:0
                images[f"jpeg-rgb-sub{sub}"] = pil_bytes(img, "JPEG", subsampling=sub)
            images["jpeg-rgb-optimized"] = pil_bytes(img, "JPEG", optimize=True, quality=40)
    images["jpeg-rgb-restart1"] = jpeg_with_restarts(gradient(24, 16, "RGB"), 1)
    images["jpeg-rgb-restart3-420"] = jpeg_with_restarts(gradient(40, 24, "RGB"), 3, True)
    images["jpeg-gray-restart2"] = jpeg_with_restarts(gradient(20, 20, "L"), 2)
    images["jpeg-large-420"] = pil_bytes(gradient(96, 96, "RGB"), "JPEG", quality=75)

    def px(channels, depth, x, y):
        m = (1 << depth) - 1
        return tuple((x * 37 + y * 11 + c * 83) * (m // 255 if depth == 16 else 1) % (m + 1)
                     for c in range(channels))

    images["png-rgb8"] = pil_bytes(gradient(30, 20, "RGB"), "PNG")
    images["png-gray8"] = pil_bytes(gradient(30, 20, "L"), "PNG")
    images["png-rgba8"] = pil_bytes(gradient(16, 12, "RGBA"), "PNG")
    images["png-gray-alpha8"] = pil_bytes(gradient(16, 12, "LA"), "PNG")
    images["png-palette8"] = pil_bytes(gradient(30, 20, "RGB").convert("P", colors=16), "PNG")
    images["png-bilevel"] = pil_bytes(gradient(19, 9, "L").convert("1"), "PNG")
    images["png-rgb16"] = png_bytes(20, 14, 2, 16, lambda x, y: px(3, 16, x, y))
    images["png-gray16"] = png_bytes(20, 14, 0, 16, lambda x, y: px(1, 16, x, y))
    images["png-rgba16"] = png_bytes(9, 7, 6, 16, lambda x, y: px(4, 16, x, y))
    images["png-gray4"] = png_bytes(13, 5, 0, 4, lambda x, y: ((x + y) % 16,))
    images["png-palette2-trns"] = png_bytes(
        11, 6, 3, 2, lambda x, y: ((x * y) % 4,), palette=[(0, 0, 0), (255, 0, 0), (0, 255, 0),
                                                           (0, 0, 255)], trns=b"\x00\x80")
    images["png-rgb8-interlaced"] = png_bytes(23, 19, 2, 8, lambda x, y: px(3, 8, x, y),
                                              interlace=True)
    images["png-gray16-interlaced"] = png_bytes(17, 9, 0, 16, lambda x, y: px(1, 16, x, y),
                                                interlace=True)
    images["png-palette4-interlaced"] = png_bytes(
        10, 10, 3, 4, lambda x, y: ((x + 2 * y) % 16,),
        palette=[(i * 16, 255 - i * 16, i * 7) for i in range(16)], interlace=True)

    # Each image whole and truncated (half; all but its last 2 bytes, which
    # keeps a JPEG's EOI out and a PNG's IEND CRC short), under a few of the
    # option bytes: centre crop uint8 NHWC; random-resized crop, flip,
    # float32 NCHW normalised; gray output at 1/2 scale; a tiny pixel limit.
    option_sets = [
        dict(),
        dict(flags=0b00011111, size=24, crop=0x45, seed=3, epoch=1, index=9, decode=0x15),
        dict(flags=0b01010000, size=7, resize=200, decode=0x01),
        dict(flags=0b00100101, size=40, limit=6, decode=0x2a),
    ]
    for name, data in images.items():
        for k, opts in enumerate(option_sets):
            write(out, "decode", f"{name}-{k}", decode_input(data, **opts))
        write(out, "decode", f"{name}-half", decode_input(data[:len(data) // 2]))
        write(out, "decode", f"{name}-cut2", decode_input(data[:-2], flags=1))
    # Raw pixels: 28 x 28 gray (Fashion-MNIST's shape) and 6 x 10 RGB.
    write(out, "decode", "raw-gray", decode_input(bytes(range(256)) * 3 + bytes(16), flags=0x80,
                                                  raw_height=27, size=8))
    write(out, "decode", "raw-rgb", decode_input(bytes(range(180)), flags=0x81, fmt=0b1100,
                                                 raw_height=5, size=4))
    # Progressive scans repeated: 40 (refused as bogus) and 600 (above the
    # scan limit, refused before decoding).
    progressive = images["jpeg-rgb-progressive"]
    for copies in (40, 600):
        write(out, "decode", f"jpeg-scans-{copies}",
              decode_input(repeat_smallest_scan(progressive, copies)))


def regressions(out):
    for harness in HARNESSES:
        src = REPO / "fuzz" / "regressions" / harness
        if src.is_dir():
            for f in sorted(src.iterdir()):
                write(out, harness, "regression-" + f.name, f.read_bytes())
    hostile = REPO / "tests" / "data" / "hostile"
    write(out, "lmdb", "hostile-entries", (hostile / "lmdb-entries-2e61" / "data.mdb").read_bytes())
    write(out, "tar", "hostile-4g", (hostile / "tar-4g-member.tar").read_bytes())
    write(out, "idx", "hostile-huge",
          idx_input((hostile / "idx-huge" / "train-images-idx3-ubyte").read_bytes(),
                    (hostile / "idx-huge" / "train-labels-idx1-ubyte").read_bytes()))


# ---- prepare: images behind the harness's option bytes ----------------------

def prepare_seeds(out):
    images = {
        "jpeg-rgb": pil_bytes(gradient(48, 32, "RGB"), "JPEG", quality=85),
        "jpeg-gray": pil_bytes(gradient(33, 17, "L"), "JPEG", quality=85),
        "jpeg-cmyk": pil_bytes(gradient(24, 24, "CMYK"), "JPEG", quality=85),
        "png-rgb": pil_bytes(gradient(30, 20, "RGB"), "PNG"),
        "png-palette": pil_bytes(gradient(30, 20, "RGB").convert("P", colors=16), "PNG"),
        "png-gray16": png_bytes(20, 14, 0, 16, lambda x, y: ((x * 3001 + y * 17) % 65536,)),
    }
    # max_side, mode/filter/flags, quality, limits: keep; raw at 16 px
    # bicubic; JPEG q 60 gray; smart; proportion; always re-encode; a tiny
    # pixel limit.
    option_sets = [bytes([0, 0, 0, 14]), bytes([15, 0b00001010, 0, 14]),
                   bytes([7, 0b10000001, 128 + 59, 14]), bytes([20, 0b00011011, 0, 0x8e]),
                   bytes([11, 0b00100100, 0, 0x7e]), bytes([0, 0b01000000, 200, 14]),
                   bytes([5, 2, 0, 3])]
    for name, data in images.items():
        for k, opts in enumerate(option_sets):
            write(out, "prepare", f"{name}-{k}", opts + data)
        write(out, "prepare", f"{name}-half", option_sets[1] + data[:len(data) // 2])


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    out, dlfs = pathlib.Path(sys.argv[1]), sys.argv[2]
    for harness in HARNESSES:
        shutil.rmtree(out / harness, ignore_errors=True)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        volumes(out, dlfs, tmp)
        lmdbs(out, tmp)
    idxs(out)
    tars(out)
    decode_seeds(out)
    prepare_seeds(out)
    regressions(out)
    for harness in HARNESSES:
        n = len(list((out / harness).iterdir()))
        print(f"{harness}: {n} seeds in {out / harness}")


if __name__ == "__main__":
    main()
