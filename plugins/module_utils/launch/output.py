# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""What the launch reads back from the commands it runs before and after a job: the partition's node count
from ``sinfo`` and whether it can take a job, the staging marks found and the options recorded beside them,
the refusal a test case's own rules print, a local run's duration. Each was a Jinja
expression in the role; here each is one function with its edge cases tested."""

from __future__ import annotations

import json
import re

_ERROR_LINE = re.compile(r"error: (.*)")


def partition_nodes(sinfo_lines: list[str], partition: str = "") -> int:
    """Nodes of the partition from ``sinfo --noheader --format='%P %D'``: sinfo prints one line per node state
    (idle, mixed, ...), each with its count, so the counts are summed. Without a partition, the default one
    (the name sinfo marks with ``*``)."""
    total = 0
    for line in sinfo_lines:
        fields = line.split()
        if len(fields) != 2 or not fields[1].isdigit():
            continue
        name = fields[0]
        if name.endswith("*") if not partition else name.rstrip("*") == partition:
            total += int(fields[1])
    return total


def partition_problem(sinfo_lines: list[str], sinfo_error: str, nodes: int, partition: str = "") -> str:
    """Why the partition cannot take ``nodes`` nodes ('' when it can): sinfo could not be read, or the
    partition (the default one when unnamed) has fewer nodes; the message quotes what sinfo printed."""
    if sinfo_error:
        return f"the partition could not be read: {sinfo_error}"
    found = partition_nodes(sinfo_lines, partition)
    if nodes <= found:
        return ""
    return (
        f"{nodes} nodes requested but partition '{partition or 'default'}' has {found} "
        f"({', '.join(sinfo_lines)})"
    )


# The line between the marks found and the recorded options' text in stage.yml's listing.
LISTING_SEPARATOR = "--"


def staged_listing(stdout: str) -> dict[str, object]:
    """The staging marks a launch found and, when the listing printed them, the entrypoint's recorded options.

    stage.yml lists the marks that exist, one path a line, then a line ``--`` and the options file, so that a
    staged launch reads both in one module run. Marks are absolute paths and never ``--``; what follows the
    first such line is the options text as written (which may itself hold ``--`` lines). ``options`` is None
    when the listing printed none (the payload or its options were not staged).
    """
    lines = stdout.splitlines()
    if LISTING_SEPARATOR not in lines:
        return {"marks": [line for line in lines if line], "options": None}
    cut = lines.index(LISTING_SEPARATOR)
    return {"marks": [line for line in lines[:cut] if line], "options": "\n".join(lines[cut + 1 :])}


def rules_refusal(stderr: str) -> str:
    """The last ``error: ...`` line an entrypoint's argument check printed (argparse's form), else all it
    printed: the reason a launch was refused, without the usage text above it."""
    found = _ERROR_LINE.findall(stderr)
    return found[-1].strip() if found else stderr.strip()


def duration_seconds(delta: str) -> float:
    """Ansible's command ``delta`` (``H:MM:SS.ffffff``) in seconds, to a tenth."""
    hours, minutes, seconds = (float(part) for part in (delta or "0:00:00").split(":"))
    return round(hours * 3600 + minutes * 60 + seconds, 1)


ATTEMPT_PREFIX = "TRAINSTACK_ATTEMPT "
ATTEMPT_STOP_PREFIX = "TRAINSTACK_ATTEMPT_STOP "
METRIC_PREFIX = "TRAINSTACK_METRIC "


def _json_after(line: str, prefix: str) -> dict | None:
    """The JSON object a marker line carries after its prefix, or None for a line cut short or garbled (a
    node that was lost mid-write leaves one)."""
    try:
        value = json.loads(line[line.index(prefix) + len(prefix) :])
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def job_attempts(log_text: str) -> list[dict]:
    """Every attempt of a requeueable job from its log (``--open-mode=append`` keeps all of them): the batch
    script's ``TRAINSTACK_ATTEMPT`` line opens one (attempt number, job id, node set, checkpoint it resumes
    from), the test case's ``TRAINSTACK_METRIC`` lines that follow are its steps, and a
    ``TRAINSTACK_ATTEMPT_STOP`` line says why the script refused to run it (requeued too often).

    Metric lines before the first marker (a script without markers) make no attempt: nothing is guessed."""
    attempts: list[dict] = []
    for line in log_text.splitlines():
        if ATTEMPT_STOP_PREFIX in line:
            stop = _json_after(line, ATTEMPT_STOP_PREFIX)
            if stop is not None and attempts:
                attempts[-1]["stopped"] = str(stop.get("reason", ""))
        elif ATTEMPT_PREFIX in line:
            start = _json_after(line, ATTEMPT_PREFIX)
            if start is None:
                continue
            attempts.append(
                {
                    "attempt": int(start.get("attempt", len(attempts))),
                    "job_id": str(start.get("job_id", "")),
                    "nodes": str(start.get("nodes", "")),
                    "checkpoint": start.get("checkpoint") or None,
                    "first_step": None,
                    "last_step": None,
                    "steps": 0,
                }
            )
        elif METRIC_PREFIX in line and attempts:
            metric = _json_after(line, METRIC_PREFIX)
            if metric is None or not isinstance(metric.get("step"), int):
                continue
            current = attempts[-1]
            current["steps"] += 1
            if current["first_step"] is None:
                current["first_step"] = metric["step"]
            current["last_step"] = metric["step"]
    return attempts
