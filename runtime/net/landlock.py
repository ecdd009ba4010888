"""A Landlock sandbox set up from pure Python: the launcher tern runs in place of a
program, which restricts itself and then executes the program.

Why a launcher (``python -I -S -B -c <this file> <policy> <program> <argv...>``) and not
``preexec_fn``: ``preexec_fn`` runs Python between fork and exec, which is unsafe in a
process with threads (trio's workers), and Landlock applies to the calling thread only.
A fresh interpreter has one thread; it restricts itself, then ``execve``\\s the program,
which inherits the restrictions (they can never be lifted). The file is passed as
source, so it runs the same from a checkout, a wheel or the pyz, with nothing imported
from tern: standard library only, and nothing at module level but definitions.

What it applies, in order (any step that fails: one line on stderr, exit 126, the
program never runs):

1. capabilities: when it has any (tern runs as root), the bounding set, the inheritable
   and ambient sets are emptied, so the program execs with none (a root program could
   otherwise ``mknod`` a disk or load a kernel module);
2. ``PR_SET_NO_NEW_PRIVS``: no set-uid program regains them;
3. seccomp (x86_64, aarch64): ``socket()`` refused with EACCES (every family when the
   network is off; ``AF_UNIX`` alone when it is on, so ``/run``'s daemons stay out of
   reach), ``io_uring_setup`` refused (its socket operations skip the filter), and a
   foreign syscall ABI (i386, x32) kills the process;
4. Landlock: every filesystem right this kernel knows is handled; the policy's
   ``read`` paths get read and execute, ``write`` paths every right but making device
   nodes, ``dev`` files read and write; TCP bind and connect are denied when the
   network is off (ABI 4); abstract UNIX sockets and signals are scoped to the sandbox
   (ABI 6), so it cannot signal tern or any other process outside.

The policy is JSON: ``{"read": [...], "write": [...], "dev": [...], "net": false, "env":
{...}}``; ``env`` is the program's whole environment (this interpreter's own may differ:
Python coerces a C locale by setting ``LC_CTYPE``). A path that does not exist is
skipped. ``--probe`` applies all of it and exits 0 without running anything: what
``runtime.net.sandbox`` asks once to learn whether it works here.
"""

import ctypes
import json
import os
import platform
import stat
import struct
import sys

SYS_CREATE_RULESET, SYS_ADD_RULE, SYS_RESTRICT_SELF = 444, 445, 446  # the same on every architecture
CREATE_RULESET_VERSION = 1
RULE_PATH_BENEATH = 1

EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX, SCOPE_SIGNAL = 1 << 0, 1 << 1

PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, PR_CAPBSET_DROP, PR_CAP_AMBIENT = 38, 22, 24, 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
SECCOMP_MODE_FILTER = 2
RET_KILL_PROCESS, RET_ERRNO, RET_ALLOW = 0x80000000, 0x00050000, 0x7FFF0000
EACCES, EPERM, EINVAL = 13, 1, 22
AF_UNIX = 1
# machine -> (AUDIT_ARCH, socket, io_uring_setup, lowest number of a foreign ABI or None)
SECCOMP_ARCH = {"x86_64": (0xC000003E, 41, 425, 0x40000000), "aarch64": (0xC00000B7, 198, 425, None)}
EXIT_REFUSED = 126


def fs_rights(abi):
    """Every filesystem right Landlock ``abi`` knows."""
    rights = (1 << 13) - 1
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    if abi >= 5:
        rights |= IOCTL_DEV
    return rights


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    libc.prctl.restype = ctypes.c_int
    return libc


class _Refused(Exception):
    """A step of the sandbox failed: the program must not run."""


def _check(result, what):
    if result < 0:
        number = ctypes.get_errno()
        raise _Refused(f"{what}: {os.strerror(number)} (errno {number})")
    return result


def abi(libc=None):
    """The Landlock ABI version of this kernel, 0 when it has none (or it is disabled)."""
    libc = libc or _libc()
    result = libc.syscall(SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(CREATE_RULESET_VERSION))
    return max(int(result), 0)


