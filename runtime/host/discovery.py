"""The daemon's discovery file and local token, and the checks before a client trusts them.

``daemon.json`` (pid, URL) tells ``tern status``, ``tern events`` and ``tern mcp``'s
relay where the daemon is, and they send it the API key or the local token. So a
client believes the file only when (item 13 of the hardening issue):

- the state directory and the file are owned by this OS user and not group- or
  world-writable (nobody else can have planted or edited it), the file is a regular
  file (not a symlink);
- the pid is alive and runs as this user;
- the URL is http(s) on a loopback address, and (where /proc tells) the socket
  listening there belongs to this user.

``local-token`` (0600, made at the daemon's first start) is what tern's own clients
present when the daemon has no API key and cannot tell who a loopback peer is.
"""

from __future__ import annotations

import json
import os
import secrets
import stat
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from runtime._bundle import unsafe_owner_or_mode
from runtime.config import Config

__all__ = ["DISCOVERY_FILE", "TOKEN_FILE", "config_label", "other_config", "discovery_path", "token_path",
           "read_record", "trusted_daemon", "unsafe_owner_or_mode", "ensure_local_token", "read_local_token",
           "pid_alive", "api_key", "client_headers", "named_daemon", "write_operator_token", "read_operator_token"]

DISCOVERY_FILE = "daemon.json"
TOKEN_FILE = "local-token"
MAX_FILE_BYTES = 64 * 1024


def config_label(path: Path | None) -> str:
    """How the discovery file names the config a daemon runs: its absolute path, or
    ``<bundled>`` for the built-in default."""
    return str(path.resolve()) if path is not None else "<bundled>"


def other_config(record: dict[str, Any], path: Path | None) -> str:
    """The config the daemon of ``record`` runs when it is not ``path`` (a client's own), else
    "" (the same one, or a daemon too old to say). A command uses a daemon only when it
    runs the client's config: another config's daemon would answer with other agents."""
    running = record.get("config")
    if not isinstance(running, str) or running == config_label(path):
        return ""
    return running


def discovery_path(config: Config) -> Path:
    return Path(config.state.dir) / DISCOVERY_FILE


def token_path(config: Config) -> Path:
    return Path(config.state.dir) / TOKEN_FILE


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read_private(path: Path, what: str, secret: bool = False) -> tuple[bytes | None, str]:
    """The file's bytes if it and its directory pass ``unsafe_owner_or_mode`` (and, for a
    ``secret``, nobody else may read it either)."""
    try:
        why = unsafe_owner_or_mode(os.stat(path.parent), f"the state directory {path.parent}")
        if why:
            return None, why
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        return None, ""
    except OSError as exc:
        return None, f"cannot read {what} {path}: {exc.strerror or exc}"
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(handle.fileno())
        if not stat.S_ISREG(st.st_mode):
            return None, f"{what} {path} is not a regular file"
        why = unsafe_owner_or_mode(st, f"{what} {path}")
        if why:
            return None, why
        if secret and os.name == "posix" and st.st_mode & 0o077:
            return None, f"{what} {path} is readable by other users (mode {stat.S_IMODE(st.st_mode):o})"
        return handle.read(MAX_FILE_BYTES), ""


def read_record(config: Config) -> tuple[dict[str, Any] | None, str]:
    """The discovery record of a live daemon, unchecked (the daemon itself uses this to
    find another daemon in its state directory); or (None, why not)."""
    path = discovery_path(config)
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        pid = int(record["pid"])
    except FileNotFoundError:
        return None, f"no tern daemon is running (no {path})"
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return None, f"unreadable discovery file {path}: {exc}"
    if not pid_alive(pid):
        return None, f"stale discovery file {path}: pid {pid} is gone (the daemon did not exit cleanly)"
    return record, ""


