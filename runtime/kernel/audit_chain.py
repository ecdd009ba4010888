"""The audit log's hash chain, sans-IO: how a record is linked to the one before it,
and the verifier that walks records and names the first one that is not as tern wrote it.

A chained record is one line: its canonical bytes with the chain value spliced in last::

    {"seq":7,"agent":"a","kind":"tool_call",...,"time":1700000000.5,"chain":"<64 hex>"}

- canonical bytes: the line without ``,"chain":"<64 hex>"`` (``{"seq":7,...}``): ``seq``
  first, then the other fields in sorted key order as the writer encoded them. The
  verifier checks these exact bytes, so it never depends on re-encoding JSON the same way.
- chain: ``hex(HMAC-SHA256(key, previous chain || canonical))``, where ``previous chain``
  is the previous record's chain value as its 64 ASCII hex characters, and empty for
  seq 1, the first record of a chain.

The key is 32 random bytes only tern's user can read (``audit.key``, see
``runtime.kernel.audit``): without it, nobody can write a record that verifies, so a
record changed, removed, inserted, copied or moved shows as a break in the chain.
"""

from __future__ import annotations

import hashlib
from binascii import hexlify
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

import msgspec

__all__ = ["KEY_BYTES", "Mac", "parse", "last_chained", "Line", "Problem", "Report", "verify"]

KEY_BYTES = 32
SUFFIX_BYTES = 76  # ,"chain":"  +  64 hex  +  "}
_CHAIN_KEY = b',"chain":"'
_HEX = frozenset(b"0123456789abcdef")
RECENT_CHAINS = 4096  # chain values remembered to recognise a record copied further on
MAX_PROBLEMS = 100  # a report lists at most this many (and counts the rest)
_decode = msgspec.json.Decoder().decode


class Mac:
    """HMAC-SHA256 with the key's inner and outer hash states computed once: a record
    costs two ``copy()``s and three updates instead of hashing the padded key twice
    (0.7 us against 1.7 us for ``hmac.digest`` on the machine it was measured on)."""

    __slots__ = ("_inner", "_outer")

    def __init__(self, key: bytes) -> None:
        if len(key) > 64:
            key = hashlib.sha256(key).digest()
        key = key.ljust(64, b"\0")
        self._inner = hashlib.sha256(bytes(b ^ 0x36 for b in key))
        self._outer = hashlib.sha256(bytes(b ^ 0x5C for b in key))

    def __call__(self, previous: bytes, canonical: bytes) -> bytes:
        """The chain value (64 hex characters, as bytes) of ``canonical`` after ``previous``."""
        inner = self._inner.copy()
        inner.update(previous)
        inner.update(canonical)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return hexlify(outer.digest())

    def line(self, previous: bytes, seq: int, body: bytes) -> tuple[bytes, bytes]:
        """The line (with its newline) and chain value of record ``seq`` after the chain
        value ``previous``; ``body`` holds the record's other fields as a JSON object
        (``{...}``, at least one field). The MAC of ``__call__``, inlined: a record
        costs one call."""
        canonical = b'{"seq":%d,' % seq + body[1:]
        inner = self._inner.copy()
        inner.update(previous)
        inner.update(canonical)
        outer = self._outer.copy()
        outer.update(inner.digest())
        chain = hexlify(outer.digest())
        return b"".join((canonical[:-1], _CHAIN_KEY, chain, b'"}\n')), chain


class Chained(NamedTuple):
    seq: int | None  # None: the bytes still end with a chain value, but are no JSON object with a seq
    chain: bytes
    canonical: bytes
    fields: dict[str, Any]


class Unchained(NamedTuple):
    fields: dict[str, Any]  # a record of a tern from before the chain (no seq, no chain)


class Unreadable(NamedTuple):
    pass


