"""EpochPrefetcher thread shutdown: whatever the consumer does (finish, break early, raise, drop the prefetcher,
hit a corrupt source), no prefetch thread is left running and no pool buffer stays leased."""
import gc, threading, time

import pytest
import torch

from gpurl.data.folds import FoldData
from gpurl.data.foldfile import save_fold
from gpurl.systems.pipeline import EpochPrefetcher, GpuBufferPool, PrefetchError


def _threads():
    return [t for t in threading.enumerate() if t.name == "gpurl-prefetch" and t.is_alive()]


def _wait_no_threads(timeout=2.0):
    end = time.monotonic() + timeout
    while _threads() and time.monotonic() < end: time.sleep(0.01)
    return _threads()


@pytest.fixture
def sources(tmp_path):
    paths = []
    for k in range(8):
        fd = FoldData(torch.randn(32, 3), torch.randn(32), torch.arange(k * 32, (k + 1) * 32))
        paths.append(save_fold(tmp_path / f"f{k}{('.npz', '.safetensors')[k % 2]}", fd))
    return paths


@pytest.fixture(autouse=True)
def no_leftover_threads():
    assert not _wait_no_threads(), "a prefetch thread of an earlier test is still running"
    yield
    assert not _wait_no_threads(), "the test left a prefetch thread running"


def test_full_run(sources):
    pool = GpuBufferPool()
    with EpochPrefetcher.spawn(sources, "cpu", pool=pool) as pf:
        assert len(list(pf)) == len(sources)
    assert not pf.alive and pool.n_leased == 0


@pytest.mark.parametrize("stop_after", [0, 1, 3])
def test_break_early(sources, stop_after):
    pool = GpuBufferPool()
    with EpochPrefetcher.spawn(sources, "cpu", pool=pool) as pf:
        for k, _ in enumerate(pf):
            if k == stop_after: break
    assert not pf.alive and pool.n_leased == 0


def test_consumer_raises(sources):
    pool = GpuBufferPool()
    with pytest.raises(ZeroDivisionError):
        with EpochPrefetcher.spawn(sources, "cpu", pool=pool) as pf:
            pf.get(); 1 / 0
    assert not pf.alive and pool.n_leased == 0


def test_close_without_get(sources):
    pool = GpuBufferPool()
    pf = EpochPrefetcher.spawn(sources, "cpu", pool=pool)
    time.sleep(0.05)                       # the thread fills its slots and blocks waiting for the consumer
    pf.close(); pf.close()                 # idempotent
    assert not pf.alive and pool.n_leased == 0, "the staged, never fetched items go back to the pool"


def test_dropped_without_close(sources):
    pool = GpuBufferPool()
    pf = EpochPrefetcher.spawn(sources, "cpu", pool=pool); pf.get()
    del pf; gc.collect()
    assert not _wait_no_threads() and pool.n_leased == 0, "garbage collection stops the thread and returns the buffers"


def test_corrupt_source_stops_thread(sources, tmp_path):
    bad = tmp_path / "bad.safetensors"; bad.write_bytes(b"\x00" * 64)
    pf = EpochPrefetcher.spawn([sources[0], bad, sources[1]], "cpu")
    pf.get()
    with pytest.raises(PrefetchError, match="bad.safetensors") as e:
        pf.get()
    assert e.value.index == 1 and isinstance(e.value.__cause__, ValueError)
    assert not _wait_no_threads()
    with pytest.raises(StopIteration): pf.get()
    pf.close()