def _pid_uid(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def _loopback_url(url: Any) -> tuple[str, int] | None:
    import ipaddress

    if not isinstance(url, str):
        return None
    try:
        parts = urlsplit(url)
        host, port = parts.hostname or "", parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or port is None or parts.path not in ("", "/") \
            or parts.query or parts.username or parts.password:
        return None
    if host == "localhost":
        return "127.0.0.1", port
    try:
        return (host, port) if ipaddress.ip_address(host).is_loopback else None
    except ValueError:
        return None


def trusted_daemon(config: Config) -> tuple[dict[str, Any] | None, str]:
    """The discovery record, if a client may send this daemon a key; else (None, why not:
    one line)."""
    from runtime.net.peer import listener_uid

    path = discovery_path(config)
    data, why = _read_private(path, "the discovery file")
    if data is None:
        return None, (f"not trusting {path}: {why}" if why else f"no tern daemon is running (no {path})")
    try:
        record = json.loads(data)
        pid = int(record["pid"])
    except (ValueError, KeyError, TypeError) as exc:
        return None, f"unreadable discovery file {path}: {exc}"
    if not pid_alive(pid):
        return None, f"stale discovery file {path}: pid {pid} is gone (the daemon did not exit cleanly)"
    owner = _pid_uid(pid)
    if os.name == "posix" and owner is not None and owner != os.geteuid():
        return None, f"not trusting {path}: its pid {pid} runs as uid {owner}, not as this user"
    address = _loopback_url(record.get("url"))
    if address is None:
        return None, f"not trusting {path}: its URL {str(record.get('url'))[:200]!r} is not a loopback http(s) URL"
    listener = listener_uid(*address)
    if os.name == "posix" and listener is not None and listener != os.geteuid():
        return None, f"not trusting {path}: the socket at {record['url']} belongs to uid {listener}, not this user"
    return record, ""


def ensure_local_token(config: Config) -> str:
    """The local token, made (0600, 256 bits) if missing or not safe to reuse (another
    user could have read or written it)."""
    path = token_path(config)
    data, _why = _read_private(path, "the local token", secret=True)
    token = data.decode("ascii", "replace").strip() if data else ""
    if len(token) >= 32:
        return token
    return _new_token(path)


def _new_token(path: Path, *, group: tuple[str, int] | None = None) -> str:
    """A fresh 256-bit token, written whole to a private temporary file and renamed over
    ``path``: mode 0600, or 0640 given to ``group`` (its name, its gid)."""
    token = secrets.token_urlsafe(32)
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        if group is not None:
            try:
                os.fchown(fd, -1, group[1])
            except PermissionError:
                from runtime.errors import UsageError

                raise UsageError(f"[server] operator_group: tern's user may not give {path} to group {group[0]!r} "
                                 f"(it is not a member: under systemd, SupplementaryGroups={group[0]})") from None
            os.fchmod(fd, 0o640)
        os.write(fd, token.encode("ascii"))
        os.close(fd)
        fd = -1
        os.replace(temp, path)
    finally:
        if fd >= 0:
            os.close(fd)
        temp.unlink(missing_ok=True)
    return token


def write_operator_token(config: Config) -> str:
    """A fresh operator token in ``[server] operator_token_file``: mode 0640, group
    ``operator_group``, so that group's members (operators of the system service, who
    cannot read its state directory) reach the daemon from this host as its owner. Made
    anew at every start (a token from before stops working); ``UsageError`` in one line
    when the group does not exist or tern's user is not in it."""
    import grp

    from runtime.errors import UsageError

    group, path = config.server.operator_group, Path(config.server.operator_token_file)
    try:
        gid = grp.getgrnam(group).gr_gid
    except KeyError:
        raise UsageError(f"[server] operator_group: no group named {group!r} on this host") from None
    if not path.parent.is_dir():
        path.parent.mkdir(parents=True)
        os.chmod(path.parent, 0o755)  # the group must reach the file, whatever the umask (the unit's is 0077)
    return _new_token(path, group=(group, gid))


def read_operator_token(path: str) -> str:
    """The operator token an operator names (``$TERN_TOKEN_FILE``): a regular file (not a
    link) that not everyone may read. ``UsageError`` in one line otherwise."""
    from runtime.errors import UsageError

    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise UsageError(f"TERN_TOKEN_FILE: cannot read {path}: {exc.strerror or exc} (an operator of the "
                         "service is in its [server] operator_group)") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_mode & 0o004:
            raise UsageError(f"TERN_TOKEN_FILE: {path} is not a token file only its group may read")
        token = handle.read(4096).decode("ascii", "replace").strip()
    if len(token) < 32:
        raise UsageError(f"TERN_TOKEN_FILE: {path} holds no token")
    return token


def read_local_token(config: Config) -> str:
    """The local token for tern's own clients; "" when there is none safe to send."""
    data, _why = _read_private(token_path(config), "the local token", secret=True)
    return data.decode("ascii", "replace").strip() if data else ""


def api_key(config: Config) -> str:
    """The configured key: ``api_key``, else the variable ``api_key_env`` names (may be unset)."""
    from runtime.log import register_secret

    key = config.server.api_key or (os.environ.get(config.server.api_key_env, "") if config.server.api_key_env else "")
    if key:
        register_secret(key)
    return key


def named_daemon(explicit: str | None, config: Config) -> tuple[dict[str, Any], dict[str, str]] | None:
    """A daemon the person named (``--url``, else ``$TERN_URL``): its record as the
    discovery file's would be, and the headers with the key (``$TERN_API_KEY``, else the
    config's, else the operator token in ``$TERN_TOKEN_FILE``). How an operator reaches a
    daemon run as another user (the system service), or on another host. None when none
    is named."""
    url = (explicit or os.environ.get("TERN_URL", "")).rstrip("/")
    if not url:
        return None
    from runtime.errors import UsageError
    from runtime.log import register_secret

    if urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).hostname:
        raise UsageError(f"--url / TERN_URL must be an http(s) URL, not {url[:100]!r}")
    key = os.environ.get("TERN_API_KEY", "") or api_key(config)
    if not key and os.environ.get("TERN_TOKEN_FILE"):
        key = read_operator_token(os.environ["TERN_TOKEN_FILE"])  # an operator of the system service
    if key:
        register_secret(key)
    return {"url": url, "pid": 0, "config": "(named by --url)"}, ({"Authorization": f"Bearer {key}"} if key else {})


def client_headers(config: Config) -> dict[str, str]:
    """What tern's own clients send a daemon found by ``trusted_daemon``: the API key,
    else the local token (a daemon without a key wants it where it cannot tell who we are).
    Here, not in daemon.py, so a CLI command that only talks to the daemon imports no trio."""
    from runtime.log import register_secret

    key = api_key(config)
    if not key:
        key = read_local_token(config)
        if key:
            register_secret(key)
    return {"Authorization": f"Bearer {key}"} if key else {}
