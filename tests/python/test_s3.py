"""Volumes on object storage: a real Ceph RADOS Gateway (scripts/rgw.sh,
started once for this module and stopped by PID) serves volumes uploaded
with curl; dlfs reads them as s3://dlfs/KEY with the standard AWS_*
variables. Skipped where Ceph is not installed or the gateway cannot start."""
import os
import pathlib
import random
import shutil
import subprocess
import time

import pytest
from image_fixtures import flat_png, flat_png_volume

dlfs = pytest.importorskip("dlfs", reason="Python module not built")

ROOT = pathlib.Path(__file__).resolve().parents[2]
RGW = ROOT / "scripts" / "rgw.sh"


def _env_file(path):
    out = {}
    for line in path.read_text().splitlines():
        key, _, value = line.partition("=")
        if key:
            out[key] = value
    return out


@pytest.fixture(scope="module")
def rgw(tmp_path_factory):
    if subprocess.run([RGW, "available"], capture_output=True).returncode != 0:
        pytest.skip("Ceph's RADOS Gateway is not installed (scripts/install-deps.sh installs it)")
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    state = tmp_path_factory.mktemp("rgw") / "state"
    proc = subprocess.run([RGW, "start", state], capture_output=True, timeout=180)
    if proc.returncode != 0:
        subprocess.run([RGW, "stop", state], capture_output=True, timeout=60)
        pytest.skip(f"the RADOS Gateway did not start: {proc.stderr.decode()[-500:]}")
    try:
        yield {**_env_file(state / "env"), "RGW_STATE_DIR": str(state)}
    finally:
        subprocess.run([RGW, "stop", state], capture_output=True, timeout=60)


def _curl(env, *args):
    subprocess.run(["curl", "-sS", "-f", "--aws-sigv4", f"aws:amz:{env['AWS_REGION']}:s3",
                    "--user", f"{env['AWS_ACCESS_KEY_ID']}:{env['AWS_SECRET_ACCESS_KEY']}",
                    "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD", *map(str, args)],
                   check=True, capture_output=True, timeout=120)


def _upload(env, path, key):
    _curl(env, "-T", path, f"{env['AWS_ENDPOINT_URL']}/{env['DLFS_S3_BUCKET']}/{key}")
    return f"s3://{env['DLFS_S3_BUCKET']}/{key}"


@pytest.fixture
def s3env(rgw, monkeypatch):
    """The gateway's AWS_* variables, in this process and for `dlfs`."""
    for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(key, raising=False)
    for key, value in rgw.items():
        monkeypatch.setenv(key, value)
    return rgw


def _volume(path, n=300, seed=0, size=(1000, 30000), targets=1):
    rng = random.Random(seed)
    samples = []
    with dlfs.Writer(str(path), force=True, targets=targets) as w:
        for i in range(n):
            data = rng.randbytes(rng.randint(*size))
            w.add(f"s/{i:05d}", data, label=i % 7)
            samples.append((data, i % 7))
    return samples


def test_reads_match_the_local_file_sample_by_sample(s3env, tmp_path, run):
    local = tmp_path / "v.dlfs"
    want = _volume(local)
    url = _upload(s3env, local, "match/v.dlfs")
    out = run("verify", url, check=0).stdout.decode()
    assert "300 samples" in out and "0 bad" in out, out
    info = run("info", url, check=0).stdout.decode()
    assert "S3 object" in info, info
    with dlfs.Volume(url) as vol:
        assert len(vol) == 300
        for i in (0, 1, 150, 299):
            assert vol[i] == want[i]
    # The loader (shuffled, 64 ranged GETs in flight), sample by sample.
    seen = {}
    for batch in dlfs.Loader(url, 32, shuffle=True, seed=3, drop_last=False):
        indices, labels = batch.indices, batch.labels
        for k in range(len(batch)):
            seen[int(indices[k])] = (bytes(batch[k]), int(labels[k]))
    assert seen == {i: want[i] for i in range(300)}
    # LoaderDataset, as a PyTorch user reads it: DataLoader workers are
    # forked from a process that has read the object already (its pooled
    # connections must not be shared with them).
    torch = pytest.importorskip("torch")
    from dlfs.torch import LoaderDataset
    got = []
    loader = torch.utils.data.DataLoader(
        LoaderDataset(url, 50, shuffle=True, stack=False, batch_transform=lambda s, l: (s, l)),
        batch_size=None, num_workers=2)
    for samples, labels in loader:
        got += [(bytes(data), int(labels[k])) for k, data in enumerate(samples)]
    assert sorted(got) == sorted(want)


