"""Tuning records: one JSON object per line, one line per measured trial.

A record says what was measured and how it went::

    {"format": 1, "kiln": "0.1.0", "workload": "conv2d|NCHW>NCHW|1x64x56x56|...",
     "space": "conv2d", "target": "x86_64-avx2", "runner": "local-cpu",
     "trace": {"space": "conv2d", "decisions": [["ob", 16], ["rw", 6], ...]},
     "costs": [0.00071, 0.00070, 0.00072], "unit": "s", "error": null, "flops": 231211008,
     "conditions": {"repeat": 3, "flush_mb": 8, "cold_mb": 0, "machine": "AMD EPYC ...",
                    "cores": 1}}

``conditions`` say how the trial was measured (:mod:`toolchain.autotune.conditions`;
a record written by an earlier Kiln has none: unknown). ``costs`` are the repeats
(seconds of thread CPU time for the CPU runner, instructions for the QEMU runner); a
failed trial (build error, crash, time-out) has ``costs: null`` and an ``error``.
:func:`best_records` picks, per workload, the trial of least cost — what ``kiln compile
--records`` applies.

Files are written crash-safe by :class:`RecordWriter`: trials are appended, one whole
line per ``write`` and flushed to disk, to ``OUT.partial``; only a run that finishes
renames it to ``OUT`` (atomically), so ``OUT`` is never half-written. A later run with the
same ``-o OUT`` resumes from ``OUT.partial`` (or ``OUT``). A line cut short at the end of
a file (a crash while writing it) is skipped with a warning; any other malformed line is
an error naming the file and line.

One writer at a time: a writer holds an exclusive lock (``flock``) on ``OUT.lock`` from
its creation until it commits or its block ends, and a second writer of the same ``OUT``
(another ``kiln tune -o OUT`` still running) is refused naming the process that holds it.
Before the lock two runs read each other's partial file, truncated it under each other,
measured the same points twice, and the second's rename failed with an internal error.

>>> import tempfile, pathlib
>>> from toolchain.autotune.space import Trace
>>> r = Record("w|1", "toy", "c-generic", Trace("toy", (("tile", 4),)), [2e-3, 1e-3])
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> with RecordWriter(d / "r.jsonl") as w:
...     w.append(r)
>>> [x.cost for x in load_records(d / "r.jsonl")]
[0.001]
"""

from __future__ import annotations

import fcntl
import json
import os
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolchain import __version__
from toolchain.autotune.space import Trace
from toolchain.errors import InputError, KilnWarning

FORMAT = 1


@dataclass(frozen=True)
class Record:
    """One measured trial (see the module docstring)."""

    workload: str
    space: str
    target: str
    trace: Trace
    costs: Sequence[float] | None
    error: str | None = None
    runner: str = "local-cpu"
    unit: str = "s"
    flops: int = 0
    kiln: str = __version__
    #: the kernel's features (:mod:`toolchain.autotune.features`), for transfer learning
    features: Sequence[float] | None = None
    #: how it was measured (:mod:`toolchain.autotune.conditions`); None: not recorded
    conditions: Mapping[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.costs)

    @property
    def cost(self) -> float:
        """The trial's cost: the least of its repeats (inf for a failed trial)."""
        return min(self.costs) if self.ok and self.costs else float("inf")

    def to_json(self) -> dict[str, Any]:
        out = {"format": FORMAT, "kiln": self.kiln, "workload": self.workload,
               "space": self.space, "target": self.target, "runner": self.runner,
               "trace": self.trace.to_json(),
               "costs": None if self.costs is None else [float(c) for c in self.costs],
               "unit": self.unit, "error": self.error, "flops": int(self.flops),
               "features": None if self.features is None else list(self.features)}
        if self.conditions is not None:  # a record without them stays as it was written
            out["conditions"] = dict(self.conditions)
        return out

    @classmethod
    def from_json(cls, d: Any, where: str) -> Record:
        """A record from its JSON object; anything malformed is refused naming ``where``."""
        if not isinstance(d, dict):
            raise InputError(f"{where}: a record is a JSON object, got {type(d).__name__}")
        if d.get("format") != FORMAT:
            raise InputError(f"{where}: record format {d.get('format')!r} is not {FORMAT} "
                             "(written by another Kiln version?)")
        for key in ("workload", "space", "target"):
            if not isinstance(d.get(key), str):
                raise InputError(f"{where}: field {key!r} must be a string")
        costs = d.get("costs")
        if costs is not None and (not isinstance(costs, list) or not all(
                isinstance(c, int | float) and c >= 0 for c in costs)):
            raise InputError(f"{where}: 'costs' must be null or a list of non-negative "
                             f"numbers, got {costs!r}")
        err = d.get("error")
        if err is not None and not isinstance(err, str):
            raise InputError(f"{where}: 'error' must be null or a string")
        feats = d.get("features")
        if feats is not None and (not isinstance(feats, list) or not all(
                isinstance(x, int | float) for x in feats)):
            raise InputError(f"{where}: 'features' must be null or a list of numbers")
        cond = d.get("conditions")
        if cond is not None and (not isinstance(cond, dict) or not all(
                isinstance(v, str | int | float | bool) or v is None for v in cond.values())):
            raise InputError(f"{where}: 'conditions' must be an object of numbers and "
                             f"strings (how the trial was measured), got {cond!r}")
        return cls(d["workload"], d["space"], d["target"],
                   Trace.from_json(d.get("trace"), f"{where}: trace"),
                   None if costs is None else [float(c) for c in costs], err,
                   str(d.get("runner", "?")), str(d.get("unit", "s")), int(d.get("flops", 0)),
                   str(d.get("kiln", "?")), feats, cond)


