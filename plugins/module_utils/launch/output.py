# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""What the launch reads back from the commands it runs before and after a job: the partition's node count
from ``sinfo``, the refusal a test case's own rules print, a local run's duration. Each was a Jinja
expression in the role; here each is one function with its edge cases tested."""

from __future__ import annotations

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


def rules_refusal(stderr: str) -> str:
    """The last ``error: ...`` line an entrypoint's argument check printed (argparse's form), else all it
    printed: the reason a launch was refused, without the usage text above it."""
    found = _ERROR_LINE.findall(stderr)
    return found[-1].strip() if found else stderr.strip()


def duration_seconds(delta: str) -> float:
    """Ansible's command ``delta`` (``H:MM:SS.ffffff``) in seconds, to a tenth."""
    hours, minutes, seconds = (float(part) for part in (delta or "0:00:00").split(":"))
    return round(hours * 3600 + minutes * 60 + seconds, 1)
