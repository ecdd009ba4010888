"""What a ``shell_exec`` allowlist entry allows: the programs that can run other programs
through their arguments, and pinned rules matched on the whole argv.

Why here (pure, below the kernel): ``tern config check`` refuses the same entries the
tool refuses at call time, from one list.

An allowlist entry by program name alone allows any arguments, so a program that runs
commands through its options (``find -exec``, ``git -c alias.x=!cmd``, ``tar
--checkpoint-action=exec=``, ``sort --compress-program``...) would run anything. Such a
program is allowed only by a ``[[tools.shell_rules]]`` entry that pins its arguments. The
list errs on the side of refusing, but it cannot be complete (``setarch x86_64 sh``,
``cpp -wrapper``, ``install --strip-program``...), and a glob cannot pin what a
program makes of an argument (``git config alias.x '!cmd'``, ``sed '1e cmd'`` pass
``[!-]*``). So safety comes from the sandbox: a name or a glob runs only inside one,
and without one (``shell_sandbox = "off"``) only rules whose every argument is a literal
value (``is_literal``) are accepted. No advice here suggests a glob.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Sequence

from runtime.config.schema import ShellRule

__all__ = ["RUNS_COMMANDS", "runs_commands", "why_refused", "rule_matches", "rule_text", "rule_problems",
           "is_literal"]

# fnmatch patterns on a program's basename (and on the basename of its real path, so
# ``awk`` -> ``mawk`` and ``sh`` -> ``dash`` are caught whatever the entry says).
RUNS_COMMANDS: tuple[str, ...] = (
    # shells and multi-call binaries: their arguments are a program
    "sh", "bash", "dash", "zsh", "ksh", "mksh", "pdksh", "ash", "csh", "tcsh", "fish", "rbash", "pwsh",
    "busybox", "toybox",
    # interpreters and language tools
    "python*", "pypy*", "perl*", "ruby*", "irb", "node*", "deno", "bun", "php*", "lua*", "tclsh*", "wish*",
    "expect", "Rscript", "R", "julia", "guile*", "java", "jshell", "osascript", "ld.so", "ld-linux*", "ldd",
    "awk", "gawk", "mawk", "nawk", "sed", "gsed", "ed", "red",
    # editors and pagers (``!cmd``, ``:!cmd``, ``e`` commands)
    "ex", "vi", "vim*", "nvim", "view", "rvim", "emacs*", "nano", "pico", "less", "more", "most", "pager",
    "man", "sensible-pager", "sensible-editor", "editor",
    # run the command in their arguments
    "env", "xargs", "find", "nice", "nohup", "timeout", "stdbuf", "time", "setsid", "chroot", "unshare",
    "nsenter", "ionice", "chrt", "taskset", "flock", "watch", "script", "strace", "ltrace", "gdb", "valgrind",
    "perf", "parallel", "at", "batch", "crontab", "systemd-run", "xdg-open", "start-stop-daemon", "setpriv",
    "capsh", "prlimit", "numactl", "firejail", "bwrap", "proot", "fakeroot", "faketime", "unbuffer",
    "ssh-agent", "sg", "newgrp", "runcon", "dbus-launch", "tmux", "screen",
    "sudo", "doas", "su", "runuser", "pkexec",
    # run commands through an option
    "git", "hg", "svn", "tar", "zip", "cpio", "rsync", "ssh", "scp", "sftp", "socat", "nc", "ncat", "netcat",
    "ftp", "wget", "sort", "split", "sdiff", "diff3", "tcpdump", "ip", "mail", "mailx", "mutt",
    "sqlite3", "mysql", "psql",
    # build tools and package managers: run scripts named in their arguments or the workspace
    "make", "gmake", "bmake", "cmake", "ninja", "meson", "cargo", "go", "rustc", "gcc*", "g++*", "cc", "c++",
    "clang*", "ld", "npm", "npx", "yarn", "pnpm", "pip*", "pipx", "uv", "uvx", "poetry", "gem", "bundle",
    "composer", "dpkg", "apt", "apt-get", "rpm", "dnf", "yum",
    # containers and clusters
    "docker", "podman", "nerdctl", "ctr", "kubectl", "lxc",
)

_HOW: dict[str, str] = {
    "find": "find -exec/-execdir/-ok", "git": "git -c alias.x='!cmd' x, -c core.pager=..., --upload-pack",
    "tar": "tar --checkpoint-action=exec=..., --to-command, -I", "xargs": "its arguments are a command",
    "env": "its arguments are a command", "sed": "the GNU 'e' command", "awk": "system()", "zip": "zip -TT",
    "rsync": "rsync -e", "ssh": "its arguments are a remote command, -o ProxyCommand",
    "make": "the Makefile and --eval",
    "sort": "sort --compress-program", "split": "split --filter", "wget": "wget --use-askpass",
}


def runs_commands(name: str) -> bool:
    """Whether the program called ``name`` (a basename) can run other programs."""
    name = os.path.basename(name)
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in RUNS_COMMANDS)


# Multi-call binaries pick the program by argv[0], which shell_exec pins to the allowed
# name, so ``ls`` -> busybox (Alpine) is ``ls``; ``busybox`` by its own name is refused.
_MULTI_CALL = ("busybox", "toybox")


def why_refused(entry: str, *, real_name: str = "") -> str | None:
    """The reason an allowlist entry by name alone is refused, or None if it is not.
    ``real_name`` is the basename of the program's real path, when known."""
    names = [os.path.basename(entry)]
    if real_name and real_name not in names and real_name not in _MULTI_CALL:
        names.append(real_name)
    for name in names:
        if runs_commands(name):
            how = _HOW.get(name, "its options or arguments")
            via = f" (it is {name!r})" if name != os.path.basename(entry) else ""
            return (f"{entry!r}{via} can run other programs through {how}, so it is not allowed by name alone; "
                    f"pin its arguments to literal values with a [[tools.shell_rules]] entry "
                    f"(program = \"{entry}\", args = [...])")
    return None


