"""Bootstrap of ``tern.pyz``: put this interpreter's native modules on ``sys.path``.

C extensions cannot be imported from inside a zip, so the pyz carries each native
package (msgspec, and cffi's ``_cffi_backend`` on Windows) once per supported
(Python, platform) under ``_native/<sha16 of the extension>/``, described by a
manifest that ``build_pyz.py`` writes into the pyz's ``__main__.py``::

    {digest: {"package": "msgspec", "version": "0.22.0",
              "so": "_core.cpython-311-x86_64-linux-gnu.so", "python": "3.11",
              "platform": "linux", "machine": "x86_64", "tag": ..., "label": ...,
              "common": "msgspec-0.22.0"}}

Files identical in every bundle of a package version (msgspec's ``.py`` files) are
stored once, under ``_native/<common>/``; a bundle is its digest directory joined with
that one.

``bootstrap()`` picks the bundle whose ``so`` is exactly ``<stem> + suffix`` for the
first matching suffix of ``importlib.machinery.EXTENSION_SUFFIXES`` (and, on macOS,
whose machine is ``os.uname().machine``, since both Mac builds share a file name).
The bundle is extracted once into ``<cache>/native/<package>-<version>-<digest>``:

- every directory of the chain (``<cache>``, ``<cache>/native``, the bundle) must be
  owned by this user and not group- or world-writable, else ``BundleError``: another
  user who can write there could swap the native module tern loads. tern creates
  them 0700 whatever the umask; extracted files are 0400.
- warm path: the directory exists and every file still matches the stamp written at
  extraction (``.tern-stamp``: size, mtime and inode of each file, 0400) and the
  directory holds nothing else at its top (it goes first on ``sys.path``). A stat per
  file, no hashing: hashing msgspec on every start would cost ~10 ms. Nothing else is
  imported (no zipfile, json or platform: they cost
  ~18 ms per start).
- a directory whose files differ from their stamp (or without one) is moved aside and
  extracted again.
- cold path: extract into a fresh ``.tmp-*`` work directory in ``<cache>/native``,
  checking each file's SHA-256 against the manifest (written by ``build_pyz.py``) before
  it is written, precompile it, stamp it, then
  ``os.rename`` it into place. A racer that loses the rename finds the target there
  and uses it; the work directory is removed either way. A published directory is
  complete and never changes again (CPython reads ``.pyc`` files without locking).
- unwritable cache: extract into a temporary directory removed at exit.

This module is imported right after ``runtime._pyzcode`` (which it shares the cache
root and the owner/mode checks with): standard library only, and only ``os``, ``sys``
and that module at import time.
"""

import os
import sys

from runtime._pyzcode import WORK_PREFIX, cache_root, unsafe_owner_or_mode
from runtime._pyzcode import private_dir as _private_dir

__all__ = ["BUNDLE_PACKAGES", "bootstrap", "cache_root", "bundle_dir_names", "in_use", "running_manifest",
           "prune_cache", "unsafe_owner_or_mode"]

#: Native packages every platform needs (others, e.g. ``_cffi_backend``, are needed
#: where the manifest has bundles for the platform).
BUNDLE_PACKAGES = ("msgspec",)

#: Extension module stem per package: ``<stem><EXTENSION_SUFFIX>``; default the package.
_STEMS = {"msgspec": "_core"}

#: A work directory older than this is debris of a killed process.
STALE_WORK_SECS = 3600

_manifest = None  # the manifest bootstrap() was given (the running pyz's)
_in_use = []  # directory names under <cache>/native this process put on sys.path


def _dir_name(digest, entry):
    return f"{entry['package']}-{entry['version']}-{digest}"


def bundle_dir_names(manifest):
    """The ``<cache>/native`` directory names of every bundle in ``manifest``."""
    return {_dir_name(digest, entry) for digest, entry in manifest.items()}


def running_manifest():
    """The manifest of the running pyz, or None when tern does not run from one."""
    return _manifest


def in_use():
    """Directory names under ``<cache>/native`` this process put on ``sys.path``."""
    return set(_in_use)


def _select(manifest, package):
    """The (digest, entry) of the bundle of ``package`` this interpreter can load."""
    import importlib.machinery  # already imported by runpy when running the pyz

    stem = _STEMS.get(package, package)
    machine = os.uname().machine if sys.platform == "darwin" else None
    libc = _libc() if sys.platform == "linux" else None
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        wanted = stem + suffix
        for digest, entry in manifest.items():
            if (
                entry["package"] == package
                and entry["so"] == wanted
                and entry["platform"] == sys.platform
                and (machine is None or entry["machine"] == machine)
                and (libc is None or entry.get("libc", libc) == libc)
            ):
                return digest, entry
    return None