def test_targets_beside_the_object_and_the_node_cache(s3env, tmp_path, run):
    local = tmp_path / "m.dlfs"
    want = _volume(local, n=1000, size=(10000, 30000), targets=2)
    url = _upload(s3env, local, "multi/m.dlfs")
    _upload(s3env, str(local) + ".t1", "multi/m.dlfs.t1")
    with dlfs.Volume(url) as vol:
        assert vol.info()["targets"] == [url, url + ".t1"]
        assert all(vol[i] == want[i] for i in range(0, 1000, 37))
    # A budget that holds the volume: later epochs fetch (almost) nothing.
    # (Batches of 32: the loader's read-ahead then stays within an epoch.)
    import json
    report = json.loads(run("bench", url, "--epochs", "3", "--batch", "32", "--cache-budget",
                            "64M", "--json", check=0).stdout)
    total = sum(len(d) for d, _ in want)
    assert report["epochs"][0]["cache"]["fill_bytes"] >= total
    later = sum(e["cache"]["device_bytes"] for e in report["epochs"][1:])
    assert later <= 0.05 * total, (later, total)
    # Samples of ~20 KB, defaults: filled before the first read (remote
    # storage, small samples), so not one sample is a GET of its own.
    report = json.loads(run("bench", url, "--epochs", "2", "--batch", "32", "--json",
                            check=0).stdout)
    assert "fills the node cache before the first read" in report["engine"], report["engine"]
    assert [e["cache"]["device_bytes"] for e in report["epochs"]] == [0, 0]
    assert [e["cache"]["misses"] for e in report["epochs"]] == [0, 0]
    assert report["epochs"][0]["cache"]["fill_bytes"] >= total


