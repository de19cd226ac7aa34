# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Check a request against botocore's own model of an AWS API before it is sent.

Why a module of its own: the PCS and the SageMaker HyperPod renderers both build boto3 requests for services
moto does not (fully) implement, so the installed botocore's service model is the only description of the API
the tests and the modules can hold a request to. botocore's ParamValidator checks required members, unknown
members, types and minimums; the walk here adds what it leaves to the service: enums, patterns and maximum
lengths, sizes and values, read from the same shapes.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any


@functools.cache
def service_model(service: str) -> Any:
    """botocore's model of `service` (for example "pcs" or "sagemaker") as the installed botocore has it;
    loaded once per process (EC2's model alone is megabytes of JSON)."""
    from botocore.session import Session

    return Session().get_service_model(service)


def constraint_problems(value: Any, shape: Any, path: str) -> list[str]:
    """Enums, patterns and maxima of `value` against `shape`, one '<dotted.path>: <rule>' line each."""
    found: list[str] = []
    kind = shape.type_name
    if kind == "structure" and isinstance(value, Mapping):
        for key, member in shape.members.items():
            if key in value:
                found += constraint_problems(value[key], member, f"{path}.{key}" if path else key)
    elif kind == "list" and isinstance(value, list):
        maximum = shape.metadata.get("max")
        if maximum is not None and len(value) > maximum:
            found.append(f"{path}: {len(value)} items, at most {maximum}")
        for index, item in enumerate(value):
            found += constraint_problems(item, shape.member, f"{path}[{index}]")
    elif kind == "map" and isinstance(value, Mapping):
        for key, item in value.items():
            found += constraint_problems(item, shape.value, f"{path}.{key}")
    elif kind == "string" and isinstance(value, str):
        found += string_problems(value, shape, path)
    elif kind in ("integer", "long") and isinstance(value, int):
        maximum = shape.metadata.get("max")
        if maximum is not None and value > maximum:
            found.append(f"{path}: {value} is more than {maximum}")
    return found


def pattern_matches(pattern: str, value: str) -> bool:
    """The model's patterns are Java regular expressions; one Python cannot read is left to the service."""
    try:
        return re.search(pattern, value) is not None
    except re.error:
        return True


def string_problems(value: str, shape: Any, path: str) -> list[str]:
    found = []
    if shape.enum and value not in shape.enum:
        found.append(f"{path}: {value!r} is not one of {', '.join(shape.enum)}")
    maximum = shape.metadata.get("max")
    if maximum is not None and len(value) > maximum:
        found.append(f"{path}: {len(value)} characters, at most {maximum}")
    pattern = shape.metadata.get("pattern")
    if pattern and not pattern_matches(pattern, value):
        found.append(f"{path}: {value!r} does not match the pattern {pattern}")
    return found


def request_problems(model: Any, operation: str, request: Mapping[str, Any]) -> str:
    """Empty when `request` is valid input of `operation` in `model`; otherwise botocore's report, then the
    model's enum, pattern and maximum checks, one problem a line."""
    from botocore.validate import ParamValidator

    shape = model.operation_model(operation).input_shape
    report = ParamValidator().validate(dict(request), shape)
    lines = [report.generate_report()] if report.has_errors() else []
    lines += constraint_problems(request, shape, "")
    return "\n".join(lines)