def rule_matches(rule: ShellRule, args: Sequence[str]) -> bool:
    """Whether ``args`` (argv without the program) is what ``rule`` pins: one glob per
    argument, then ``rule.rest`` for every further argument (none when it is empty)."""
    if len(args) < len(rule.args) or (len(args) > len(rule.args) and not rule.rest):
        return False
    if not all(fnmatch.fnmatchcase(arg, pattern) for arg, pattern in zip(args, rule.args)):
        return False
    return all(fnmatch.fnmatchcase(arg, rule.rest) for arg in args[len(rule.args):])


def rule_text(rule: ShellRule) -> str:
    """A rule as one line for the tool's description and messages."""
    words = [rule.program, *rule.args] + ([f"[more: {rule.rest}]"] if rule.rest else [])
    return " ".join(words)


_GLOB_CHARS = frozenset("*?[")


def is_literal(rule: ShellRule) -> bool:
    """Whether ``rule`` pins every argument to one literal value: no glob, no ``rest``."""
    return not rule.rest and not any(_GLOB_CHARS & set(arg) for arg in rule.args)


_UNSANDBOXED = ('shell_sandbox = "off" would run it unsandboxed, as tern\'s user (any file tern can read or '
                "write, the network); keep a sandbox (\"auto\": bubblewrap or Landlock), or pin every argument to "
                "a literal value in a [[tools.shell_rules]] entry")


def rule_problems(allowlist: Sequence[str], rules: Sequence[ShellRule], sandbox: str = "auto") -> list[str]:
    """Config problems of ``[tools]``'s shell policy, each starting with its key path.
    ``sandbox`` is ``shell_sandbox``: under ``"off"`` only literal rules may stand."""
    problems = []
    if sandbox == "off":
        problems += [f"tools.shell_allowlist[{i}]: {entry!r} is allowed by name (any arguments) and {_UNSANDBOXED}"
                     for i, entry in enumerate(allowlist)]
        problems += [f"tools.shell_rules[{i}]: \"{rule_text(rule)}\" leaves arguments free (a glob or rest) and "
                     f"{_UNSANDBOXED}" for i, rule in enumerate(rules) if not is_literal(rule)]
    for i, entry in enumerate(allowlist):
        problem = _program_problem(entry) or why_refused(entry)
        if problem:
            problems.append(f"tools.shell_allowlist[{i}]: {problem}")
    for i, rule in enumerate(rules):
        problem = _program_problem(rule.program)
        if problem:
            problems.append(f"tools.shell_rules[{i}].program: {problem}")
        elif not rule.args and rule.rest and fnmatch.fnmatchcase("-x", rule.rest) and runs_commands(rule.program):
            problems.append(f'tools.shell_rules[{i}].rest: "{rule.rest}" with no args pins nothing: any option '
                            f"reaches {rule.program!r}, which can run other programs; pin its arguments to "
                            f"literal values in args (no glob keeps it from running a command: it runs only in "
                            f"the sandbox)")
    return problems


def _program_problem(program: str) -> str | None:
    if not program.strip() or "\x00" in program:
        return "expected a program name or an absolute path"
    if "/" in program and not os.path.isabs(program):
        return f'give a bare program name or an absolute path, got "{program}"'
    return None
