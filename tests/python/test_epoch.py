"""`dlfs epoch` and `dlfs bench` from the command line.

The epoch order is specified (docs/format.md, "Epoch order") well enough to
reimplement: this file carries an independent Python version of it, and the
CLI must agree with it for every rank, i.e. the order does not depend on the
C++ toolchain.
"""
import json

import pytest

M = (1 << 64) - 1
GAMMA = 0x9E3779B97F4A7C15


def _splitmix_output(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
    return z ^ (z >> 31)


def _round_function(key, half):
    z = ((half ^ key) * 0xBF58476D1CE4E5B9) & M
    z ^= z >> 32
    z = (z * 0x94D049BB133111EB) & M
    return z ^ (z >> 32)


class EpochPermutation:
    """docs/format.md, "Epoch order" (order version 2), written from that text."""

    def __init__(self, n, seed, epoch, shuffle=True):
        self.n, self.keys = n, []
        if not shuffle or n < 2:
            return
        k = (n - 1).bit_length()
        self.low_bits = (k + 1) // 2
        self.high_count = (n + (1 << self.low_bits) - 1) >> self.low_bits
        state = seed ^ _splitmix_output((epoch + GAMMA) & M)
        for _ in range(max(6, -(-48 // k))):
            state = (state + GAMMA) & M
            self.keys.append(_splitmix_output(state))

    def _network(self, x):
        mask = (1 << self.low_bits) - 1
        low, high = x & mask, x >> self.low_bits
        for i, key in enumerate(self.keys):
            if i % 2 == 0:
                low = (low ^ _round_function(key, high)) & mask
            else:
                high = (high + ((_round_function(key, low) * self.high_count) >> 64)) \
                    % self.high_count
        return (high << self.low_bits) | low

    def __call__(self, position):
        if not self.keys:
            return position
        x = self._network(position)
        while x >= self.n:  # cycle walking
            x = self._network(x)
        return x


def reference_rank_indices(n, seed, epoch, rank, world, batch, drop_last):
    perm = EpochPermutation(n, seed, epoch)
    per_rank = (n // world) // batch * batch if drop_last else -(-n // world)
    return [perm((k * world + rank) % n) for k in range(per_rank)]


def test_reference_matches_the_documented_golden_values():
    # The table of docs/format.md's "Epoch order" (and sampler_test.cc's).
    for n, seed, epoch, position, sample in [
            (10, 42, 0, 0, 1), (1000, 7, 3, 500, 771), (100000000, 7, 0, 0, 98052685),
            (1000000000, 123, 17, 999999999, 866032615),
            (18446744073709551615, 1, 2, 3, 554798756374177014)]:
        assert EpochPermutation(n, seed, epoch)(position) == sample


@pytest.fixture
def small_volume(tmp_path, run):
    root = tmp_path / "tree"
    for i in range(101):
        p = root / f"c{i % 3}" / f"{i:04d}.png"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(bytes([i]) * (i * 37 % 5000))
    vol = tmp_path / "v.dlfs"
    run("pack", root, "-o", vol, "-q", check=0)
    return vol


@pytest.mark.parametrize("world,drop_last", [(1, False), (4, False), (4, True), (7, False)])
def test_epoch_matches_reference(run, small_volume, world, drop_last):
    seen = []
    for rank in range(world):
        args = ["epoch", small_volume, "--seed", 1234, "--epoch", 3, "--rank", rank,
                "--world", world, "--batch", 8]
        if drop_last:
            args.append("--drop-last")
        out = [int(x) for x in run(*args, check=0).stdout.split()]
        assert out == reference_rank_indices(101, 1234, 3, rank, world, 8, drop_last)
        seen += out
    if drop_last:
        assert len(seen) == len(set(seen))
    else:
        assert set(seen) == set(range(101))


def test_epoch_pages_with_start_and_count(run, small_volume):
    whole = [int(x) for x in run("epoch", small_volume, "--seed", 9, "--rank", 1, "--world", 2,
                                 check=0).stdout.split()]
    assert whole == reference_rank_indices(101, 9, 0, 1, 2, 1, False)
    for start, count in [(0, 5), (10, 7), (45, 100), (51, 3), (200, 1)]:
        out = run("epoch", small_volume, "--seed", 9, "--rank", 1, "--world", 2,
                  "--start", start, "--count", count, check=0).stdout.split()
        assert [int(x) for x in out] == whole[start:start + count]
    out = run("epoch", small_volume, "--seed", 9, "--start", 100, check=0).stdout.split()
    assert [int(x) for x in out] == reference_rank_indices(101, 9, 0, 0, 1, 1, False)[100:]


def test_epoch_bad_rank_is_an_error(run, small_volume):
    proc = run("epoch", small_volume, "--rank", 4, "--world", 4)
    assert proc.returncode == 2
    assert b"rank 4" in proc.stderr


@pytest.mark.parametrize("engine", ["uring", "pread"])
def test_bench_json(run, small_volume, engine):
    proc = run("bench", small_volume, "--engine", engine, "--batch", 16, "--epochs", 2, "--json")
    if proc.returncode == 2 and b"unavailable" in proc.stderr:
        pytest.skip(proc.stderr.decode())
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)
    assert r["samples"] == 2 * 101
    assert r["samples_per_s"] > 0 and r["mb_per_s"] > 0
    assert len(r["epochs"]) == 2
    assert {"cpu_s_per_gb", "p50_batch_ms", "p99_batch_ms", "engine"} <= set(r)
    assert r["engine"].startswith("io_uring" if engine == "uring" else "pread")


@pytest.mark.parametrize("budget", ["0", "auto", "64M"])
def test_bench_reports_where_the_time_went(run, small_volume, budget):
    proc = run("bench", small_volume, "--batch", 16, "--epochs", 2, "--json",
               "--cache-budget", budget)
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)
    p = r["pipeline"]
    for key in ("ring_empty_seconds", "mean_reads_in_flight", "submit_seconds",
                "reap_wait_seconds", "verify_seconds", "io_bytes"):
        assert p[key] >= 0, key
    assert all("pipeline" in e for e in r["epochs"])
    m = r["memory"]
    if budget == "0":
        assert m["cache_bytes"] == 0 and m["buffer_pool_bytes"] > 0
        assert p["io_bytes"] > 0 and p["mean_reads_in_flight"] > 0
        assert r["epochs"][1]["pipeline"]["io_bytes"] > 0
    else:
        assert m["cache_bytes"] > 0 and "node cache" in r["engine"]
        # Every sample looked up, but for the first epoch's read-ahead (4 batches
        # of 16), which may be looked up before the first epoch's stats start,
        # and nothing past the last epoch (it is not read ahead).
        looked_up = sum(e["cache"]["hits"] + e["cache"]["misses"] for e in r["epochs"])
        total = sum(e["samples"] for e in r["epochs"])
        assert total - 4 * 16 <= looked_up <= total, (looked_up, total)
        for e in r["epochs"]:
            assert e["cache"]["device_bytes"] == e["pipeline"]["io_bytes"]
        # The fill reads the volume in large windows beside the epoch's reads
        # (which of them gets a sample first, and whether the automatic fill
        # has measured enough to decide in so short a run, is timing).
        assert r["cache"]["used_bytes"] <= r["cache"]["capacity_bytes"]
        assert r["cache"]["fill_bytes"] <= r["cache"]["used_bytes"]
        if budget == "64M":
            # Asked for: the volume is cached when the first epoch ends, and
            # the report says so.
            assert "budget given" in r["cache"]["plan"], r["cache"]
            assert r["cache"]["scan_bytes"] >= r["cache"]["fill_bytes"] > 0
            assert r["cache"]["used_bytes"] == r["payload_bytes"] // 2
            assert r["epochs"][1]["pipeline"]["io_bytes"] == 0
    assert m["cache_budget"] == (0 if budget == "0" else 64 << 20 if budget == "64M"
                                 else m["cache_budget"])
    assert isinstance(r["io_uring_flags"], list)
    text = run("bench", small_volume, "--batch", 16, "--cache-budget", budget).stdout.decode()
    assert "rings empty" in text and "reads in flight" in text and "batch buffers" in text


def test_bench_bad_cache_budget(run, small_volume):
    proc = run("bench", small_volume, "--cache-budget", "lots")
    assert proc.returncode != 0 and b"--cache-budget" in proc.stderr
