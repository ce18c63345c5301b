"""File-system faults for gpurl.systems.checkpoint: crash before rename, disk full, read-only directory, truncated files,
and loading a checkpoint with safetensors alone in a fresh process."""
import errno, json, os, stat, subprocess, sys

import pytest
import torch

from gpurl.systems.checkpoint import (AsyncCheckpointer, CheckpointError, SnapshotRing, load_checkpoint, snapshot_model_to_pinned)
from gpurl.core.files import atomic_write_bytes
from gpurl.core.device import rng_state
from gpurl.core.state import flatten_state, unflatten_state

TEMPLATE = "fold{fold}_{kind}.safetensors"


def _weights(value: float) -> dict:
    return {"w": torch.full((64, 8), value), "b": torch.arange(8, dtype=torch.int64) + int(value),
            "h": torch.full((5,), value, dtype=torch.bfloat16)}


def _snap(ring, value, epoch, kind="best", fold=0):
    return snapshot_model_to_pinned(_weights(value), {"fold": fold, "kind": kind, "epoch": epoch}, ring=ring)


def _leftovers(d):
    return sorted(n for n in os.listdir(d) if n.endswith(".tmp"))


@pytest.fixture
def ring():
    return SnapshotRing()


def test_crash_before_rename_keeps_previous_file(tmp_path, ring, monkeypatch):
    with AsyncCheckpointer() as ck:
        ck.submit(_snap(ring, 1.0, epoch=1), str(tmp_path / TEMPLATE))
        ck.drain()

        def crash(*a, **k):
            raise OSError(errno.EIO, "simulated crash before rename")
        monkeypatch.setattr(os, "replace", crash)
        ck.submit(_snap(ring, 2.0, epoch=2), str(tmp_path / TEMPLATE))
        with pytest.raises(CheckpointError, match=r"best checkpoint \(fold 0, epoch 2\).*simulated crash"):
            ck.drain()
        monkeypatch.undo()
    t, meta = load_checkpoint(tmp_path / "fold0_best.safetensors")
    assert meta["epoch"] == "1" and torch.equal(t["w"], _weights(1.0)["w"]), "the previous checkpoint is intact"
    assert _leftovers(tmp_path) == [], "no temporary file is left behind"


def test_disk_full_mid_write_keeps_previous_file(tmp_path, ring, monkeypatch):
    p = tmp_path / "fold0_best.safetensors"
    with AsyncCheckpointer() as ck:
        ck.submit(_snap(ring, 1.0, epoch=1), str(tmp_path / TEMPLATE)); ck.drain()
        real_write = os.write

        def full(fd, data):
            real_write(fd, bytes(memoryview(data)[:16]))       # a partial write, then the disk is full
            raise OSError(errno.ENOSPC, "No space left on device")
        monkeypatch.setattr(os, "write", full)
        ck.submit(_snap(ring, 2.0, epoch=2), str(tmp_path / TEMPLATE))
        with pytest.raises(CheckpointError, match="No space left on device"):
            ck.drain()
        monkeypatch.undo()
        # the worker survives the error and the next checkpoint is written
        ck.submit(_snap(ring, 3.0, epoch=3), str(tmp_path / TEMPLATE)); ck.drain()
    assert load_checkpoint(p)[1]["epoch"] == "3"
    assert _leftovers(tmp_path) == []


def test_disk_full_callback_surfaces_on_drain_and_close(tmp_path, ring):
    def full(data, meta):
        raise OSError(errno.ENOSPC, "No space left on device")
    ck = AsyncCheckpointer()
    fut = ck.submit(_snap(ring, 1.0, epoch=4, kind="periodic", fold=2), full)
    with pytest.raises(CheckpointError, match=r"periodic checkpoint \(fold 2, epoch 4\).*No space left on device"):
        ck.drain()
    assert isinstance(fut.exception(), CheckpointError)
    assert isinstance(fut.exception().__cause__, OSError)
    ck.submit(_snap(ring, 1.0, epoch=5, kind="periodic", fold=2), full)
    with pytest.raises(CheckpointError, match="epoch 5"):
        ck.close()                                             # close drains and re-raises too
    with pytest.raises(RuntimeError, match="closed"):
        ck.submit(_snap(ring, 1.0, epoch=6), full)
    assert all(not s.busy for p in ring._pools.values() for s in p), "failed jobs give their slots back"


def test_two_failures_are_both_named(tmp_path, ring):
    def full(data, meta):
        raise OSError(errno.ENOSPC, "No space left on device")
    with AsyncCheckpointer() as ck:
        ck.submit(_snap(ring, 1.0, epoch=1, kind="best"), full)
        ck.submit(_snap(ring, 1.0, epoch=1, kind="periodic"), full)
        with pytest.raises(CheckpointError) as e:
            ck.drain()
        assert "2 checkpoint jobs failed" in str(e.value) and "best" in str(e.value) and "periodic" in str(e.value)


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root ignores directory permissions")
def test_read_only_directory_real(tmp_path, ring):
    d = tmp_path / "ro"; d.mkdir()
    atomic_write_bytes(d / "fold0_best.safetensors", b"old")
    d.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        with AsyncCheckpointer() as ck:
            ck.submit(_snap(ring, 1.0, epoch=1), str(d / TEMPLATE))
            with pytest.raises(CheckpointError, match="PermissionError"):
                ck.drain()
    finally:
        d.chmod(stat.S_IRWXU)
    assert (d / "fold0_best.safetensors").read_bytes() == b"old"


