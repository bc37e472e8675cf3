"""Tests of the on-disk artifact cache (sol.cache)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sol
from sol import cache
from sol.errors import SolCacheError

KEY = "0123456789abcdef" * 2
OTHER = "fedcba9876543210" * 2


@pytest.fixture(autouse=True)
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("SOL_CACHE_DIR", str(root))
    return root


@pytest.fixture
def warnings(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    # SOL's logger does not propagate to the root logger, where caplog listens.
    logger = logging.getLogger("sol.cache")
    logger.addHandler(caplog.handler)
    caplog.set_level(logging.WARNING, logger="sol.cache")
    yield caplog
    logger.removeHandler(caplog.handler)


def make_builder(counter: list[Path], payload: bytes = b"\x7fELF fake shared object") -> Callable[[Path], dict]:
    def build(tmp: Path) -> dict:
        counter.append(tmp)
        (tmp / "model.so").write_bytes(payload)
        (tmp / "model.cpp").write_text("int forward() { return 0; }\n")
        (tmp / "sub").mkdir()
        (tmp / "sub" / "kernel.h").write_text("#pragma once\n")
        return {"name": "model", "shape": (1, 3)}

    return build


def source_dir(tmp_path: Path, content: bytes = b"library bytes") -> Path:
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    (src / "model.so").write_bytes(content)
    (src / "meta.json").write_text('{"a": 1}')
    return src


# -- round trip, info, clear ------------------------------------------------------


def test_path_follows_env_at_call_time(cache_dir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert cache.path() == cache_dir
    monkeypatch.setenv("SOL_CACHE_DIR", str(tmp_path / "elsewhere"))
    assert cache.path() == tmp_path / "elsewhere"
    monkeypatch.delenv("SOL_CACHE_DIR")
    import platformdirs

    assert cache.path() == Path(platformdirs.user_cache_dir("sol"))


def test_store_lookup_round_trip(cache_dir: Path, tmp_path: Path) -> None:
    assert cache.lookup(KEY) is None
    stored = cache.store(KEY, source_dir(tmp_path), {"backend": "x86", "flags": ["-O3"]})
    assert stored.path == cache_dir / "v1" / KEY[:2] / KEY
    assert stored.file("model.so").read_bytes() == b"library bytes"

    found = cache.lookup(KEY)
    assert found is not None
    assert found.key == KEY
    assert found.path == stored.path
    assert set(found.files) == {"model.so", "meta.json"}
    assert found.metadata == {"backend": "x86", "flags": ["-O3"]}
    assert found.file("meta.json").read_text() == '{"a": 1}'
    index = json.loads((found.path / "index.json").read_text())
    assert index["files"]["model.so"]["size"] == len(b"library bytes")
    assert len(index["files"]["model.so"]["sha256"]) == 64
    with pytest.raises(KeyError, match="has no file 'missing.so'.*meta.json, model.so"):
        found.file("missing.so")


def test_directories_are_private(cache_dir: Path, tmp_path: Path) -> None:
    cache.store(KEY, source_dir(tmp_path))
    for directory in (cache_dir, cache_dir / "v1"):
        assert directory.stat().st_mode & 0o777 == 0o700


def test_store_replaces_existing_entry(tmp_path: Path) -> None:
    cache.store(KEY, source_dir(tmp_path, b"old"), {"v": 1})
    cache.store(KEY, source_dir(tmp_path, b"new"), {"v": 2})
    entry = cache.lookup(KEY)
    assert entry is not None
    assert entry.file("model.so").read_bytes() == b"new"
    assert entry.metadata == {"v": 2}


def test_info_and_clear(cache_dir: Path, tmp_path: Path) -> None:
    empty = cache.info()
    assert (empty.path, empty.entries, empty.size_bytes) == (cache_dir, 0, 0)
    assert not cache_dir.exists()  # info creates nothing
    assert cache.clear() == 0

    cache.store(KEY, source_dir(tmp_path, b"x" * 3000))
    cache.store(OTHER, source_dir(tmp_path, b"y" * 10))
    report = cache.info()
    assert report.entries == 2
    assert report.size_bytes > 3010  # the artifacts plus their indexes
    text = str(report)
    assert str(cache_dir) in text and "2 entries" in text and "KiB" in text

    assert cache.clear() == 2
    assert cache.lookup(KEY) is None and cache.lookup(OTHER) is None
    assert cache.info().entries == 0
    assert str(cache.info()).endswith("0 entries, 0 B")


def test_get_or_build_builds_once(cache_dir: Path) -> None:
    builds: list[Path] = []
    first = cache.get_or_build(KEY, make_builder(builds))
    second = cache.get_or_build(KEY, make_builder(builds))
    assert len(builds) == 1
    assert builds[0].parent == cache_dir / "v1" / "tmp"  # built on the cache's filesystem
    assert not builds[0].exists()  # renamed into place
    assert first == second
    assert set(first.files) == {"model.so", "model.cpp", "sub/kernel.h"}
    assert first.metadata == {"name": "model", "shape": [1, 3]}  # as a later lookup sees it
    assert first.file("sub/kernel.h").read_text() == "#pragma once\n"


def test_invalid_keys_are_rejected() -> None:
    for bad in ("short", "0123456789ABCDEF", "g" * 16, "0" * 129, "../" + "0" * 16):
        with pytest.raises(ValueError, match="16 to 128 lower-case hex"):
            cache.lookup(bad)


def test_build_must_not_write_index_or_links(cache_dir: Path) -> None:
    with pytest.raises(ValueError, match="reserved"):
        cache.get_or_build(KEY, lambda tmp: (tmp / "index.json").write_text("{}") and None)

    def linking(tmp: Path) -> None:
        (tmp / "real.so").write_bytes(b"x")
        (tmp / "link.so").symlink_to(tmp / "real.so")

    with pytest.raises(ValueError, match="link.so is not a regular file"):
        cache.get_or_build(KEY, linking)
    with pytest.raises(TypeError, match="JSON"):
        cache.get_or_build(KEY, lambda tmp: {"bad": object()})
    assert cache.lookup(KEY) is None


def test_failed_build_is_kept_and_removed_by_next_build(cache_dir: Path, warnings: pytest.LogCaptureFixture) -> None:
    def failing(tmp: Path) -> None:
        (tmp / "build.log").write_text("error: boom")
        raise RuntimeError("compiler failed")

    with pytest.raises(RuntimeError, match="compiler failed"):
        cache.get_or_build(KEY, failing)
    kept = list((cache_dir / "v1" / "tmp").glob(f"{KEY}.*"))
    assert len(kept) == 1 and (kept[0] / "build.log").read_text() == "error: boom"
    assert str(kept[0]) in warnings.text

    cache.get_or_build(KEY, make_builder([]))
    assert not kept[0].exists()


def test_cancelled_build_leaves_nothing_and_warns_nothing(cache_dir: Path, warnings: pytest.LogCaptureFixture) -> None:
    def cancelled(tmp: Path) -> None:
        (tmp / "half.o").write_text("")
        raise cache.BuildCancelled("the process is ending")

    with pytest.raises(cache.BuildCancelled):
        cache.get_or_build(KEY, cancelled)
    assert not list((cache_dir / "v1" / "tmp").glob(f"{KEY}.*"))
    assert cache.lookup(KEY) is None
    assert "failed" not in warnings.text


# -- corruption -------------------------------------------------------------------


def corrupt_and_rebuild(
    warnings: pytest.LogCaptureFixture, damage: Callable[[cache.CacheEntry], object], reason: str
) -> None:
    builds: list[Path] = []
    entry = cache.get_or_build(KEY, make_builder(builds))
    damage(entry)
    assert cache.lookup(KEY) is None  # evicted, a miss
    assert not entry.path.exists()
    assert reason in warnings.text and "evicted" in warnings.text
    rebuilt = cache.get_or_build(KEY, make_builder(builds))
    assert len(builds) == 2
    assert rebuilt.file("model.so").read_bytes() == b"\x7fELF fake shared object"
    assert cache.lookup(KEY) == rebuilt


def test_truncated_artifact_is_evicted_and_rebuilt(warnings: pytest.LogCaptureFixture) -> None:
    def truncate(entry: cache.CacheEntry) -> None:
        data = entry.file("model.so").read_bytes()
        entry.file("model.so").write_bytes(data[: len(data) // 2])

    corrupt_and_rebuild(warnings, truncate, "truncated")


def test_same_size_different_content_is_evicted(warnings: pytest.LogCaptureFixture) -> None:
    def flip(entry: cache.CacheEntry) -> None:
        data = bytearray(entry.file("model.so").read_bytes())
        data[0] ^= 0xFF
        entry.file("model.so").write_bytes(bytes(data))

    corrupt_and_rebuild(warnings, flip, "sha256")


def test_garbage_index_is_evicted_and_rebuilt(warnings: pytest.LogCaptureFixture) -> None:
    corrupt_and_rebuild(warnings, lambda e: (e.path / "index.json").write_bytes(b"\xff{not json"), "cannot read")


def test_missing_index_is_evicted_and_rebuilt(warnings: pytest.LogCaptureFixture) -> None:
    corrupt_and_rebuild(warnings, lambda e: (e.path / "index.json").unlink(), "index.json is missing")


def test_missing_file_is_evicted_and_rebuilt(warnings: pytest.LogCaptureFixture) -> None:
    corrupt_and_rebuild(warnings, lambda e: e.file("sub/kernel.h").unlink(), "kernel.h is missing")


@pytest.mark.parametrize(
    "index",
    [
        [],
        {"key": OTHER, "files": {}, "metadata": {}},
        {"key": KEY, "files": {"../escape": {"size": 1, "sha256": "0"}}, "metadata": {}},
        {"key": KEY, "files": {"/etc/passwd": {"size": 1, "sha256": "0"}}, "metadata": {}},
        {"key": KEY, "files": {}},
    ],
    ids=["not-a-dict", "other-key", "dotdot", "absolute", "no-metadata"],
)
def test_malformed_index_is_evicted(index: object, warnings: pytest.LogCaptureFixture) -> None:
    corrupt_and_rebuild(warnings, lambda e: (e.path / "index.json").write_text(json.dumps(index)), "index.json")


def test_corrupt_entry_appearing_during_build_is_replaced(cache_dir: Path) -> None:
    final = cache_dir / "v1" / KEY[:2] / KEY

    def build(tmp: Path) -> dict:
        final.mkdir(parents=True)  # a writer that ignored the lock left garbage
        (final / "model.so").write_bytes(b"junk")
        (tmp / "model.so").write_bytes(b"good")
        return {}

    entry = cache.get_or_build(KEY, build)
    assert entry.path == final
    assert entry.file("model.so").read_bytes() == b"good"
    assert cache.lookup(KEY) == entry


def test_valid_entry_appearing_during_build_is_kept(tmp_path: Path) -> None:
    src = source_dir(tmp_path, b"published by someone else")

    def build(tmp: Path) -> dict:
        cache.store(KEY, src, {"winner": "other"})  # re-entrant lock: no deadlock
        (tmp / "model.so").write_bytes(b"ours")
        return {"winner": "us"}

    entry = cache.get_or_build(KEY, build)
    assert entry.metadata == {"winner": "other"}
    assert entry.file("model.so").read_bytes() == b"published by someone else"
    assert not list((cache.path() / "v1" / "tmp").glob(f"{KEY}.build.*"))


# -- directory safety -------------------------------------------------------------


@pytest.mark.parametrize("mode, who", [(0o777, "group and others"), (0o720, "group"), (0o702, "others")])
def test_writable_root_is_refused(cache_dir: Path, mode: int, who: str) -> None:
    cache_dir.mkdir()
    cache_dir.chmod(mode)
    with pytest.raises(SolCacheError) as raised:
        cache.get_or_build(KEY, make_builder([]))
    message = str(raised.value)
    assert str(cache_dir) in message
    assert f"writable by {who}" in message
    assert f"chmod 700 {cache_dir}" in message and "SOL_CACHE_DIR" in message
    for call in (cache.lookup, lambda key: cache.info(), lambda key: cache.clear()):
        with pytest.raises(SolCacheError):
            call(KEY)
    assert not (cache_dir / "v1").exists()  # nothing written into an unsafe dir


def test_world_writable_layout_dir_is_refused(cache_dir: Path, tmp_path: Path) -> None:
    cache.store(KEY, source_dir(tmp_path))
    (cache_dir / "v1").chmod(0o777)
    with pytest.raises(SolCacheError, match=f"{cache_dir / 'v1'} is writable by group and others"):
        cache.lookup(KEY)


def test_existing_readable_dir_is_accepted(cache_dir: Path) -> None:
    cache_dir.mkdir(mode=0o755)
    cache_dir.chmod(0o755)  # readable by others is fine; only writing is dangerous
    assert cache.get_or_build(KEY, make_builder([])).file("model.so").exists()


def test_dir_owned_by_someone_else_is_refused(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache_dir.mkdir(mode=0o700)
    owner = cache_dir.stat().st_uid
    monkeypatch.setattr(os, "getuid", lambda: owner + 4242)
    with pytest.raises(SolCacheError) as raised:
        cache.lookup(KEY)
    message = str(raised.value)
    assert str(cache_dir) in message
    assert f"owned by uid {owner}" in message and f"uid {owner + 4242}" in message
    assert "SOL_CACHE_DIR" in message and "chown" in message


def test_root_that_is_a_file_is_refused(cache_dir: Path) -> None:
    cache_dir.write_text("not a dir")
    with pytest.raises((SolCacheError, FileExistsError)):
        cache.lookup(KEY)
    with pytest.raises(SolCacheError, match="not a directory"):
        cache.info()


# -- cache disabled ---------------------------------------------------------------


@pytest.fixture
def cache_disabled() -> Iterator[None]:
    sol.config["cache::enabled"] = False
    yield
    del sol.config["cache::enabled"]


def test_disabled_cache_builds_outside_and_never_stores(
    cache_dir: Path, tmp_path: Path, cache_disabled: None
) -> None:
    builds: list[Path] = []
    first = cache.get_or_build(KEY, make_builder(builds))
    second = cache.get_or_build(KEY, make_builder(builds))
    assert len(builds) == 2
    for entry in (first, second):
        assert cache_dir not in entry.path.parents
        assert entry.file("model.so").read_bytes() == b"\x7fELF fake shared object"
        assert entry.metadata == {"name": "model", "shape": [1, 3]}
    assert first.path != second.path
    stored = cache.store(KEY, source_dir(tmp_path))
    assert stored.file("model.so").exists() and cache_dir not in stored.path.parents
    assert cache.lookup(KEY) is None
    assert not cache_dir.exists()


def test_disabled_cache_temp_dirs_removed_at_exit(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import sol
        from sol import cache
        sol.config["cache::enabled"] = False
        entry = cache.get_or_build({KEY!r}, lambda tmp: (tmp / "model.so").write_bytes(b"x") and None)
        assert entry.file("model.so").exists()
        print(entry.path)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    built = Path(done.stdout.strip())
    assert built.name.startswith("sol-") and not built.exists()


# -- crashed processes and concurrency -------------------------------------------------


def hold_lock(lock_file: Path) -> subprocess.Popen[str]:
    """A child process holding ``lock_file`` (as another SOL process building that key would)."""
    script = (
        "import filelock, time\n"
        f"lock = filelock.FileLock({str(lock_file)!r})\n"  # keep a reference: a dropped FileLock releases
        "lock.acquire()\n"
        "print('locked', flush=True)\n"
        "time.sleep(60)\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
    return holder


def test_stale_temp_dirs_and_lock_files_are_harmless(cache_dir: Path) -> None:
    layout = cache_dir / "v1"
    for sub in ("tmp", "locks"):
        (layout / sub).mkdir(parents=True, mode=0o700)
    cache_dir.chmod(0o700)
    layout.chmod(0o700)
    stale = layout / "tmp" / f"{KEY}.build.dead"
    stale.mkdir()
    (stale / "model.so").write_bytes(b"half")
    (layout / "tmp" / f"{KEY}.evicted.dead").write_bytes(b"a file, not a dir")
    (layout / "locks" / f"{KEY}.lock").write_text("left by a crashed process")

    # A process that dies (SIGKILL) while holding the lock.
    holder = hold_lock(layout / "locks" / f"{KEY}.lock")
    holder.kill()
    holder.wait()

    started = time.monotonic()
    entry = cache.get_or_build(KEY, make_builder([]))
    assert time.monotonic() - started < 30
    assert entry.file("model.so").exists()
    assert list((layout / "tmp").iterdir()) == []
    assert cache.info().entries == 1


def test_clear_removes_leftovers_but_skips_keys_being_built(cache_dir: Path, tmp_path: Path) -> None:
    cache.store(KEY, source_dir(tmp_path))
    cache.store(OTHER, source_dir(tmp_path))
    leftover = cache_dir / "v1" / "tmp" / f"{'a' * 16}.build.dead"
    leftover.mkdir()

    # Another process holds the lock of OTHER (it is building it).
    lock_file = cache_dir / "v1" / "locks" / f"{OTHER}.lock"
    holder = hold_lock(lock_file)
    try:
        assert cache.clear() == 1
    finally:
        holder.kill()
        holder.wait()
    assert cache.lookup(KEY) is None
    assert cache.lookup(OTHER) is not None
    assert not leftover.exists()


WORKER = textwrap.dedent(
    """
    import os, sys, time, uuid
    from pathlib import Path
    from sol import cache

    markers, go, *keys = sys.argv[1:]
    while not os.path.exists(go):  # start together, to make the race real
        time.sleep(0.005)

    def build(key):
        def run(tmp):
            Path(markers, f"{key}.{os.getpid()}.{uuid.uuid4().hex}").touch()
            time.sleep(0.3)  # a slow compiler keeps the window wide open
            (tmp / "model.so").write_bytes(key.encode() * 1000)
            (tmp / "model.cpp").write_text(f"// {key}")
            return {"key": key, "pid": os.getpid()}
        return run

    for key in keys:
        entry = cache.get_or_build(key, build(key))
        assert entry.file("model.so").read_bytes() == key.encode() * 1000, key
        assert entry.metadata["key"] == key
    print("ok")
    """
)


def test_processes_fill_the_same_cache_concurrently(cache_dir: Path, tmp_path: Path) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    go = tmp_path / "go"
    shared = "ab" * 16
    processes = 6
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(markers), str(go), shared, f"{index:02d}" * 16],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "SOL_CACHE_DIR": str(cache_dir)},
        )
        for index in range(processes)
    ]
    time.sleep(0.5)  # let them all start and wait for the signal
    go.touch()
    for worker in workers:
        out, err = worker.communicate(timeout=120)
        assert worker.returncode == 0, err
        assert out.strip() == "ok"

    built = sorted(m.name.split(".")[0] for m in markers.iterdir())
    assert built.count(shared) == 1  # the shared key was built exactly once
    for index in range(processes):
        assert built.count(f"{index:02d}" * 16) == 1
    assert cache.info().entries == processes + 1
    for key in [shared] + [f"{index:02d}" * 16 for index in range(processes)]:
        entry = cache.lookup(key)
        assert entry is not None and entry.metadata["key"] == key
        assert entry.file("model.so").read_bytes() == key.encode() * 1000
    assert list((cache_dir / "v1" / "tmp").iterdir()) == []


def test_threads_build_a_key_once() -> None:
    from concurrent.futures import ThreadPoolExecutor

    builds: list[Path] = []

    def build(tmp: Path) -> dict:
        builds.append(tmp)
        time.sleep(0.2)
        (tmp / "model.so").write_bytes(b"x")
        return {}

    with ThreadPoolExecutor(4) as pool:
        entries = list(pool.map(lambda _: cache.get_or_build(KEY, build), range(4)))
    assert len(builds) == 1
    assert len({e.path for e in entries}) == 1
