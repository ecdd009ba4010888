#!/usr/bin/env python3
"""Build ``dist/tern.pyz``: tern and its pinned runtime dependencies in one runnable file.

Usage (from the repository root, with only the standard library and pip)::

    python3 build_pyz.py [--out dist/tern.pyz] [--offline] [--platform KEY ...]

Any CPython 3.10 or newer builds it; the output does not depend on which one.

What it does (the design is in docs/packaging.md):

1. Reads the ``[runtime]`` section of ``.ci/requirements.lock``.
2. Fetches wheels with ``pip download --no-deps --only-binary=:all:`` into
   ``build/wheels/`` (git-ignored). A wheel already there is reused without asking
   the index, so a second build is offline and fast.
3. Unpacks the pure-Python wheels at the zip root (no tests, ``__pycache__`` or
   ``.pyi``; ``*.dist-info/METADATA`` and licence files are kept), adds the ``runtime``
   package and ``config.toml`` as ``runtime/default_config.toml``.
4. Stores every native package (msgspec for each supported Python x platform, cffi's
   ``_cffi_backend`` for Windows) under ``_native/<sha16 of the extension>/`` (files
   identical in all bundles of a package once, under ``_native/<package>-<version>/``)
   and writes the manifest as a literal in the generated ``runtime/_pyz_manifest.py``.
5. Ships sources only, no ``.pyc``: each interpreter compiles what it imports once
   into the per-user cache (``runtime._pyzcode``). The generated ``__main__.py`` holds
   ``BUILD``, a digest of everything else in the file, which names that cache.
6. Writes a deterministic zip: sorted entries, fixed timestamps and permissions,
   ``ZIP_DEFLATED``, ``#!/usr/bin/env python3`` shebang, mode 0755. The same inputs
   give a byte-identical file.
7. Beside it, for MCP hosts (``build_mcpb.py``): ``tern.mcpb``, an MCP Bundle of the pyz
   that a desktop assistant installs with one click, and ``server.json``, the MCP
   registry's entry for that bundle. Reproducible too.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import build_mcpb

ROOT = Path(__file__).resolve().parent

# --- what goes into the pyz ---------------------------------------------------------

#: CPython versions the pyz supports (one native bundle each per platform).
PYTHONS = ("3.10", "3.11", "3.12", "3.13", "3.14")


@dataclass(frozen=True)
class Platform:
    key: str  # our name for it
    pip_platforms: tuple[str, ...]  # pip download --platform values
    tag_pattern: str  # a wheel platform tag that counts as this platform
    sys_platform: str  # sys.platform there
    machine: str  # os.uname().machine there (compared on macOS only)
    label: str  # for people


PLATFORMS = (
    Platform(
        "manylinux_x86_64",
        ("manylinux2014_x86_64", "manylinux_2_17_x86_64"),
        r"manylinux(2014|_2_\d+)_x86_64",
        "linux",
        "x86_64",
        "Linux x86_64 (glibc)",
    ),
    Platform(
        "manylinux_aarch64",
        ("manylinux2014_aarch64", "manylinux_2_17_aarch64"),
        r"manylinux(2014|_2_\d+)_aarch64",
        "linux",
        "aarch64",
        "Linux aarch64 (glibc)",
    ),
    Platform(
        "musllinux_x86_64",
        ("musllinux_1_2_x86_64",),
        r"musllinux_1_\d+_x86_64",
        "linux",
        "x86_64",
        "Linux x86_64 (musl: Alpine)",
    ),
    Platform(
        "musllinux_aarch64",
        ("musllinux_1_2_aarch64",),
        r"musllinux_1_\d+_aarch64",
        "linux",
        "aarch64",
        "Linux aarch64 (musl: Alpine)",
    ),
    Platform(
        "macos_arm64",
        ("macosx_14_0_arm64",),
        r"macosx_\d+_\d+_arm64",
        "darwin",
        "arm64",
        "macOS arm64",
    ),
    Platform(
        "macos_x86_64",
        ("macosx_14_0_x86_64",),
        r"macosx_\d+_\d+_x86_64",
        "darwin",
        "x86_64",
        "macOS x86_64",
    ),
    Platform("win_amd64", ("win_amd64",), r"win_amd64", "win32", "AMD64", "Windows x86_64"),
)


@dataclass(frozen=True)
class Native:
    module: str  # what Python imports: a package or a top-level extension module
    stem: str  # the extension file is <stem><EXTENSION_SUFFIX>
    keep_package: bool  # bundle the package's pure .py files with the extension


#: Distributions with a compiled part. Each is bundled per (Python, platform) for which
#: its lock-file marker holds, and never at the zip root.
NATIVE = {
    "msgspec": Native(module="msgspec", stem="_core", keep_package=True),
    # trio on Windows imports only _cffi_backend (from its pre-generated FFI module);
    # the cffi package itself is the FFI compiler and is not needed at run time.
    "cffi": Native(module="_cffi_backend", stem="_cffi_backend", keep_package=False),
}

#: Locked distributions deliberately left out, with the reason.
LEFT_OUT = {
    "pycparser": "only cffi's FFI compiler uses it; at run time trio imports just _cffi_backend",
}

#: Zip timestamp of every entry (the earliest a zip can hold).
ZIP_DATE = (1980, 1, 1, 0, 0, 0)
SIZE_BUDGET_BYTES = 10_000_000  # 10 MB: the ceiling the daily-use issue sets for the one file
SHEBANG = b"#!/usr/bin/env python3\n"

#: Files of locked wheels that tern never imports, with the reason (each costs size).
DROP_FILES = {
    "anyio/_backends/_asyncio.py": "tern runs on trio only; httpx imports just anyio's lazy-import shim",
    "anyio/pytest_plugin.py": "a pytest plugin",
    "httpx/_main.py": "httpx's command line (it needs click and rich)",
}

DROP_DIRS = {"tests", "_tests", "test", "__pycache__"}
DROP_SUFFIXES = (".pyi", ".pyc", ".pyo")
LICENSE_RE = re.compile(r"(LICEN[CS]E|COPYING|NOTICE|AUTHORS)", re.IGNORECASE)


class BuildError(Exception):
    """A problem the person building can fix; printed as one message, no traceback."""


# --- the lock file ------------------------------------------------------------------


@dataclass(frozen=True)
class Requirement:
    name: str
    version: str
    marker: str  # "" when none

    @property
    def key(self) -> str:
        return normalize(self.name)


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def read_lock(path: Path, section: str = "runtime") -> list[Requirement]:
    """The pinned requirements of one ``# [section]`` of the lock file."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as error:
        raise BuildError(f"cannot read the lock file {path}: {error}") from None
    current = None
    found = False
    requirements = []
    for number, line in enumerate(lines, 1):
        text = line.strip()
        header = re.fullmatch(r"#\s*\[([\w-]+)\]", text)
        if header:
            current = header.group(1)
            found = found or current == section
            continue
        if not text or text.startswith("#") or current != section:
            continue
        spec, _, marker = text.partition(";")
        name, sep, version = spec.strip().partition("==")
        if not sep or not name.strip() or not version.strip():
            raise BuildError(f"{path}:{number}: expected 'name==version [; marker]', got {text!r}")
        requirements.append(Requirement(name.strip(), version.strip(), marker.strip()))
    if not found or not requirements:
        raise BuildError(f"{path}: no requirements in a '# [{section}]' section")
    return requirements


