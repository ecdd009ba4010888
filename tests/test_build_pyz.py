"""build_pyz.py and the pyz bootstrap (runtime._bundle).

The ``pyz`` tests share one ``tern.pyz`` built per session by ``build_pyz.py --out``
(wheels come from build/wheels/, downloaded by the first build on a machine). Each
run of the pyz gets a fresh TERN_CACHE_DIR and TMPDIR, and runs under ``-I`` (often
``-I -S``) so nothing from the host's site-packages can stand in for the bundle.
"""

from __future__ import annotations

import ast
import glob
import hashlib
import json
import os
import shutil
import subprocess
import stat
import sys
import time
import zipfile
from pathlib import Path

import pytest

import build_pyz
import runtime
from runtime import _bundle
from runtime.errors import BundleError

ROOT = Path(__file__).resolve().parent.parent
BUILD_TIMEOUT_SECS = 600  # the first build on a machine downloads ~45 wheels
RUN_TIMEOUT_SECS = 60
PYTHONS = ("3.10", "3.11", "3.12", "3.13", "3.14")
PLATFORM_KEYS = ("manylinux_x86_64", "manylinux_aarch64", "musllinux_x86_64", "musllinux_aarch64", "macos_arm64",
                 "macos_x86_64", "win_amd64")

# Imports the pyz's __main__ without running it, bootstraps like it does, then uses
# everything the runtime needs (msgspec's C core, trio, httpx with the shared TLS
# context, trio-websocket, which reads trio's version through importlib.metadata).
PROBE = r"""
import json, os, sys, tempfile, zipimport
pyz = sys.argv[1]
sys.path.insert(0, pyz)
ns = {"__name__": "tern_pyz_main", "__file__": os.path.join(pyz, "__main__.py")}
exec(zipimport.zipimporter(pyz).get_code("__main__"), ns)
from runtime import _pyzcode
_pyzcode.install(ns["__file__"], ns["BUILD"])
from runtime import _bundle
from runtime._pyz_manifest import NATIVE
added = _bundle.bootstrap(NATIVE, ns["__file__"])
import msgspec, trio, httpx, trio_websocket, certifi
from runtime.net.tls import ssl_context

async def main():
    async with httpx.AsyncClient(verify=ssl_context()):
        pass
    return msgspec.json.encode({"ok": True}).decode()

names = ["msgspec", "msgspec._core", "trio", "httpx", "httpcore", "h11", "anyio", "certifi",
         "trio_websocket", "wsproto", "runtime", "runtime.net.tls"]
if sys.version_info < (3, 11):
    import tomli, exceptiongroup
    names += ["tomli", "exceptiongroup"]
print(json.dumps({
    "encoded": trio.run(main),
    "added": added,
    "files": {name: sys.modules[name].__file__ for name in names},
    "cas": len(ssl_context().get_ca_certs()),
    "code_dir": _pyzcode.code_dir(),
    "served": type(sys.modules["runtime.net.tls"].__loader__).__name__,
    "python": "%d.%d" % sys.version_info[:2],
}))
"""


# --- helpers ------------------------------------------------------------------------


def python_for(version: str) -> str | None:
    """A working CPython ``version`` interpreter, or None."""
    candidates = [shutil.which(f"python{version}")]
    candidates += sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{version}.*/bin/python{version}")))
    for candidate in filter(None, candidates):
        try:
            out = subprocess.run(
                [candidate, "-I", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                capture_output=True, text=True, timeout=30,
            ).stdout.strip()  # fmt: skip
        except (OSError, subprocess.TimeoutExpired):
            continue
        if out == version:
            return candidate
    return None


#: The Pythons the code cache tests run on (each skipped if absent; CI has all four).
CACHE_PYTHONS = ("3.10", "3.11", "3.12", "3.13")


def need_python(version: str) -> str:
    python = python_for(version)
    if python is None:
        pytest.skip(f"no CPython {version} on this machine (python{version} or ~/.pyenv)")
    return python


def base_python() -> str:
    """The interpreter behind the test venv: no tern dependencies next to it."""
    return getattr(sys, "_base_executable", None) or sys.executable


def clean_env(cache: Path, tmp: Path, **extra: str) -> dict[str, str]:
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp), "LANG": "C.UTF-8"}
    env.update(TERN_CACHE_DIR=str(cache), TMPDIR=str(tmp), **extra)
    return env


def run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, timeout=RUN_TIMEOUT_SECS)


def literal_in(pyz: Path, member: str, name: str) -> object:
    with zipfile.ZipFile(pyz) as archive:
        tree = ast.parse(archive.read(member))
    for node in tree.body:
        if isinstance(node, ast.Assign) and [t.id for t in node.targets if isinstance(t, ast.Name)] == [name]:
            return ast.literal_eval(node.value)
    raise AssertionError(f"no {name} literal in {member}")


def manifest_of(pyz: Path) -> dict[str, dict]:
    return literal_in(pyz, build_pyz.MANIFEST_MODULE, "NATIVE")


def build_of(pyz: Path) -> str:
    return literal_in(pyz, "__main__.py", "BUILD")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def assert_probe_ok(result: subprocess.CompletedProcess[str], pyz: Path, version: str) -> dict:
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["encoded"] == '{"ok":true}'
    assert report["python"] == version
    assert report["cas"] > 100
    (bundle,) = report["added"]
    for name, file in report["files"].items():
        where = bundle if name.startswith("msgspec") else str(pyz)
        assert file.startswith(where + os.sep), (name, file)
    assert report["served"] == "CachedZipImporter"
    return report


def build(out: Path) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, str(ROOT / "build_pyz.py"), "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=BUILD_TIMEOUT_SECS,
    )  # fmt: skip
    if result.returncode != 0:
        pytest.fail(f"build_pyz.py failed:\n{result.stdout}\n{result.stderr}")
    return result