def parse_lines(text: str, name: str) -> list[Record]:
    """The records of a JSON-lines text (see the module docstring for bad lines)."""
    out = []
    lines = text.split("\n")
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
        except json.JSONDecodeError as exc:
            if i == len(lines):  # no newline after it: cut short by a crash
                warnings.warn(f"{name}:{i}: the last line is incomplete (a crash while it was "
                              "written?); skipped", KilnWarning, stacklevel=2)
                continue
            raise InputError(f"{name}:{i}: not a JSON record ({exc.msg} at column "
                             f"{exc.colno})") from None
        out.append(Record.from_json(d, f"{name}:{i}"))
    return out


def load_records(path: str | Path) -> list[Record]:
    """Every record of a records file, in file order."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"records file {p} does not exist")
    try:
        text = p.read_text()
    except UnicodeDecodeError:
        raise InputError(f"records file {p} is not a text file of JSON lines") from None
    return parse_lines(text, str(p))


#: units of runs that check points without timing them (``kiln tune --runner emulate``:
#: the cost is one plus the error against the default point): never applied
UNTIMED_UNITS = ("check",)


def device(runner: str) -> str:
    """The device a runner measures on: a Ray runner is its device's (``ray-local-cpu``
    times as ``local-cpu`` does)."""
    return runner.removeprefix("ray-")


def best_records(records: Iterable[Record], source: str = "the records") -> dict[str, Record]:
    """Per workload, the successful timed record of least cost (the first one on a tie;
    records in :data:`UNTIMED_UNITS` are left out). A workload whose timed records come
    from two runners (concatenated files: seconds against instructions, the cycle model's
    cycles against the RTL's) is refused naming ``source`` and the workload: their costs
    do not compare. (Two runs of one runner measured otherwise, another CPU or
    ``--repeat``, are told apart by the records' ``conditions``: ``kiln compile
    --records`` warns of them, :mod:`toolchain.autotune.conditions`.)

    >>> from toolchain.autotune.space import Trace
    >>> t = Trace("toy", (("tile", 4),))
    >>> import textwrap
    >>> try:
    ...     best_records([Record("w|1", "toy", "m4", t, [900.0], runner="qemu-icount",
    ...                          unit="instructions"),
    ...                   Record("w|1", "toy", "m4", t, [1e-3])], "r.jsonl")
    ... except InputError as e:
    ...     print(textwrap.fill(str(e), 88))
    r.jsonl: workload w|1 has timed trials from 2 runners, qemu-icount (instructions) and
    local-cpu (s), whose costs do not compare; keep one runner's records for it (the
    "runner" field of each line)
    """
    best: dict[str, Record] = {}
    runners: dict[str, dict[tuple[str, str], None]] = {}
    for r in records:
        if not r.ok or r.unit in UNTIMED_UNITS:
            continue
        runners.setdefault(r.workload, {})[(device(r.runner), r.unit)] = None
        if r.workload not in best or r.cost < best[r.workload].cost:
            best[r.workload] = r
    for workload, seen in runners.items():
        known = {k for k in seen if k[0] != "?"}  # a record without its runner: by unit
        if len(known) > 1 or len({unit for _, unit in seen}) > 1:
            by = " and ".join(f"{name if name != '?' else 'an unnamed runner'} ({unit})"
                              for name, unit in seen)
            raise InputError(f"{source}: workload {workload} has timed trials from "
                             f"{len(seen)} runners, {by}, whose costs do not compare; keep "
                             "one runner's records for it (the \"runner\" field of each line)")
    return best


def best_traces(records: Iterable[Record], source: str = "the records") -> dict[str, Trace]:
    """:func:`best_records` as the traces :func:`toolchain.autotune.apply.applying` takes."""
    return {w: r.trace for w, r in best_records(records, source).items()}


class RecordWriter:
    """Append records crash-safely to ``OUT.partial``; :meth:`commit` renames it to
    ``OUT``. Used as a context manager, it commits when the block ends without an error
    and otherwise leaves ``OUT`` untouched (``OUT.partial`` keeps the whole records of the
    interrupted run, which the next run with ``resume`` picks up).

    ``resume``: start from the records already in ``OUT.partial`` or ``OUT`` (see
    :meth:`existing`); otherwise an existing ``OUT`` is replaced on commit.

    A second writer of the same ``OUT`` while this one holds its lock (module docstring)
    is refused with an :class:`~toolchain.errors.InputError`; :meth:`release` (called by
    :meth:`commit` and at the end of the ``with`` block) lets the next one in.
    """

    def __init__(self, path: str | Path, resume: bool = False) -> None:
        self.path = Path(path)
        self.partial = self.path.with_name(self.path.name + ".partial")
        if self.path.parent and not self.path.parent.is_dir():
            raise InputError(f"records file {self.path}: folder {self.path.parent} "
                             + ("is a file, not a directory" if self.path.parent.exists()
                                else "does not exist"))
        if self.path.is_dir():
            raise InputError(f"records file {self.path} is a directory")
        self._fd: int | None = None
        self._lock: int | None = None
        self.appended = 0
        self.existing: list[Record] = []
        #: the file :attr:`existing` was read from (``OUT.partial`` after an interrupted
        #: run, else ``OUT``; None: nothing to resume)
        self.source: Path | None = None
        self._take_lock()
        if resume:
            src = self.partial if self.partial.is_file() else self.path
            try:
                if src.is_file():
                    self.existing = load_records(src)
                    self.source = src
            except BaseException:
                self.release()
                raise

    def _take_lock(self) -> None:
        lock = self.path.with_name(self.path.name + ".lock")
        while True:
            try:
                fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as exc:  # was an internal error, after the whole run
                raise InputError(f"records file {self.path}: cannot write in folder "
                                 f"{self.path.parent} ({exc.strerror})") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.read(fd, 32).decode(errors="replace").strip() or "?"
                os.close(fd)
                raise InputError(f"records file {self.path} is being written by another "
                                 f"run (process {holder} holds {lock}); wait for it to "
                                 "end, or write to another file") from None
            try:  # the holder before may have removed the file between open and flock
                same = os.stat(lock).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._lock = fd
        self._lock_path = lock

    def release(self) -> None:
        """Close the partial file and give up the lock (removing ``OUT.lock``)."""
        self.close()
        if self._lock is not None:
            self._lock_path.unlink(missing_ok=True)
            os.close(self._lock)
            self._lock = None

    def _open(self) -> int:
        if self._fd is None:
            fd = os.open(self.partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            # rewrite the resumed records first (whole lines), so the partial file alone
            # is always a complete records file
            body = "".join(json.dumps(r.to_json()) + "\n" for r in self.existing)
            if body:
                os.write(fd, body.encode())
            os.close(fd)
            self._fd = os.open(self.partial, os.O_WRONLY | os.O_APPEND)
        return self._fd

    def append(self, record: Record) -> None:
        """Write one record as one whole line and flush it to disk."""
        fd = self._open()
        os.write(fd, (json.dumps(record.to_json()) + "\n").encode())
        os.fsync(fd)
        self.appended += 1

    def commit(self) -> Path:
        """Rename ``OUT.partial`` to ``OUT`` (atomic); returns ``OUT``."""
        self._open()
        self.close()
        os.replace(self.partial, self.path)
        self.release()
        return self.path

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> None:
        try:
            if kind is None:
                self.commit()
        finally:
            self.release()
