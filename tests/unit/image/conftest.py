"""Ansible's plugin loader points at this checkout before this directory's test modules load."""

import shutil

import pytest

from tests.support import init_ansible_plugins
from tests.unit.image.packer_effective import flavour_builds

init_ansible_plugins()


@pytest.fixture(scope="session")
def flavour_images():
    """Flavour -> what `make image-ami IMAGE_FLAVOUR=<flavour>` builds, as Packer evaluates it with PROBE_VARS
    (packer_effective.flavour_builds: "sources", and "images" by source name with "settings" and steps)."""
    if shutil.which("packer") is None:
        pytest.skip("packer is not installed (make host-deps)")
    return flavour_builds()
