"""Sessions share one CPU memory arena (as2d.runtime.sessions.shared_arena).

Each onnxruntime session otherwise keeps an arena of its own, grown to the peak of its own runs:
a long AS²D run held nine of them, and the arenas were most of its peak memory. These tests
fail if a regression gives sessions their own arenas again."""

from __future__ import annotations

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

from as2d.runtime import sessions  # noqa: E402

N = 16 * 1024 * 1024  # floats: a 64-MB intermediate tensor


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def _graph(path) -> None:
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [None])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [])
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    nodes = [helper.make_node("Mul", ["x", "two"], ["big"]),  # lives in the arena
             helper.make_node("ReduceSum", ["big"], ["y"], keepdims=0)]
    g = helper.make_graph(nodes, "big", [x], [y], [two])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))


def test_sessions_use_the_shared_arena(tmp_path, monkeypatch):
    monkeypatch.delenv("AS2D_SHARED_ARENA", raising=False)
    if sessions._shared_arena is False:
        pytest.skip("this process registered no shared arena (AS2D_SHARED_ARENA=0 at its start)")
    assert sessions.shared_arena()
    _graph(tmp_path / "g.onnx")
    for threads in (1, 2):
        so = sessions.make_session(tmp_path / "g.onnx", threads).get_session_options()
        assert so.get_session_config_entry("session.use_env_allocators") == "1"
        assert not so.enable_mem_pattern  # a pattern block beside the arena's chunks


@pytest.mark.skipif(not __import__("os").path.exists("/proc/self/statm"), reason="Linux RSS")
def test_a_second_session_reuses_what_the_first_freed(tmp_path):
    """Two sessions (one model at two thread counts, as AS²D's target decoder has) run one
    after the other: the second allocates its 64-MB intermediate where the first's was, so
    the process does not grow by another 64 MB."""
    if not sessions.shared_arena():
        pytest.skip("no shared arena in this process")
    _graph(tmp_path / "g.onnx")
    x = np.ones(N, np.float32)
    first = sessions.make_session(tmp_path / "g.onnx", 1)
    second = sessions.make_session(tmp_path / "g.onnx", 2)
    for _ in range(2):  # (with a memory pattern, the second run would allocate it)
        assert first.run(None, {"x": x})[0] == 2.0 * N
    before = _rss_mb()
    assert second.run(None, {"x": x})[0] == 2.0 * N
    grown = _rss_mb() - before
    assert grown < 32, f"the second session grew the process by {grown:.0f} MB (its own arena)"


def _resident_kb(path) -> int:
    """Resident kilobytes of this process's mappings of ``path``."""
    total, inside, name = 0, False, str(path.resolve())
    with open("/proc/self/smaps") as f:
        for line in f:
            fields = line.split()
            if "-" in fields[0] and not fields[0].endswith(":"):
                inside = len(fields) >= 6 and fields[5] == name
            elif inside and fields[0] == "Rss:":
                total += int(fields[1])
    return total


def _on_tmpfs(path) -> bool:
    """Whether ``path`` lies in memory (tmpfs: its pages cannot be paged out without swap)."""
    best, kind = "", ""
    with open("/proc/mounts") as f:
        for line in f:
            fields = line.split()
            if str(path).startswith(fields[1]) and len(fields[1]) > len(best):
                best, kind = fields[1], fields[2]
    return kind in ("tmpfs", "ramfs")


def test_file_pages_are_given_back_and_read_again_unchanged(tmp_path):
    """drop_file_pages (a compiled encoder's source after its first run): a read-only shared
    mapping's pages leave this process and come back unchanged when read; a private, written
    mapping of the same folder keeps its own (changed) pages."""
    if _on_tmpfs(tmp_path.resolve()):
        pytest.skip("the temporary folder is in memory: its pages stay")
    data = np.arange(4 * 1024 * 1024, dtype=np.float32)  # 16 MB
    shared, private = tmp_path / "blob.bin", tmp_path / "copy.bin"
    data.tofile(shared)
    data.tofile(private)
    view = np.memmap(shared, dtype=np.float32, mode="r")
    mine = np.memmap(private, dtype=np.float32, mode="c")
    assert float(view.sum()) == float(data.sum())  # every page read
    mine += 1  # copy-on-write: pages of its own
    assert _resident_kb(shared) > 8 * 1024
    sessions.drop_file_pages(tmp_path)
    assert _resident_kb(shared) < 1024
    assert np.array_equal(view, data)  # read again from the file
    assert np.array_equal(mine, data + 1)