def test_errors_name_the_url(s3env, tmp_path, run, monkeypatch):
    local = tmp_path / "e.dlfs"
    _volume(local, n=20)
    url = _upload(s3env, local, "errors/e.dlfs")
    bucket = s3env["DLFS_S3_BUCKET"]
    err = run("info", f"s3://{bucket}/errors/none.dlfs", check=2).stderr.decode()
    assert f"s3://{bucket}/errors/none.dlfs: no such key" in err, err
    err = run("info", "s3://no-such-bucket/e.dlfs", check=2).stderr.decode()
    assert "s3://no-such-bucket/e.dlfs: no such bucket" in err, err
    err = run("verify", "s3://bucket-only", check=2).stderr.decode()
    assert "s3://bucket-only: an S3 target is s3://BUCKET/KEY" in err, err
    # A truncated object: refused at open, naming it.
    data = local.read_bytes()
    (tmp_path / "short.dlfs").write_bytes(data[: len(data) // 2])
    short = _upload(s3env, tmp_path / "short.dlfs", "errors/short.dlfs")
    err = run("verify", short, check=2).stderr.decode()
    assert f"{short}: truncated" in err, err
    # Credentials the server refuses.
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    err = run("info", url, check=2).stderr.decode()
    assert f"{url}: access denied (HTTP 403 SignatureDoesNotMatch" in err, err
    assert "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY" in err, err
    with pytest.raises(PermissionError, match="access denied"):
        dlfs.Volume(url)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3env["AWS_SECRET_ACCESS_KEY"])
    # No server there: a bounded wait, then an error naming the URL.
    with socket_free_port() as port:
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
        start = time.monotonic()
        err = run("info", url, check=2).stderr.decode()
        assert time.monotonic() - start < 20
        assert f"{url}: cannot connect to the S3 endpoint" in err and "tries" in err, err


def test_an_object_replaced_while_open_is_an_error_not_a_mix(s3env, tmp_path):
    first, second = tmp_path / "a.dlfs", tmp_path / "b.dlfs"
    want = _volume(first, n=50, seed=1)
    _volume(second, n=50, seed=2)
    url = _upload(s3env, first, "replace/v.dlfs")
    vol = dlfs.Volume(url)
    assert vol[3] == want[3]
    _upload(s3env, second, "replace/v.dlfs")
    with pytest.raises(OSError, match=r"s3://.*replace/v.dlfs.*replaced since this process opened"):
        vol[4]
    with pytest.raises(OSError, match="replaced"):
        for _ in dlfs.Loader(vol, 10):
            pass
    # A second open while the first is in use would mix the two versions.
    with pytest.raises(OSError, match="while this process still has a volume of it open"):
        dlfs.Volume(url)
    vol.close()
    del vol
    import gc
    gc.collect()
    with dlfs.Volume(url) as again:  # the new version, once the old one is closed
        assert len(again) == 50


class socket_free_port:
    """A TCP port of 127.0.0.1 nobody listens on (while held)."""

    def __enter__(self):
        import socket
        self.s = socket.socket()
        self.s.bind(("127.0.0.1", 0))
        return self.s.getsockname()[1]

    def __exit__(self, *exc):
        self.s.close()


def test_pack_and_writer_stream_to_s3(s3env, tmp_path, run):
    # A Writer to s3:// (20 MB: a multipart upload, the head sent last).
    url = f"s3://{s3env['DLFS_S3_BUCKET']}/written/w.dlfs"
    rng = random.Random(5)
    want = [(rng.randbytes(rng.randint(50_000, 150_000)), i % 3) for i in range(200)]
    with dlfs.Writer(url) as w:
        for i, (data, label) in enumerate(want):
            w.add(f"w/{i:04d}", data, label=label)
    with dlfs.Volume(url) as vol:
        assert len(vol) == 200 and all(vol[i] == want[i] for i in range(200))
    # Never replaced without asking.
    with pytest.raises(FileExistsError, match=f"{url}: already exists"):
        dlfs.Writer(url)
    # A Writer that fails leaves no object.
    failed = url.replace("w.dlfs", "failed.dlfs")
    with pytest.raises(RuntimeError, match="on purpose"):
        with dlfs.Writer(failed) as w:
            w.add("a", b"x" * 1000)
            raise RuntimeError("on purpose")
    err = run("info", failed, check=2).stderr.decode()
    assert "no such key" in err, err
    # dlfs pack -o s3://, sample by sample as the same pack to a file.
    src = tmp_path / "images"
    for c in range(3):
        (src / f"c{c}").mkdir(parents=True)
        for k in range(20):
            (src / f"c{c}" / f"{k}.png").write_bytes(rng.randbytes(3000))
    packed = url.replace("w.dlfs", "packed.dlfs")
    run("pack", src, "-o", packed, "-q", check=0)
    run("pack", src, "-o", tmp_path / "packed.dlfs", "-q", check=0)
    with dlfs.Volume(packed) as a, dlfs.Volume(str(tmp_path / "packed.dlfs")) as b:
        assert len(a) == len(b) == 60
        assert all(a[i] == b[i] and a.path(i) == b.path(i) for i in range(60))
    err = run("pack", src, "-o", packed, "-q", check=2).stderr.decode()
    assert f"{packed}: already exists (use --force to replace it)" in err, err
    run("pack", src, "-o", packed, "-q", "--force", check=0)


def test_image_loader_reads_a_mixture_of_s3_volumes(s3env, tmp_path, run):
    pytest.importorskip("torch")
    import dlfs.torch as dt
    urls = []
    for name, n, value in (("x", 60, 10), ("y", 30, 200)):
        path = flat_png_volume(tmp_path / f"{name}.dlfs", n, value)
        urls.append(_upload(s3env, path, f"images/{name}.dlfs"))
    # ImageLoader over a mixture of two S3 volumes, decoded.
    loader = dt.ImageLoader(urls, 16, size=8, weights=[2, 1], return_indices=True,
                            return_sources=True, decode_threads=1)
    loader.set_epoch(0)
    seen = []
    for images, _, indices, sources in loader:
        for img, s in zip(images, sources.tolist()):
            assert int(img.flatten()[0]) == (10, 200)[s]  # decoded from its own volume
        seen += list(zip(sources.tolist(), indices.tolist()))
    assert len(seen) == len(set(seen)) == 90


def test_the_fuse_view(s3env, tmp_path, run):
    # Mounted in the background, as users do (a forked daemon).
    if shutil.which("fusermount3") is None or not os.path.exists("/dev/fuse"):
        pytest.skip("no FUSE here (fuse3, /dev/fuse)")
    path = flat_png_volume(tmp_path / "y.dlfs", 30, 200)
    url = _upload(s3env, path, "images/fuse.dlfs")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    proc = run("mount", url, mnt)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount here: {proc.stderr.decode().strip()}")
    try:
        files = sorted((mnt / "c").iterdir())
        assert len(files) == 30
        assert files[0].read_bytes() == flat_png(200)
    finally:
        subprocess.run(["fusermount3", "-u", str(mnt)], capture_output=True)


def test_a_gateway_that_goes_away_ends_the_epoch_naming_the_url(s3env, tmp_path):
    # The module's gateway, killed mid-epoch: the loader's next reads fail
    # (connection refused, retried with backoff) within a bounded time.
    # Runs last in this module (pytest keeps the file's order).
    local = tmp_path / "gone.dlfs"
    _volume(local, n=2000, size=(20000, 30000))
    url = _upload(s3env, local, "gone/v.dlfs")
    # No node cache: every batch is read from the gateway.
    loader = iter(dlfs.Loader(url, 16, shuffle=True, cache_budget=0))
    next(loader)
    pids = pathlib.Path(s3env["RGW_STATE_DIR"], "pids").read_text().split("\n")
    rgw_pid = next(int(line.split()[1]) for line in pids if line.startswith("client.rgw"))
    os.kill(rgw_pid, 9)
    start = time.monotonic()
    with pytest.raises(OSError, match=f"{url}: (cannot connect|the connection failed)"):
        for _ in loader:
            pass
    assert time.monotonic() - start < 60


class _FlakyS3:
    """A stand-in S3 server (no signature checks) serving one file's ranges,
    answering each key's first `fail` requests 503 SlowDown: the retries
    are tested without a gateway."""

    def __init__(self, data, fail, hang=False):
        import http.server
        import threading
        outer = self
        self.data, self.fail, self.requests, self.hang = data, fail, 0, hang

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                outer.requests += 1
                if outer.hang:  # a server that takes requests and never answers
                    time.sleep(30)
                    return
                if outer.requests <= outer.fail:
                    body = b"<Error><Code>SlowDown</Code><Message>Reduce your rate</Message></Error>"
                    self.send_response(503)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                first, last = map(int, self.headers["Range"].split("=")[1].split("-"))
                last = min(last, len(outer.data) - 1)
                body = outer.data[first:last + 1]
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {first}-{last}/{len(outer.data)}")
                self.send_header("ETag", '"fixed"')
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_slowdown_is_retried_with_backoff_then_fails_naming_the_url(tmp_path, run, monkeypatch):
    local = tmp_path / "v.dlfs"
    _volume(local, n=20)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AK")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    server = _FlakyS3(local.read_bytes(), fail=3)
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", server.endpoint)
        out = run("verify", "s3://b/v.dlfs", check=0).stdout.decode()
        assert "20 samples" in out and "0 bad" in out, out
        assert server.requests > 3
    finally:
        server.close()
    server = _FlakyS3(local.read_bytes(), fail=1000)  # never recovers
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", server.endpoint)
        start = time.monotonic()
        err = run("info", "s3://b/v.dlfs", check=2).stderr.decode()
        assert "s3://b/v.dlfs: HTTP 503 SlowDown: Reduce your rate (5 tries)" in err, err
        assert server.requests == 5 and time.monotonic() - start < 10
    finally:
        server.close()


def test_a_silent_server_is_bounded_by_dlfs_s3_timeout(tmp_path, run, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AK")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.setenv("DLFS_S3_TIMEOUT", "0.5")
    monkeypatch.setenv("DLFS_S3_RETRIES", "1")
    server = _FlakyS3(b"", fail=0, hang=True)
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", server.endpoint)
        start = time.monotonic()
        err = run("info", "s3://b/v.dlfs", check=2).stderr.decode()
        assert time.monotonic() - start < 5
        assert "s3://b/v.dlfs: no answer in time" in err and "(2 tries)" in err, err
        assert server.requests == 2
    finally:
        server.close()