def _libc():
    """"glibc" or "musl" (Alpine): on Python 3.10 the two builds share file names."""
    try:
        return "glibc" if os.confstr("CS_GNU_LIBC_VERSION") else "musl"
    except (ValueError, OSError, AttributeError):
        return "musl"


def bootstrap(manifest, archive):
    """Put the native bundles this interpreter needs first on ``sys.path``.

    ``manifest`` is the pyz's ``NATIVE`` literal; ``archive`` is the pyz path, or the
    ``__file__`` of its ``__main__.py``. Returns the directories added. Raises
    ``BundleError`` (one line, listing what is supported) when a needed package has
    no bundle here and is not installed either.
    """
    global _manifest
    _manifest = manifest
    if os.path.basename(archive) in ("__main__.py", "__main__.pyc"):
        archive = os.path.dirname(archive)
    archive = os.path.abspath(archive)
    packages = list(BUNDLE_PACKAGES)
    for entry in manifest.values():
        if entry["platform"] == sys.platform and entry["package"] not in packages:
            packages.append(entry["package"])
    added = []
    for package in packages:
        chosen = _select(manifest, package)
        if chosen is None:
            if _installed(package):
                continue
            raise _no_bundle(manifest, package)
        digest, entry = chosen
        path = _ensure(archive, digest, entry)
        sys.path.insert(0, path)
        added.append(path)
    return added


def _installed(package):
    try:
        __import__(package)
    except ImportError:
        return False
    return True


def _no_bundle(manifest, package):
    from runtime.errors import BundleError

    import importlib.machinery

    pairs = {}
    for entry in manifest.values():
        if entry["package"] == package:
            pairs.setdefault(entry["label"], set()).add(entry["python"])
    supported = "; ".join(
        f"{label}: Python {', '.join(sorted(pythons, key=lambda v: tuple(map(int, v.split('.')))))}"
        for label, pythons in sorted(pairs.items())
    )
    if hasattr(os, "uname"):
        machine = os.uname().machine
    else:
        machine = os.environ.get("PROCESSOR_ARCHITECTURE", "unknown machine")
    name = {"cpython": "CPython", "pypy": "PyPy"}.get(sys.implementation.name, sys.implementation.name)
    here = (
        f"{name} {sys.version_info[0]}.{sys.version_info[1]} on {sys.platform} {machine} "
        f"(extension suffix {importlib.machinery.EXTENSION_SUFFIXES[0]})"
    )
    oldest = min(
        (tuple(map(int, e["python"].split("."))) for e in manifest.values()), default=(3, 10)
    )
    if sys.version_info[:2] < oldest:
        return BundleError(
            f"tern needs Python {oldest[0]}.{oldest[1]} or newer, but this is {here}. "
            f"Supported: {supported}."
        )
    return BundleError(
        f"this tern.pyz has no {package} native module for {here}, and no {package} is "
        f"installed for this Python. Supported: {supported}. Run tern with one of those "
        f"Pythons, or install {package} for this one (python -m pip install {package})."
    )


def _ensure(archive, digest, entry):
    """The extracted bundle directory, extracting it first if it is not there yet."""
    name = _dir_name(digest, entry)
    root = cache_root()
    native = os.path.join(root, "native")
    target = os.path.join(native, name)
    try:
        _private_dir(root, follow=True)
        _private_dir(native)
    except OSError:
        return _extract_to_temp(archive, digest, entry, name)
    if os.path.lexists(target):
        try:
            st = os.lstat(target)
        except OSError:
            st = None
        if st is not None:
            if ((st.st_mode & 0o170000) == 0o040000 and not unsafe_owner_or_mode(st, target)
                    and _stamp_matches(target, entry)):
                _in_use.append(name)
                return target
            _set_aside(native, target, name)
    try:
        work = _make_work_dir(native, name)
    except OSError:
        return _extract_to_temp(archive, digest, entry, name)
    try:
        _extract(archive, digest, entry, work, target)
        _write_stamp(work, entry)
        _publish(work, target)
    except OSError:  # e.g. the disk is full: still run, from a temp dir
        return _extract_to_temp(archive, digest, entry, name)
    finally:
        if os.path.lexists(work):  # gone already if we won the rename
            import shutil

            shutil.rmtree(work, ignore_errors=True)
    _in_use.append(name)
    return target


STAMP = ".tern-stamp"


