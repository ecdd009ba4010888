"""``tern keys add|list|remove`` as real subprocesses; the stored file holds hashes only
(0600); a broken file is moved aside; the key table: every source, a missing
``key_env``, and a daemon that takes a stored key at reload."""

from __future__ import annotations

import hashlib
import json
import os
import stat

import httpx
import pytest

from runtime.config import load_config
from runtime.config.keys import ADMIN, KeyTable, digest
from runtime.config.schema import KeyConfig
from runtime.errors import ConfigError
from runtime.host.keystore import KEYS_FILE, read_keys
from tests.test_cli import tern


@pytest.fixture
def setup(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text('[state]\ndir = "state"\n[server]\napi_key = "admin-key-for-the-store-test"\n'
                    '[[server.keys]]\nname = "ci"\nkey_sha256 = "' + "ab" * 32 + '"\nscopes = ["metrics"]\n'
                    '[[agents]]\nname = "a"\nkind = "echo"\n')
    return tmp_path, str(path)


def test_add_list_remove(setup):
    tmp_path, config = setup
    added = tern("--config", config, "keys", "add", "desk", "--scopes", "message,approvals", "--agents", "a")
    assert added.returncode == 0, added.stderr
    key = added.stdout.strip()
    assert key.startswith("tern_") and len(key) > 40 and "shown only now" in added.stderr
    store = tmp_path / "state" / KEYS_FILE
    assert stat.S_IMODE(store.stat().st_mode) == 0o600
    text = store.read_text()
    assert key not in text and hashlib.sha256(key.encode()).hexdigest() in text
    listed = json.loads(tern("--config", config, "keys", "list", "--json").stdout)["keys"]
    assert [(k["name"], k["source"]) for k in listed] == [("admin", "api_key"), ("ci", "config"), ("desk", "tern keys")]
    assert listed[2]["scopes"] == ["approvals", "message"] and listed[2]["agents"] == ["a"]
    plain = tern("--config", config, "keys", "list").stdout
    assert "desk" in plain and key not in plain and "admin-key-for-the-store-test" not in plain
    again = tern("--config", config, "keys", "add", "desk")
    assert again.returncode != 0 and "exists already" in again.stderr
    for bad in (["Bad Name"], ["admin"], ["x", "--scopes", "root"]):
        refused = tern("--config", config, "keys", "add", *bad)
        assert refused.returncode != 0 and refused.stderr.startswith("tern: "), bad
    table = KeyTable.build("", [], read_keys(load_config(config).config))
    found = table.match(key.encode())
    assert found is not None and found.name == "desk" and found.may_message("a") and not found.may_message("b")
    assert tern("--config", config, "keys", "remove", "desk").returncode == 0
    assert tern("--config", config, "keys", "remove", "desk").returncode != 0
    assert read_keys(load_config(config).config) == []


@pytest.mark.parametrize("garbage", [b"{not json", b'[{"name": "x", "sha256": "zz"}]',
                                     b"[" + b'{"name":"Q"},' * 3 + b"1]"])
def test_a_broken_store_is_moved_aside(setup, garbage):
    tmp_path, config = setup
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    store = state / KEYS_FILE
    store.write_bytes(garbage)
    os.chmod(store, 0o600)
    assert read_keys(load_config(config).config) == []
    assert not store.exists() and [p.name for p in state.iterdir() if p.name.startswith(KEYS_FILE + ".corrupt-")]
    assert tern("--config", config, "keys", "add", "fresh").returncode == 0  # and a new one is started


def test_a_store_others_may_write_is_not_used(setup, caplog):
    """Another user who could write the file could add a key: it is refused, loudly."""
    tmp_path, config = setup
    assert tern("--config", config, "keys", "add", "desk").returncode == 0
    store = tmp_path / "state" / KEYS_FILE
    os.chmod(store, 0o622)
    assert read_keys(load_config(config).config) == []
    assert any("key store" in r.getMessage() for r in caplog.records)


def test_the_key_table(monkeypatch):
    monkeypatch.setenv("CI_KEY", "from-the-environment")
    table = KeyTable.build("the-admin-key", [
        KeyConfig(name="env", key_env="CI_KEY"), KeyConfig(name="plain", key="plain-key", scopes=["mcp"]),
        KeyConfig(name="hashed", key_sha256=hashlib.sha256(b"hashed-key").hexdigest()),
        KeyConfig(name="cert", tls_subject="CN=bot")])
    assert table.match(b"the-admin-key") == ADMIN
    assert table.match(b"from-the-environment").name == "env"
    assert table.match(b"plain-key").scopes == frozenset({"mcp"})
    assert table.match(b"hashed-key").scopes == frozenset({"message", "tasks"})
    assert table.match(b"nope") is None and table.match(b"") is None
    assert table.by_subject("CN=bot").name == "cert" and table.by_subject("CN=other") is None
    assert digest("x") == hashlib.sha256(b"x").digest()
    monkeypatch.delenv("CI_KEY")
    with pytest.raises(ConfigError, match="CI_KEY"):
        KeyTable.build("", [KeyConfig(name="env", key_env="CI_KEY")])


def test_a_reload_takes_a_stored_key(setup):
    """The daemon reads the store at boot and again at reload (a real `tern serve`)."""
    from tests.test_daemon import start_daemon

    tmp_path, config = setup
    path = tmp_path / "config.toml"
    path.write_text(path.read_text().replace("[server]\n", '[server]\nlisten = "127.0.0.1:0"\n'))
    process, url = start_daemon(config)
    try:
        key = tern("--config", config, "keys", "add", "late").stdout.strip()
        late = {"Authorization": f"Bearer {key}"}
        assert httpx.get(url + "/api/agents", headers=late, timeout=10).status_code == 401
        admin = {"Authorization": "Bearer admin-key-for-the-store-test"}
        assert httpx.post(url + "/api/config/reload", headers=admin, timeout=10).status_code == 200
        assert httpx.get(url + "/api/agents", headers=late, timeout=10).status_code == 200
        assert httpx.get(url + "/api/config", headers=late, timeout=10).status_code == 403
    finally:
        process.kill()
        process.wait()


def test_named_keys_without_an_api_key_still_take_the_local_token():
    """tern's own clients send the local token when the config has no api_key (on loopback
    only, as without keys)."""
    from runtime.config.keys import LOCAL
    from runtime.httpd.access import Access
    from runtime.httpd.messages import HttpError, Request

    token = "local-token-" + "x" * 32
    access = Access("", keys=KeyTable.build("", [KeyConfig(name="ci", key="ci-key")]), local_token=token)

    def sent(value: str) -> Request:
        return Request("GET", "/api/status", "", [(b"authorization", f"Bearer {value}".encode())], ("10.0.0.1", 1))

    assert access.authenticate(sent(token), True) is LOCAL
    with pytest.raises(HttpError):
        access.authenticate(sent(token), False)
    assert access.authenticate(sent("ci-key"), False).name == "ci"
    with pytest.raises(HttpError) as refused:
        access.authenticate(sent("guess"), False)
    assert refused.value.http_status == 401


def test_config_check_warns_of_an_unset_key_variable(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text('[[server.keys]]\nname = "ci"\nkey_env = "TERN_TEST_UNSET_KEY"\n')
    checked = tern("config", "check", str(path))
    assert 'server.keys[0].key_env: "TERN_TEST_UNSET_KEY" is not set' in checked.stdout + checked.stderr
    served = tern("--config", str(path), "serve", "--listen", "127.0.0.1:0")
    assert served.returncode == 2 and "key_env names TERN_TEST_UNSET_KEY, which is not set" in served.stderr
    assert len(served.stderr.strip().splitlines()) == 1, served.stderr


def test_the_help_names_every_scope():
    from runtime.config.keys import SCOPES

    shown = " ".join(tern("keys", "add", "--help").stdout.split())
    assert all(scope in shown for scope in SCOPES)


def test_a_literal_key_is_masked_wherever_the_config_is_shown(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text('[[server.keys]]\nname = "ci"\nkey = "literal-secret-key-123"\n')
    shown = tern("config", "show", "--config", str(path))
    assert shown.returncode == 0 and "literal-secret-key-123" not in shown.stdout and '"ci"' in shown.stdout
    path.write_text('[[server.keys]]\nname = "ci"\nkey = "literal-secret-key-123"\nscopes = "oops"\n')
    bad = tern("config", "check", str(path))
    assert bad.returncode == 2 and "literal-secret-key-123" not in bad.stderr + bad.stdout