def _marker_class():
    try:
        from packaging.markers import Marker
    except ImportError:  # only pip is installed: use the copy pip vendors
        from pip._vendor.packaging.markers import Marker
    return Marker


def marker_holds(marker: str, python: str, platform: Platform) -> bool:
    """Whether a requirement marker holds for CPython ``python`` on ``platform``."""
    if not marker:
        return True
    os_name = "nt" if platform.sys_platform == "win32" else "posix"
    system = {"linux": "Linux", "darwin": "Darwin", "win32": "Windows"}[platform.sys_platform]
    environment = {
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "python_version": python,
        "python_full_version": python + ".0",
        "implementation_version": python + ".0",
        "sys_platform": platform.sys_platform,
        "platform_system": system,
        "os_name": os_name,
        "platform_machine": platform.machine,
    }
    try:
        return bool(_marker_class()(marker).evaluate(environment))
    except Exception as error:
        raise BuildError(f"cannot evaluate the marker {marker!r}: {error}") from None


# --- wheels -------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """What one wheel must be compatible with: pure Python, or (Python, platform)."""

    python: str | None = None
    platform: Platform | None = None

    @property
    def pure(self) -> bool:
        return self.platform is None

    def describe(self) -> str:
        if self.pure:
            return "pure Python (py3-none-any)"
        return f"CPython {self.python} on {self.platform.label}"


