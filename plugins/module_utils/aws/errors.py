# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""A resource that is not there, told apart from a call that failed, by each service's own error codes.

Why a table: "does it exist?" is the first question of every module, and each service answers "no" in its own
way (EKS and PCS C(ResourceNotFoundException), SageMaker C(ResourceNotFound), FSx C(FileSystemNotFound), ECR
C(RepositoryNotFoundException), EC2 a code per kind of resource, Batch an empty list and no error at all).
Matching a loose pattern such as "NotFound" anywhere in the code would also swallow errors that are not
about the resource asked for (EC2's C(InvalidSubnetID.NotFound) on a create); each code here is one a service
answers for the very resource a Describe or Get names.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

try:
    from botocore.exceptions import ClientError
except ImportError:  # pragma: no cover - AnsibleAWSModule reports a missing botocore itself
    ClientError = None

T = TypeVar("T")

# By botocore's service name (client.meta.service_model.service_name).
NOT_FOUND: Mapping[str, frozenset[str]] = {
    "batch": frozenset(),  # Describe* answer an empty list for a name they do not know
    "ec2": frozenset({"InvalidLaunchTemplateName.NotFoundException", "InvalidLaunchTemplateId.NotFound"}),
    "ecr": frozenset({"RepositoryNotFoundException"}),
    "eks": frozenset({"ResourceNotFoundException"}),
    "fsx": frozenset({"FileSystemNotFound"}),
    "pcs": frozenset({"ResourceNotFoundException"}),
    "sagemaker": frozenset({"ResourceNotFound"}),
}
# Answers that mean "not found" under another code: moto's SageMaker (5.2.5) answers DescribeCluster of a
# missing cluster with a ValidationException "Could not find ..." where SageMaker answers ResourceNotFound.
NOT_FOUND_MESSAGES: Mapping[str, tuple[tuple[str, str], ...]] = {
    "sagemaker": (("ValidationException", "Could not find"),),
}


def is_not_found(error: BaseException, service: str) -> bool:
    """Whether ``error`` is ``service``'s answer that the resource asked for does not exist."""
    if service not in NOT_FOUND:
        raise KeyError(f"no not-found codes of the service {service!r}; add them to NOT_FOUND")
    if ClientError is None or not isinstance(error, ClientError):
        return False
    detail = error.response.get("Error", {})
    code, message = detail.get("Code", ""), str(detail.get("Message", ""))
    return code in NOT_FOUND[service] or any(
        code == quirk and text in message for quirk, text in NOT_FOUND_MESSAGES.get(service, ())
    )


def or_none(client: Any, call: Callable[[], T]) -> T | None:
    """What ``call`` (a Describe or Get on ``client``) answers, or None where the resource does not exist.

    The service is read from the client, so a caller cannot pair EC2's codes with an EKS call.
    """
    try:
        return call()
    except Exception as error:
        if is_not_found(error, client.meta.service_model.service_name):
            return None
        raise
