# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""The two ways a backend's renderer refuses: the spec asks for what the service cannot make (every problem
listed, each naming the spec key), or a rendered request is not one the service's API model accepts (the
operation named). Each renderer subclasses both, so a module catches its own backend's and
spec_module.rendered reports them alike."""

from __future__ import annotations


class RenderError(ValueError):
    """The spec or the inputs ask for what the service cannot make; one '<key>: <rule>' line per problem."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


class RequestError(ValueError):
    """A rendered request is not one botocore's model of the service accepts; names the operation and the
    resource."""

    MODEL = "botocore's model"

    def __init__(self, operation: str, label: str, report: str) -> None:
        super().__init__(f"{operation} ({label}) does not match {self.MODEL}: {report}")
        self.operation = operation
        self.label = label
        self.report = report