WHEEL_RE = re.compile(
    r"^(?P<name>[^-]+)-(?P<version>[^-]+)(-\d[^-]*)?-(?P<py>[^-]+)-(?P<abi>[^-]+)-(?P<plat>[^-]+)\.whl$"
)


def wheel_matches(filename: str, requirement: Requirement, target: Target) -> bool:
    match = WHEEL_RE.match(filename)
    if not match or normalize(match["name"]) != requirement.key:
        return False
    if match["version"] != requirement.version:
        return False
    pys, abis, plats = (match[k].split(".") for k in ("py", "abi", "plat"))
    if target.pure:
        return "none" in abis and "any" in plats and any(p.startswith("py3") for p in pys)
    cp = "cp" + target.python.replace(".", "")
    return (
        cp in pys
        and cp in abis
        and any(re.fullmatch(target.platform.tag_pattern, p) for p in plats)
    )


def find_wheel(wheels: Path, requirement: Requirement, target: Target) -> Path | None:
    if not wheels.is_dir():
        return None
    candidates = sorted(
        p for p in wheels.iterdir() if wheel_matches(p.name, requirement, target)
    )
    return candidates[0] if candidates else None


def pip_download(wheels: Path, requirements: list[Requirement], target: Target) -> None:
    """Download the wheels of ``requirements`` for ``target`` into ``wheels``."""
    command = [
        sys.executable, "-m", "pip", "download",
        "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
        "--progress-bar", "off", "--quiet", "--dest", str(wheels),
    ]  # fmt: skip
    if target.pure:
        # A pure wheel only: never a compiled (e.g. mypyc) build of the same release.
        command += ["--implementation", "py", "--platform", "any", "--python-version", PYTHONS[0]]
    else:
        command += ["--implementation", "cp", "--python-version", target.python]
        for platform in target.platform.pip_platforms:
            command += ["--platform", platform]
    command += [f"{r.name}=={r.version}" for r in requirements]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        names = ", ".join(f"{r.name}=={r.version}" for r in requirements)
        output = (result.stderr or result.stdout).strip()
        raise BuildError(
            f"pip could not download {names} for {target.describe()}:\n{output}"
        )


