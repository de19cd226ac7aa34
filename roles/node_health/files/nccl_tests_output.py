#!/usr/bin/env python3
"""Read the result table that nccl-tests (``all_reduce_perf`` and friends) and the ``nccl/collectives`` test
case print, the way it reaches us in real use.

Why a parser of its own: the acceptance verdict hangs on one number (bus bandwidth at the largest size), and a
wrong reading of the job's output must never look like a slow fabric. Real output is rarely the clean table of
the README: ``mpirun --tag-output`` prefixes every line with ``[job,rank]<stdout>:``, ``srun --label`` with
``rank: ``; with ``NCCL_DEBUG=INFO`` NCCL writes its lines into the same stdout buffer, so they land between
rows and even inside one (NCCL connects lazily during the first call, after the row's size was printed); a
run that dies leaves half a table; a build without MPI started by srun prints one table per task. So:

* lines are split by rank prefix into streams, and the table must come from exactly one stream;
* NCCL debug text is cut out of a line and the row it interrupted is joined back together;
* columns are read by the table's own header (nccl-tests: out-of-place and in-place groups of time, algbw,
  busbw, ``#wrong``, with optional per-iteration and timestamp columns; the test case: one group);
* ``#wrong`` must be a number where the tool checks results (``N/A`` means the check was off: ``-c 0``);
* nccl-tests' ``# Out of bounds values`` and ``# Avg bus bandwidth`` footer marks a complete run: without it
  the run stopped early. The test case prints no footer; its caller knows completion from its exit status
  and summary file.

Anything else (no rows, a cut row, error text, several tables) is *unparsable*, with the reason. Standard
library only: it runs on the login/head node next to ``nccl_acceptance.py``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

TAG_OUTPUT = re.compile(r"^\[\d+,(\d+)\]<(stdout|stderr)>:\s?")
SRUN_LABEL = re.compile(r"^\s*(\d+): ")
# NCCL's debug line prefix, host:pid:tid [dev] NCCL INFO. At the start of a line the host may be anything;
# glued to a row's last field (a number, or N/A) it is the host name that starts with a letter, or all
# that follows N/A.
NCCL_DEBUG = re.compile(
    r"(?:^\S+|(?<=N/A)\S+|(?<!N/)[A-Za-z][\w-]*):\d+:\d+ \[\d+\] NCCL (?:INFO|WARN|TRACE|ABORT)\b"
)
ERROR_TEXT = re.compile(
    r"Test (?:CUDA |NCCL )?failure|Traceback \(most recent call last\)|^srun: error:|"
    r"\b(?:RuntimeError|DistBackendError|ncclInternalError|ncclSystemError|ncclUnhandledCudaError):"
)
STARTING = re.compile(r"^#\s*Collective test starting:\s*(\S+)")
CASE_OP = re.compile(r"^#\s*(\w+), (\d+) ranks, (\w+)\s*$")  # the test case's per-op banner
OUT_OF_BOUNDS = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)")
AVG_BUSBW = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(\S+)")
FIXED = ("size", "count", "type", "redop", "root")
# nccl-tests never checks the in-place result of these (it prints N/A there by design).
IN_PLACE_UNCHECKED = frozenset({"alltoall", "alltoallv", "sendrecv"})


@dataclass
class Side:
    """One half of a row: out-of-place or in-place. ``wrong`` is None where the tool printed ``N/A``."""

    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    wrong: int | None


@dataclass
class Row:
    """One size of one collective, as printed."""

    op: str | None
    size_bytes: int
    count: int
    type: str
    redop: str
    root: int
    out_of_place: Side
    in_place: Side | None


@dataclass
class ParsedOutput:
    """What the output says, and whether it can be trusted: ``unparsable`` non-empty means it cannot."""

    tool: str = ""  # "nccl-tests" or "collectives" (the nccl/collectives test case)
    prefix: str = "plain"  # "plain", "mpi-tag-output" or "srun-label"
    rank: int | None = None  # the rank whose stream held the table (prefixed output only)
    op: str | None = None
    rows: list[Row] = field(default_factory=list)
    out_of_bounds: int | None = None
    avg_busbw_gbps: float | None = None
    busbw_gbps: float | None = None  # out-of-place bus bandwidth at the largest size
    wrong_total: int = 0
    problems: list[str] = field(default_factory=list)  # results the check rejects (#wrong, N/A, bounds)
    unchecked: bool = False  # #wrong was N/A where it should be a number
    unparsable: str = ""
    nccl_debug_lines: int = 0

    @property
    def ok(self) -> bool:
        """Readable and every result checked and right (bandwidth is judged by the caller)."""
        return not self.unparsable and not self.problems


# ------------------------------------------------------------------------------------------ line streams
def split_streams(text: str) -> tuple[str, dict[tuple[int | None, str], list[str]]]:
    """Lines by (rank, channel) under the launcher's prefix style; unprefixed lines go to rank None."""
    lines = text.splitlines()
    if any(TAG_OUTPUT.match(line) for line in lines):
        style, pattern = "mpi-tag-output", TAG_OUTPUT
    elif any(SRUN_LABEL.match(line) for line in lines):
        style, pattern = "srun-label", SRUN_LABEL
    else:
        return "plain", {(None, "stdout"): lines}
    streams: dict[tuple[int | None, str], list[str]] = {}
    for line in lines:
        match = pattern.match(line)
        if match is None:
            streams.setdefault((None, "stdout"), []).append(line)
            continue
        channel = match.group(2) if pattern is TAG_OUTPUT else "stdout"
        streams.setdefault((int(match.group(1)), channel), []).append(line[match.end() :])
    return style, streams