def test_read_only_directory_simulated(tmp_path, ring, monkeypatch):
    """As root a chmod'ed directory stays writable, so the EACCES the kernel would give is injected at os.open."""
    d = tmp_path / "ro"; d.mkdir()
    atomic_write_bytes(d / "fold0_best.safetensors", b"old")
    real_open = os.open

    def ro_open(path, flags, *a, **k):
        if os.fspath(path).startswith(str(d)) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            raise PermissionError(errno.EACCES, "Permission denied", os.fspath(path))
        return real_open(path, flags, *a, **k)
    monkeypatch.setattr(os, "open", ro_open)
    with AsyncCheckpointer() as ck:
        ck.submit(_snap(ring, 1.0, epoch=1), str(d / TEMPLATE))
        with pytest.raises(CheckpointError, match="PermissionError.*Permission denied"):
            ck.drain()
    monkeypatch.undo()
    assert (d / "fold0_best.safetensors").read_bytes() == b"old"
    assert _leftovers(d) == []


def test_destination_directory_is_a_file(tmp_path, ring):
    (tmp_path / "runs").write_bytes(b"not a directory")
    with AsyncCheckpointer() as ck:
        ck.submit(_snap(ring, 1.0, epoch=1), str(tmp_path / "runs" / TEMPLATE))
        with pytest.raises(CheckpointError, match="best checkpoint"):
            ck.drain()


def test_missing_template_field_is_a_clear_error_at_submit(tmp_path, ring):
    with AsyncCheckpointer() as ck:
        with pytest.raises(ValueError, match="needs field 'seed'"):
            ck.submit(_snap(ring, 1.0, epoch=1), str(tmp_path / "x{seed}.safetensors"))


@pytest.mark.parametrize("cut", [0, 5, 8, 30, -1])
def test_truncated_file_is_a_clear_error(tmp_path, ring, cut):
    p = tmp_path / "m.safetensors"
    with AsyncCheckpointer() as ck:
        ck.submit(_snap(ring, 1.0, epoch=1), str(p)); ck.drain()
    raw = p.read_bytes()
    p.write_bytes(raw[:cut] if cut >= 0 else raw[:len(raw) + cut])
    with pytest.raises(ValueError, match="truncated|corrupt"):
        load_checkpoint(p)


_FRESH = r"""
import json, sys
import torch, safetensors.torch as s
from safetensors import safe_open
t = s.load_file(sys.argv[1])
with safe_open(sys.argv[1], "pt") as f:
    meta = f.metadata()
assert "gpurl" not in sys.modules, "loaded without gpurl"
print(json.dumps({"meta": meta, "w": t["w"].flatten()[:3].tolist(), "h": t["h"].float().tolist(),
                  "b": t["b"].tolist(), "dtypes": {k: str(v.dtype) for k, v in t.items()},
                  "n_state": len(json.loads(meta.get("__gpurl_state__", "{}")))}))
"""


def test_fresh_process_loads_with_safetensors_alone(tmp_path, ring):
    state = {"model": _weights(7.0), "step": 3, "rng": rng_state()}
    tensors, meta = flatten_state(state)
    with AsyncCheckpointer() as ck:
        ck.submit(_snap(ring, 7.0, epoch=9), str(tmp_path / TEMPLATE))
        ck.submit(snapshot_model_to_pinned(tensors, {**meta, "fold": 0, "kind": "last_state", "epoch": 9}, ring=ring),
                  str(tmp_path / TEMPLATE))
    r = subprocess.run([sys.executable, "-c", _FRESH, str(tmp_path / "fold0_best.safetensors")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["meta"]["epoch"] == "9" and out["meta"]["kind"] == "best" and "gpurl_version" in out["meta"]
    assert out["w"] == [7.0, 7.0, 7.0] and out["h"] == [7.0] * 5 and out["b"] == list(range(7, 15))
    assert out["dtypes"] == {"w": "torch.float32", "b": "torch.int64", "h": "torch.bfloat16"}
    # the full-state file too; and it rebuilds in this process
    r = subprocess.run([sys.executable, "-c", _FRESH.replace('t["w"]', 't["model/w"]').replace('t["h"]', 't["model/h"]')
                        .replace('t["b"]', 't["model/b"]'), str(tmp_path / "fold0_last_state.safetensors")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["n_state"] == 3
    back = unflatten_state(*load_checkpoint(tmp_path / "fold0_last_state.safetensors"))
    assert back["step"] == 3 and torch.equal(back["rng"]["torch"], state["rng"]["torch"])
