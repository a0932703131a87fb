#!/usr/bin/python3
"""Writes a Caffe-style LMDB: keys "%08d_<name>", Datum values, 1000 puts per
commit (as caffe's convert_imageset does), so the page layout is the one
LMDBIO meets in practice.

  bench/lmdbio/make_caffe_lmdb.py OUT --records N --shape C H W [--encoded-bytes B]
                                  [--rewrite FRACTION] [--seed S]

--shape gives raw pixel Datums (C*H*W bytes of data), e.g. 3 32 32 for
CIFAR-like records. --encoded-bytes B writes encoded Datums of about B bytes
(JPEG-sized, e.g. 110000 for ImageNet-like records) instead.
--rewrite F deletes a fraction F of the records after writing and writes them
again, so their values land in reused free pages, out of key order.
Needs python3-lmdb. Refuses to overwrite an existing OUT.
"""
import argparse
import os
import random
import sys
import time

try:
    import lmdb
except ImportError:
    sys.exit("make_caffe_lmdb.py: needs python3-lmdb (apt-get install python3-lmdb)")


def varint(v):
    out = bytearray()
    while True:
        b, v = v & 0x7F, v >> 7
        out.append(b | 0x80 if v else b)
        if not v:
            return bytes(out)


def datum(channels, height, width, data, label, encoded):
    """Caffe's Datum in protobuf wire format (caffe.proto fields 1-5, 7)."""
    m = b"".join(varint(f << 3) + varint(v) for f, v in ((1, channels), (2, height), (3, width)))
    m += varint(4 << 3 | 2) + varint(len(data)) + data
    m += varint(5 << 3) + varint(label)
    if encoded:
        m += varint(7 << 3) + varint(1)
    return m


def record(i, args, rng):
    label = i % 1000 if args.encoded_bytes else i % 10
    if args.encoded_bytes:
        # JPEG sizes vary; +-10% around the mean, never empty.
        n = max(1, int(args.encoded_bytes * rng.uniform(0.9, 1.1)))
        payload = i.to_bytes(8, "little") + rng.randbytes(n - 8)
        return datum(3, 256, 256, payload, label, True)
    c, h, w = args.shape
    payload = i.to_bytes(8, "little") + rng.randbytes(c * h * w - 8)
    return datum(c, h, w, payload, label, False)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--records", type=int, required=True)
    ap.add_argument("--shape", type=int, nargs=3, default=[3, 32, 32], metavar=("C", "H", "W"))
    ap.add_argument("--encoded-bytes", type=int, default=0)
    ap.add_argument("--rewrite", type=float, default=0.0)
    ap.add_argument("--per-commit", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("-q", "--quiet", action="store_true")
    args = ap.parse_args()
    if os.path.exists(args.out):
        sys.exit(f"make_caffe_lmdb.py: {args.out} exists; not overwriting it")
    rng = random.Random(args.seed)
    mean = args.encoded_bytes or args.shape[0] * args.shape[1] * args.shape[2]
    env = lmdb.open(args.out, map_size=max(1 << 30, int(args.records * (mean + 8192) * 2.5)))
    key = lambda i: b"%08d_img%d.JPEG" % (i, i)
    start = time.monotonic()
    txn = env.begin(write=True)
    for i in range(args.records):
        txn.put(key(i), record(i, args, rng))
        if (i + 1) % args.per_commit == 0:
            txn.commit()
            txn = env.begin(write=True)
            if not args.quiet and (i + 1) % (args.per_commit * 20) == 0:
                print(f"  {i + 1}/{args.records} records, {time.monotonic() - start:.0f} s",
                      file=sys.stderr)
    txn.commit()
    if args.rewrite > 0:
        victims = sorted(rng.sample(range(args.records), int(args.records * args.rewrite)))
        with env.begin(write=True) as t:
            for i in victims:
                t.delete(key(i))
        for n in range(0, len(victims), args.per_commit):
            with env.begin(write=True) as t:
                for i in victims[n:n + args.per_commit]:
                    t.put(key(i), record(i, args, rng))
    env.sync(True)
    env.close()
    # No lock file: readers open the database with MDB_NOLOCK.
    try:
        os.remove(os.path.join(args.out, "lock.mdb"))
    except FileNotFoundError:
        pass
    size = os.path.getsize(os.path.join(args.out, "data.mdb"))
    if not args.quiet:
        print(f"{args.out}: {args.records} records, {size / 1e6:.1f} MB data.mdb, "
              f"{time.monotonic() - start:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