def _chained(line: bytes) -> Chained | None:
    """``line`` as a chained record, if it ends with a well-formed chain value."""
    if len(line) <= SUFFIX_BYTES or line[-SUFFIX_BYTES:-66] != _CHAIN_KEY or line[-2:] != b'"}' \
            or not _HEX.issuperset(line[-66:-2]):
        return None
    canonical = line[:-SUFFIX_BYTES] + b"}"
    try:
        fields = _decode(canonical)
    except msgspec.DecodeError:
        fields = None
    if not isinstance(fields, dict):
        return Chained(None, line[-66:-2], canonical, {})
    seq = fields.get("seq")
    return Chained(seq if type(seq) is int and seq > 0 else None, line[-66:-2], canonical, fields)


def parse(line: bytes) -> Chained | Unchained | Unreadable:
    """What one line (without its newline) is."""
    chained = _chained(line)
    if chained is not None:
        return chained
    try:
        fields = _decode(line)
    except msgspec.DecodeError:
        return Unreadable()
    if isinstance(fields, dict) and "seq" not in fields and "chain" not in fields:
        return Unchained(fields)
    return Unreadable()


def last_chained(data: bytes, *, whole: bool) -> tuple[int, bytes] | None:
    """The seq and chain of the last complete chained record in ``data``, the end of a
    file (``whole``: all of it, so its first line is complete too). A last line without
    its newline is a record cut short and does not count; lines that are not chained
    records (an older tern's, or damage) are passed over."""
    lines = data.split(b"\n")
    lines.pop()  # after the last newline: "" or a record cut short
    if not whole and lines:
        lines.pop(0)  # may begin mid-record
    for line in reversed(lines):
        chained = _chained(line)
        if chained is not None and chained.seq is not None:
            return chained.seq, chained.chain
    return None


# --- Verification ------------------------------------------------------------------------


class Line(NamedTuple):
    file: str
    number: int  # 1-based
    data: bytes  # without its newline
    terminated: bool  # False: the last line of its file, with no newline after it


class Problem(msgspec.Struct, frozen=True):
    file: str
    line: int
    seq: int | None
    kind: str  # changed inserted removed reordered duplicated restarted partial unreadable unchained no_key
    message: str  # one sentence, naming file, line and seq


class Report(msgspec.Struct):
    ok: bool = True
    records: int = 0  # chained records read
    unchained: int = 0  # records from before the chain (an older tern's)
    files: list[str] = msgspec.field(default_factory=list)
    first_seq: int | None = None
    last_seq: int | None = None
    last_time: float | None = None
    rotated_away: bool = False  # the walk began at a record whose predecessor is gone
    stopped: bool = False  # a break the walk could not step over ended it early
    problems: list[Problem] = msgspec.field(default_factory=list)
    problem_count: int = 0

    def summary(self) -> str:
        """One sentence: what was checked and whether the chain holds."""
        files = f"{len(self.files)} file{'' if len(self.files) == 1 else 's'}"
        counted = f"{self.records} record{'' if self.records == 1 else 's'} in {files}"
        if self.ok:
            text = (f"{counted}, chain intact from seq {self.first_seq} to {self.last_seq}" if self.records
                    else f"no chained records yet in {files}")
        else:
            first = self.problems[0]
            more = self.problem_count - 1
            text = f"not intact: {first.message}" + (f" ({more} more problem{'' if more == 1 else 's'} after it)"
                                                       if more else "")
        if self.unchained:
            before = f", before seq {self.first_seq}" if self.first_seq is not None else ""
            text += f"; {self.unchained} older record{'' if self.unchained == 1 else 's'} unchained{before}"
        if self.rotated_away and self.ok:
            text += (f"; the older files were rotated away, so checking starts at seq {self.first_seq}, "
                     "whose own contents cannot be checked")
        return text


def verify(lines: Iterable[Line], mac: Mac | None, *, rotated_files: int) -> Report:
    """Walk ``lines`` (oldest file first, each file in order) and check every chain value.

    The first problem is the one that matters; the walk goes on past a problem only where
    the next record proves where the chain continues (an inserted line it goes around, a
    changed record it still links through), so one damaged line does not hide what comes
    after it. ``rotated_files``: how many rotated files the walk includes (with none, the
    chain must start at seq 1)."""
    return _Walk(mac, rotated_files).run(lines)