def fetch_wheels(
    wheels: Path, wanted: list[tuple[Requirement, Target]], offline: bool, jobs: int
) -> dict[tuple[Requirement, Target], Path]:
    """Find every wanted wheel in ``wheels``, downloading only the missing ones."""
    found = {}
    missing: dict[Target, list[Requirement]] = {}
    for requirement, target in wanted:
        path = find_wheel(wheels, requirement, target)
        if path is None:
            missing.setdefault(target, []).append(requirement)
        else:
            found[requirement, target] = path
    if missing:
        count = sum(len(v) for v in missing.values())
        if offline:
            first = next(iter(missing.items()))
            raise BuildError(
                f"--offline: {count} wheel(s) missing from {wheels}, "
                f"e.g. {first[1][0].name}=={first[1][0].version} for {first[0].describe()}"
            )
        print(f"downloading {count} wheel(s) into {display(wheels)} ...", flush=True)
        wheels.mkdir(parents=True, exist_ok=True)
        with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
            futures = [pool.submit(pip_download, wheels, reqs, t) for t, reqs in missing.items()]
            for future in futures:
                future.result()
        for target, requirements in missing.items():
            for requirement in requirements:
                path = find_wheel(wheels, requirement, target)
                if path is None:
                    raise BuildError(
                        f"pip ran but no {requirement.name}=={requirement.version} wheel for "
                        f"{target.describe()} is in {wheels}"
                    )
                found[requirement, target] = path
    return found


def wheel_members(path: Path) -> list[tuple[str, bytes]]:
    """The files of a wheel as (name, data), directories left out."""
    with zipfile.ZipFile(path) as wheel:
        return [
            (info.filename, wheel.read(info))
            for info in wheel.infolist()
            if not info.is_dir()
        ]


def keep_member(name: str) -> bool:
    """Whether a wheel file belongs in the pyz."""
    parts = name.split("/")
    if parts[0].endswith(".dist-info"):
        # METADATA for importlib.metadata (trio-websocket reads trio's version),
        # licence texts because we redistribute; RECORD, WHEEL, entry points go.
        rest = parts[1:]
        return rest == ["METADATA"] or (
            len(rest) >= 1 and (rest[0] == "licenses" or LICENSE_RE.match(rest[0]) is not None)
        )
    if parts[0].endswith(".data"):
        return False
    if any(part in DROP_DIRS for part in parts[:-1]) or name in DROP_FILES:
        return False
    return not name.endswith(DROP_SUFFIXES)


# --- assembling the archive ---------------------------------------------------------


class Entries(dict):
    """Archive name -> bytes, refusing a name twice."""

    def add(self, name: str, data: bytes, origin: str) -> None:
        if name in self:
            raise BuildError(f"{name} comes from two places (second: {origin})")
        self[name] = data


def add_pure_wheel(entries: Entries, wheel: Path) -> None:
    for name, data in wheel_members(wheel):
        parts = name.split("/")
        if parts[0].endswith(".data") and parts[1:2] in (["purelib"], ["platlib"]):
            raise BuildError(f"{wheel.name}: code under {parts[0]}/{parts[1]} is not supported")
        if keep_member(name):
            entries.add(name, data, wheel.name)


def read_native_wheel(
    requirement: Requirement, native: Native, target: Target, wheel: Path
) -> tuple[str, dict[str, bytes], dict[str, str]]:
    """The (digest, files, manifest entry) of one native wheel's bundle."""
    members = wheel_members(wheel)
    ext = re.compile(re.escape(native.stem) + r"\.[^/]*(\.so|\.pyd)$")
    if native.keep_package:
        extensions = [
            (n, d) for n, d in members
            if n.startswith(native.module + "/") and n.count("/") == 1 and ext.fullmatch(n.split("/")[1])
        ]  # fmt: skip
    else:
        extensions = [(n, d) for n, d in members if "/" not in n and ext.fullmatch(n)]
    if len(extensions) != 1:
        raise BuildError(
            f"{wheel.name}: expected one {native.stem} extension module, found "
            f"{[n for n, _ in extensions] or 'none'}"
        )
    so_name, so_data = extensions[0]
    files = {}
    for name, data in members:
        top = name.split("/")[0]
        if top.endswith(".dist-info"):
            keep = keep_member(name)
        elif native.keep_package:
            keep = top == native.module and keep_member(name)
        else:
            keep = name == so_name
        if keep:
            files[name] = data
    entry = {
        "package": native.module,
        "version": requirement.version,
        "so": so_name.split("/")[-1],
        "python": target.python,
        "platform": target.platform.sys_platform,
        "machine": target.platform.machine,
        "tag": WHEEL_RE.match(wheel.name)["plat"],
        "label": target.platform.label,
    }
    if target.platform.key.startswith(("manylinux", "musllinux")):
        # CPython before 3.11 names its extensions "-linux-gnu" on musl too, so the file
        # name alone cannot tell the two Linux builds apart there: the C library can.
        entry["libc"] = "musl" if target.platform.key.startswith("musllinux") else "glibc"
    return hashlib.sha256(so_data).hexdigest()[:16], files, entry


