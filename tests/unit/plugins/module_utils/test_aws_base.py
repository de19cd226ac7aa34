"""module_utils/aws, called directly: the wait's deadline, interval floor and messages on a fake clock
(nothing sleeps), each service's not-found codes on real botocore errors, the drift of a resource, and the
clients' retry mode."""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.trainstack.cluster.plugins.module_utils.aws import client, drift, errors, wait
from botocore.exceptions import ClientError, ParamValidationError
from botocore.session import Session
from botocore.stub import Stubber

pytestmark = pytest.mark.cluster


class FakeClock:
    """A monotonic clock that moves only when the waiter sleeps; ``slept`` is every sleep asked for."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def waiter(clock: FakeClock, timeout: float = 60, interval: float = 10, **kwargs: Any) -> wait.Waiter:
    return wait.Waiter("EKS", timeout, interval, clock=clock, sleep=clock.sleep, **kwargs)


def answers(*statuses: str | None):
    """A look that answers these statuses in turn (None: the resource is gone), the last one for ever."""
    seen = list(statuses)

    def look() -> dict[str, str] | None:
        status = seen.pop(0) if len(seen) > 1 else seen[0]
        return None if status is None else {"status": status, "reason": "no capacity"}

    return look


# ---------------------------------------------------------------- wait


def test_a_wait_returns_the_resource_once_it_has_the_wanted_status() -> None:
    clock = FakeClock()
    w = waiter(clock)
    found = w.until("cluster a", answers("CREATING", "CREATING", "ACTIVE"), "ACTIVE")
    assert found == {"status": "ACTIVE", "reason": "no capacity"}
    assert clock.slept == [10, 10]
    assert w.progress == ["0s cluster a CREATING", "20s cluster a ACTIVE"]


def test_the_deadline_ends_the_wait_naming_what_was_waited_for_and_the_last_status() -> None:
    clock = FakeClock()
    w = waiter(clock, timeout=25, hint="EKS goes on; run the same task again to wait once more")
    with pytest.raises(wait.WaitTimeoutError) as caught:
        w.until("node group h100", answers("CREATING", "CREATING", "UPDATING"), "ACTIVE")
    assert str(caught.value) == (
        "EKS node group h100: still UPDATING after 25 s (wait_timeout), not ACTIVE. "
        "EKS goes on; run the same task again to wait once more"
    )
    assert caught.value.status == "UPDATING"
    # Two full intervals, then the last sleep is shortened to land on the deadline, where one more look is.
    assert clock.slept == [10, 10, 5]
    assert clock.now == 1025
    assert caught.value.as_result() == {
        "msg": str(caught.value),
        "status": "UPDATING",
        "progress": ["0s node group h100 CREATING", "20s node group h100 UPDATING"],
    }


def test_one_deadline_bounds_every_wait_of_a_run() -> None:
    clock = FakeClock()
    w = waiter(clock, timeout=30)
    w.until("cluster a", answers("CREATING", "CREATING", "ACTIVE"), "ACTIVE")
    with pytest.raises(wait.WaitTimeoutError, match=r"still CREATING after 30 s .*not ACTIVE\.$"):
        w.until("node group b", answers("CREATING"), "ACTIVE")
    assert clock.now == 1030  # not 20 s for the cluster and then 30 more for the node group


def test_the_interval_has_a_floor() -> None:
    clock = FakeClock()
    w = waiter(clock, timeout=3.5, interval=0.01)
    with pytest.raises(wait.WaitTimeoutError):
        w.until("cluster a", answers("CREATING"), "ACTIVE")
    assert w.interval == wait.MIN_INTERVAL == 1.0
    # Never a sleep below the floor, the last one included (a deadline 0.5 s away still waits 1 s).
    assert clock.slept == [1.0, 1.0, 1.0, 1.0]


def test_a_deletion_waits_until_the_resource_is_gone() -> None:
    clock = FakeClock()
    w = waiter(clock)
    assert w.until("cluster a", answers("DELETING", None), wait.GONE) is None
    assert w.progress == ["0s cluster a DELETING", "10s cluster a gone"]
    with pytest.raises(
        wait.WaitTimeoutError, match=r"still DELETING after 60 s \(wait_timeout\), not deleted\.$"
    ):
        waiter(FakeClock()).until("cluster a", answers("DELETING"), wait.GONE)


def test_a_failed_status_ends_the_wait_at_once_with_its_reason() -> None:
    clock = FakeClock()
    with pytest.raises(wait.WaitFailedError) as caught:
        waiter(clock).until(
            "cluster a",
            answers("CREATING", "CREATE_FAILED"),
            "ACTIVE",
            failed=("CREATE_FAILED",),
            reason=lambda item: item["reason"],
        )
    assert str(caught.value) == "EKS cluster a is CREATE_FAILED: no capacity"
    assert caught.value.progress == ["0s cluster a CREATING", "10s cluster a CREATE_FAILED"]
    assert clock.slept == [10]


def test_a_resource_that_goes_away_while_awaited_ends_the_wait() -> None:
    with pytest.raises(wait.WaitFailedError, match=r"^EKS cluster a: gone while waiting for ACTIVE$"):
        waiter(FakeClock()).until("cluster a", answers("CREATING", None), "ACTIVE")


def test_progress_keeps_changes_only_and_can_leave_the_name_out() -> None:
    clock = FakeClock()
    w = waiter(clock)
    w.until(
        "cluster a",
        answers("Creating", "Creating", "InService"),
        "InService",
        status=lambda item: item["status"],
        progress_as="",
    )
    assert w.progress == ["0s Creating", "20s InService"]


def test_a_wait_of_no_time_is_refused() -> None:
    with pytest.raises(ValueError, match=r"wait_timeout: must be more than 0 seconds \(got 0\)"):
        waiter(FakeClock(), timeout=0)
    assert wait.problems({"wait_timeout": 0, "poll_interval": -1}) == [
        "wait_timeout: must be more than 0 seconds (got 0)",
        "poll_interval: must be more than 0 seconds (got -1)",
    ]
    assert wait.problems({"wait_timeout": 60, "poll_interval": None}) == []


def test_the_module_wide_clock_and_sleep_are_read_when_a_waiter_is_made(monkeypatch) -> None:
    clock = FakeClock()
    monkeypatch.setattr(wait, "CLOCK", clock)
    monkeypatch.setattr(wait, "SLEEP", clock.sleep)
    wait.Waiter("PCS", 60, 15).until("cluster a", answers("CREATING", "ACTIVE"), "ACTIVE")
    assert clock.slept == [15]


# ---------------------------------------------------------------- not found


def stubbed(service: str) -> tuple[Any, Stubber]:
    made = Session().create_client(
        service, region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing"
    )
    return made, Stubber(made)


def error(code: str, message: str = "") -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": message}}, "Describe")


@pytest.mark.parametrize(
    ("service", "code"),
    [
        ("eks", "ResourceNotFoundException"),
        ("pcs", "ResourceNotFoundException"),
        ("sagemaker", "ResourceNotFound"),
        ("fsx", "FileSystemNotFound"),
        ("ecr", "RepositoryNotFoundException"),
        ("ec2", "InvalidLaunchTemplateName.NotFoundException"),
        ("ec2", "InvalidLaunchTemplateId.NotFound"),
    ],
)
def test_each_services_not_found_code_is_recognised(service: str, code: str) -> None:
    assert errors.is_not_found(error(code), service)


@pytest.mark.parametrize(
    ("service", "raised"),
    [
        ("eks", error("AccessDeniedException")),
        ("eks", error("ResourceNotFound")),  # SageMaker's code, not EKS's
        ("ec2", error("InvalidSubnetID.NotFound")),  # not the resource a Describe asked for
        ("sagemaker", error("ValidationException", "1 validation error detected")),
        ("pcs", ValueError("not an AWS error")),
    ],
)
def test_other_errors_are_not_a_missing_resource(service: str, raised: BaseException) -> None:
    assert not errors.is_not_found(raised, service)


def test_motos_sagemaker_answer_for_a_missing_cluster_counts() -> None:
    assert errors.is_not_found(error("ValidationException", "Could not find cluster 'x'."), "sagemaker")


def test_an_unknown_service_is_a_mistake_of_the_caller() -> None:
    with pytest.raises(KeyError, match="no not-found codes of the service 'eksx'"):
        errors.is_not_found(error("ResourceNotFoundException"), "eksx")


def test_or_none_reads_the_service_from_the_client() -> None:
    eks, stub = stubbed("eks")
    stub.add_client_error("describe_cluster", "ResourceNotFoundException", "no such cluster", 404)
    stub.add_client_error("describe_cluster", "AccessDeniedException", "no", 403)
    stub.add_response("describe_cluster", {"cluster": {"name": "a", "status": "ACTIVE"}})
    with stub:
        assert errors.or_none(eks, lambda: eks.describe_cluster(name="a")) is None
        with pytest.raises(ClientError, match="AccessDenied"):
            errors.or_none(eks, lambda: eks.describe_cluster(name="a"))
        assert errors.or_none(eks, lambda: eks.describe_cluster(name="a"))["cluster"]["status"] == "ACTIVE"

    def broken() -> None:
        raise ParamValidationError(report="name: not a string")

    with pytest.raises(ParamValidationError):  # not an answer of AWS at all: raised as it is
        errors.or_none(eks, broken)


def test_every_service_the_modules_call_has_its_codes() -> None:
    assert set(errors.NOT_FOUND) == {"batch", "ec2", "ecr", "eks", "fsx", "pcs", "sagemaker"}


# ---------------------------------------------------------------- drift


def test_drift_names_each_key_whose_value_differs() -> None:
    current = {"version": "1.33", "scalingConfig": {"maxSize": 5}, "status": "ACTIVE", "labels": {}}
    desired = {"version": "1.34", "scalingConfig": {"maxSize": 5}, "taints": [], "labels": {"a": "b"}}
    found = drift.drift(current, desired)
    assert [str(d) for d in found] == ["version is 1.33, not 1.34", "labels is {}, not {'a': 'b'}"]
    assert found[0] == drift.Difference("version", "1.33", "1.34")


def test_drift_reads_only_the_keys_asked_for_in_their_order() -> None:
    current = {"a": 1, "b": 2, "c": 3}
    desired = {"a": 0, "b": 0, "c": 3}
    assert [d.key for d in drift.drift(current, desired, ("b", "a", "c", "z"))] == ["b", "a"]


def test_a_key_on_one_side_only_is_not_drift() -> None:
    assert drift.drift({"size": None}, {"size": None, "version": "25.11"}) == []
    assert drift.drift({"size": None}, {"size": "SMALL"}) == [drift.Difference("size", None, "SMALL")]


def test_drift_is_warned_about_in_the_same_words_everywhere() -> None:
    class Module:
        def __init__(self) -> None:
            self.warnings: list[str] = []

        def warn(self, text: str) -> None:
            self.warnings.append(text)

    module = Module()
    drift.warn(module, "PCS cluster a", drift.drift({"size": "LARGE"}, {"size": "SMALL"}))
    assert module.warnings == ["PCS cluster a: size is LARGE, not SMALL; left as it is"]


# ---------------------------------------------------------------- clients


def test_clients_retry_throttling_in_botocores_standard_mode() -> None:
    asked: list[dict[str, Any]] = []

    class Module:
        def client(self, service: str, **kwargs: Any) -> str:
            asked.append({"service": service, **kwargs})
            return service

    assert client.client(Module(), "pcs", "us-west-2") == "pcs"
    (call,) = asked
    assert (call["service"], call["region"]) == ("pcs", "us-west-2")
    assert call["config"].retries == {"mode": "standard", "total_max_attempts": 10}
    client.client(Module(), "fsx")
    assert "region" not in asked[1]  # the module's own O(region)
    assert asked[1]["config"].retries is not asked[0]["config"].retries  # botocore writes into it


def test_a_real_client_makes_ten_attempts_in_standard_mode() -> None:
    class Module:
        def client(self, service: str, config: Any, region: str) -> Any:
            return Session().create_client(
                service, region_name=region, config=config, aws_access_key_id="x", aws_secret_access_key="y"
            )

    for _client in range(2):  # the second client is made as the first (nothing shared was changed)
        made = client.client(Module(), "eks", "us-east-1")
        assert made.meta.config.retries == {"mode": "standard", "total_max_attempts": 10}


def test_reported_fails_a_wait_and_an_aws_error_alike() -> None:
    class FailedError(Exception):
        pass

    class Module:
        def fail_json(self, **result: Any) -> None:
            raise FailedError(result)

        def fail_json_aws(self, exception: BaseException, msg: str) -> None:
            raise FailedError({"msg": msg, "exception": exception})

    with pytest.raises(FailedError) as caught, client.reported(Module(), "EKS cluster a"):
        raise wait.WaitTimeoutError("EKS cluster a: still CREATING", "CREATING", ["0s cluster a CREATING"])
    assert caught.value.args[0] == {
        "msg": "EKS cluster a: still CREATING",
        "status": "CREATING",
        "progress": ["0s cluster a CREATING"],
    }
    with pytest.raises(FailedError) as caught, client.reported(Module(), "EKS cluster a"):
        raise error("AccessDeniedException")
    assert caught.value.args[0]["msg"] == "EKS cluster a"