@pytest.fixture(autouse=True)
def bundle_state(monkeypatch: pytest.MonkeyPatch) -> None:
    """bootstrap() records the manifest and the directories in use: restore them."""
    monkeypatch.setattr(_bundle, "_manifest", _bundle._manifest)
    monkeypatch.setattr(_bundle, "_in_use", list(_bundle._in_use))


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(cache, tmp, cwd): a fresh cache, a fresh TMPDIR, an unrelated working directory."""
    made = tuple(tmp_path / name for name in ("cache", "tmp", "elsewhere"))
    for path in made[1:]:
        path.mkdir()
    return made


def native_listing(cache: Path) -> list[str]:
    return sorted(os.listdir(cache / "native"))


# --- build_pyz.py, no pyz needed ----------------------------------------------------


def test_lock_runtime_section_is_read_with_markers() -> None:
    requirements = {r.key: r for r in build_pyz.read_lock(ROOT / ".ci" / "requirements.lock")}
    assert {"trio", "msgspec", "certifi", "trio_websocket", "tomli", "cffi"} <= set(requirements)
    assert "pytest" not in requirements  # [test] is not bundled
    assert requirements["cffi"].marker == 'sys_platform == "win32"'


def test_lock_without_runtime_section_is_refused(tmp_path: Path) -> None:
    lock = tmp_path / "lock"
    lock.write_text("# [test]\npytest==9.2.0\n")
    with pytest.raises(build_pyz.BuildError, match=r"\[runtime\]"):
        build_pyz.read_lock(lock)


def test_markers_are_evaluated_per_target() -> None:
    linux, *_, windows = build_pyz.PLATFORMS
    assert build_pyz.marker_holds('python_version < "3.11"', "3.10", linux)
    assert not build_pyz.marker_holds('python_version < "3.11"', "3.11", linux)
    assert build_pyz.marker_holds('sys_platform == "win32"', "3.12", windows)
    assert not build_pyz.marker_holds('sys_platform == "win32"', "3.12", linux)


def test_pure_target_never_takes_a_compiled_wheel() -> None:
    tomli = build_pyz.Requirement("tomli", "2.5.0", "")
    pure = build_pyz.Target()
    assert build_pyz.wheel_matches("tomli-2.5.0-py3-none-any.whl", tomli, pure)
    assert not build_pyz.wheel_matches(
        "tomli-2.5.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", tomli, pure
    )
    assert not build_pyz.wheel_matches("tomli-2.4.0-py3-none-any.whl", tomli, pure)


def test_native_target_matches_python_and_platform() -> None:
    msgspec = build_pyz.Requirement("msgspec", "0.22.0", "")
    linux = build_pyz.Target("3.11", build_pyz.PLATFORMS[0])
    name = "msgspec-0.22.0-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64.manylinux_2_28_x86_64.whl"
    assert build_pyz.wheel_matches(name, msgspec, linux)
    assert not build_pyz.wheel_matches(name.replace("cp311", "cp312"), msgspec, linux)
    assert not build_pyz.wheel_matches("msgspec-0.22.0-cp311-cp311-musllinux_1_2_x86_64.whl", msgspec, linux)


@pytest.mark.parametrize(
    ("name", "kept"),
    [
        ("trio/_core/_run.py", True),
        ("trio/_tests/test_util.py", False),
        ("trio/_core/_tests/tutil.py", False),
        ("certifi/tests/__init__.py", False),
        ("msgspec/__init__.pyi", False),
        ("trio/__pycache__/x.cpython-311.pyc", False),
        ("trio-0.35.0.dist-info/METADATA", True),
        ("trio-0.35.0.dist-info/licenses/LICENSE.MIT", True),
        ("sniffio-1.3.1.dist-info/LICENSE", True),
        ("trio-0.35.0.dist-info/RECORD", False),
        ("trio-0.35.0.dist-info/entry_points.txt", False),
        ("certifi/cacert.pem", True),
    ],
)
def test_wheel_member_filter(name: str, kept: bool) -> None:
    assert build_pyz.keep_member(name) is kept


# --- runtime._bundle in process -----------------------------------------------------


def fake_entry(so: str, platform: str, machine: str, python: str = "3.11", **more: str) -> dict:
    return {
        "package": "msgspec", "version": "0.22.0", "so": so, "python": python,
        "platform": platform, "machine": machine, "label": f"{platform} {machine}", "files": [], **more,
    }  # fmt: skip


def test_select_walks_suffixes_in_order_and_matches_exactly(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.machinery

    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(
        importlib.machinery, "EXTENSION_SUFFIXES",
        [".cpython-311-x86_64-linux-gnu.so", ".abi3.so", ".so"],
    )  # fmt: skip
    manifest = {
        "aarch": fake_entry("_core.cpython-311-aarch64-linux-gnu.so", "linux", "aarch64"),
        "musl": fake_entry("_core.cpython-311-x86_64-linux-musl.so", "linux", "x86_64"),
        "right": fake_entry("_core.cpython-311-x86_64-linux-gnu.so", "linux", "x86_64"),
        "py312": fake_entry("_core.cpython-312-x86_64-linux-gnu.so", "linux", "x86_64", "3.12"),
    }
    assert _bundle._select(manifest, "msgspec")[0] == "right"
    del manifest["right"]
    assert _bundle._select(manifest, "msgspec") is None  # ".so" must not match anything


def test_a_musl_interpreter_selects_the_musl_bundle(monkeypatch: pytest.MonkeyPatch) -> None:
    """Alpine's CPython names its extensions ``-linux-musl.so``: the same manifest gives
    it the musllinux build and a glibc CPython the manylinux one (no Alpine here to run
    the pyz on; the selection is what differs)."""
    import importlib.machinery

    monkeypatch.setattr(sys, "platform", "linux")
    manifest = {
        "gnu": fake_entry("_core.cpython-312-x86_64-linux-gnu.so", "linux", "x86_64", "3.12"),
        "musl": fake_entry("_core.cpython-312-x86_64-linux-musl.so", "linux", "x86_64", "3.12"),
    }
    musl = [".cpython-312-x86_64-linux-musl.so", ".abi3.so", ".so"]
    monkeypatch.setattr(importlib.machinery, "EXTENSION_SUFFIXES", musl)
    assert _bundle._select(manifest, "msgspec")[0] == "musl"
    monkeypatch.setattr(importlib.machinery, "EXTENSION_SUFFIXES", [musl[0].replace("musl", "gnu"), *musl[1:]])
    assert _bundle._select(manifest, "msgspec")[0] == "gnu"
    # CPython 3.10 on musl says "-linux-gnu" too: the C library decides
    same_name = "_core.cpython-310-x86_64-linux-gnu.so"
    manifest = {"musl": fake_entry(same_name, "linux", "x86_64", "3.10", libc="musl"),
                "gnu": fake_entry(same_name, "linux", "x86_64", "3.10", libc="glibc")}
    monkeypatch.setattr(importlib.machinery, "EXTENSION_SUFFIXES", [".cpython-310-x86_64-linux-gnu.so"])
    assert _bundle._libc() == "glibc"  # this machine
    assert _bundle._select(manifest, "msgspec")[0] == "gnu"
    monkeypatch.setattr(_bundle, "_libc", lambda: "musl")
    assert _bundle._select(manifest, "msgspec")[0] == "musl"


def test_select_compares_the_machine_on_macos(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.machinery

    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setattr(importlib.machinery, "EXTENSION_SUFFIXES", [".cpython-311-darwin.so", ".abi3.so", ".so"])
    manifest = {
        "intel": fake_entry("_core.cpython-311-darwin.so", "darwin", "x86_64"),
        "arm": fake_entry("_core.cpython-311-darwin.so", "darwin", "arm64"),
    }
    for machine in ("arm64", "x86_64"):
        monkeypatch.setattr(os, "uname", lambda m=machine: os.uname_result(("Darwin", "h", "23", "v", m)))
        digest, entry = _bundle._select(manifest, "msgspec")
        assert entry["machine"] == machine


def test_no_bundle_and_nothing_installed_is_one_line_bundle_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(_bundle, "_installed", lambda package: False)
    manifest = {
        f"d{i}": fake_entry(f"_core.cp3{i}-win_amd64.pyd", "win32", "AMD64", f"3.{i}") for i in (10, 11)
    }
    for entry in manifest.values():
        entry["label"] = "Windows x86_64"
    if sys.platform == "win32":
        pytest.skip("the fake manifest is for this platform")
    with pytest.raises(BundleError) as caught:
        _bundle.bootstrap(manifest, str(tmp_path / "tern.pyz"))
    message = str(caught.value)
    assert "\n" not in message
    assert "Windows x86_64: Python 3.10, 3.11" in message
    assert caught.value.exit_code == 3


def test_no_bundle_but_installed_msgspec_is_used(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))
    manifest = {"d": fake_entry("_core.cp311-win_amd64.pyd", "win32", "AMD64")}
    if sys.platform == "win32":
        pytest.skip("the fake manifest is for this platform")
    assert _bundle.bootstrap(manifest, str(tmp_path / "tern.pyz")) == []  # msgspec is in the venv


def test_cache_root_follows_the_platform_conventions(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TERN_CACHE_DIR", str(tmp_path / "explicit"))
    assert _bundle.cache_root() == str(tmp_path / "explicit")
    monkeypatch.delenv("TERN_CACHE_DIR")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert _bundle.cache_root() == str(tmp_path / "xdg" / "tern")
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert _bundle.cache_root() == str(tmp_path / ".cache" / "tern")
    monkeypatch.setattr(sys, "platform", "darwin")
    assert _bundle.cache_root() == str(tmp_path / "Library" / "Caches" / "tern")
    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setenv("LOCALAPPDATA", str(tmp_path / "Local"))
    assert _bundle.cache_root() == os.path.join(str(tmp_path / "Local"), "tern", "Cache")


def test_prune_cache_removes_stale_dirs_and_old_work_dirs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(_bundle, "_in_use", ["msgspec-0.22.0-inuse"])
    native = tmp_path / "native"
    for name in ("msgspec-0.22.0-live", "msgspec-0.22.0-inuse", "msgspec-0.21.0-stale",
                 ".tmp-msgspec-0.22.0-live-1-2-0", ".tmp-msgspec-0.22.0-live-3-4-0"):  # fmt: skip
        (native / name / "msgspec").mkdir(parents=True)
        (native / name / "msgspec" / "__init__.py").write_text("")
    (native / "not-a-dir").write_text("")
    hours_ago = time.time() - 2 * 3600
    os.utime(native / ".tmp-msgspec-0.22.0-live-1-2-0", (hours_ago, hours_ago))

    removed = _bundle.prune_cache({"msgspec-0.22.0-live"}, root=str(tmp_path))

    assert sorted(removed) == [str(native / ".tmp-msgspec-0.22.0-live-1-2-0"), str(native / "msgspec-0.21.0-stale")]
    assert sorted(os.listdir(native)) == [
        ".tmp-msgspec-0.22.0-live-3-4-0", "msgspec-0.22.0-inuse", "msgspec-0.22.0-live", "not-a-dir",
    ]  # fmt: skip
    assert _bundle.prune_cache({"msgspec-0.22.0-live"}, root=str(tmp_path)) == []
    assert _bundle.prune_cache(root=str(tmp_path / "nothing-here")) == []


def test_prune_cache_defaults_to_the_bundles_of_the_running_pyz(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(_bundle, "_in_use", [])
    monkeypatch.setattr(_bundle, "_manifest", {"abc": fake_entry("x", "linux", "x86_64")})
    monkeypatch.setenv("TERN_CACHE_DIR", str(tmp_path))
    for name in ("msgspec-0.22.0-abc", "msgspec-0.22.0-old"):
        (tmp_path / "native" / name).mkdir(parents=True)
    assert _bundle.prune_cache() == [str(tmp_path / "native" / "msgspec-0.22.0-old")]


def test_prune_cache_keeps_only_the_running_builds_code(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(_bundle, "_in_use", [])
    code = tmp_path / "code"
    for name in ("abc-cpython-311", "abc-cpython-313", "old-cpython-311"):
        (code / name).mkdir(parents=True)
        (code / name / "runtime.cli.pyc").write_bytes(b"")
    for name in (".tmp-runtime.pyc-1-2", ".tmp-runtime.pyc-3-4"):
        (code / "abc-cpython-311" / name).write_bytes(b"")
    hours_ago = time.time() - 2 * 3600
    os.utime(code / "abc-cpython-311" / ".tmp-runtime.pyc-1-2", (hours_ago, hours_ago))

    removed = _bundle.prune_cache(set(), root=str(tmp_path), build="abc")

    assert sorted(removed) == [str(code / "abc-cpython-311" / ".tmp-runtime.pyc-1-2"), str(code / "old-cpython-311")]
    assert sorted(os.listdir(code)) == ["abc-cpython-311", "abc-cpython-313"]  # every Python's code of this build
    assert sorted(os.listdir(code / "abc-cpython-311")) == [".tmp-runtime.pyc-3-4", "runtime.cli.pyc"]
    left = [str(code / name) for name in sorted(os.listdir(code))]
    assert _bundle.prune_cache(set(), root=str(tmp_path)) == left  # not from a pyz: all stale


@pytest.mark.pyz
def test_losing_the_publish_race_uses_the_winners_directory(
    pyz: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TERN_CACHE_DIR", str(tmp_path))
    manifest = manifest_of(pyz)
    digest, entry = next((d, e) for d, e in sorted(manifest.items()) if e["package"] == "msgspec")
    target = tmp_path / "native" / f"msgspec-0.22.0-{digest}"
    real_extract = _bundle._extract

    def extract_while_another_process_wins(*args: object) -> None:
        real_extract(*args)
        target.mkdir()  # the racer renamed its complete copy into place meanwhile
        (target / "winner").write_text("")

    monkeypatch.setattr(_bundle, "_extract", extract_while_another_process_wins)
    assert _bundle._ensure(str(pyz), digest, entry) == str(target)
    assert os.listdir(tmp_path / "native") == [target.name]  # our work directory is gone
    assert os.listdir(target) == ["winner"]


@pytest.mark.pyz
def test_extracted_bundle_is_complete_and_precompiled(pyz: Path, monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path) -> None:
    monkeypatch.setenv("TERN_CACHE_DIR", str(tmp_path))
    manifest = manifest_of(pyz)
    digest, entry = next((d, e) for d, e in sorted(manifest.items()) if e["package"] == "msgspec")
    path = Path(_bundle._ensure(str(pyz), digest, entry))
    files = {p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file()} - {_bundle.STAMP}
    expected = set(entry["files"]) | set(entry["common_files"])
    sources = sorted(f for f in expected if f.endswith(".py"))
    assert "msgspec/__init__.py" in sources and f"msgspec/{entry['so']}" in expected
    import importlib.util

    pycs = {Path(importlib.util.cache_from_source(str(path / f))).relative_to(path).as_posix() for f in sources}
    assert files == expected | pycs
    if os.name == "posix":
        assert oct(path.stat().st_mode & 0o777) == oct(0o700)


# --- the built pyz ------------------------------------------------------------------


@pytest.mark.pyz
def test_layout_and_determinism_rules(pyz: Path, pyz_built: tuple[Path, str]) -> None:
    data = pyz.read_bytes()
    assert data.startswith(b"#!/usr/bin/env python3\n")
    assert os.stat(pyz).st_mode & 0o777 == 0o755
    assert f"sha256 {hashlib.sha256(data).hexdigest()}" in pyz_built[1]
    with zipfile.ZipFile(pyz) as archive:
        infos = archive.infolist()
        names = [i.filename for i in infos]
        assert names == sorted(names)
        assert {i.date_time for i in infos} == {(1980, 1, 1, 0, 0, 0)}
        assert {i.compress_type for i in infos} == {zipfile.ZIP_DEFLATED}
        assert {i.external_attr >> 16 for i in infos} == {0o100644}
        name_set = set(names)
        roots = {n.split("/")[0] for n in names}
        assert "msgspec" not in roots and "_cffi_backend" not in roots and "cffi" not in roots
        assert not any("/__pycache__/" in n or n.endswith(".pyi") or "/_tests/" in n for n in names)
        assert not any(n.endswith(".pyc") for n in names)  # sources only: each Python compiles its own
        assert "runtime/default_config.toml" in name_set
        assert archive.read("runtime/default_config.toml") == (ROOT / "config.toml").read_bytes()
        assert "trio-0.35.0.dist-info/METADATA" in name_set
        assert build_pyz.MANIFEST_MODULE in name_set
        main = archive.read("__main__.py")
    assert len(main) < 3000  # zipimport compiles it on every start
    assert len(build_of(pyz)) == 16


@pytest.mark.pyz
def test_manifest_has_every_bundle(pyz: Path) -> None:
    manifest = manifest_of(pyz)
    msgspec = [e for e in manifest.values() if e["package"] == "msgspec"]
    cffi = [e for e in manifest.values() if e["package"] == "_cffi_backend"]
    assert len(msgspec) == len(PYTHONS) * len(PLATFORM_KEYS) == 35
    assert {(e["python"], e["label"]) for e in msgspec} == {(v, p.label) for v in PYTHONS for p in build_pyz.PLATFORMS}
    assert sorted(e["python"] for e in cffi) == list(PYTHONS)
    assert {e["platform"] for e in cffi} == {"win32"}
    with zipfile.ZipFile(pyz) as archive:
        names = set(archive.namelist())
    for digest, entry in manifest.items():
        assert len(digest) == 16
        so_dir = "msgspec/" if entry["package"] == "msgspec" else ""
        assert f"{so_dir}{entry['so']}" in entry["files"]
        for file in entry["files"]:
            assert f"_native/{digest}/{file}" in names
        for file in entry.get("common_files", []):
            assert f"_native/{entry['common']}/{file}" in names
        if entry["package"] == "msgspec":
            assert "msgspec/__init__.py" in entry["files"] + entry["common_files"]


@pytest.mark.pyz
def test_size_budget(pyz: Path) -> None:
    assert pyz.stat().st_size <= build_pyz.SIZE_BUDGET_BYTES == 10_000_000


@pytest.mark.pyz
def test_rebuild_is_byte_identical(pyz: Path, tmp_path: Path) -> None:
    again = tmp_path / "again.pyz"
    build(again)
    assert sha256(again) == sha256(pyz)


@pytest.mark.pyz
@pytest.mark.parametrize("version", ["3.10", "3.13"])
def test_any_python_builds_the_same_archive(pyz: Path, dirs: tuple[Path, Path, Path], tmp_path: Path,
                                            version: str) -> None:
    """No CPython 3.11 needed: the file holds sources only, so which Python builds it
    does not matter (byte for byte, given the same zlib)."""
    python = python_for(version)
    if python is None:
        pytest.skip(f"no CPython {version} on this machine (python{version} or ~/.pyenv)")
    out = tmp_path / "other.pyz"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    result = subprocess.run([python, str(ROOT / "build_pyz.py"), "--out", str(out), "--offline"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=BUILD_TIMEOUT_SECS)
    assert result.returncode == 0, result.stdout + result.stderr
    with zipfile.ZipFile(out) as theirs, zipfile.ZipFile(pyz) as ours:
        assert [(i.filename, i.CRC, i.file_size) for i in theirs.infolist()] == \
            [(i.filename, i.CRC, i.file_size) for i in ours.infolist()]
    import zlib

    zlib_there = subprocess.run([python, "-I", "-c", "import zlib; print(zlib.ZLIB_RUNTIME_VERSION)"],
                                capture_output=True, text=True, timeout=RUN_TIMEOUT_SECS).stdout.strip()
    if zlib_there == zlib.ZLIB_RUNTIME_VERSION:
        assert sha256(out) == sha256(pyz)
    cache, tmp, cwd = dirs
    ran = run([base_python(), "-I", "-S", str(out), "version"], clean_env(cache, tmp), cwd)
    assert ran.returncode == 0 and runtime.__version__ in ran.stdout, ran.stderr


def test_an_unknown_platform_is_refused() -> None:
    with pytest.raises(build_pyz.BuildError, match="unknown --platform musl; known: manylinux_x86_64"):
        build_pyz.chosen_platforms(["manylinux_x86_64", "musl"])
    assert build_pyz.chosen_platforms(None) == build_pyz.PLATFORMS


@pytest.mark.pyz
def test_platform_option_builds_a_slimmer_file(pyz: Path, dirs: tuple[Path, Path, Path], tmp_path: Path) -> None:
    out = tmp_path / "slim.pyz"
    result = subprocess.run([sys.executable, str(ROOT / "build_pyz.py"), "--out", str(out), "--offline",
                             "--platform", "manylinux_x86_64"],
                            cwd=ROOT, capture_output=True, text=True, timeout=BUILD_TIMEOUT_SECS)
    assert result.returncode == 0, result.stdout + result.stderr
    manifest = manifest_of(out)
    assert {(e["label"], e["python"]) for e in manifest.values()} == {("Linux x86_64 (glibc)", v) for v in PYTHONS}
    assert out.stat().st_size < pyz.stat().st_size / 2
    if sys.platform == "linux" and os.uname().machine == "x86_64":
        cache, tmp, cwd = dirs
        ran = run([base_python(), "-I", "-S", str(out), "version"], clean_env(cache, tmp), cwd)
        assert ran.returncode == 0 and runtime.__version__ in ran.stdout, ran.stderr


@pytest.mark.pyz
@pytest.mark.parametrize("flags", [["-I"], ["-I", "-S"]], ids=["isolated", "isolated-no-site"])
def test_version_runs_isolated_from_elsewhere(pyz: Path, dirs: tuple[Path, Path, Path], flags: list[str]) -> None:
    cache, tmp, cwd = dirs
    result = run([base_python(), *flags, str(pyz), "version"], clean_env(cache, tmp), cwd)
    assert result.returncode == 0, result.stderr
    assert runtime.__version__ in result.stdout
    (bundle,) = native_listing(cache)
    assert bundle.startswith("msgspec-0.22.0-")
    assert os.listdir(tmp) == []
    # warm: same directory, nothing new
    before = os.stat(cache / "native" / bundle).st_mtime_ns
    assert run([base_python(), *flags, str(pyz), "version"], clean_env(cache, tmp), cwd).returncode == 0
    assert native_listing(cache) == [bundle]
    assert os.stat(cache / "native" / bundle).st_mtime_ns == before


@pytest.mark.pyz
def test_runtime_imports_from_the_pyz_in_an_empty_venv(
    pyz: Path, dirs: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    cache, tmp, cwd = dirs
    venv = tmp_path / "venv"
    subprocess.run([base_python(), "-m", "venv", "--without-pip", str(venv)], check=True, timeout=RUN_TIMEOUT_SECS)
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    result = run([str(python), str(pyz), "version"], clean_env(cache, tmp), cwd)
    assert result.returncode == 0, result.stderr
    assert runtime.__version__ in result.stdout
    assert_probe_ok(run([str(python), "-c", PROBE, str(pyz)], clean_env(cache, tmp), cwd), pyz, "3.11")
    assert os.listdir(tmp) == []  # in particular no tmp...cacert.pem from certifi.where()


@pytest.mark.pyz
@pytest.mark.parametrize("version", CACHE_PYTHONS)
def test_eight_concurrent_first_runs_leave_one_directory(pyz: Path, dirs: tuple[Path, Path, Path],
                                                         version: str) -> None:
    python = need_python(version)
    cache, tmp, cwd = dirs
    env = clean_env(cache, tmp)
    procs = [
        subprocess.Popen(
            [python, "-I", "-S", str(pyz), "version"],
            env=env,
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for _ in range(8)
    ]
    results = [(p.wait(timeout=RUN_TIMEOUT_SECS), *p.communicate()) for p in procs]
    assert [code for code, _, _ in results] == [0] * 8, [err for _, _, err in results]
    assert all(runtime.__version__ in out for _, out, _ in results)
    assert sorted(os.listdir(cache)) == ["code", "native"]
    (bundle,) = native_listing(cache)  # no .tmp-* debris
    assert not bundle.startswith(_bundle.WORK_PREFIX)
    (code,) = os.listdir(cache / "code")
    assert code == f"{build_of(pyz)}-{cache_tag_of(python)}"
    assert not [n for n in os.listdir(cache / "code" / code) if n.startswith(_bundle.WORK_PREFIX)]
    assert os.listdir(tmp) == []
    # Every published file is whole: the next run uses them all and writes nothing.
    before = cache_snapshot(cache)
    assert run([python, "-I", "-S", str(pyz), "version"], env, cwd).returncode == 0
    assert cache_snapshot(cache) == before


@pytest.mark.pyz
def test_unwritable_cache_still_runs_and_cleans_up(pyz: Path, dirs: tuple[Path, Path, Path]) -> None:
    _, tmp, cwd = dirs
    blocker = cwd / "a-file"
    blocker.write_text("")
    env = clean_env(blocker / "cache", tmp)  # cannot be created, even by root
    result = run([base_python(), "-I", "-S", str(pyz), "version"], env, cwd)
    assert result.returncode == 0, result.stderr
    assert runtime.__version__ in result.stdout
    report = assert_probe_ok(run([base_python(), "-I", "-S", "-c", PROBE, str(pyz)], env, cwd), pyz, "3.11")
    assert report["added"][0].startswith(str(tmp))
    assert report["code_dir"] is None  # compiled in memory, once per module
    assert os.listdir(tmp) == []  # the temporary extraction is removed at exit


@pytest.mark.pyz
@pytest.mark.parametrize("version", CACHE_PYTHONS)
def test_a_code_cache_that_cannot_be_made_still_runs(pyz: Path, dirs: tuple[Path, Path, Path], version: str) -> None:
    """Only the code cache is unusable (a file where its folder goes): the native
    bundle is still extracted and used, the code is compiled in memory."""
    python = need_python(version)
    cache, tmp, cwd = dirs
    cache.mkdir(mode=0o700)
    (cache / "code").write_text("")
    env = clean_env(cache, tmp)
    result = run([python, "-I", "-S", str(pyz), "version"], env, cwd)
    assert result.returncode == 0, result.stderr
    assert runtime.__version__ in result.stdout
    report = assert_probe_ok(run([python, "-I", "-S", "-c", PROBE, str(pyz)], env, cwd), pyz, version)
    assert report["code_dir"] is None
    assert report["added"][0].startswith(str(cache / "native"))


@pytest.mark.pyz
def test_cache_prune_command_keeps_the_live_bundle(pyz: Path, dirs: tuple[Path, Path, Path]) -> None:
    cache, tmp, cwd = dirs
    env = clean_env(cache, tmp)
    assert run([base_python(), "-I", "-S", str(pyz), "version"], env, cwd).returncode == 0
    (live,) = native_listing(cache)
    other_python = next(n for n in sorted(_bundle.bundle_dir_names(manifest_of(pyz))) if n != live)
    for name in ("msgspec-0.21.0-0123456789abcdef", other_python):
        (cache / "native" / name).mkdir()
    result = run([base_python(), "-I", "-S", str(pyz), "cache", "prune"], env, cwd)
    assert result.returncode == 0, result.stderr
    assert "msgspec-0.21.0-0123456789abcdef" in result.stdout
    # Bundles of this pyz stay, the live one and those for other Pythons alike.
    assert native_listing(cache) == sorted([live, other_python])


def cache_snapshot(cache: Path) -> dict[str, tuple[int, int, int]]:
    """Every path under ``cache``: (inode, mtime, size), to see that nothing was written."""
    return {str(p.relative_to(cache)): (p.lstat().st_ino, p.lstat().st_mtime_ns, p.lstat().st_size)
            for p in cache.rglob("*")}


def cache_tag_of(python: str) -> str:
    return subprocess.run([python, "-I", "-c", "import sys; print(sys.implementation.cache_tag)"],
                          capture_output=True, text=True, timeout=RUN_TIMEOUT_SECS, check=True).stdout.strip()


@pytest.mark.pyz
@pytest.mark.parametrize("version", CACHE_PYTHONS)
def test_each_python_compiles_once_into_the_code_cache(pyz: Path, dirs: tuple[Path, Path, Path],
                                                       version: str) -> None:
    """The first run compiles what it imports into <cache>/code/<build>-<cache tag>/;
    the second loads it all from there: it writes nothing, and imports the same."""
    python = need_python(version)
    cache, tmp, cwd = dirs
    env = clean_env(cache, tmp)
    first = run([python, "-I", "-S", str(pyz), "version"], env, cwd)
    assert first.returncode == 0, first.stderr
    code = cache / "code" / f"{build_of(pyz)}-{cache_tag_of(python)}"
    assert os.listdir(cache / "code") == [code.name]
    cached = sorted(os.listdir(code))
    assert {"runtime._bundle.pyc", "runtime._pyz_manifest.pyc", "runtime.cli.pyc"} <= set(cached)
    assert not [n for n in cached if n.startswith(_bundle.WORK_PREFIX)]
    if os.name == "posix":
        assert {stat.S_IMODE(p.stat().st_mode) for p in code.iterdir()} == {0o400}
        assert stat.S_IMODE(code.stat().st_mode) == 0o700
    before = cache_snapshot(cache)
    second = run([python, "-I", "-S", str(pyz), "version"], env, cwd)
    assert second.returncode == 0 and second.stdout == first.stdout
    assert cache_snapshot(cache) == before  # nothing compiled, nothing written
    # The whole runtime (trio, httpx, msgspec ...) through the cache, then again.
    assert_probe_ok(run([python, "-I", "-S", "-c", PROBE, str(pyz)], env, cwd), pyz, version)
    before = cache_snapshot(cache)
    report = assert_probe_ok(run([python, "-I", "-S", "-c", PROBE, str(pyz)], env, cwd), pyz, version)
    assert cache_snapshot(cache) == before
    assert report["code_dir"] == str(code)
    assert len(os.listdir(code)) > len(cached)


def in_python(python: str, program: str, data: bytes = b"") -> bytes:
    """What ``program`` writes to stdout under ``python``, given ``data`` on stdin."""
    return subprocess.run([python, "-I", "-c", program], input=data, capture_output=True, check=True,
                          timeout=RUN_TIMEOUT_SECS).stdout


@pytest.mark.pyz
@pytest.mark.parametrize("version", CACHE_PYTHONS)
@pytest.mark.parametrize("how", ["rewritten", "truncated", "symlink", "group-writable", "stale-source"])
def test_tampered_cached_code_is_not_used(pyz: Path, dirs: tuple[Path, Path, Path], tmp_path: Path,
                                          how: str, version: str) -> None:
    """A cache file that is not exactly what tern wrote for this pyz's source is never
    executed: the module is compiled from the pyz again and the file replaced."""
    from runtime import _pyzcode

    python = need_python(version)
    cache, tmp, cwd = dirs
    env = clean_env(cache, tmp)
    assert run([python, "-I", "-S", str(pyz), "version"], env, cwd).returncode == 0
    (code,) = (cache / "code").iterdir()
    target = code / "runtime.cli.pyc"
    good = target.read_bytes()
    header = good[:_pyzcode.HEADER_BYTES]
    evil = in_python(python, "import marshal, sys; sys.stdout.buffer.write(marshal.dumps("
                             "compile('raise SystemExit(\"TAMPERED\")', 'x', 'exec')))")
    target.chmod(0o600)
    target.unlink()
    if how == "rewritten":  # the header kept, the code swapped: the digest no longer matches
        target.write_bytes(header + evil)
    elif how == "truncated":
        target.write_bytes(good[: len(good) // 2])
    elif how == "stale-source":  # whole and rightly digested, but for another source (the CRC-32 differs)
        digest = in_python(python, f"import _imp, sys; sys.stdout.buffer.write("
                                   f"_imp.source_hash({_pyzcode.DIGEST_KEY}, sys.stdin.buffer.read()))", evil)
        crc = (int.from_bytes(header[8:12], "little") ^ 1).to_bytes(4, "little")
        target.write_bytes(header[:8] + crc + header[12:16] + digest + evil)
    elif how == "symlink":
        (tmp_path / "planted.pyc").write_bytes(good)
        target.symlink_to(tmp_path / "planted.pyc")
    else:  # good bytes, but another user of the group could have written them
        target.write_bytes(good)
        target.chmod(0o620)
    result = run([python, "-I", "-S", str(pyz), "version"], env, cwd)
    assert result.returncode == 0, result.stderr
    assert "TAMPERED" not in result.stdout + result.stderr and runtime.__version__ in result.stdout
    assert not target.is_symlink() and target.read_bytes() == good  # compiled again, replaced
    if os.name == "posix":
        assert stat.S_IMODE(target.stat().st_mode) == 0o400


@pytest.mark.pyz
def test_a_moved_pyz_reuses_the_cache_with_its_new_path(pyz: Path, dirs: tuple[Path, Path, Path],
                                                        tmp_path: Path) -> None:
    cache, tmp, cwd = dirs
    env = clean_env(cache, tmp)
    probe = PROBE.split("print(json.dumps(")[0] + (
        "import runtime.cli\nprint(runtime.cli.main.__code__.co_filename, runtime.cli.__file__)")
    assert run([base_python(), "-I", "-S", "-c", probe, str(pyz)], env, cwd).returncode == 0
    before = cache_snapshot(cache)
    moved = tmp_path / "moved" / "tern.pyz"
    moved.parent.mkdir()
    shutil.copy2(pyz, moved)
    result = run([base_python(), "-I", "-S", "-c", probe, str(moved)], env, cwd)
    assert result.returncode == 0, result.stderr
    expected = str(moved / "runtime" / "cli" / "__init__.py")
    assert result.stdout.split() == [expected, expected]  # tracebacks name the file that runs
    assert cache_snapshot(cache) == before


@pytest.mark.pyz
@pytest.mark.parametrize("version", ["3.10", "3.12", "3.13"])
def test_other_pythons(pyz: Path, dirs: tuple[Path, Path, Path], version: str) -> None:
    python = python_for(version)
    if python is None:
        pytest.skip(f"no CPython {version} on this machine (python{version} or ~/.pyenv)")
    cache, tmp, cwd = dirs
    env = clean_env(cache, tmp)
    result = run([python, "-I", "-S", str(pyz), "version"], env, cwd)
    assert result.returncode == 0, result.stderr
    assert runtime.__version__ in result.stdout
    report = assert_probe_ok(run([python, "-I", "-S", "-c", PROBE, str(pyz)], env, cwd), pyz, version)
    digest = report["added"][0].rsplit("-", 1)[1]
    assert manifest_of(pyz)[digest]["python"] == version
    assert os.listdir(tmp) == []


@pytest.mark.pyz
def test_unsupported_python_exits_3_with_one_line(pyz: Path, dirs: tuple[Path, Path, Path]) -> None:
    python = python_for("3.9")
    if python is None:
        pytest.skip("no CPython 3.9 on this machine to play an unsupported Python")
    cache, tmp, cwd = dirs
    result = run([python, "-I", "-S", str(pyz), "version"], clean_env(cache, tmp), cwd)
    assert result.returncode == 3
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith("tern: ") and "3.10" in line and "Linux x86_64 (glibc)" in line


@pytest.mark.pyz
def test_pyz_serves_http_with_the_bundled_default_config(pyz: Path, dirs: tuple[Path, Path, Path]) -> None:
    """The one-file promise: ``python3 tern.pyz serve`` with no config file at all,
    no packages, answers /health, and exits 0 on SIGTERM."""
    import signal
    import urllib.request

    cache, tmp, cwd = dirs
    env = clean_env(cache, tmp, XDG_STATE_HOME=str(tmp / "state"))
    process = subprocess.Popen(
        [base_python(), "-I", "-S", str(pyz), "serve", "--listen", "127.0.0.1:0"],
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = process.stderr.readline()
        assert "serving on http://127.0.0.1:" in line, line + process.stderr.read()
        url = line.split("serving on ", 1)[1].strip()
        with urllib.request.urlopen(url + "/health", timeout=10) as response:
            assert response.read() == b'{"status":"ok"}'
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=RUN_TIMEOUT_SECS) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


# --- the native-module cache against other users (hardening item 14) ----------------


def bundle_so(cache: Path) -> Path:
    (so,) = (cache / "native").glob("msgspec-*/msgspec/_core*")
    return so


def so_hash_in_manifest(pyz: Path, so: Path) -> str:
    """The SHA-256 of the module as the pyz stores it (the manifest records the same)."""
    digest = so.parent.parent.name.rsplit("-", 1)[1]
    with zipfile.ZipFile(pyz) as archive:
        return hashlib.sha256(archive.read(f"_native/{digest}/msgspec/{so.name}")).hexdigest()


@pytest.mark.pyz
def test_manifest_records_every_files_sha256(pyz: Path) -> None:
    for entry in manifest_of(pyz).values():
        assert set(entry["sha256"]) == set(entry["files"]) | set(entry.get("common_files", ()))
        assert all(len(h) == 64 for h in entry["sha256"].values())


@pytest.mark.pyz
@pytest.mark.parametrize("how", ["rewritten", "swapped-with-forged-mtime"])
def test_tampered_extracted_module_is_re_extracted_before_import(pyz: Path, dirs: tuple[Path, Path, Path],
                                                                 how: str) -> None:
    """Decision: re-extract (the directory is moved aside), not refuse: the run goes on
    with the module the manifest names, never with the tampered one."""
    cache, tmp, cwd = dirs
    env = clean_env(cache, tmp)
    assert run([base_python(), "-I", "-S", str(pyz), "version"], env, cwd).returncode == 0
    so = bundle_so(cache)
    good = so_hash_in_manifest(pyz, so)
    assert sha256(so) == good
    before = so.stat()
    garbage = b"\0not an ELF file" * (before.st_size // 16)
    if how == "rewritten":
        so.chmod(0o600)
        so.write_bytes(garbage)
        so.chmod(0o400)
    else:  # a new file under the old name, its size and mtime forged: the inode differs
        fake = so.with_name("fake")
        fake.write_bytes(garbage.ljust(before.st_size, b"\0"))
        os.utime(fake, ns=(before.st_atime_ns, before.st_mtime_ns))
        os.replace(fake, so)
    assert sha256(so) != good
    report = assert_probe_ok(run([base_python(), "-I", "-S", "-c", PROBE, str(pyz)], env, cwd), pyz, "3.11")
    assert sha256(bundle_so(cache)) == good and report["encoded"] == '{"ok":true}'
    (bundle,) = native_listing(cache)  # the tampered copy is gone, no debris
    assert not bundle.startswith(_bundle.WORK_PREFIX)


@pytest.mark.pyz
@pytest.mark.parametrize("where", ["cache", "native", "code"])
def test_a_cache_other_users_can_write_is_refused(pyz: Path, dirs: tuple[Path, Path, Path], where: str) -> None:
    cache, tmp, cwd = dirs
    env = clean_env(cache, tmp)
    assert run([base_python(), "-I", "-S", str(pyz), "version"], env, cwd).returncode == 0
    (cache / where if where != "cache" else cache).chmod(0o777)
    refused = run([base_python(), "-I", "-S", str(pyz), "version"], env, cwd)
    assert refused.returncode == 3 and runtime.__version__ not in refused.stdout
    assert refused.stderr.count("\n") == 1 and "group- or world-writable (mode 777)" in refused.stderr


@pytest.mark.pyz
@pytest.mark.skipif(os.name != "posix" or os.geteuid() != 0, reason="chown to another uid needs root")
def test_a_cache_owned_by_another_user_is_refused(pyz: Path, dirs: tuple[Path, Path, Path]) -> None:
    cache, tmp, cwd = dirs
    cache.mkdir(mode=0o700)
    os.chown(cache, 65534, 65534)  # e.g. planted in a shared /tmp before tern's first run
    refused = run([base_python(), "-I", "-S", str(pyz), "version"], clean_env(cache, tmp), cwd)
    assert refused.returncode == 3 and "owned by uid 65534" in refused.stderr


@pytest.mark.pyz
@pytest.mark.skipif(os.name != "posix", reason="modes")
def test_a_cache_made_under_umask_000_is_private(pyz: Path, dirs: tuple[Path, Path, Path]) -> None:
    cache, tmp, cwd = dirs
    cache = cache / "deeper" / "tern"  # missing parents are made private too
    result = subprocess.run([base_python(), "-I", "-S", str(pyz), "version"], env=clean_env(cache, tmp), cwd=cwd,
                            capture_output=True, text=True, timeout=RUN_TIMEOUT_SECS,
                            preexec_fn=lambda: os.umask(0))
    assert result.returncode == 0, result.stderr
    modes = {str(p.relative_to(dirs[0])): stat.S_IMODE(p.lstat().st_mode) for p in dirs[0].rglob("*")}
    assert modes and all(mode == (0o700 if (dirs[0] / p).is_dir() else 0o400) for p, mode in modes.items()), modes


@pytest.mark.pyz
def test_a_damaged_pyz_member_is_refused_before_it_is_written(pyz: Path, monkeypatch: pytest.MonkeyPatch,
                                                              tmp_path: Path) -> None:
    monkeypatch.setenv("TERN_CACHE_DIR", str(tmp_path))
    digest, entry = next((d, e) for d, e in sorted(manifest_of(pyz).items()) if e["package"] == "msgspec")
    entry = dict(entry, sha256=dict(entry["sha256"], **{f"msgspec/{entry['so']}": "0" * 64}))
    with pytest.raises(BundleError, match="does not match the SHA-256"):
        _bundle._ensure(str(pyz), digest, entry)
    assert os.listdir(tmp_path / "native") == []


@pytest.mark.pyz
def test_governance_works_from_the_pyz(pyz: Path, dirs: tuple[Path, Path, Path]) -> None:
    """Issue 15's "from the built tern.pyz": a call waits for approval and another pyz
    process approves it; scripts are pending until approved; an OSSA manifest imports;
    the audit chain verifies."""
    cache, tmp, cwd = dirs
    env = clean_env(cache, tmp)
    scripts = cwd / "scripts"
    scripts.mkdir()
    (scripts / "hello").write_text("#!/bin/sh\necho hello\n")
    (scripts / "hello").chmod(0o755)
    config = cwd / "config.toml"
    config.write_text(f'[state]\ndir = "{cwd / "state"}"\n[scripts]\ndir = "{scripts}"\n'
                      '[[agents]]\nname = "writer"\nkind = "tool"\ntool = "file_write"\n')

    def tern(*args: str) -> subprocess.CompletedProcess[str]:
        return run([base_python(), "-I", str(pyz), *args, "--config", str(config)], env, cwd)

    waiting = subprocess.Popen([base_python(), "-I", str(pyz), "run", "writer", '{"path": "p.txt", "content": "pyz"}',
                                "--config", str(config)], env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + RUN_TIMEOUT_SECS
        listed: list = []
        while not listed and time.monotonic() < deadline:
            listed = json.loads(tern("approvals", "--json").stdout)["approvals"]
            time.sleep(0.1)
        assert [a["tool"] for a in listed] == ["file_write"]
        assert tern("approve", listed[0]["id"]).returncode == 0
        out, err = waiting.communicate(timeout=RUN_TIMEOUT_SECS)
    finally:
        waiting.kill()
    assert waiting.returncode == 0, err
    assert "wrote 3 bytes to p.txt" in out
    assert (cwd / "state" / "workspaces" / "writer" / "p.txt").read_text() == "pyz"
    assert json.loads(tern("scripts", "list", "--json").stdout)["scripts"][0]["status"] == "pending"
    assert tern("scripts", "approve", "hello").returncode == 0
    assert json.loads(tern("scripts", "list", "--json").stdout)["scripts"][0]["status"] == "approved"
    manifest = cwd / "manifest.json"
    manifest.write_text(json.dumps({"ossa_version": "0.3.3", "agent": {"id": "acme/reader", "name": "Reader",
                                    "access_tier": "tier_1_read"},
                                    "governance": {"rate_limits": {"requests_per_minute": 6}}}))
    imported = tern("import", "ossa", str(manifest))
    assert imported.returncode == 0 and 'access_tier = "read"' in imported.stdout
    verified = tern("audit", "verify")
    assert verified.returncode == 0 and "chain intact" in verified.stdout, verified.stdout + verified.stderr
    records = (cwd / "state" / "audit.jsonl").read_bytes().splitlines()
    (cwd / "state" / "audit.jsonl").write_bytes(b"\n".join(records[:1] + records[2:]) + b"\n")  # one removed
    tampered = tern("audit", "verify")
    assert tampered.returncode == 1 and "removed" in tampered.stdout + tampered.stderr


@pytest.mark.pyz
@pytest.mark.parametrize("version", CACHE_PYTHONS)
def test_daily_use_works_from_the_pyz(pyz: Path, dirs: tuple[Path, Path, Path], version: str) -> None:
    """Issue 16's "from the built pyz on every CPython here": a daemon from the pyz; run,
    chat, tools and conversations from another pyz process go through it (its access log
    shows their requests, the run's tool call shows on stderr); tern mcp relays to it over
    stdio; reload, status --json, completion and setup --print work."""

    from tests.chat_stub import calls_tool, serve_chat

    python = need_python(version)
    cache, tmp, cwd = dirs
    env = clean_env(cache, tmp)
    with serve_chat(calls_tool("time_now", {})) as model_url:
        config = cwd / "config.toml"
        config.write_text(f'[server]\nlisten = "127.0.0.1:0"\n[state]\ndir = "{cwd / "state"}"\n'
                          '[[agents]]\nname = "echo"\nkind = "echo"\n'
                          '[[agents]]\nname = "bot"\nkind = "llm"\ntools = ["time_now"]\n'
                          f'[agents.model]\nbase_url = "{model_url}"\nmodel = "stub-model"\n')
        _daily_use_through_a_pyz_daemon(pyz, python, env, cwd, config)


def _daily_use_through_a_pyz_daemon(pyz: Path, python: str, env: dict[str, str], cwd: Path, config: Path) -> None:
    import signal

    def tern(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([python, "-I", str(pyz), *args, "--config", str(config)], env=env, cwd=cwd,
                                input=stdin, capture_output=True, text=True, timeout=RUN_TIMEOUT_SECS)
        assert result.returncode == 0, (args, result.stdout, result.stderr)
        return result

    log = cwd / "serve.log"
    with log.open("w") as sink:
        daemon = subprocess.Popen([python, "-I", str(pyz), "serve", "--log-level", "info", "--config", str(config)],
                                  env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=sink)
    try:
        deadline = time.monotonic() + RUN_TIMEOUT_SECS
        while "serving on" not in log.read_text() and time.monotonic() < deadline:
            assert daemon.poll() is None, log.read_text()
            time.sleep(0.05)
        assert tern("run", "echo", "hi").stdout == "hi\n"
        ran = tern("run", "bot", "what time is it?")
        assert ran.stdout.startswith("the tool said: ") and "time_now" in ran.stderr, ran
        chat = tern("chat", "bot", stdin="hello there\n/exit\n")
        assert "the tool said: " in chat.stdout
        assert "built-in" in tern("tools").stdout
        listed = json.loads(tern("conversations", "--json").stdout)["conversations"]
        assert len(listed) == 2 and {c["agent"] for c in listed} == {"bot"}
        assert json.loads(tern("status", "--json").stdout)["pid"] == daemon.pid
        assert "reloaded" in tern("reload").stdout
        frames = [{"jsonrpc": "2.0", "id": 1, "method": "initialize",
                   "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                              "clientInfo": {"name": "pyz-test", "version": "1"}}},
                  {"jsonrpc": "2.0", "method": "notifications/initialized"},
                  {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                   "params": {"name": "tern_agent_echo", "arguments": {"message": "via mcp"}}}]
        relayed = tern("mcp", stdin="".join(json.dumps(f) + "\n" for f in frames))
        answers = {m["id"]: m for m in map(json.loads, relayed.stdout.splitlines())}
        assert answers[1]["result"]["serverInfo"]["name"] == "tern"
        assert answers[2].get("result", {}).get("content", [{}])[0].get("text") == "via mcp", answers
        access = log.read_text()
        for request in ("POST /api/agents/echo/stream 200", "POST /api/agents/bot/stream 200", "GET /api/tools 200",
                        "GET /api/conversations 200", "POST /mcp 200"):
            assert request in access, access
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            assert daemon.wait(timeout=RUN_TIMEOUT_SECS) == 0, log.read_text()
        finally:
            if daemon.poll() is None:
                daemon.kill()
    assert "complete -F" in tern("completion", "bash").stdout
    entry = json.loads(tern("setup", "claude", "--print").stdout)["mcpServers"]["tern"]
    executable = subprocess.run([python, "-I", "-c", "import sys; print(sys.executable)"], capture_output=True,
                                text=True, timeout=RUN_TIMEOUT_SECS).stdout.strip()
    assert entry["command"] == executable and entry["args"][0] == str(pyz)  # absolute: no PATH at launch
