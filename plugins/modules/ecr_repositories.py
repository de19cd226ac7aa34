#!/usr/bin/python
# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Ansible module: the Amazon ECR repositories a container build pushes to, and the registry's login."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: ecr_repositories
short_description: Make the Amazon ECR repositories of a container build and return the registry's login
description:
  - Creates each repository of O(names) that does not exist, with image scanning on push, the tag mutability
    of O(image_tag_mutability) and server-side encryption (AES-256, or the KMS key O(kms_key)); an existing
    repository gets the scanning and mutability asked for (ECR cannot change a repository's encryption; a
    different one is reported, not changed). Nothing changes on a second run.
  - With O(login=true), also returns the registry's login from C(GetAuthorizationToken) (user C(AWS) and a
    password valid for 12 hours) for C(buildah login) or an auth file. Run the task with C(no_log) then, as
    the password is a credential.
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
  login:
    description: Return the registry's login (C(username), C(password), C(registry)).
    type: bool
    default: false
extends_documentation_fragment:
  - amazon.aws.common.modules
  - amazon.aws.region.modules
  - amazon.aws.boto3
"""

EXAMPLES = r"""
- name: Make the repositories and get the login
  trainstack.cluster.ecr_repositories:
    region: us-east-1
    names: [ml/trainstack/base, ml/trainstack/pytorch]
    login: true
  register: ecr
  no_log: true
"""

RETURN = r"""
repositories:
  description: Each repository's name, URI, and whether this run created it.
  returned: always
  type: list
  elements: dict
username:
  description: The registry's user (C(AWS)).
  returned: when login
  type: str
password:
  description: The registry's password (a credential, valid 12 hours).
  returned: when login
  type: str
registry:
  description: The registry's host (C(<account>.dkr.ecr.<region>.amazonaws.com)).
  returned: when login
  type: str
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


def login(client: Any, registry_id: str | None) -> dict[str, str]:
    """The registry's user, password and host from its authorization token (base64 of 'AWS:<password>')."""
    ids = {"registryIds": [registry_id]} if registry_id else {}
    data = client.get_authorization_token(**ids)["authorizationData"][0]
    username, _sep, password = base64.b64decode(data["authorizationToken"]).decode().partition(":")
    return {
        "username": username,
        "password": password,
        "registry": data["proxyEndpoint"].removeprefix("https://").rstrip("/"),
    }


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
            "login": {"type": "bool", "default": False},
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
        if module.params["login"]:
            result.update(login(client, module.params["registry_id"]))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