def add_native_bundles(
    entries: Entries, bundles: list[tuple[str, dict[str, bytes], dict[str, str]]]
) -> dict:
    """Store the bundles under ``_native/``; return the manifest.

    A file that is byte-identical in every bundle of a package version (msgspec's
    pure ``.py`` files, its METADATA and licence) is stored once, under
    ``_native/<package>-<version>/``, named by the entry's ``common`` key; the rest
    (the extension module) under ``_native/<digest>/``. Extraction joins the two, so
    each cache directory still holds the complete package.
    """
    manifest: dict = {}
    groups: dict[tuple[str, str], list] = {}
    for digest, files, entry in bundles:
        if digest in manifest:
            raise BuildError(f"two native bundles have the same digest {digest}")
        manifest[digest] = entry
        groups.setdefault((entry["package"], entry["version"]), []).append((digest, files, entry))
    for (package, version), group in sorted(groups.items()):
        common_names: set[str] = set()
        if len(group) > 1:
            first = group[0][1]
            common_names = {
                name for name, data in first.items()
                if name.split("/")[-1] != group[0][2]["so"]
                and all(files.get(name) == data for _, files, _ in group[1:])
            }  # fmt: skip
        common = f"{package}-{version}"
        for name in sorted(common_names):
            entries.add(f"_native/{common}/{name}", group[0][1][name], common)
        for digest, files, entry in group:
            # Checked by runtime._bundle before anything extracted is loaded.
            entry["sha256"] = {name: hashlib.sha256(data).hexdigest() for name, data in sorted(files.items())}
            entry["files"] = sorted(set(files) - common_names)
            if common_names:
                entry["common"] = common
                entry["common_files"] = sorted(common_names)
            for name, data in sorted(files.items()):
                if name not in common_names:
                    entries.add(f"_native/{digest}/{name}", data, digest)
    return manifest


def add_runtime(entries: Entries, config: Path) -> None:
    """Our own package, plus the default config as ``runtime/default_config.toml``."""
    package = ROOT / "runtime"
    for path in sorted(package.rglob("*")):
        rel = path.relative_to(ROOT).as_posix()
        parts = rel.split("/")
        if (
            path.is_dir()
            or "__pycache__" in parts
            or any(part.startswith(".") for part in parts)
            or rel.endswith(DROP_SUFFIXES + ("~", ".swp", ".orig", ".rej"))
        ):
            continue
        entries.add(rel, path.read_bytes(), "runtime/")
    try:
        entries.add("runtime/default_config.toml", config.read_bytes(), str(config))
    except OSError as error:
        raise BuildError(
            f"cannot read {config} ({error.strerror}); the pyz bundles it as "
            "runtime/default_config.toml"
        ) from None


