"""The on-disk artifact cache: compiled models stored under a key, shared by processes.

A key (a hex string the caller computes from everything that affects an
artifact) maps to an *entry*: a directory of files (``model.so``,
``model.cpp``, ...) plus ``index.json``, which records the sha256 and size of
every file and the caller's free-form metadata::

    entry = sol.cache.get_or_build(key, build)   # build(tmpdir) -> metadata
    lib = ctypes.CDLL(str(entry.file("model.so")))

Layout (``<root>`` is ``platformdirs.user_cache_dir("sol")``, or ``SOL_CACHE_DIR``)::

    <root>/v1/<key[:2]>/<key>/     published entries (each with index.json)
    <root>/v1/tmp/<key>.*          builds in progress, failed builds, evicted entries
    <root>/v1/locks/<key>.lock     one lock file per key

Guarantees:

* Safety: SOL dlopens what it finds here, so the root and ``v1`` directories
  are created with mode 0700, and a directory owned by another user or
  writable by group or others is refused with `SolCacheError`.
* Integrity: every file is hashed against the index before an entry is
  returned. A missing or garbage index, a missing file or a size/hash mismatch
  is corruption: the entry is evicted (logged at WARNING) and reported as a
  miss, so the caller rebuilds it. Corruption never raises.
* Concurrency: entries are built in a temp directory inside the cache and
  published with one atomic rename, so nobody ever sees half an entry; a lock
  per key (`filelock`) makes concurrent processes build one key only once.
  Lock files and temp directories left by crashed processes are harmless: the
  OS drops a dead process's lock, and leftovers of a key are removed by the
  next build of that key (or by `clear`).
* ``sol.config["cache::enabled"] = False``: `get_or_build` and `store` work in
  a temp directory outside the cache that lives until the process exits, and
  `lookup` always misses; the cache directory is not touched at all.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

import filelock
import platformdirs

from . import log
from .errors import SolCacheError

__all__ = ["BuildCancelled", "CacheEntry", "CacheInfo", "clear", "get_or_build", "info", "lookup", "path", "store"]

_log = log.get("cache")

#: Bump when the entry layout or index format changes; old versions are simply ignored.
LAYOUT_VERSION = "v1"
INDEX_NAME = "index.json"
_KEY_RE = re.compile(r"[0-9a-f]{16,128}")
_SHARD_RE = re.compile(r"[0-9a-f]{2}")
# A build holding a lock longer than this gets an INFO line in the waiting process,
# so a "hang" behind a long compile in another process is explained.
_LOCK_NOTICE_S = 2.0


class BuildCancelled(Exception):
    """Raised by a ``build`` callable that gave up on purpose (e.g. the process is exiting): not a failure, so its
    directory is removed and nothing is logged as a warning."""


@dataclasses.dataclass(frozen=True)
class CacheEntry:
    """A verified cache entry: ``files`` maps each file name (posix, relative) to its path."""

    key: str
    path: Path
    files: Mapping[str, Path]
    metadata: Mapping[str, Any]

    def file(self, name: str) -> Path:
        """The path of one file of the entry, e.g. ``entry.file("model.so")``."""
        try:
            return self.files[name]
        except KeyError:
            raise KeyError(
                f"cache entry {self.key} has no file {name!r}; it has: {', '.join(sorted(self.files)) or 'none'}"
            ) from None


@dataclasses.dataclass(frozen=True)
class CacheInfo:
    """What `info` reports about the cache directory."""

    path: Path
    entries: int
    size_bytes: int

    def __str__(self) -> str:
        noun = "entry" if self.entries == 1 else "entries"
        return f"SOL cache at {self.path}: {self.entries} {noun}, {_human_size(self.size_bytes)}"


# -- public API -----------------------------------------------------------------


def path() -> Path:
    """The cache root: ``SOL_CACHE_DIR`` if set, else ``platformdirs.user_cache_dir("sol")``.

    Read on every call (not at import) so a process or a test can redirect it.
    Nothing is created or checked.
    """
    override = os.environ.get("SOL_CACHE_DIR", "").strip()
    return Path(override).expanduser().absolute() if override else Path(platformdirs.user_cache_dir("sol"))


def info() -> CacheInfo:
    """Number of entries and bytes on disk; creates nothing, refuses an unsafe directory."""
    root = path()
    layout = _layout_dir(create=False)
    if layout is None:
        return CacheInfo(root, 0, 0)
    size = 0
    for dirpath, _dirs, filenames in os.walk(layout):
        for name in filenames:
            try:
                size += os.lstat(os.path.join(dirpath, name)).st_size
            except FileNotFoundError:  # removed by a concurrent process while we walk
                pass
    return CacheInfo(root, sum(1 for _ in _entry_dirs(layout)), size)


def clear() -> int:
    """Remove every entry (and leftovers of crashed builds); returns the number of entries removed.

    An entry whose key is being built by another process right now is left
    alone: that process holds its lock and will publish a fresh entry anyway.
    Lock files stay: deleting a lock file another process waits on would let
    two processes hold "the" lock at once.
    """
    layout = _layout_dir(create=False)
    if layout is None:
        return 0
    removed = 0
    for entry_dir in list(_entry_dirs(layout)):
        key = entry_dir.name
        try:
            with _lock(layout, key, timeout=0):
                _remove_leftovers(layout, key)
                if entry_dir.exists():
                    _discard(layout, entry_dir, key, "cleared")
                    removed += 1
        except filelock.Timeout:
            _log.info("cache entry %s is being built by another process; not cleared", key)
        with contextlib.suppress(OSError):
            entry_dir.parent.rmdir()  # the shard directory, once empty
    # Leftovers of keys that have no entry (e.g. a build that crashed before publishing).
    tmp_dir = layout / "tmp"
    keys = {p.name.split(".", 1)[0] for p in tmp_dir.iterdir()} if tmp_dir.is_dir() else set()
    for key in keys:
        if _KEY_RE.fullmatch(key):
            try:
                with _lock(layout, key, timeout=0):
                    _remove_leftovers(layout, key)
            except filelock.Timeout:
                pass
    _log.info("cache cleared: %d entries removed from %s", removed, layout)
    return removed


def lookup(key: str) -> CacheEntry | None:
    """The verified entry for ``key``, or None (a miss; a corrupt entry is evicted first)."""
    _check_key(key)
    if not _enabled():
        return None
    layout = _layout_dir(create=True)
    assert layout is not None
    entry = _load(layout, key)
    if isinstance(entry, CacheEntry):
        return entry
    if entry is None:
        return None
    # Corrupt: evict under the lock, re-checking first, so we never evict an
    # entry another process has just rebuilt in its place.
    with _lock(layout, key):
        entry = _load(layout, key)
        if isinstance(entry, str):
            _evict(layout, key, entry)
    return entry if isinstance(entry, CacheEntry) else None


def store(key: str, src_dir: str | os.PathLike[str], metadata: Mapping[str, Any] | None = None) -> CacheEntry:
    """Copy the files of ``src_dir`` into the cache as the entry of ``key``, replacing an existing one."""
    _check_key(key)
    src = Path(src_dir)
    if not src.is_dir():
        raise NotADirectoryError(f"sol.cache.store({key!r}, ...): {src} is not a directory")
    if not _enabled():
        work = _process_temp_dir(key)
        try:
            shutil.copytree(src, work, dirs_exist_ok=True)
            entry = _finish(work, key, metadata)
        except BaseException:
            _remove(work)
            raise
        atexit.register(_remove, work)
        return entry
    layout = _layout_dir(create=True)
    assert layout is not None
    with _lock(layout, key):
        _remove_leftovers(layout, key)
        with _new_temp_dir(layout, key) as work:
            try:
                shutil.copytree(src, work, dirs_exist_ok=True)
                final = _entry_dir(layout, key)
                if final.exists():
                    _discard(layout, final, key, "replaced")
                return _publish(layout, key, work, metadata)
            finally:
                _remove(work)  # gone already once published


def get_or_build(key: str, build: Callable[[Path], Mapping[str, Any] | None]) -> CacheEntry:
    """The entry of ``key``; on a miss, ``build(tmpdir)`` writes its files and returns metadata.

    ``tmpdir`` is a fresh, empty directory on the cache's filesystem; ``build``
    may return None for no metadata. Concurrent callers (threads or processes)
    wait for one build instead of building the same key twice. If ``build``
    raises, its directory is kept for inspection (its path is logged) until
    the next build of the key, and the exception propagates; a `BuildCancelled`
    propagates too, but its directory is removed.
    """
    _check_key(key)
    if not _enabled():
        work = _process_temp_dir(key)
        metadata = _run_build(build, work, key)  # on failure, work is kept for inspection
        entry = _finish(work, key, metadata)
        atexit.register(_remove, work)  # the caller may dlopen its files until the process ends
        return entry
    hit = lookup(key)
    if hit is not None:
        return hit
    layout = _layout_dir(create=True)
    assert layout is not None
    with _lock(layout, key):
        # Another process may have built it while we waited for the lock.
        entry = _load(layout, key)
        if isinstance(entry, CacheEntry):
            return entry
        if isinstance(entry, str):
            _evict(layout, key, entry)
        _remove_leftovers(layout, key)  # only the lock holder builds, so these are stale
        with _new_temp_dir(layout, key) as work:
            metadata = _run_build(build, work, key)  # on failure, work is kept for inspection
            try:
                return _publish(layout, key, work, metadata)
            finally:
                _remove(work)  # gone already once published


# -- the directory and its safety --------------------------------------------------


def _current_uid() -> int | None:
    """The uid that must own the cache; None where uids do not exist (Windows)."""
    getuid = getattr(os, "getuid", None)
    return getuid() if getuid is not None else None


def _layout_dir(*, create: bool) -> Path | None:
    """``<root>/v1`` after checking root and ``v1`` are safe; None if absent and not ``create``."""
    root = path()
    layout = root / LAYOUT_VERSION
    for directory in (root, layout):
        if create:
            # mode applies to the leaf only; parents (e.g. ~/.cache) get the default mode
            os.makedirs(directory, mode=0o700, exist_ok=True)
        elif not os.path.lexists(directory):
            return None
        _check_private(directory)
    return layout


def _check_private(directory: Path) -> None:
    """Refuse a directory others could plant a shared object in (SOL dlopens what it finds)."""
    uid = _current_uid()
    if uid is None:  # Windows: the per-user profile directory is private by default ACLs
        return
    try:
        st = os.stat(directory)
    except OSError as exc:
        raise SolCacheError(f"SOL cache directory {directory} cannot be used: {exc}. {_ADVICE}") from exc
    if not stat.S_ISDIR(st.st_mode):
        raise SolCacheError(f"SOL cache directory {directory} is not a directory. {_ADVICE}")
    if st.st_uid != uid:
        raise SolCacheError(
            f"SOL cache directory {directory} is owned by {_user(st.st_uid)}, not by you ({_user(uid)}). "
            "SOL loads compiled code from it, so it must be yours alone. "
            f"Fix it with `chown -R {uid} {directory}`, or {_ADVICE_ENV}."
        )
    writable = [who for who, bit in (("group", stat.S_IWGRP), ("others", stat.S_IWOTH)) if st.st_mode & bit]
    if writable:
        raise SolCacheError(
            f"SOL cache directory {directory} is writable by {' and '.join(writable)} "
            f"(mode {stat.S_IMODE(st.st_mode):04o}). SOL loads compiled code from it, so nobody else "
            f"may write there. Fix it with `chmod 700 {directory}`, or {_ADVICE_ENV}."
        )


_ADVICE_ENV = (
    "set SOL_CACHE_DIR to a directory only you can write, "
    "or disable the cache with sol.config['cache::enabled'] = False"
)
_ADVICE = _ADVICE_ENV[0].upper() + _ADVICE_ENV[1:] + "."


def _user(uid: int) -> str:
    try:
        import pwd

        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def _enabled() -> bool:
    import sol  # at call time: sol.config is created after this module is imported

    return bool(sol.config["cache::enabled"])


# -- entries --------------------------------------------------------------------


def _check_key(key: str) -> None:
    if not isinstance(key, str) or not _KEY_RE.fullmatch(key):
        raise ValueError(f"cache key must be 16 to 128 lower-case hex digits, got {key!r}")


def _entry_dir(layout: Path, key: str) -> Path:
    return layout / key[:2] / key


def _entry_dirs(layout: Path) -> Iterator[Path]:
    for shard in layout.iterdir():
        if shard.is_dir() and _SHARD_RE.fullmatch(shard.name):
            for entry in shard.iterdir():
                if _KEY_RE.fullmatch(entry.name) and entry.name.startswith(shard.name):
                    yield entry


def _load(layout: Path, key: str) -> CacheEntry | str | None:
    """The verified entry, None if there is none, or why it is corrupt (a str)."""
    directory = _entry_dir(layout, key)
    if not os.path.lexists(directory):
        return None
    try:
        index = json.loads((directory / INDEX_NAME).read_text(encoding="utf-8"))
        if not isinstance(index, dict) or index.get("key") != key:
            return f"{INDEX_NAME} does not describe key {key}"
        listed, metadata = index.get("files"), index.get("metadata")
        if not isinstance(listed, dict) or not isinstance(metadata, dict):
            return f"{INDEX_NAME} lacks 'files' or 'metadata'"
        files: dict[str, Path] = {}
        for name, record in listed.items():
            if not _safe_name(name) or not isinstance(record, dict):
                return f"{INDEX_NAME} has a bad record for {name!r}"
            file = directory / name
            st = os.lstat(file)
            if not stat.S_ISREG(st.st_mode):
                return f"{name} is not a regular file"
            if st.st_size != record.get("size"):
                return f"{name} has {st.st_size} bytes, the index says {record.get('size')} (truncated?)"
            if _sha256(file) != record.get("sha256"):
                return f"{name} does not match its sha256 in the index"
            files[name] = file
    except FileNotFoundError as exc:
        return f"{Path(exc.filename or '?').name} is missing"
    except (OSError, ValueError) as exc:  # unreadable, or not JSON / not UTF-8
        return f"cannot read it: {type(exc).__name__}: {exc}"
    return CacheEntry(key, directory, files, metadata)


def _safe_name(name: object) -> bool:
    # Index names come from disk; never let one point outside the entry.
    if not isinstance(name, str) or not name or "\\" in name or name == INDEX_NAME:
        return False
    pure = PurePosixPath(name)
    return not pure.is_absolute() and ".." not in pure.parts and str(pure) == name


def _sha256(file: Path) -> str:
    digest = hashlib.sha256()
    with open(file, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _write_index(directory: Path, key: str, metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    """Hash every file under ``directory`` into its index.json; returns the index."""
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, Mapping):
        raise TypeError(f"cache entry {key}: metadata must be a dict, got {type(metadata).__name__}")
    files: dict[str, dict[str, Any]] = {}
    for file in sorted(directory.rglob("*")):
        name = file.relative_to(directory).as_posix()
        if name == INDEX_NAME:
            raise ValueError(f"cache entry {key}: {INDEX_NAME} is reserved for the cache's own index")
        if file.is_symlink() or not (file.is_file() or file.is_dir()):
            raise ValueError(f"cache entry {key}: {name} is not a regular file (links are not cached)")
        if file.is_file():
            files[name] = {"size": file.stat().st_size, "sha256": _sha256(file)}
    try:
        text = json.dumps({"key": key, "files": files, "metadata": dict(metadata)}, indent=1, sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"cache entry {key}: metadata must be JSON-serialisable: {exc}") from exc
    # No fsync: a file cut short by a crash fails verification and is rebuilt.
    (directory / INDEX_NAME).write_text(text, encoding="utf-8")
    return json.loads(text)  # what a later lookup will see (tuples become lists, ...)


def _finish(directory: Path, key: str, metadata: Mapping[str, Any] | None) -> CacheEntry:
    index = _write_index(directory, key, metadata)
    files = {name: directory / name for name in index["files"]}
    return CacheEntry(key, directory, files, index["metadata"])


def _publish(layout: Path, key: str, work: Path, metadata: Mapping[str, Any] | None) -> CacheEntry:
    """Index ``work`` and rename it into place (lock held). Returns the published entry."""
    entry = _finish(work, key, metadata)
    final = _entry_dir(layout, key)
    final.parent.mkdir(mode=0o700, exist_ok=True)
    for _attempt in range(2):
        try:
            os.rename(work, final)  # atomic: readers see no entry or a whole one
        except OSError:
            # The entry appeared meanwhile (a writer that ignores our lock, e.g.
            # on a filesystem without working locks). Keep a valid one: other
            # processes may already use it; replace a corrupt one.
            existing = _load(layout, key)
            if isinstance(existing, CacheEntry):
                _log.debug("cache entry %s appeared during the build; keeping it", key)
                return existing
            if existing is None:
                raise
            _evict(layout, key, existing)
            continue
        _log.debug("cache entry %s stored at %s", key, final)
        return dataclasses.replace(entry, path=final, files={n: final / n for n in entry.files})
    raise SolCacheError(f"cannot publish cache entry {key} at {final}: it keeps reappearing corrupt")


def _run_build(build: Callable[[Path], Mapping[str, Any] | None], work: Path, key: str) -> Mapping[str, Any] | None:
    try:
        return build(work)
    except BuildCancelled as cancelled:
        _log.debug("building cache entry %s was cancelled: %s", key, cancelled)
        _remove(work)
        raise
    except BaseException:
        _log.warning("building cache entry %s failed; its files are kept in %s", key, work)
        raise


def _evict(layout: Path, key: str, reason: str) -> None:
    directory = _entry_dir(layout, key)
    _log.warning("cache entry %s at %s is corrupt (%s); evicted, it will be rebuilt", key, directory, reason)
    _discard(layout, directory, key, "evicted")


def _discard(layout: Path, directory: Path, key: str, why: str) -> None:
    # Rename first so the final name goes away atomically; if we crash while
    # deleting, the rest is a leftover in tmp/, not a half-entry.
    trash = _temp_root(layout) / f"{key}.{why}.{uuid.uuid4().hex[:8]}"
    try:
        os.rename(directory, trash)
    except FileNotFoundError:
        return
    _remove(trash)


def _remove(target: Path) -> None:
    """Delete a directory tree, or a file where a directory was expected; never raises."""
    if target.is_dir() and not target.is_symlink():
        shutil.rmtree(target, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            target.unlink()


# -- temp directories and locks -----------------------------------------------------


def _temp_root(layout: Path) -> Path:
    tmp = layout / "tmp"
    tmp.mkdir(mode=0o700, exist_ok=True)
    return tmp


# Builds in progress in this process. The lock is re-entrant, so holding it does
# not prove that no build of the key is live: a build callback may store or
# build its own key, and must not sweep away the outer build's directory.
_LIVE_BUILDS: set[Path] = set()


@contextlib.contextmanager
def _new_temp_dir(layout: Path, key: str) -> Iterator[Path]:
    # Inside the cache so the final rename stays on one filesystem (atomic).
    work = Path(tempfile.mkdtemp(prefix=f"{key}.build.", dir=_temp_root(layout)))
    _LIVE_BUILDS.add(work)
    try:
        yield work
    finally:
        _LIVE_BUILDS.discard(work)


def _remove_leftovers(layout: Path, key: str) -> None:
    """Remove temp dirs of ``key`` (lock held: no other process is building it)."""
    for leftover in _temp_root(layout).glob(f"{key}.*"):
        if leftover not in _LIVE_BUILDS:
            _log.debug("removing leftover %s", leftover)
            _remove(leftover)


def _process_temp_dir(key: str) -> Path:
    """A private temp dir outside the cache (cache disabled); callers register its removal at exit."""
    return Path(tempfile.mkdtemp(prefix=f"sol-{key[:16]}-"))


# One FileLock per lock file in this process: FileLock is re-entrant per object
# (and per thread), but two objects on one path would deadlock a thread that
# nests them, e.g. a build callback that looks up its own key.
_LOCKS: dict[str, filelock.FileLock] = {}
_LOCKS_GUARD = threading.Lock()


@contextlib.contextmanager
def _lock(layout: Path, key: str, timeout: float = -1) -> Iterator[None]:
    """Hold the lock of ``key``; ``timeout`` >= 0 raises `filelock.Timeout` when it is busy."""
    locks = layout / "locks"
    locks.mkdir(mode=0o700, exist_ok=True)
    name = str(locks / f"{key}.lock")
    with _LOCKS_GUARD:
        lock = _LOCKS.get(name)
        if lock is None:
            lock = _LOCKS[name] = filelock.FileLock(name, mode=0o600)
    if timeout >= 0:
        lock.acquire(timeout=timeout)
    else:
        try:
            lock.acquire(timeout=_LOCK_NOTICE_S)
        except filelock.Timeout:
            _log.info("waiting for another process that is building cache entry %s", key)
            lock.acquire()
    try:
        yield
    finally:
        lock.release()


def _human_size(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")
