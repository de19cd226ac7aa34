"""Golden record of the AMI builds per flavour, as `make image-ami IMAGE_FLAVOUR=<flavour>` selects them.

For each flavour the test takes the `packer build` command that make would run (`make -n`), keeps the images
that command selects (its -only/-except globs and -var values, whatever the template layout) and has Packer
evaluate every setting, provisioner and post-processor of each image with PROBE_VARS (packer_effective.py).
tests/data/golden/packer_flavour_builds.json records the answer: which sources each flavour builds and, for
each amazon-ebs image, its settings and its steps in order. A refactoring of the templates or of the flavour
selection must leave it as it is. After an intended change of the builds, record it again and review the diff:

    .venv/bin/python -m tests.unit.image.packer_effective --flavours \
        > tests/data/golden/packer_flavour_builds.json
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.unit.image.packer_effective import FLAVOURS, make_packer_command, selected_images

REPO = Path(__file__).resolve().parents[3]
GOLDEN = REPO / "tests" / "data" / "golden" / "packer_flavour_builds.json"


@pytest.fixture(scope="module")
def recorded() -> dict:
    return json.loads(GOLDEN.read_text())


def test_the_record_covers_every_flavour(recorded: dict) -> None:
    assert sorted(recorded) == sorted(FLAVOURS)
    for flavour, builds in recorded.items():
        assert builds["sources"], flavour
        assert sorted(builds["images"]) == [s.split(".", 1)[1] for s in builds["sources"]], flavour


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_make_image_ami_builds_what_the_record_holds(flavour: str, recorded: dict) -> None:
    if shutil.which("packer") is None or shutil.which("make") is None:
        pytest.skip("packer or make is not installed (make host-deps)")
    actual = selected_images(make_packer_command("image-ami", IMAGE_FLAVOUR=flavour))
    expected = recorded[flavour]
    assert actual["sources"] == expected["sources"], flavour
    for name, image in expected["images"].items():
        got = actual["images"][name]
        # settings, provisioners[i], post-processors[chain][i]: one at a time, for a readable difference
        for part in sorted(set(image) | set(got)):
            assert got.get(part) == image.get(part), f"{flavour} {name} {part}"
