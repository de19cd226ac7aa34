"""moto_server whose per-instance lookups are direct, so that a fleet of tens of thousands of instances fits.

Why: moto 5 answers every instance's tags (`TaggedEC2Resource.get_tags`) with `describe_tags` filtered by
`resource-id`, which scans every tag of every resource in the region; a `tag-key` filter, and every
instance in a describe_instances answer, then costs a scan each, so the server's time grows with the square
of the fleet (at 5,000 instances most of a describe_instances is this scan; at 50,000 a single call would
take hours). Likewise each new instance looks its AMI up with `describe_images` filtered by `image-id`,
which walks every AMI moto preloads.

This script answers those two exact-id questions from the dictionaries moto already keys by id, and passes
every other question to moto unchanged. The answers are the same as moto's (a literal id matches only
itself: moto translates filter values with fnmatch, whose patterns are anchored), so what a client sees is
unchanged; only moto's own cost per instance stops growing with the fleet. Run it in place of moto_server
(bench.support.moto.start_moto's ``server``).
"""

from __future__ import annotations

import sys
from typing import Any

from moto.ec2.models.amis import AmiBackend
from moto.ec2.models.tags import TagBackend
from moto.ec2.utils import EC2_PREFIX_TO_RESOURCE, generic_filter, get_prefix

_WILDCARDS = frozenset("*?[")
_moto_describe_tags = TagBackend.describe_tags
_moto_describe_images = AmiBackend.describe_images


def literal(values: Any) -> str | None:
    """The one wildcard-free value of a filter, else None (a pattern or several values go to moto)."""
    if isinstance(values, str):
        values = [values]
    single = isinstance(values, list) and len(values) == 1 and isinstance(values[0], str)
    return values[0] if single and not _WILDCARDS.intersection(values[0]) else None


def describe_tags(self: TagBackend, filters: dict[str, list[str]] | None = None) -> list[dict[str, str]]:
    """Tags of one resource by id: a dictionary lookup instead of a scan of every resource's tags."""
    resource_id = literal(filters.get("resource-id")) if filters and set(filters) == {"resource-id"} else None
    if resource_id is None:
        return _moto_describe_tags(self, filters)
    kind = EC2_PREFIX_TO_RESOURCE.get(get_prefix(resource_id), "")
    found = self.tags.get(resource_id) or {}
    return [
        {"resource_id": resource_id, "key": key, "value": value, "resource_type": kind}
        for key, value in found.items()
    ]


def describe_images(
    self: AmiBackend,
    ami_ids: list[str] | None = None,
    filters: dict[str, Any] | None = None,
    exec_users: list[str] | None = None,
    owners: list[str] | None = None,
) -> list[Any]:
    """One AMI by id (what every new instance asks): moto's own filter, applied to that AMI alone."""
    image_id = literal(filters.get("image-id")) if filters and set(filters) == {"image-id"} else None
    if image_id is None or ami_ids or exec_users or owners:
        return _moto_describe_images(self, ami_ids, filters, exec_users, owners)
    candidates = [self.amis[image_id]] if image_id in self.amis else []
    return generic_filter(filters, candidates)


def install() -> None:
    """Put the direct lookups in place of moto's scans (idempotent)."""
    TagBackend.describe_tags = describe_tags  # type: ignore[method-assign]
    AmiBackend.describe_images = describe_images  # type: ignore[method-assign]


if __name__ == "__main__":
    install()
    from moto.server import main

    sys.exit(main(sys.argv[1:]))
