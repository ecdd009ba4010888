"""The audit log's hash chain, sans-IO: how a record is linked to the one before it,
and the verifier that walks records and names the first one that is not as tern wrote it.

A chained record is one line: its canonical bytes with its hash and chain value spliced
in last::

    {"seq":7,"agent":"a","kind":"tool_call",...,"time":1700000000.5,"hash":"<64 hex>","chain":"<64 hex>"}

- canonical bytes: the line without ``,"hash":"<64 hex>","chain":"<64 hex>"``
  (``{"seq":7,...}``): ``seq`` first, then the other fields in sorted key order as the
  writer encoded them. The verifier checks these exact bytes, so it never depends on
  re-encoding JSON the same way.
- hash: ``hex(SHA-256(previous link || canonical))``, where ``previous link`` is the
  previous record's hash as its 64 ASCII hex characters, and empty for seq 1, the first
  record of a chain. No key: anyone can check it, so a signed checkpoint
  (``runtime.kernel.audit_checkpoints``) over one record's hash vouches for every record
  up to it, on any machine, with tern's public key alone.
- chain: ``hex(HMAC-SHA256(key, hash))``. The key is 32 random bytes only tern's user
  can read (``audit.key``, see ``runtime.kernel.audit``): without it nobody can write a
  record that verifies, so records after the last checkpoint are covered too where the
  key is at hand.

Records of a tern from before the hash carry only ``chain`` (``hex(HMAC-SHA256(key,
previous link || canonical))``, their link is that chain value); they are still read, and
checked where the key is.
"""

from __future__ import annotations

import hashlib
from binascii import hexlify
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple

import msgspec

__all__ = ["KEY_BYTES", "Mac", "parse", "last_chained", "link_of", "Line", "Mark", "Problem", "Report", "verify"]

KEY_BYTES = 32
SUFFIX_BYTES = 76  # ,"chain":"  +  64 hex  +  "}
HASH_BYTES = 74  # ,"hash":"  +  64 hex  +  "   (before the chain value)
_CHAIN_KEY = b',"chain":"'
_HASH_KEY = b',"hash":"'
_HEX = frozenset(b"0123456789abcdef")
RECENT_CHAINS = 4096  # chain values remembered to recognise a record copied further on
MAX_PROBLEMS = 100  # a report lists at most this many (and counts the rest)
_decode = msgspec.json.Decoder().decode


def link_of(previous: bytes, canonical: bytes) -> bytes:
    """The keyless hash (64 hex characters, as bytes) of ``canonical`` after ``previous``."""
    return hashlib.sha256(previous + canonical).hexdigest().encode()


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
        """The line (with its newline) and hash of record ``seq`` after the link
        ``previous``; ``body`` holds the record's other fields as a JSON object (``{...}``,
        at least one field). The MAC of ``__call__``, inlined: a record costs one call."""
        canonical = b'{"seq":%d,' % seq + body[1:]
        link = hashlib.sha256(previous + canonical).hexdigest().encode()
        inner = self._inner.copy()
        inner.update(link)
        outer = self._outer.copy()
        outer.update(inner.digest())
        chain = hexlify(outer.digest())
        return b"".join((canonical[:-1], _HASH_KEY, link, b'"', _CHAIN_KEY, chain, b'"}\n')), link


class Chained(NamedTuple):
    seq: int | None  # None: the bytes still end with a chain value, but are no JSON object with a seq
    chain: bytes
    canonical: bytes
    fields: dict[str, Any]
    hash: bytes | None = None  # None: an older tern's record, chained by the HMAC alone

    @property
    def link(self) -> bytes:
        """What the next record chains from: the hash (the chain value for older records)."""
        return self.hash if self.hash is not None else self.chain


class Unchained(NamedTuple):
    fields: dict[str, Any]  # a record of a tern from before the chain (no seq, no chain)


class Unreadable(NamedTuple):
    pass