MAIN_TEMPLATE = '''\
# Generated by build_pyz.py: do not edit.
"""tern.pyz entry point: serve the pyz's code from the per-interpreter cache, put the
native modules for this Python on sys.path, run the CLI. Kept tiny: zipimport compiles
this file from source on every start."""

import sys

#: Digest of everything else in this archive: names its code cache (runtime._pyzcode).
BUILD = "{build}"


def _import_once(name):
    """Import ``runtime.<name>`` from this archive, compiling its source once: zipimport's
    own find_spec compiles a module to learn its file name, then again to run it."""
    import importlib.machinery
    import importlib.util
    import os
    import zipimport

    import runtime

    where = os.path.join(os.path.dirname(os.path.abspath(__file__)), "runtime")
    # A ModuleSpec made here: 3.10's spec_from_loader would ask get_filename (a compile).
    spec = importlib.machinery.ModuleSpec(f"runtime.{{name}}", zipimport.zipimporter(where),
                                          origin=os.path.join(where, name + ".py"))
    spec.has_location = True
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    setattr(runtime, name, module)
    return module


def _run():
    try:
        if sys.version_info >= (3, 10):  # an older Python gets _bundle's one-line "needs 3.10"
            _import_once("_pyzcode").install(__file__, BUILD)
        from runtime import _bundle
        from runtime._pyz_manifest import NATIVE

        _bundle.bootstrap(NATIVE, __file__)
    except Exception as error:
        from runtime.errors import BundleError

        if not isinstance(error, BundleError):
            raise
        message = " ".join(str(error).split())
        sys.stderr.write(f"tern: {{message}}\\n")
        sys.exit(error.exit_code)
    from runtime.cli import main

    sys.exit(main())


if __name__ == "__main__":
    _run()
'''

MANIFEST_TEMPLATE = '''\
# Generated by build_pyz.py: do not edit.
"""The native bundles of this tern.pyz: {{sha16 of the extension module: what is under
_native/<sha16>/}}. runtime._bundle picks the one this interpreter can load."""

NATIVE = {manifest}
'''

#: The generated module holding the manifest (a module, not __main__.py: it is then
#: compiled once per interpreter into the code cache instead of on every start).
MANIFEST_MODULE = "runtime/_pyz_manifest.py"


def manifest_module(manifest: dict) -> bytes:
    literal = json.dumps(manifest, indent=4, sort_keys=True)  # str-only: also a Python literal
    return MANIFEST_TEMPLATE.format(manifest=literal).encode("utf-8")


def build_id(entries: Entries) -> str:
    """16 hex digits of SHA-256 over every entry's name and bytes: equal files, equal id."""
    digest = hashlib.sha256()
    for name in sorted(entries):
        data = entries[name]
        digest.update(b"%d:%s\\0%d:" % (len(name.encode()), name.encode(), len(data)))
        digest.update(data)
    return digest.hexdigest()[:16]


def main_module(build: str) -> bytes:
    return MAIN_TEMPLATE.format(build=build).encode("utf-8")


# --- writing ------------------------------------------------------------------------


def write_pyz(entries: Entries, out: Path) -> bytes:
    """Write the archive deterministically; return its bytes."""
    buffer = io.BytesIO()
    buffer.write(SHEBANG)
    with zipfile.ZipFile(buffer, "w") as archive:
        for name in sorted(entries):
            info = zipfile.ZipInfo(name, date_time=ZIP_DATE)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.create_system = 3  # unix, so the mode below means what it says
            info.external_attr = (0o100644 & 0xFFFF) << 16
            archive.writestr(info, entries[name], compresslevel=9)
    data = buffer.getvalue()
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    partial.write_bytes(data)
    os.chmod(partial, 0o755)
    os.replace(partial, out)
    return data


def display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def chosen_platforms(keys: list[str] | None) -> tuple[Platform, ...]:
    """The platforms to bundle: all, or those ``--platform`` names (a slimmer file)."""
    if not keys:
        return PLATFORMS
    known = {p.key: p for p in PLATFORMS}
    unknown = sorted(set(keys) - set(known))
    if unknown:
        raise BuildError(f"unknown --platform {', '.join(unknown)}; known: {', '.join(known)}")
    return tuple(p for p in PLATFORMS if p.key in keys)