# ------------------------------------------------------------------------------------------ one stream
def _groups(columns: list[str]) -> list[list[str]]:
    """Header names after the fixed five, split into result groups (each starts with time or cputime)."""
    groups: list[list[str]] = []
    for name in columns[len(FIXED) :]:
        if name in ("time", "cputime"):
            groups.append([])
        if groups and name != "timestamp":
            groups[-1].append(name)
    return [group for group in groups if {"algbw", "busbw", "#wrong"} <= set(group)]


def _number(token: str, what: str) -> float:
    try:
        return float(token)
    except ValueError:
        raise ValueError(f"{what} {token!r} is not a number") from None


def _side(tokens: list[str], names: list[str]) -> Side:
    """One result group of a row, read by the header's names (per-iteration extras are skipped)."""
    values = dict(zip(names, tokens, strict=True))
    wrong = values["#wrong"]
    return Side(
        time_us=_number(values[names[0]], names[0]),
        algbw_gbps=_number(values["algbw"], "algbw"),
        busbw_gbps=_number(values["busbw"], "busbw"),
        wrong=None if wrong == "N/A" else int(_number(wrong, "#wrong")),
    )


class StreamReader:
    """State of one stream: the header in force, the row being assembled, and what was read."""

    def __init__(self) -> None:
        self.groups: list[list[str]] = []
        self.tool = ""
        self.op: str | None = None
        self.runs = 0
        self.rows: list[Row] = []
        self.pending = ""
        self.bad_rows: list[str] = []
        self.cut_last = ""  # a short row with nothing read after it: the run stopped there
        self.errors: list[str] = []
        self.out_of_bounds: int | None = None
        self.avg_busbw: float | None = None
        self.debug_lines = 0

    def feed(self, line: str) -> None:
        """Take one line; NCCL debug text is cut out, and a row it interrupted waits for its remainder."""
        cut = NCCL_DEBUG.search(line)
        text = line[: cut.start()] if cut else line
        self.debug_lines += bool(cut)
        if ERROR_TEXT.search(text):
            self.errors.append(text.strip())
        if self.pending or self._starts_row(text):
            self.pending = f"{self.pending} {text}" if self.pending else text
            if not cut:  # the line ended with the row's own newline
                self._finish_row(self.pending)
                self.pending = ""
        elif text.lstrip().startswith("#"):
            self.cut_last = ""
            self._comment(text.strip())

    def _starts_row(self, text: str) -> bool:
        tokens = text.split()
        return bool(self.groups) and bool(tokens) and tokens[0].isdigit()

    def _comment(self, text: str) -> None:
        tokens = text.lstrip("#").split()
        if tuple(tokens[: len(FIXED)]) == FIXED:
            self.groups = _groups(tokens)
        elif match := STARTING.match(text):
            self.tool, self.runs = "nccl-tests", self.runs + 1
            self.op = match.group(1).removesuffix("_perf")
        elif match := CASE_OP.match(text):
            self.tool, self.op = "collectives", match.group(1)
        elif match := OUT_OF_BOUNDS.match(text):
            self.out_of_bounds = int(match.group(1))
        elif match := AVG_BUSBW.match(text):
            self.avg_busbw = _number(match.group(1), "Avg bus bandwidth")

    def _finish_row(self, text: str) -> None:
        tokens = text.split()
        widths = [len(group) for group in self.groups]
        self.cut_last = ""
        if len(tokens) < len(FIXED) + sum(widths):
            self.bad_rows.append(f"row cut short: {text.strip()!r}")
            self.cut_last = text.strip()
            return
        try:
            sides, start = [], len(FIXED)
            for group, width in zip(self.groups, widths, strict=True):
                sides.append(_side(tokens[start : start + width], group))
                start += width
            size, count, root = int(tokens[0]), int(tokens[1]), int(tokens[4])
        except ValueError as err:
            self.bad_rows.append(f"row not readable ({err}): {text.strip()!r}")
            return
        in_place = sides[1] if len(sides) > 1 else None
        self.rows.append(Row(self.op, size, count, tokens[2], tokens[3], root, sides[0], in_place))