def _stamped_files(dest, entry):
    """Every file extraction writes (relative names): the bundle's and their pycs."""
    names = list(entry["files"]) + list(entry.get("common_files", ()))
    if not sys.pycache_prefix:
        from importlib.util import cache_from_source

        for rel in list(names):
            if rel.endswith(".py"):
                names.append(os.path.relpath(cache_from_source(os.path.join(dest, rel)), dest).replace(os.sep, "/"))
    return names


def _write_stamp(dest, entry):
    """Record (size, mtime, inode) of every extracted file, for the warm path's check."""
    lines = []
    for rel in _stamped_files(dest, entry):
        st = os.lstat(os.path.join(dest, *rel.split("/")))
        lines.append(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}\n")
    fd = os.open(os.path.join(dest, STAMP), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
    with open(fd, "w", encoding="utf-8") as out:
        out.write("".join(lines))


def _stamp_matches(target, entry):
    """Whether ``target`` holds exactly what was extracted: its top-level names, and
    every file as stamped (same size, mtime, inode, a regular file owned by us)."""
    try:
        with open(os.path.join(target, STAMP), encoding="utf-8") as stamp:
            lines = stamp.read().splitlines()
        tops = {STAMP}
        seen = set()
        uid = os.geteuid() if os.name == "posix" else None
        for line in lines:
            rel, size, mtime, ino = line.split("\0")
            st = os.lstat(os.path.join(target, *rel.split("/")))
            if (st.st_mode & 0o170000) != 0o100000 or st.st_size != int(size) or st.st_mtime_ns != int(mtime) \
                    or st.st_ino != int(ino) or (uid is not None and (st.st_uid != uid or st.st_mode & 0o022)):
                return False
            tops.add(rel.split("/")[0])
            seen.add(rel)
        wanted = set(entry["files"]) | set(entry.get("common_files", ()))
        return wanted <= seen and set(os.listdir(target)) == tops
    except (OSError, ValueError):
        return False


def _set_aside(native, target, name):
    """Move a damaged or foreign bundle directory out of the way (prune removes debris)."""
    import shutil

    try:
        aside = _make_work_dir(native, "bad-" + name)
        os.rmdir(aside)
        os.rename(target, aside)
    except OSError:
        return  # another process set it aside first, or it cannot be moved: extraction will tell
    shutil.rmtree(aside, ignore_errors=True)


def _make_work_dir(parent, name):
    """A new, empty, uniquely named work directory under ``parent``.

    ``tempfile.mkdtemp`` would do, but importing tempfile costs a few ms per cold start.
    """
    import time

    base = f"{WORK_PREFIX}{name}-{os.getpid()}-{time.monotonic_ns()}"
    for attempt in range(100):
        path = os.path.join(parent, f"{base}-{attempt}")
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue
        if os.name == "posix":
            os.chmod(path, 0o700)
        return path
    raise FileExistsError(f"cannot create a work directory in {parent}")


def _publish(work, target):
    """Rename ``work`` to ``target``; if another process got there first, use theirs."""
    attempts = 10 if sys.platform == "win32" else 1
    for attempt in range(attempts):
        try:
            os.rename(work, target)
            return
        except OSError:
            if os.path.isdir(target):
                return  # another process won; its directory is complete
            if attempt + 1 == attempts:
                raise
            import time

            time.sleep(0.05 * (attempt + 1))  # antivirus may hold new files briefly


def _extract_to_temp(archive, digest, entry, name):
    """Unwritable cache: extract into a temporary directory removed at exit."""
    import atexit
    import shutil
    import tempfile

    from runtime.errors import BundleError

    try:
        path = tempfile.mkdtemp(prefix="tern-" + name + "-")
    except OSError as error:
        raise BundleError(
            f"cannot extract {name}: neither the cache {cache_root()} nor the temporary "
            f"directory is writable ({error.strerror}); set TERN_CACHE_DIR to a writable "
            "directory"
        ) from None
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    try:
        _extract(archive, digest, entry, path, path)
    except OSError as error:
        raise BundleError(f"cannot extract {name} into {path}: {error}") from None
    return path


def _extract(archive, digest, entry, dest, final):
    """Write the bundle's files into ``dest`` and precompile its ``.py`` files.

    ``final`` is where ``dest`` will be renamed to (the code objects' file names).

    The bundle is ``_native/<digest>/<f>`` for each ``f`` in ``entry["files"]`` and
    ``_native/<entry["common"]>/<f>`` for each ``f`` in ``entry["common_files"]``. They
    are read through zipimport, whose parsed directory of the pyz is already cached:
    no zipfile import, no second parse of ~700 entries.
    """
    import marshal
    import zipimport
    from importlib.util import MAGIC_NUMBER, cache_from_source, source_hash

    pyz = zipimport.zipimporter(archive)
    members = [(f"_native/{digest}/{f}", f) for f in entry["files"]]
    if entry.get("common"):
        members += [(f"_native/{entry['common']}/{f}", f) for f in entry["common_files"]]
    hashes = entry.get("sha256")
    made = {dest}
    for member, rel in members:
        parts = rel.split("/")
        if any(part in ("", ".", "..") or ":" in part or "\\" in part for part in parts) or rel == STAMP:
            from runtime.errors import BundleError

            raise BundleError(f"the pyz is damaged: unsafe entry name {member!r}")
        data = pyz.get_data(member)
        if hashes is not None:
            _check_hash(member, data, hashes.get(rel))
        path = os.path.join(dest, *parts)
        _write_new(made, path, data)
        if rel.endswith(".py") and not sys.pycache_prefix:
            # Complete before it is published (this also covers
            # PYTHONDONTWRITEBYTECODE=1): an unchecked-hash pyc (PEP 552), as
            # py_compile would write it, without importing py_compile.
            code = compile(data, os.path.join(final, *parts), "exec", dont_inherit=True)
            pyc = cache_from_source(path)
            _write_new(made, pyc, MAGIC_NUMBER + b"\x01\x00\x00\x00" + source_hash(data) + marshal.dumps(code))


def _write_new(made, path, data):
    """A new file, 0400 (its folders 0700), whatever the umask."""
    folder = os.path.dirname(path)
    if folder not in made:
        missing = []
        while folder not in made and not os.path.isdir(folder):
            missing.append(folder)
            folder = os.path.dirname(folder)
        for folder in reversed(missing):
            os.mkdir(folder, 0o700)  # the umask can only narrow it
            made.add(folder)
        made.add(os.path.dirname(path))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o400)
    with open(fd, "wb") as out:
        out.write(data)