def build(args: argparse.Namespace) -> Path:
    started = time.monotonic()
    requirements = read_lock(Path(args.lock))
    platforms = chosen_platforms(args.platform)

    pure_target = Target()
    wanted: list[tuple[Requirement, Target]] = []
    natives: list[tuple[Requirement, Native, Target]] = []
    for requirement in requirements:
        if requirement.key in LEFT_OUT:
            continue
        if requirement.key in NATIVE:
            for python in PYTHONS:
                for platform in platforms:
                    if marker_holds(requirement.marker, python, platform):
                        target = Target(python, platform)
                        wanted.append((requirement, target))
                        natives.append((requirement, NATIVE[requirement.key], target))
        elif any(marker_holds(requirement.marker, py, pl) for py in PYTHONS for pl in platforms):
            wanted.append((requirement, pure_target))
    wheels = fetch_wheels(Path(args.wheels), wanted, args.offline, args.jobs)

    entries = Entries()
    for requirement, target in wanted:
        if target.pure:
            add_pure_wheel(entries, wheels[requirement, target])
    manifest = add_native_bundles(
        entries,
        [read_native_wheel(r, n, t, wheels[r, t]) for r, n, t in natives],
    )
    stray = sorted({n.split("/")[0] for n in entries} & {n.module for n in NATIVE.values()})
    if stray:
        raise BuildError(f"native packages must not sit at the zip root: {stray}")
    add_runtime(entries, Path(args.config))
    entries.add(MANIFEST_MODULE, manifest_module(manifest), "build_pyz.py")
    entries.add("__main__.py", main_module(build_id(entries)), "build_pyz.py")

    out = Path(args.out)
    data = write_pyz(entries, out)
    size = len(data)
    print(
        f"{display(out)}: {size / 1e6:.2f} MB ({size:,} bytes), {len(entries)} entries, "
        f"{len(manifest)} native bundles, {time.monotonic() - started:.1f} s"
    )
    print(f"sha256 {hashlib.sha256(data).hexdigest()}")
    if size > SIZE_BUDGET_BYTES:
        print(f"warning: over the {SIZE_BUDGET_BYTES / 1e6:.0f} MB budget", file=sys.stderr)
    try:
        bundle, entry = build_mcpb.write_for_hosts(
            ROOT, data, out.parent, pythons=PYTHONS, platforms=sorted({p.sys_platform for p in platforms}),
            registry_name=args.registry_name, bundle_url=args.bundle_url)
    except (ValueError, OSError) as error:
        raise BuildError(f"cannot write the MCP bundle or server.json: {error}") from None
    print(f"{display(bundle)}: {bundle.stat().st_size / 1e6:.2f} MB, sha256 {sha256_of(bundle)}; {display(entry)}")
    return out


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(ROOT / "dist" / "tern.pyz"),
                        help="where to write the pyz (default: dist/tern.pyz)")
    parser.add_argument("--wheels", default=str(ROOT / "build" / "wheels"), help="wheel cache (default: build/wheels)")
    parser.add_argument("--lock", default=str(ROOT / ".ci" / "requirements.lock"), help="lock file")
    parser.add_argument("--config", default=str(ROOT / "config.toml"), help="bundled default config")
    parser.add_argument("--offline", action="store_true", help="fail instead of downloading a missing wheel")
    parser.add_argument("--platform", action="append", metavar="KEY",
                        help="bundle native modules for this platform only (repeatable; default: all of "
                             + ", ".join(p.key for p in PLATFORMS) + ")")
    parser.add_argument("--jobs", type=int, default=8, help="parallel pip downloads (default: 8)")
    parser.add_argument("--registry-name", default=build_mcpb.REGISTRY_NAME,
                        help=f"server.json name, reverse DNS (default: {build_mcpb.REGISTRY_NAME})")
    parser.add_argument("--bundle-url", default=build_mcpb.BUNDLE_URL,
                        help="where tern.mcpb will be downloaded from, {version} filled in (default: a GitHub release)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        build(args)
    except BuildError as error:
        print(f"build_pyz: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
