#!/usr/bin/python
# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Ansible module: the Amazon ECR repositories a container build pushes to, and the registry's login."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: ecr_repositories
short_description: Make the Amazon ECR repositories of a container build and log in to the registry
description:
  - Creates each repository of O(names) that does not exist, with image scanning on push, the tag mutability
    of O(image_tag_mutability) and server-side encryption (AES-256, or the KMS key O(kms_key)); an existing
    repository gets the scanning and mutability asked for (ECR cannot change a repository's encryption; a
    different one is reported, not changed). Nothing changes on a second run.
  - With O(auth_file), also logs in to the registry as C(buildah login) does, in the module itself - the
    login from C(GetAuthorizationToken) (user C(AWS), a password valid for 12 hours) is written into that
    containers auth file (mode 0600, replaced atomically, other registries' entries kept), which buildah,
    podman and skopeo read. The password is never returned; the result says where it went.
version_added: 0.1.0
author: trainstack maintainers (@trainstack)
options:
  names:
    description: Repository names (C(<namespace>/<repository>/<flavour>)).
    type: list
    elements: str
    required: true
  registry_id:
    description: The account whose registry holds them (default the caller's).
    type: str
  image_tag_mutability:
    description:
      - C(MUTABLE) lets a tag move to new content; the build moves the stack tag (C(<stack>)) to each new
        content tag (C(<stack>-<key>)), which itself never changes.
    type: str
    choices: [MUTABLE, IMMUTABLE]
    default: MUTABLE
  scan_on_push:
    description: Scan every pushed image for known vulnerabilities (ECR basic scanning).
    type: bool
    default: true
  kms_key:
    description: KMS key for the repositories' encryption (default AES-256 with ECR's own key).
    type: str
  auth_file:
    description:
      - A containers auth file (C(containers-auth.json)) to write the registry's login into, such as root's
        C(/run/containers/0/auth.json); made when missing. Not given, the module does not log in.
    type: path
extends_documentation_fragment:
  - amazon.aws.common.modules
  - amazon.aws.region.modules
  - amazon.aws.boto3
"""

EXAMPLES = r"""
- name: Make the repositories and log in (buildah's auth file)
  trainstack.cluster.ecr_repositories:
    region: us-east-1
    names: [ml/trainstack/base, ml/trainstack/pytorch]
    auth_file: /run/containers/0/auth.json
"""

RETURN = r"""
repositories:
  description: Each repository's name, URI, and whether this run created it.
  returned: always
  type: list
  elements: dict
registry:
  description: The registry's host (C(<account>.dkr.ecr.<region>.amazonaws.com)), the auth file's key.
  returned: when O(auth_file) is given
  type: str
auth_file:
  description: The auth file the login was written to.
  returned: when O(auth_file) is given
  type: str
auth_file_changed:
  description: Whether the auth file changed (a new password changes it).
  returned: when O(auth_file) is given
  type: bool
"""

import base64
from typing import Any

try:
    from ansible_collections.amazon.aws.plugins.module_utils.modules import AnsibleAWSModule
except ImportError:  # pragma: no cover - amazon.aws is a dependency of this collection
    AnsibleAWSModule = None

from ansible_collections.trainstack.cluster.plugins.module_utils.aws.client import client as aws_client
from ansible_collections.trainstack.cluster.plugins.module_utils.aws.client import reported
from ansible_collections.trainstack.cluster.plugins.module_utils.aws.drift import drift, warn
from ansible_collections.trainstack.cluster.plugins.module_utils.aws.errors import or_none
from ansible_collections.trainstack.cluster.plugins.module_utils.files import registry_auth


def encryption(kms_key: str | None) -> dict[str, str]:
    """CreateRepository's encryption configuration: KMS with the given key, else AES-256."""
    return {"encryptionType": "KMS", "kmsKey": kms_key} if kms_key else {"encryptionType": "AES256"}


def _existing(client: Any, name: str, registry_id: str | None) -> dict[str, Any] | None:
    ids = {"registryId": registry_id} if registry_id else {}
    return or_none(
        client, lambda: client.describe_repositories(repositoryNames=[name], **ids)["repositories"][0]
    )


def ensure(module: Any, client: Any, name: str) -> tuple[dict[str, Any], bool]:
    """One repository as asked; (its description, whether anything changed)."""
    params = module.params
    ids = {"registryId": params["registry_id"]} if params["registry_id"] else {}
    repo = _existing(client, name, params["registry_id"])
    if repo is None:
        if module.check_mode:
            return {"repositoryName": name, "repositoryUri": ""}, True
        repo = client.create_repository(
            repositoryName=name,
            imageTagMutability=params["image_tag_mutability"],
            imageScanningConfiguration={"scanOnPush": params["scan_on_push"]},
            encryptionConfiguration=encryption(params["kms_key"]),
            **ids,
        )["repository"]
        return repo, True
    changed = False
    if repo.get("imageTagMutability") != params["image_tag_mutability"]:
        changed = True
        if not module.check_mode:
            client.put_image_tag_mutability(
                repositoryName=name, imageTagMutability=params["image_tag_mutability"], **ids
            )
    if (repo.get("imageScanningConfiguration") or {}).get("scanOnPush") != params["scan_on_push"]:
        changed = True
        if not module.check_mode:
            client.put_image_scanning_configuration(
                repositoryName=name, imageScanningConfiguration={"scanOnPush": params["scan_on_push"]}, **ids
            )
    wanted = {"encryption": encryption(params["kms_key"])["encryptionType"]}
    have = {"encryption": (repo.get("encryptionConfiguration") or {}).get("encryptionType", "AES256")}
    warn(module, f"ECR repository {name}", drift(have, wanted), "ECR cannot change that")
    return repo, changed


def login(module: Any, client: Any, registry_id: str | None, auth_file: str) -> dict[str, Any]:
    """Log in to the registry in `auth_file` with its authorization token (base64 of 'AWS:<password>').

    The password goes from ECR's answer into the file and nowhere else: the result names the registry and
    the file, never the token."""
    ids = {"registryIds": [registry_id]} if registry_id else {}
    data = client.get_authorization_token(**ids)["authorizationData"][0]
    username, _sep, password = base64.b64decode(data["authorizationToken"]).decode().partition(":")
    registry = data["proxyEndpoint"].removeprefix("https://").rstrip("/")
    try:
        changed = registry_auth.write(auth_file, registry, username, password, dry_run=module.check_mode)
    except (OSError, registry_auth.RegistryAuthError) as exc:
        module.fail_json(msg=f"auth_file: cannot write the registry's login: {exc}")
    return {"registry": registry, "auth_file": auth_file, "auth_file_changed": changed}


def main() -> None:
    if AnsibleAWSModule is None:
        from ansible.module_utils.basic import AnsibleModule

        AnsibleModule(argument_spec={}, bypass_checks=True).fail_json(
            msg="trainstack.cluster.ecr_repositories needs the amazon.aws collection (its module_utils)"
        )
    module = AnsibleAWSModule(
        argument_spec={
            "names": {"type": "list", "elements": "str", "required": True},
            "registry_id": {"type": "str"},
            "image_tag_mutability": {
                "type": "str",
                "choices": ["MUTABLE", "IMMUTABLE"],
                "default": "MUTABLE",
            },
            "scan_on_push": {"type": "bool", "default": True},
            # A key id or ARN, not a secret.
            "kms_key": {"type": "str", "no_log": False},
            "auth_file": {"type": "path"},
        },
        supports_check_mode=True,
    )
    client = aws_client(module, "ecr")
    result: dict[str, Any] = {"changed": False, "repositories": []}
    with reported(module, "Amazon ECR repositories"):
        for name in module.params["names"]:
            repo, changed = ensure(module, client, name)
            result["changed"] |= changed
            result["repositories"].append(
                {"name": name, "uri": repo.get("repositoryUri", ""), "changed": changed}
            )
        if module.params["auth_file"]:
            result.update(login(module, client, module.params["registry_id"], module.params["auth_file"]))
            result["changed"] |= result["auth_file_changed"]
    module.exit_json(**result)


if __name__ == "__main__":
    main()
