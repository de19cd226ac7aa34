"""Unverified downloads are a per-artifact decision of the stack, and the image records each one.

There is no build-wide switch: an artifact without a checksum is installed only where its own stack entry says
`verify: false` with a reason; the build lists those (stack_unverified_artifacts) and image.json keeps them.
"""

import json

import yaml
from ansible_collections.trainstack.cluster.plugins.module_utils.stack import stack_matrix as sm

from tests.support import LOCALHOST_ARGS, REPO, VENV_BIN, run

REASON = "AWS publishes no checksum for the installer tarball"


def mark_efa_unverified(stack):
    art = stack["components"]["efa_installer"]["artifacts"][0]
    art.update(verify=False, unverified_reason=REASON)
    return art


def test_only_the_marked_artifact_is_unverified(current_stack):
    assert sm.unverified_artifacts(current_stack, "ubuntu-24.04", "x86_64") == []
    art = mark_efa_unverified(current_stack)
    assert sm.unverified_artifacts(current_stack, "ubuntu-24.04", "x86_64") == [
        {"name": art["name"], "url": art["url"], "component": "efa_installer", "reason": REASON}
    ]
    notes = {n.rule: n.message for n in sm.unverified_notes(current_stack)}
    assert REASON in notes["checksum-waived"]


def test_no_build_wide_unverified_switch_is_left():
    """The old global variable (and its Packer/role spellings) must not come back anywhere in the product."""
    product = [REPO / d for d in ("roles", "playbooks", "packer", "plugins", "stacks", "docs", "mk")]
    hits = [
        str(path.relative_to(REPO))
        for directory in product
        for path in directory.rglob("*")
        if path.is_file() and "allow_unverified" in path.read_text(errors="replace")
    ]
    assert hits == []


def test_image_json_records_the_unverified_artifacts(tmp_path, current_stack):
    """The image_manifest role, run for real on this host (manifest under tmp_path), lists them."""
    art = mark_efa_unverified(current_stack)
    unverified = sm.unverified_artifacts(current_stack, "ubuntu-24.04", "x86_64")
    manifest = tmp_path / "image.json"
    play = tmp_path / "play.yml"
    play.write_text(
        yaml.safe_dump(
            [
                {
                    "hosts": "localhost",
                    "gather_facts": True,
                    "tasks": [
                        {
                            "ansible.builtin.include_role": {"name": "trainstack.cluster.image_manifest"},
                            "vars": {
                                "image_manifest_path": str(manifest),
                                "trainstack_stack": current_stack["id"],
                                "image_manifest_flavour": "base-gpu",
                                "image_manifest_pinned": {},
                                "image_manifest_unverified": unverified,
                            },
                        }
                    ],
                }
            ]
        )
    )
    proc = run(
        [
            str(VENV_BIN / "ansible-playbook"),
            *LOCALHOST_ARGS,
            str(play),
        ],
        check=False,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert f"UNVERIFIED artifact {art['name']}" in proc.stdout
    recorded = json.loads(manifest.read_text())["unverified_artifacts"]
    assert recorded == [
        {"name": art["name"], "url": art["url"], "component": "efa_installer", "reason": REASON}
    ]
