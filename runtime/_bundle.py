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

- warm path: the directory exists; it goes first on ``sys.path``. Nothing else is
  imported (no zipfile, json or platform: they cost ~18 ms per start).
- cold path: extract into a fresh ``.tmp-*`` work directory in ``<cache>/native``,
  precompile it, then
  ``os.rename`` it into place. A racer that loses the rename finds the target there
  and uses it; the work directory is removed either way. A published directory is
  complete and never changes again (CPython reads ``.pyc`` files without locking).
- unwritable cache: extract into a temporary directory removed at exit.

This module is imported before anything else in the pyz: standard library only, and
only ``os`` and ``sys`` at import time.
"""

import os
import sys

__all__ = ["BUNDLE_PACKAGES", "bootstrap", "cache_root", "bundle_dir_names", "in_use", "running_manifest",
           "prune_cache"]

#: Native packages every platform needs (others, e.g. ``_cffi_backend``, are needed
#: where the manifest has bundles for the platform).
BUNDLE_PACKAGES = ("msgspec",)

#: Extension module stem per package: ``<stem><EXTENSION_SUFFIX>``; default the package.
_STEMS = {"msgspec": "_core"}

#: Prefix of work directories under ``<cache>/native``.
WORK_PREFIX = ".tmp-"

#: A work directory older than this is debris of a killed process.
STALE_WORK_SECS = 3600

_manifest = None  # the manifest bootstrap() was given (the running pyz's)
_in_use = []  # directory names under <cache>/native this process put on sys.path


def cache_root():
    """tern's cache directory (it may not exist yet).

    ``TERN_CACHE_DIR`` if set; else ``$XDG_CACHE_HOME/tern`` or ``~/.cache/tern`` on
    Linux, ``~/Library/Caches/tern`` on macOS, ``%LOCALAPPDATA%\\tern\\Cache`` on Windows.
    """
    explicit = os.environ.get("TERN_CACHE_DIR")
    if explicit:
        return os.path.abspath(os.path.expanduser(explicit))
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or os.path.join(
            os.path.expanduser("~"), "AppData", "Local"
        )
        return os.path.join(base, "tern", "Cache")
    if sys.platform == "darwin":
        return os.path.join(os.path.expanduser("~"), "Library", "Caches", "tern")
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg and os.path.isabs(xdg):
        return os.path.join(xdg, "tern")
    return os.path.join(os.path.expanduser("~"), ".cache", "tern")


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
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        wanted = stem + suffix
        for digest, entry in manifest.items():
            if (
                entry["package"] == package
                and entry["so"] == wanted
                and entry["platform"] == sys.platform
                and (machine is None or entry["machine"] == machine)
            ):
                return digest, entry
    return None


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
    native = os.path.join(cache_root(), "native")
    target = os.path.join(native, name)
    if os.path.isdir(target):
        _in_use.append(name)
        return target
    try:
        os.makedirs(native, exist_ok=True)
        work = _make_work_dir(native, name)
    except OSError:
        return _extract_to_temp(archive, digest, entry, name)
    try:
        _extract(archive, digest, entry, work, target)
        if os.name == "posix":
            os.chmod(work, 0o755)
        _publish(work, target)
    except OSError:  # e.g. the disk is full: still run, from a temp dir
        return _extract_to_temp(archive, digest, entry, name)
    finally:
        if os.path.lexists(work):  # gone already if we won the rename
            import shutil

            shutil.rmtree(work, ignore_errors=True)
    _in_use.append(name)
    return target


def _make_work_dir(parent, name):
    """A new, empty, uniquely named work directory under ``parent``.

    ``tempfile.mkdtemp`` would do, but importing tempfile costs a few ms per cold start.
    """
    import time

    base = f"{WORK_PREFIX}{name}-{os.getpid()}-{time.monotonic_ns()}"
    for attempt in range(100):
        path = os.path.join(parent, f"{base}-{attempt}")
        try:
            os.mkdir(path)
        except FileExistsError:
            continue
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
    made = {dest}
    for member, rel in members:
        parts = rel.split("/")
        if any(part in ("", ".", "..") or ":" in part or "\\" in part for part in parts):
            from runtime.errors import BundleError

            raise BundleError(f"the pyz is damaged: unsafe entry name {member!r}")
        data = pyz.get_data(member)
        path = os.path.join(dest, *parts)
        folder = os.path.dirname(path)
        if folder not in made:
            os.makedirs(folder, exist_ok=True)
            made.add(folder)
        with open(path, "wb") as out:
            out.write(data)
        if rel.endswith(".py") and not sys.pycache_prefix:
            # Complete before it is published (this also covers
            # PYTHONDONTWRITEBYTECODE=1): an unchecked-hash pyc (PEP 552), as
            # py_compile would write it, without importing py_compile.
            code = compile(data, os.path.join(final, *parts), "exec", dont_inherit=True)
            pyc = cache_from_source(path)
            folder = os.path.dirname(pyc)
            if folder not in made:
                os.makedirs(folder, exist_ok=True)
                made.add(folder)
            with open(pyc, "wb") as out:
                out.write(MAGIC_NUMBER + b"\x01\x00\x00\x00" + source_hash(data) + marshal.dumps(code))


def prune_cache(keep=None, *, root=None, now=None):
    """Remove stale bundle directories from ``<cache>/native``; return the removed paths.

    Kept: the names in ``keep`` (default: every bundle of the running pyz, i.e. the
    manifest ``bootstrap()`` was given, or none when tern does not run from a pyz),
    the directories this process uses, and work directories younger than an hour
    (another process may be extracting). Removed: every other directory, including
    work directories left by killed processes. A directory that cannot be removed
    (on Windows, a loaded ``.pyd``) is skipped and not reported.
    """
    import shutil
    import time

    if keep is None:
        keep = bundle_dir_names(_manifest) if _manifest is not None else set()
    keep = set(keep) | set(_in_use)
    native = os.path.join(root if root is not None else cache_root(), "native")
    now = time.time() if now is None else now
    try:
        names = sorted(os.listdir(native))
    except OSError:
        return []
    removed = []
    for name in names:
        path = os.path.join(native, name)
        try:
            if name.startswith(WORK_PREFIX):
                if now - os.lstat(path).st_mtime < STALE_WORK_SECS:
                    continue
            elif name in keep:
                continue
            if os.path.islink(path):
                os.unlink(path)
            elif os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                continue  # not ours
        except OSError:
            continue
        if not os.path.lexists(path):
            removed.append(path)
    return removed