def seccomp_program(machine, net):
    """The BPF filter for ``machine`` as bytes, or None on an architecture it does not know."""
    if machine not in SECCOMP_ARCH:
        return None
    arch, sys_socket, sys_uring, foreign = SECCOMP_ARCH[machine]

    def ins(code, k, jt=0, jf=0):
        return struct.pack("=HBBI", code, jt, jf, k)

    ld, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06
    denied = RET_ERRNO | EACCES
    head = [ins(ld, 4), ins(jeq, arch, 1, 0), ins(ret, RET_KILL_PROCESS), ins(ld, 0)]
    if foreign is not None:
        head += [ins(jge, foreign, 0, 1), ins(ret, RET_KILL_PROCESS)]
    head += [ins(jeq, sys_uring, 0, 1), ins(ret, RET_ERRNO | EPERM)]
    if net:  # socket(AF_UNIX, ...) only
        tail = [ins(jeq, sys_socket, 0, 3), ins(ld, 16), ins(jeq, AF_UNIX, 0, 1), ins(ret, denied)]
    else:
        tail = [ins(jeq, sys_socket, 0, 1), ins(ret, denied)]
    return b"".join(head + tail + [ins(ret, RET_ALLOW)])


def _drop_capabilities(libc):
    for cap in range(64):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 and ctypes.get_errno() == EINVAL:
            break  # past the last capability this kernel knows
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = struct.pack("=Ii", 0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = ctypes.create_string_buffer(struct.pack("=6I", 0, 0, 0, 0, 0, 0))  # effective, permitted, inheritable x2
    _check(libc.capset(ctypes.c_char_p(header), data), "capset")


def _has_capabilities():
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith(("CapEff:", "CapPrm:", "CapBnd:")) and int(line.split()[1], 16):
                    return True
    except OSError:
        return os.geteuid() == 0
    return False


def _seccomp(libc, net):
    program = seccomp_program(platform.machine(), net)
    if program is None:
        return
    buffer = ctypes.create_string_buffer(program)
    prog = struct.pack("=HxxxxxxQ", len(program) // 8, ctypes.addressof(buffer))
    _check(libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.c_char_p(prog), 0, 0), "seccomp filter")


def _landlock(libc, policy):
    version = abi(libc)
    if version < 1:
        raise _Refused("Landlock is not available in this kernel")
    handled = fs_rights(version)
    net = 0 if policy.get("net") or version < 4 else NET_BIND_TCP | NET_CONNECT_TCP
    scoped = SCOPE_ABSTRACT_UNIX | SCOPE_SIGNAL if version >= 6 else 0
    if version >= 6:
        attr = struct.pack("=QQQ", handled, net, scoped)
    elif version >= 4:
        attr = struct.pack("=QQ", handled, net)
    else:
        attr = struct.pack("=Q", handled)
    ruleset = _check(libc.syscall(SYS_CREATE_RULESET, ctypes.c_char_p(attr), ctypes.c_size_t(len(attr)),
                                  ctypes.c_uint32(0)), "landlock_create_ruleset")
    file_rights = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV
    write = handled & ~(MAKE_CHAR | MAKE_BLOCK)
    try:
        for paths, rights in ((policy.get("read", []), EXECUTE | READ_FILE | READ_DIR),
                              (policy.get("write", []), write),
                              (policy.get("dev", []), READ_FILE | WRITE_FILE | IOCTL_DEV)):
            for path in paths:
                try:
                    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
                except OSError:
                    continue  # not there: nothing to allow
                try:
                    allowed = rights & handled
                    if not stat.S_ISDIR(os.fstat(fd).st_mode):
                        allowed &= file_rights
                    rule = struct.pack("=Qi", allowed, fd)
                    _check(libc.syscall(SYS_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(RULE_PATH_BENEATH),
                                        ctypes.c_char_p(rule), ctypes.c_uint32(0)), f"landlock_add_rule {path}")
                finally:
                    os.close(fd)
        _check(libc.syscall(SYS_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)), "landlock_restrict_self")
    finally:
        os.close(ruleset)


def apply(policy):
    """Restrict this process (and what it executes) to ``policy``; ``_Refused`` if any step fails."""
    libc = _libc()
    if _has_capabilities():
        _drop_capabilities(libc)
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
    _seccomp(libc, bool(policy.get("net")))
    _landlock(libc, policy)


def main(argv):
    """``<policy JSON> --probe`` or ``<policy JSON> <executable> <argv0> [args...]``."""
    try:
        policy = json.loads(argv[0])
        apply(policy)
    except (_Refused, OSError, ValueError, IndexError) as error:
        sys.stderr.write(f"tern sandbox (landlock): {error}\n")
        sys.stderr.flush()
        os._exit(EXIT_REFUSED)
    if argv[1] == "--probe":
        os._exit(0)
    try:
        os.execve(argv[1], argv[2:], policy.get("env", os.environ))
    except OSError as error:
        sys.stderr.write(f"tern sandbox (landlock): cannot run {argv[1]}: {error.strerror or error}\n")
        sys.stderr.flush()
        os._exit(EXIT_REFUSED if error.errno in (EACCES, EPERM) else 127)


if __name__ == "__main__":
    main(sys.argv[1:])