def _check_hash(member, data, expected):
    """The member's SHA-256 must be the one the build recorded in the manifest."""
    try:
        from _sha2 import sha256  # 3.12+; hashlib would load OpenSSL (~5 ms)
    except ImportError:
        try:
            from _sha256 import sha256
        except ImportError:
            from hashlib import sha256
    if expected is None or sha256(data).hexdigest() != expected:
        from runtime.errors import BundleError

        raise BundleError(f"the pyz is damaged: {member} does not match the SHA-256 its manifest records")


def prune_cache(keep=None, *, root=None, now=None, build=None):
    """Remove stale entries from ``<cache>/native`` and ``<cache>/code``; return their paths.

    Native bundles kept: the names in ``keep`` (default: every bundle of the running
    pyz, i.e. the manifest ``bootstrap()`` was given, or none when tern does not run
    from a pyz), the directories this process uses, and work directories younger than
    an hour (another process may be extracting). Code caches kept: those of ``build``
    (default: the running pyz's, for every Python; none when tern does not run from a
    pyz); in them, files being written (``.tmp-*``) younger than an hour. Removed:
    everything else of ours, including work files and directories left by killed
    processes. What cannot be removed (on Windows, a loaded ``.pyd``) is skipped and
    not reported.
    """
    import time

    from runtime import _pyzcode

    if keep is None:
        keep = bundle_dir_names(_manifest) if _manifest is not None else set()
    keep = set(keep) | set(_in_use)
    if build is None:
        build = _pyzcode.running_build()
    root = root if root is not None else cache_root()
    now = time.time() if now is None else now
    removed = []
    for name, path in _entries(os.path.join(root, "native")):
        if name.startswith(WORK_PREFIX):
            if _young(path, now):
                continue
        elif name in keep:
            continue
        _remove(path, removed)
    for name, path in _entries(os.path.join(root, "code")):
        if build and name.startswith(build + "-") and not name.startswith(WORK_PREFIX):
            for inner, work in _entries(path):
                if inner.startswith(WORK_PREFIX) and not _young(work, now):
                    _remove(work, removed, files=True)
            continue
        _remove(path, removed)
    return removed


def _entries(folder):
    try:
        return [(name, os.path.join(folder, name)) for name in sorted(os.listdir(folder))]
    except OSError:
        return []


def _young(path, now):
    try:
        return now - os.lstat(path).st_mtime < STALE_WORK_SECS
    except OSError:
        return True  # gone or unreadable: leave it


def _remove(path, removed, files=False):
    """Remove a link or directory tree (and a file if ``files``: other files are not
    ours); note it in ``removed`` if it went."""
    import shutil

    try:
        if os.path.islink(path) or (files and os.path.isfile(path)):
            os.unlink(path)
        elif os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            return
    except OSError:
        return
    if not os.path.lexists(path):
        removed.append(path)
