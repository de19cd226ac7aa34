# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Filters of the launch layer (module_utils/launch), for the checks that must run where the payload is."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ansible_collections.trainstack.cluster.plugins.module_utils.launch import names, output, plan


def close_matches(unknown: Iterable[str], known: Iterable[str], prefix: str = "") -> str:
    """Each unknown name with up to three known names that look like it (see module_utils/launch/names.py)."""
    return names.close_matches(list(unknown), list(known), str(prefix))


def entrypoint_options(help_text: str) -> list[str]:
    """The long options a test case entrypoint's ``--help`` output names."""
    return plan.entrypoint_options(str(help_text))


def partition_nodes(sinfo_lines: Iterable[str], partition: str = "") -> int:
    """The partition's node count from sinfo's '%P %D' lines (see module_utils/launch/output.py)."""
    return output.partition_nodes([str(line) for line in sinfo_lines], str(partition or ""))


def rules_refusal(stderr: str) -> str:
    """The reason a test case's argument check gave for refusing a launch."""
    return output.rules_refusal(str(stderr))


def job_attempts(log_text: str) -> list[dict]:
    """Every attempt of a requeued job, read from its log (see module_utils/launch/output.py)."""
    return output.job_attempts(str(log_text))


def duration_seconds(delta: str) -> float:
    """A command's ``delta`` in seconds."""
    return output.duration_seconds(str(delta))


class FilterModule:
    """trainstack.cluster launch filters."""

    def filters(self) -> dict[str, Any]:
        return {
            "close_matches": close_matches,
            "entrypoint_options": entrypoint_options,
            "partition_nodes": partition_nodes,
            "rules_refusal": rules_refusal,
            "duration_seconds": duration_seconds,
            "job_attempts": job_attempts,
        }