# ------------------------------------------------------------------------------------------ verdict
def _why_unparsable(reader: StreamReader, op: str, text: str) -> str:
    """The first reason the table cannot be trusted, or ''."""
    if reader.errors:
        return f"error text in the output: {reader.errors[0][:300]}"
    if reader.runs > 1:
        return f"{reader.runs} separate nccl-tests runs in one stream: each task ran its own test"
    if reader.pending or reader.cut_last:
        return f"truncated run: the output ends inside a row: {(reader.pending or reader.cut_last).strip()!r}"
    if reader.bad_rows:
        return reader.bad_rows[0]
    if not reader.rows:
        return f"no result rows in the output: {text.strip()[-300:]!r}"
    if reader.tool == "nccl-tests" and reader.avg_busbw is None:
        return f"truncated run: {len(reader.rows)} rows but no '# Avg bus bandwidth' line"
    if not [row for row in reader.rows if row.op in (op, None)]:
        found = sorted({row.op or "?" for row in reader.rows})
        return f"no {op} rows in the output (found: {', '.join(found)})"
    return ""


def _check_row(row: Row, problems: list[str]) -> bool:
    """Append what is wrong with a row's results; True when a #wrong that should be a number is N/A."""
    unchecked = False
    for name, side in (("out-of-place", row.out_of_place), ("in-place", row.in_place)):
        if side is None:
            continue
        if side.wrong is None:
            if name == "in-place" and row.op in IN_PLACE_UNCHECKED:
                continue
            unchecked = True
            problems.append(f"{row.size_bytes} B {name}: #wrong is N/A (not checked: nccl-tests -c 0)")
        elif side.wrong:
            problems.append(f"{row.size_bytes} B {name}: {side.wrong} wrong elements")
    return unchecked


def _judge(reader: StreamReader, op: str, result: ParsedOutput) -> None:
    """Fill the result from a readable stream: the op's rows, their checks, the headline bandwidth."""
    rows = [row for row in reader.rows if row.op in (op, None)]
    result.tool, result.op, result.rows = reader.tool or "nccl-tests", op, rows
    result.out_of_bounds, result.avg_busbw_gbps = reader.out_of_bounds, reader.avg_busbw
    for row in rows:
        result.unchecked |= _check_row(row, result.problems)
        for side in (row.out_of_place, row.in_place):
            result.wrong_total += (side.wrong or 0) if side else 0
    if result.out_of_bounds:
        result.problems.append(f"nccl-tests counted {result.out_of_bounds} out-of-bounds values")
    largest = max(row.size_bytes for row in rows)
    # Several rows of one size (nccl-tests -N repeats): the lowest is the one the fabric guarantees.
    result.busbw_gbps = min(row.out_of_place.busbw_gbps for row in rows if row.size_bytes == largest)


def parse_output(text: str, op: str = "all_reduce") -> ParsedOutput:
    """Read a benchmark job's output for collective ``op``; see the module doc for what is accepted."""
    style, streams = split_streams(text)
    readers: dict[tuple[int | None, str], StreamReader] = {}
    for key, lines in streams.items():
        reader = readers[key] = StreamReader()
        for line in lines:
            reader.feed(line)
    result = ParsedOutput(prefix=style, nccl_debug_lines=sum(r.debug_lines for r in readers.values()))
    errors = [error for reader in readers.values() for error in reader.errors]
    tables = {key: reader for key, reader in readers.items() if reader.rows or reader.groups}
    if len(tables) > 1:
        keys = sorted(tables, key=lambda k: (k[0] is None, k[0] or 0))
        ranks = ", ".join(str(rank) for rank, _table in keys)
        result.unparsable = f"tables from {len(tables)} ranks ({ranks}): each task ran its own test (no MPI?)"
        return result
    key, reader = next(iter(tables.items()), ((None, "stdout"), StreamReader()))
    reader.errors = errors  # an error on any rank's stream (stderr included) spoils the run
    result.rank = key[0]
    result.unparsable = _why_unparsable(reader, op, text)
    if not result.unparsable:
        _judge(reader, op, result)
    return result