def _chained(line: bytes) -> Chained | None:
    """``line`` as a chained record, if it ends with a well-formed chain value."""
    if len(line) <= SUFFIX_BYTES or line[-SUFFIX_BYTES:-66] != _CHAIN_KEY or line[-2:] != b'"}' \
            or not _HEX.issuperset(line[-66:-2]):
        return None
    head, link = line[:-SUFFIX_BYTES], None
    if len(head) > HASH_BYTES and head[-HASH_BYTES:-65] == _HASH_KEY and head[-1:] == b'"' \
            and _HEX.issuperset(head[-65:-1]):
        head, link = head[:-HASH_BYTES], head[-65:-1]
    canonical = head + b"}"
    try:
        fields = _decode(canonical)
    except msgspec.DecodeError:
        fields = None
    if not isinstance(fields, dict):
        return Chained(None, line[-66:-2], canonical, {}, link)
    seq = fields.get("seq")
    return Chained(seq if type(seq) is int and seq > 0 else None, line[-66:-2], canonical, fields, link)


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
    """The seq and link of the last complete chained record in ``data``, the end of a
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
            return chained.seq, chained.link
    return None


# --- Verification ------------------------------------------------------------------------


class Line(NamedTuple):
    file: str
    number: int  # 1-based
    data: bytes  # without its newline
    terminated: bool  # False: the last line of its file, with no newline after it


class Mark(NamedTuple):
    """One signed line of ``audit.checkpoints``, its signature already checked."""

    file: str
    line: int
    kind: str  # "checkpoint": the log reached ``seq``, whose hash was ``link``;
    #            "start": the records up to ``seq`` were rotated away (``link``: its hash; None: unknown)
    seq: int
    link: bytes | None
    time: float


class Problem(msgspec.Struct, frozen=True):
    file: str
    line: int
    seq: int | None
    kind: str  # changed inserted removed reordered duplicated restarted partial unreadable unchained no_key
    #            cut (the log ends before a checkpoint) forged (a checkpoint not signed by the key) unsigned
    message: str  # one sentence, naming file, line and seq


class Report(msgspec.Struct):
    ok: bool = True
    records: int = 0  # chained records read
    unchained: int = 0  # records from before the chain (an older tern's)
    files: list[str] = msgspec.field(default_factory=list)
    first_seq: int | None = None
    last_seq: int | None = None
    last_time: float | None = None
    rotated_away: bool = False  # the log begins after records a signed checkpoint says were rotated away
    stopped: bool = False  # a break the walk could not step over ended it early
    problems: list[Problem] = msgspec.field(default_factory=list)
    problem_count: int = 0
    checkpoints: int = 0  # signed checkpoints read
    signed_seq: int | None = None  # the last record a signed checkpoint vouches for
    signed_time: float | None = None  # when that checkpoint was made
    older: int = 0  # records still there from before the signed start (rotation stopped midway)
    unkeyed: int = 0  # an older tern's records (HMAC only), not checkable without audit.key

    def summary(self) -> str:
        """One sentence: what was checked and whether the chain holds."""
        files = f"{len(self.files)} file{'' if len(self.files) == 1 else 's'}"
        counted = f"{self.records} record{'' if self.records == 1 else 's'} in {files}"
        if self.ok:
            text = (f"{counted}, chain intact from seq {self.first_seq} to {self.last_seq}" if self.records
                    else f"no chained records yet in {files}")
            if self.signed_seq is not None and self.last_seq is not None:
                after = self.last_seq - self.signed_seq
                text += f", signed up to seq {self.signed_seq}" + (
                    f" ({after} record{'' if after == 1 else 's'} after it not yet signed)" if after > 0 else "")
            elif self.records:
                text += ", no signed checkpoint yet"
        else:
            first = self.problems[0]
            more = self.problem_count - 1
            text = f"not intact: {first.message}" + (f" ({more} more problem{'' if more == 1 else 's'} after it)"
                                                       if more else "")
        if self.unchained:
            before = f", before seq {self.first_seq}" if self.first_seq is not None else ""
            text += f"; {self.unchained} older record{'' if self.unchained == 1 else 's'} unchained{before}"
        if self.unkeyed:
            text += (f"; {self.unkeyed} record{'' if self.unkeyed == 1 else 's'} of an older tern (no hash) "
                     "checked only with audit.key")
        if self.rotated_away and self.ok:
            text += f"; the records before seq {self.first_seq} were rotated away, as a signed checkpoint says"
        return text


def verify(lines: Iterable[Line], mac: Mac | None, *, rotated_files: int, marks: Sequence[Mark] = (),
           keyless: bool = False, mark_problems: Sequence[Problem] = (), note: str = "",
           marks_file: str = "audit.checkpoints") -> Report:
    """Walk ``lines`` (oldest file first, each file in order) and check every record.

    The first problem is the one that matters; the walk goes on past a problem only where
    the next record proves where the chain continues (an inserted line it goes around, a
    changed record it still links through), so one damaged line does not hide what comes
    after it. The chain must begin at seq 1, or just after the newest ``start`` mark
    (records rotated away); each ``checkpoint`` mark must match the record of its seq,
    and none may name a seq past the log's end. ``keyless``: checked with a public key
    only (``mac`` None): hashes and signatures, and at least one checkpoint must vouch
    for the log. ``mark_problems``: what was wrong with the checkpoints file itself;
    ``note``: said where the beginning of the log is missing (an empty or absent file)."""
    return _Walk(mac, rotated_files, marks, keyless, note, marks_file).run(lines, mark_problems)


class _Walk:
    def __init__(self, mac: Mac | None, rotated_files: int, marks: Sequence[Mark], keyless: bool, note: str,
                 marks_file: str) -> None:
        self.mac = mac
        self.keyless = keyless and mac is None
        self.rotated_files = rotated_files
        self.note = note
        self.marks_file = marks_file
        self.report = Report()
        starts = [mark for mark in marks if mark.kind == "start"]
        self.base = max(starts, key=lambda mark: mark.seq) if starts else None
        floor = self.base.seq if self.base is not None else 0
        self.marks: dict[int, Mark] = {}  # seq -> the newest checkpoint of it
        for mark in marks:
            if mark.kind == "checkpoint" and mark.seq > floor:
                self.marks[mark.seq] = mark
        self.report.checkpoints = len(marks)
        self.started = False  # a chained record has been accepted
        self.prev = (self.base.link or b"") if self.base is not None else b""  # the link the next record must follow
        self.prev_seq = floor
        self.before = b""  # the link before ``prev``, and where the record of ``prev`` is
        self.prev_at: tuple[str, int] = ("", 0)
        self.seen_any = False  # any line before this one
        self.hashed = False  # a record with a hash has been accepted (older ones may no longer follow)
        self.trust_next = False  # accept the next chained record as a new starting point
        self.recent: OrderedDict[bytes, tuple[str, int, int]] = OrderedDict()  # link -> file, line, seq

    def run(self, lines: Iterable[Line], mark_problems: Sequence[Problem] = ()) -> Report:
        report = self.report
        for problem in mark_problems:
            report.problem_count += 1
            if len(report.problems) < MAX_PROBLEMS:
                report.problems.append(problem)
        iterator: Iterator[Line] = iter(lines)
        current = next(iterator, None)
        while current is not None and not report.stopped:
            following = next(iterator, None)
            if current.file not in report.files:
                report.files.append(current.file)
            self._check(current, parse(current.data), following)
            self.seen_any = True
            current = following
        if not report.stopped:
            self._ends()
        report.ok = not report.problem_count
        return report

    def _ends(self) -> None:
        """After the last record: a checkpoint past it means records were cut off the end;
        with only a public key, something must be signed."""
        report = self.report
        last = report.last_seq or 0
        beyond = [mark for seq, mark in self.marks.items() if seq > last]
        if beyond:
            mark = max(beyond, key=lambda m: m.seq)
            ends = f"it ends at seq {last}" if report.records else "it holds no record"
            self._problem_at(mark.file, mark.line, mark.seq, "cut",
                             f"is a signed checkpoint of seq {mark.seq}, but the log is shorter: {ends}, so the "
                             f"records after it were removed")
        elif self.keyless and report.records and report.signed_seq is None:
            self._problem_at(self.marks_file, 0, None, "unsigned",
                             "holds no checkpoint signed by this key for any record of the log, so nothing in "
                             "it can be vouched for with the public key alone")

    # -- helpers

    def _problem(self, line: Line, seq: int | None, kind: str, text: str, *, stop: bool = False) -> None:
        self._problem_at(line.file, line.number, seq, kind, text, stop=stop)

    def _problem_at(self, file: str, number: int, seq: int | None, kind: str, text: str, *,
                    stop: bool = False) -> None:
        report = self.report
        report.problem_count += 1
        if len(report.problems) < MAX_PROBLEMS:
            where = (f"{file} line {number}" if number else file) + (f" (seq {seq})" if seq is not None else "")
            report.problems.append(Problem(file, number, seq, kind, f"{where} {text}"))
        if stop:
            report.stopped = True

    def _links(self, previous: bytes, record: Chained) -> bool:
        """Whether ``record`` follows the link ``previous``: its hash (and, with the key,
        its chain value); an older tern's record by its chain value, with the key only
        (without one, and checking with a public key, it is taken as it stands while no
        record with a hash has come yet)."""
        if record.hash is not None:
            if link_of(previous, record.canonical) != record.hash:
                return False
            return self.mac is None or self.mac(record.hash, b"") == record.chain
        if self.mac is not None:
            return self.mac(previous, record.canonical) == record.chain
        return self.keyless and not self.hashed

    def _follows(self, line: Line | None, previous: bytes) -> Chained | None:
        """``line`` parsed, if it is a chained record that verifies after ``previous``."""
        if line is None or (self.mac is None and not self.keyless):
            return None
        parsed = parse(line.data)
        if type(parsed) is Chained and parsed.seq is not None and self._links(previous, parsed):
            return parsed
        return None

    def _accept(self, line: Line, record: Chained) -> None:
        report = self.report
        if not self.started:
            self.started = True
            report.first_seq = record.seq
        report.records += 1
        report.last_seq = record.seq
        if record.hash is not None:
            self.hashed = True
        elif self.mac is None:
            report.unkeyed += 1
        moment = record.fields.get("time")
        if isinstance(moment, (int, float)):
            report.last_time = float(moment)
        self.before, self.prev, self.prev_seq = self.prev, record.link, record.seq or 0
        self.prev_at = (line.file, line.number)
        self.recent[record.link] = (line.file, line.number, record.seq or 0)
        if len(self.recent) > RECENT_CHAINS:
            self.recent.popitem(last=False)
        mark = self.marks.pop(record.seq, None) if record.seq is not None else None
        if mark is None:
            return
        if mark.link == record.link:
            report.signed_seq, report.signed_time = record.seq, mark.time
            return
        self._problem(line, record.seq, "changed",
                      f"is not the record the signed checkpoint at {mark.file} line {mark.line} vouches for: "
                      "records up to it were changed, removed or replaced (and the chain recomputed)")

    # -- one line

    def _check(self, line: Line, parsed: Chained | Unchained | Unreadable, following: Line | None) -> None:
        if type(parsed) is Unchained:
            if not self.started:
                self.report.unchained += 1
                return
            self._problem(line, None, "unchained",
                          f"is a record without a sequence number or chain value after seq {self.prev_seq}: it "
                          "was inserted, or written by an older tern that shares this log")
            return
        if type(parsed) is Unreadable:
            self._unreadable(line, following)
            return
        assert type(parsed) is Chained
        if self.mac is None and not self.keyless:
            self._problem(line, parsed.seq, "no_key",
                          "is chained but there is no audit key to check it with (audit.key is missing)", stop=True)
            return
        if self.trust_next or not self.started:
            if self._start(line, parsed):
                return
        elif parsed.seq == self.prev_seq + 1 and self._links(self.prev, parsed):
            self._accept(line, parsed)
            return
        self._broken(line, parsed, following)

    def _start(self, line: Line, record: Chained) -> bool:
        """The first chained record, or the one after a break the walk cannot link
        across: True if it is taken as the (new) start of the chain. The log begins at
        seq 1, or just after the records a signed ``start`` mark says were rotated away;
        anything else means its first records are gone."""
        if self.trust_next:
            self.trust_next = False
            self._accept(line, record)
            return True
        base = self.base
        first, previous = (base.seq + 1, base.link) if base is not None else (1, b"")
        if record.seq is not None and base is not None and record.seq < first:
            self.report.older += 1  # still there from before the signed start: not part of the chain checked
            return True
        if record.seq == first and (previous is None or self._links(previous, record)):
            self.report.rotated_away = base is not None
        elif record.seq is None or record.seq <= first:
            return False
        else:
            gone = _missing(first, record.seq)
            if not self.seen_any and not self.rotated_files:
                text = f"is where the log begins, but no rotated file is left: {gone}"
            elif not self.seen_any:
                text = f"is where the log begins: {gone}"
            else:
                text = f"is the first chained record: {gone}"
            self._problem(line, record.seq, "removed", text + (f" ({self.note})" if self.note else ""))
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
        after = self._follows(following, record.link)
        if after is not None and after.seq == expected + 1:  # the next record links through it: its contents changed
            self._problem(line, seq, "changed",
                          "was changed after it was written: its contents no longer match its chain value")
            self._accept(line, record._replace(seq=expected))
            return
        skipped = self._follows(following, self.prev)  # the next record links around it
        if seq is not None and seq > expected:
            if skipped is not None and skipped.seq == expected and self._links(skipped.link, record):
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
        if seq == 1 and self._links(b"", record):
            self._problem(line, seq, "restarted",
                          f"starts a new chain after seq {self.prev_seq}: its writer found no chained record to "
                          "follow at the end of the file (records removed or damaged there)")
            self._accept(line, record)
            return
        if seq is not None and seq == self.prev_seq and seq > 1 and self._links(self.before, record) \
                and self._follows(following, record.link) is not None:
            file, number = self.prev_at  # two records of one seq after the same one: the chain goes on from this
            self.report.records -= 1
            self._problem_at(file, number, seq, "inserted",
                             f"was inserted: tern did not write it ({line.file} line {line.number} is the seq {seq} "
                             "the chain goes on from)")
            self.prev, self.prev_seq = self.before, seq - 1
            self._accept(line, record)
            return
        if seq is not None and seq < expected:
            copy = self.recent.get(record.link)
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