class _Walk:
    def __init__(self, mac: Mac | None, rotated_files: int) -> None:
        self.mac = mac
        self.rotated_files = rotated_files
        self.report = Report()
        self.started = False  # a chained record has been accepted
        self.prev = b""  # the chain value the next record must follow
        self.prev_seq = 0
        self.seen_any = False  # any line before this one
        self.trust_next = False  # accept the next chained record as a new starting point
        self.recent: OrderedDict[bytes, tuple[str, int, int]] = OrderedDict()  # chain -> file, line, seq

    def run(self, lines: Iterable[Line]) -> Report:
        report = self.report
        iterator: Iterator[Line] = iter(lines)
        current = next(iterator, None)
        while current is not None and not report.stopped:
            following = next(iterator, None)
            if current.file not in report.files:
                report.files.append(current.file)
            self._check(current, parse(current.data), following)
            self.seen_any = True
            current = following
        report.ok = not report.problem_count
        return report

    # -- helpers

    def _problem(self, line: Line, seq: int | None, kind: str, text: str, *, stop: bool = False) -> None:
        report = self.report
        report.problem_count += 1
        if len(report.problems) < MAX_PROBLEMS:
            where = f"{line.file} line {line.number}" + (f" (seq {seq})" if seq is not None else "")
            report.problems.append(Problem(line.file, line.number, seq, kind, f"{where} {text}"))
        if stop:
            report.stopped = True

    def _follows(self, line: Line | None, previous: bytes) -> Chained | None:
        """``line`` parsed, if it is a chained record that verifies after ``previous``."""
        if line is None or self.mac is None:
            return None
        parsed = parse(line.data)
        if type(parsed) is Chained and parsed.seq is not None and self.mac(previous, parsed.canonical) == parsed.chain:
            return parsed
        return None

    def _accept(self, line: Line, record: Chained) -> None:
        report = self.report
        if not self.started:
            self.started = True
            report.first_seq = record.seq
        report.records += 1
        report.last_seq = record.seq
        moment = record.fields.get("time")
        if isinstance(moment, (int, float)):
            report.last_time = float(moment)
        self.prev, self.prev_seq = record.chain, record.seq or 0
        self.recent[record.chain] = (line.file, line.number, record.seq or 0)
        if len(self.recent) > RECENT_CHAINS:
            self.recent.popitem(last=False)

    # -- one line

    def _check(self, line: Line, parsed: Chained | Unchained | Unreadable, following: Line | None) -> None:
        if type(parsed) is Unchained:
            if not self.started:
                self.report.unchained += 1
                return
            self._problem(line, None, "unchained",
                          f"is a record without a chain value after seq {self.prev_seq}: it was inserted, or written "
                          "by an older tern that shares this log")
            return
        if type(parsed) is Unreadable:
            self._unreadable(line, following)
            return
        assert type(parsed) is Chained
        if self.mac is None:
            self._problem(line, parsed.seq, "no_key",
                          "is chained but there is no audit key to check it with (audit.key is missing)", stop=True)
            return
        if self.trust_next or not self.started:
            if self._start(line, parsed):
                return
        elif parsed.seq == self.prev_seq + 1 and self.mac(self.prev, parsed.canonical) == parsed.chain:
            self._accept(line, parsed)
            return
        self._broken(line, parsed, following)

    def _start(self, line: Line, record: Chained) -> bool:
        """The first chained record, or the one after a break the walk cannot link
        across: True if it is taken as the (new) start of the chain."""
        assert self.mac is not None
        if self.trust_next:
            self.trust_next = False
        elif record.seq == 1 and self.mac(b"", record.canonical) == record.chain:
            pass  # the chain's first record
        elif record.seq is None or record.seq <= 1:
            return False
        elif not self.seen_any and self.rotated_files:
            self.report.rotated_away = True  # its predecessor was in a file rotated away: taken on trust
        elif not self.seen_any:
            self._problem(line, record.seq, "removed",
                          f"is where the log begins, but no rotated file is left: {_missing(1, record.seq)}")
        else:
            self._problem(line, record.seq, "removed", f"is the first chained record: {_missing(1, record.seq)}")
        self._accept(line, record)
        return True

    def _unreadable(self, line: Line, following: Line | None) -> None:
        if not line.terminated:
            self._problem(line, None, "partial",
                          "is a record cut off before its end: the file was truncated, or its writer stopped "
                          "mid-write")
            return
        if not self.started:
            self._problem(line, None, "unreadable", "is not a record tern wrote (not a JSON object of a record)")
            return
        if self._follows(following, self.prev) is not None:
            self._problem(line, None, "unreadable",
                          f"is not a complete record (a write cut short, or text added); the chain continues past it "
                          f"from seq {self.prev_seq}")
            return
        self._problem(line, None, "unreadable", "is not a record tern wrote (a record damaged or cut short, or text "
                      "added), and the record after it does not follow the one before it")
        self.trust_next = True  # check the rest from the next record on

    def _broken(self, line: Line, record: Chained, following: Line | None) -> None:
        """``record`` does not follow the previous one: say what happened, as far as the
        record after it shows, and where the walk goes on."""
        seq, expected = record.seq, self.prev_seq + 1
        after = self._follows(following, record.chain)
        if after is not None and after.seq == expected + 1:  # the next record links through it: its contents changed
            self._problem(line, seq, "changed",
                          "was changed after it was written: its contents no longer match its chain value")
            self._accept(line, record._replace(seq=expected))
            return
        skipped = self._follows(following, self.prev)  # the next record links around it
        if seq is not None and seq > expected:
            if skipped is not None and skipped.seq == expected and self.mac is not None \
                    and self.mac(skipped.chain, record.canonical) == record.chain:
                self._problem(line, seq, "reordered",
                              f"is out of order: seq {seq} comes before seq {expected} (records were reordered)",
                              stop=True)
            elif skipped is not None:
                self._problem(line, seq, "inserted",
                              f"was inserted: tern did not write it here (seq {expected} follows seq {self.prev_seq} "
                              "around it)")
            else:
                self._problem(line, seq, "removed", f"does not follow seq {self.prev_seq}: {_missing(expected, seq)}")
                self._accept(line, record)  # the chain goes on from here: check the rest against it
            return
        if seq == 1 and self.mac is not None and self.mac(b"", record.canonical) == record.chain:
            self._problem(line, seq, "restarted",
                          f"starts a new chain after seq {self.prev_seq}: its writer found no chained record to "
                          "follow at the end of the file (records removed or damaged there)")
            self._accept(line, record)
            return
        if seq is not None and seq < expected:
            copy = self.recent.get(record.chain)
            if copy is not None:
                where = f" ({copy[0]} line {copy[1]})" if copy[0] else ""
                self._problem(line, seq, "duplicated", f"is a copy of the record seq {copy[2]}{where}, added again",
                              stop=skipped is None)
            elif skipped is not None:
                self._problem(line, seq, "inserted",
                              f"was inserted: tern did not write it here (seq {expected} follows seq {self.prev_seq} "
                              "around it)")
            else:
                self._problem(line, seq, "reordered",
                              f"is out of order: seq {seq} comes after seq {self.prev_seq} (records were reordered)",
                              stop=True)
            return
        if skipped is not None:
            self._problem(line, seq, "inserted",
                          f"was inserted: tern did not write it (the record after it follows seq {self.prev_seq})")
            return
        self._problem(line, seq, "changed",
                      "does not match its chain value: it was changed or forged, and the records after it cannot be "
                      "linked to the ones before" if following is not None else
                      "does not match its chain value: it was changed or forged")
        self.trust_next = True  # check the rest from the next record on


def _missing(first: int, before: int) -> str:
    """Records ``first`` up to ``before`` (excluded) are gone, as words."""
    if before == first + 1:
        return f"the record seq {first} before it was removed"
    return f"the records seq {first} to {before - 1} before it were removed"
