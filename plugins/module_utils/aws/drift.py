# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""What an existing resource has otherwise than the request asks: found, and reported, never changed.

Why report and not update: the modules create what is missing and leave what exists alone, because changing
a running cluster (its Kubernetes or Slurm version, a node group's size, a file system's storage) is a
decision for a person; a warning that names the key, the value found and the value asked for lets them make
it. Every module reports it in the same words.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple


class Difference(NamedTuple):
    """One key whose value on the resource is not the request's."""

    key: str
    current: Any
    desired: Any

    def __str__(self) -> str:
        return f"{self.key} is {self.current}, not {self.desired}"


def drift(
    current: Mapping[str, Any], desired: Mapping[str, Any], keys: Iterable[str] | None = None
) -> list[Difference]:
    """The differences of the keys (all of ``desired``'s, or ``keys`` in their order) that both name.

    A key missing on either side is not drift: a service leaves out of its answer what it was not given, and
    a request leaves out what it leaves to the service.
    """
    return [
        Difference(key, current[key], desired[key])
        for key in (desired if keys is None else keys)
        if key in current and key in desired and current[key] != desired[key]
    ]


def warn(module: Any, what: str, differences: Iterable[Difference], outcome: str = "left as it is") -> None:
    """One warning per difference: C(<what>: <key> is <found>, not <asked>; left as it is)."""
    for difference in differences:
        module.warn(f"{what}: {difference}; {outcome}")
