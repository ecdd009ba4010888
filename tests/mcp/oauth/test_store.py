"""The OAuth token store: private files, atomic replacement, and a broken file costs a
login, never a crash."""

from __future__ import annotations

import stat

import pytest

from runtime.errors import StorageError
from runtime.mcp.client.oauth.model import Client, Tokens
from runtime.mcp.client.oauth.store import TokenStore

URL = "https://mcp.example/mcp"


def test_files_are_private_and_keyed(tmp_path):
    store = TokenStore(tmp_path)
    assert store.tokens(URL) is None and store.tokens_stamp(URL) == (0, 0)
    store.save_tokens(URL, Tokens(access_token="a" * 40, refresh_token="r" * 40, issuer="https://as"))
    store.save_client("https://as", Client(issuer="https://as", client_id="c", client_secret="s" * 30))
    assert stat.S_IMODE((tmp_path / "oauth").stat().st_mode) == 0o700
    files = sorted(p for p in (tmp_path / "oauth").iterdir())
    assert len(files) == 2 and all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in files)
    assert all("mcp.example" not in p.name for p in files)  # names are hashes
    assert store.tokens(URL).access_token == "a" * 40 and store.tokens("https://other/mcp") is None
    assert store.client("https://as").client_secret == "s" * 30 and store.client("https://as2") is None
    before = store.tokens_stamp(URL)
    store.save_tokens(URL, Tokens(access_token="b" * 40))
    assert store.tokens_stamp(URL) != before and store.tokens(URL).access_token == "b" * 40
    assert store.forget_tokens(URL) and store.tokens(URL) is None and not store.forget_tokens(URL)


@pytest.mark.parametrize("garbage", [b"", b"{", b"[1,2]", b'{"key": 5}', b"\xff" * 10, b" " * 300_000])
def test_a_corrupt_file_is_moved_aside(tmp_path, garbage):
    store = TokenStore(tmp_path)
    store.save_tokens(URL, Tokens(access_token="x"))
    (path,) = (tmp_path / "oauth").iterdir()
    path.write_bytes(garbage)
    assert store.tokens(URL) is None
    names = [p.name for p in (tmp_path / "oauth").iterdir()]
    assert not path.exists() and any(".corrupt-" in name for name in names)
    store.save_tokens(URL, Tokens(access_token="y"))  # and a login replaces it
    assert store.tokens(URL).access_token == "y"


def test_an_unwritable_state_dir_is_a_storage_error(tmp_path):
    (tmp_path / "oauth").write_text("a file where the directory should be")
    with pytest.raises(StorageError, match="OAuth credentials not saved"):
        TokenStore(tmp_path).save_tokens(URL, Tokens(access_token="x"))
    assert TokenStore(tmp_path).tokens(URL) is None


def test_memory_store_without_state_dir():
    store = TokenStore("")
    store.save_tokens(URL, Tokens(access_token="x"))
    first = store.tokens_stamp(URL)
    store.save_tokens(URL, Tokens(access_token="y"))
    assert store.tokens(URL).access_token == "y" and store.tokens_stamp(URL) != first
