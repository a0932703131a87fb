"""Helpers shared by the Python tests, as tests/testutil.h is for the C++ ones.

Tests wait for events, not for times: a fixed sleep before an assertion
asserts too early on a loaded machine (the flaky failures CI caught) and
wastes time on an idle one. wait_until polls the event with a deadline.
The only sleep left is simulate_compute: a training step's work, which no
assertion may depend on the length of.
"""
import os
import signal
import subprocess
import time


def wait_until(predicate, timeout=30.0, what="the condition", interval=0.01, fail=True):
    """Polls predicate() every `interval` seconds until it returns a true
    value, and returns that value. After `timeout` seconds: fails the test
    (AssertionError naming `what`), or returns the last (false) value when
    `fail` is False (for clean-ups that may give up)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            break
        time.sleep(interval)
    if not value and fail:
        raise AssertionError(f"waited {timeout:g} s for {what}")
    return value


def simulate_compute(seconds=0.001):
    """A training step's work between two batches: it lets a loader's
    background filler run beside the reader, as in training. Simulated work,
    not a wait: no assertion may depend on how long it takes."""
    time.sleep(seconds)


def epochs_until(done, read_epoch, timeout=120.0, what="the condition"):
    """Calls read_epoch(0), read_epoch(1), ... until done() holds (checked
    before each); fails naming `what` if it does not within `timeout`
    seconds. The number of epochs read. For caches filled in the background
    while epochs are read: how many epochs that takes depends on the
    machine, the bytes it ends with do not."""
    deadline = time.monotonic() + timeout
    epochs = 0
    while not done():
        if time.monotonic() >= deadline:
            raise AssertionError(f"{epochs} epochs in {timeout:g} s, and still not {what}")
        read_epoch(epochs)
        epochs += 1
    return epochs


def pack_mid_write(cmd, out, temporaries=1):
    """Starts `cmd` (a `dlfs pack` writing into the directory `out`) and
    returns its Popen, stopped (SIGSTOP) as soon as `temporaries` temporary
    files (".tmp." in their names) are seen in `out`: frozen in the middle
    of writing, whatever the machine's speed (a pack of the test trees takes
    about 0.1 s; a fixed sleep before the signal once used half of that).
    Interrupt it with interrupt(). Fails if the pack ended first."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def writing():
        if proc.poll() is not None:
            return True  # said below
        if sum(".tmp." in p.name for p in out.iterdir()) < temporaries:
            return False
        os.kill(proc.pid, signal.SIGSTOP)
        return True

    try:
        wait_until(writing, 60, f"{temporaries} temporary files in {out}", interval=0.001)
        assert proc.poll() is None, "pack finished before it could be interrupted"
    except BaseException:
        proc.kill()
        proc.communicate()
        raise
    return proc


def interrupt(proc, sig):
    """Sends `sig` to a process pack_mid_write stopped, then lets it go on
    (SIGCONT): it handles the signal at the point where it was stopped."""
    os.kill(proc.pid, sig)
    os.kill(proc.pid, signal.SIGCONT)
