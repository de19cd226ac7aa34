# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""AWS side of the trainstack.cluster.ec2_cluster inventory: sessions, paginated reads, error wording.

Kept apart from the model so that the rules for what an instance *is* stay testable without AWS, and so
that every AWS failure is turned into one Ec2ClusterError sentence that names the option to look at.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ansible_collections.trainstack.cluster.plugins.module_utils.aws.cluster_tags import storage_from_tags
from ansible_collections.trainstack.cluster.plugins.module_utils.inventory.ec2_cluster_model import (
    EC2_KINDS,
    EKS_CLUSTER_TAG,
    PC_CLUSTER_TAG,
    PCS_CLUSTER_TAG,
    Ec2ClusterError,
    Node,
    SourceFilter,
    TypeFacts,
    catalog_type_facts,
    facts_from_instance_type,
    hyperpod_cluster_id,
    node_from_ec2_instance,
    node_from_hyperpod,
    tag_dict,
    with_cluster_storage,
)

try:
    import boto3
    from botocore.config import Config
    from botocore.exceptions import (
        BotoCoreError,
        ClientError,
        ConnectTimeoutError,
        EndpointConnectionError,
        NoCredentialsError,
        ProfileNotFound,
        ReadTimeoutError,
    )

    HAS_BOTO3 = True
except ImportError:  # the plugin reports this with the option-free message below
    HAS_BOTO3 = False

T = TypeVar("T")
_DESCRIBE_TYPES_BATCH = 100  # the API's limit on InstanceTypes per call
_DENIED = {"AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "AuthFailure"}
_BAD_CREDENTIALS = {
    "AuthFailure",
    "InvalidClientTokenId",
    "UnrecognizedClientException",
    "SignatureDoesNotMatch",
    "ExpiredToken",
    "ExpiredTokenException",
}


@dataclass(slots=True, frozen=True)
class AwsSettings:
    """How to reach AWS: credentials, role, endpoint and patience, straight from the plugin options."""

    access_key: str | None = None
    secret_key: str | None = None
    session_token: str | None = None
    profile: str | None = None
    assume_role_arn: str | None = None
    assume_role_session_name: str = "trainstack-ec2-cluster-inventory"
    endpoint_url: str | None = None
    connect_timeout: int = 30
    read_timeout: int = 30
    max_attempts: int = 3


@dataclass(slots=True, frozen=True)
class HyperPodSettings:
    """Which SageMaker instance groups play head and login, and whether to ask each node for its address."""

    head_groups: frozenset[str] = frozenset({"controller-machine", "controller"})
    login_groups: frozenset[str] = frozenset({"login-group", "login"})
    node_details: bool = True


@dataclass(slots=True)
class FetchResult:
    """Nodes of every region in region order, plus what the plugin reports at -vvv and as warnings."""

    nodes: list[Node] = field(default_factory=list)
    pages: dict[str, int] = field(default_factory=dict)
    clusters_seen: set[str] = field(default_factory=set)
    warnings: list[str] = field(default_factory=list)


def require_boto3() -> None:
    """Fail early and plainly: without boto3 nothing else in this module can run."""
    if not HAS_BOTO3:
        raise Ec2ClusterError("the ec2_cluster inventory needs the boto3 and botocore Python packages")


def ec2_filters(flt: SourceFilter, states: Sequence[str]) -> list[dict[str, Any]]:
    """Server-side filters so that AWS, not this process, drops instances that are not cluster nodes.

    All wanted tag keys go into one `tag-key` filter (values are ORed), which keeps it one call per region
    for every EC2-backed kind. Cluster names can only be pushed down when a single tag key is in play,
    because separate `tag:` filters would be ANDed; `tag:<key>=<names>` then replaces the `tag-key` filter,
    which it implies (every filter is one more pass over the instances on the server).
    """
    keys = []
    if "parallelcluster" in flt.kinds:
        keys.append(PC_CLUSTER_TAG)
    if "pcs" in flt.kinds:
        keys.append(PCS_CLUSTER_TAG)
    if "eks" in flt.kinds:
        keys.append(EKS_CLUSTER_TAG)
    if "tagged" in flt.kinds and flt.tagged_cluster_tag:
        keys.append(flt.tagged_cluster_tag)
    if len(keys) == 1 and flt.cluster_names:
        filters: list[dict[str, Any]] = [{"Name": f"tag:{keys[0]}", "Values": sorted(flt.cluster_names)}]
    else:
        filters = [{"Name": "tag-key", "Values": keys}]
    if states:
        filters.append({"Name": "instance-state-name", "Values": list(states)})
    return filters


def _endpoint(error: Exception, settings: AwsSettings) -> str:
    """The URL botocore was talking to (it knows the regional default), else the configured one."""
    kwargs = getattr(error, "kwargs", None) or {}
    return str(kwargs.get("endpoint_url") or settings.endpoint_url or "the default AWS endpoint")


def explain(error: Exception, what: str, settings: AwsSettings) -> Ec2ClusterError:
    """One sentence per failure class, naming the endpoint and the option that most likely needs a change."""
    if isinstance(error, NoCredentialsError):
        return Ec2ClusterError(
            f"{what}: no AWS credentials found; set access_key/secret_key, profile, or the AWS_* "
            "environment variables"
        )
    if isinstance(error, ConnectTimeoutError):
        return Ec2ClusterError(
            f"{what}: no connection to {_endpoint(error, settings)} within "
            f"connect_timeout={settings.connect_timeout}s (check endpoint_url and the network)"
        )
    if isinstance(error, ReadTimeoutError):
        return Ec2ClusterError(
            f"{what}: no answer from {_endpoint(error, settings)} "
            f"within read_timeout={settings.read_timeout}s "
            "(a timed-out call is not retried; check endpoint_url, or raise read_timeout for a slow endpoint)"
        )
    if isinstance(error, EndpointConnectionError):
        return Ec2ClusterError(
            f"{what}: cannot reach {_endpoint(error, settings)} (check endpoint_url and the network) "
            f"after max_attempts={settings.max_attempts}: {error}"
        )
    if isinstance(error, ClientError):
        code = error.response.get("Error", {}).get("Code", "")
        message = error.response.get("Error", {}).get("Message", str(error))
        if code in _BAD_CREDENTIALS:
            return Ec2ClusterError(f"{what}: AWS rejected the credentials ({code}): {message}")
        if code in _DENIED:
            return Ec2ClusterError(
                f"{what}: access denied ({code}); see docs/inventory-iam.md for the policy: {message}"
            )
        return Ec2ClusterError(f"{what}: {code}: {message}")
    return Ec2ClusterError(f"{what}: {error}")


def _guard(what: str, settings: AwsSettings, call: Callable[[], T]) -> T:
    """Run one AWS interaction and translate its failure; keeps try/except out of the fetch logic."""
    try:
        return call()
    except (BotoCoreError, ClientError) as error:
        raise explain(error, what, settings) from error


def make_session(settings: AwsSettings, region: str) -> Any:
    """A boto3 session from the options, with the role assumed once here rather than per region."""
    require_boto3()
    try:
        session = boto3.Session(
            aws_access_key_id=settings.access_key,
            aws_secret_access_key=settings.secret_key,
            aws_session_token=settings.session_token,
            profile_name=settings.profile,
        )
    except ProfileNotFound as error:
        raise Ec2ClusterError(f"profile: {error}") from error
    if session.get_credentials() is None:
        raise explain(NoCredentialsError(), "ec2_cluster", settings)
    if not settings.assume_role_arn:
        return session
    sts = make_client(session, "sts", region, settings)
    answer = _guard(
        f"assume_role_arn {settings.assume_role_arn}",
        settings,
        lambda: sts.assume_role(
            RoleArn=settings.assume_role_arn, RoleSessionName=settings.assume_role_session_name
        ),
    )
    creds = answer["Credentials"]
    return boto3.Session(
        aws_access_key_id=creds["AccessKeyId"],
        aws_secret_access_key=creds["SecretAccessKey"],
        aws_session_token=creds["SessionToken"],
        region_name=session.region_name,
    )


def _config(settings: AwsSettings) -> Any:
    """Bounded patience per attempt; botocore's standard mode retries throttling, 5xx, refused connections."""
    return Config(
        connect_timeout=settings.connect_timeout,
        read_timeout=settings.read_timeout,
        # total_max_attempts counts the first attempt, as the option says; botocore's own `max_attempts` key
        # counts retries only and would make one attempt more than asked.
        retries={"total_max_attempts": settings.max_attempts, "mode": "standard"},
        max_pool_connections=16,
    )


def _timeout_is_final(caught_exception: Exception | None = None, **_: Any) -> bool | None:
    """needs-retry handler: a call that timed out is not tried again (False ends botocore's retry loop).

    Why: the timeout already is the patience the user chose; retrying it would multiply the wait by
    max_attempts (an endpoint that accepts and never answers would hold the inventory for minutes), while
    throttling, 5xx answers and refused connections, which do deserve retries, stay with botocore.
    """
    if isinstance(caught_exception, (ConnectTimeoutError, ReadTimeoutError)):
        return False
    return None


def make_client(session: Any, service: str, region: str, settings: AwsSettings) -> Any:
    """A client with the plugin's timeouts and retries, whose timed-out calls end at the first timeout."""
    client = session.client(
        service, region_name=region, endpoint_url=settings.endpoint_url, config=_config(settings)
    )
    service_id = client.meta.service_model.service_id.hyphenize()
    # First among the handlers of this service's event, so that its False wins over botocore's own delay.
    client.meta.events.register_first(
        f"needs-retry.{service_id}", _timeout_is_final, unique_id="trainstack-timeout-is-final"
    )
    return client


def _parallel(call: Callable[[Any], T], items: Sequence[Any]) -> list[T]:
    """Map over items on up to 8 threads; the first failure cancels what has not started and is raised.

    Without the cancel a failing endpoint would still be asked once per remaining item, each waiting out
    its own timeout, before the error could reach the user.
    """
    pool = ThreadPoolExecutor(max_workers=max(1, min(8, len(items))))
    try:
        futures = [pool.submit(call, item) for item in items]
        wait(futures, return_when=FIRST_EXCEPTION)
        for future in futures:
            if future.done() and future.exception() is not None:
                raise future.exception()
        return [future.result() for future in futures]
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


class Fetcher:
    """Reads every wanted region once: one paginated describe_instances, plus SageMaker for HyperPod."""

    def __init__(
        self,
        session: Any,
        settings: AwsSettings,
        flt: SourceFilter,
        states: Sequence[str],
        page_size: int,
        hyperpod: HyperPodSettings,
        pcs_tags: bool = True,
    ) -> None:
        self._session = session
        self._settings = settings
        self._flt = flt
        self._states = tuple(states)
        self._page_size = page_size
        self._hyperpod = hyperpod
        self._pcs_tags = pcs_tags
        self._clients: dict[tuple[str, str], Any] = {}

    def client(self, service: str, region: str) -> Any:
        """Clients are made up front in the calling thread: boto3 sessions are not thread-safe."""
        key = (service, region)
        if key not in self._clients:
            self._clients[key] = make_client(self._session, service, region, self._settings)
        return self._clients[key]

    def fetch(self, regions: Sequence[str]) -> FetchResult:
        """All regions at once: the wall time of a multi-region inventory is that of its slowest region."""
        for region in regions:
            if any(kind in EC2_KINDS for kind in self._flt.kinds):
                self.client("ec2", region)
            if "hyperpod" in self._flt.kinds:
                self.client("sagemaker", region)
            if "pcs" in self._flt.kinds and self._pcs_tags:
                self.client("pcs", region)
        result = FetchResult()
        answers = _parallel(self._fetch_region, regions)
        for region, (nodes, pages, seen, warnings) in zip(regions, answers, strict=True):
            result.nodes.extend(nodes)
            result.pages[region] = pages
            result.clusters_seen.update(seen)
            result.warnings.extend(warnings)
        return result

    def _fetch_region(self, region: str) -> tuple[list[Node], int, set[str], list[str]]:
        """One region: EC2-tagged kinds first, then HyperPod; returns nodes, EC2 page count, cluster names and
        warnings."""
        nodes: list[Node] = []
        warnings: list[str] = []
        pages = 0
        seen: set[str] = set()
        if any(kind in EC2_KINDS for kind in self._flt.kinds):
            pages = self._ec2_nodes(region, nodes)
        if "pcs" in self._flt.kinds and self._pcs_tags:
            self._pcs_storage(region, nodes, warnings)
        if "hyperpod" in self._flt.kinds:
            self._hyperpod_nodes(region, nodes, warnings)
        seen.update(node.cluster_name for node in nodes)
        return nodes, pages, seen, warnings

    def _optional(self, what: str, call: Callable[[], T], warnings: list[str]) -> T | None:
        """A read of a cluster's storage tags: refused or failed, it is a warning, not an error (the hosts are
        known without it; the launch then takes the paths it is given)."""
        try:
            return _guard(what, self._settings, call)
        except Ec2ClusterError as error:
            warnings.append(f"{error}; no cluster_storage (data and checkpoint directories) from it")
            return None

    def _pcs_storage(self, region: str, nodes: list[Node], warnings: list[str]) -> None:
        """The storage defaults of the PCS clusters whose nodes were found, from each cluster's tags.

        Why the cluster's tags: PCS launches its nodes from the customer's own launch template, and the tags
        it writes on them are its own (aws:pcs:cluster-id, aws:pcs:compute-node-group-id); the cluster spec's
        storage tags are on the cluster (module_utils/cluster/pcs_render.py). A node whose template tags it
        with them keeps its own. One ListClusters per region and one ListTagsForResource per cluster."""
        wanted = {node.cluster_name for node in nodes if node.cluster_kind == "pcs" and node.storage is None}
        if not wanted:
            return
        pcs = self.client("pcs", region)
        arns = self._optional(
            f"pcs list_clusters in {region}",
            lambda: {
                summary["id"]: summary["arn"]
                for page in pcs.get_paginator("list_clusters").paginate()
                for summary in page.get("clusters", ())
            },
            warnings,
        )
        found: dict[str, dict[str, str]] = {}
        for cluster in sorted(wanted & set(arns or {})):
            tags = self._optional(
                f"pcs list_tags_for_resource {cluster} in {region}",
                lambda arn=(arns or {})[cluster]: pcs.list_tags_for_resource(resourceArn=arn).get("tags"),
                warnings,
            )
            found[cluster] = storage_from_tags(tags)
        with_cluster_storage(nodes, found)

    def _ec2_nodes(self, region: str, out: list[Node]) -> int:
        """Stream pages into Nodes as they arrive so memory holds one page of raw answers at a time."""
        ec2 = self.client("ec2", region)
        paginator = ec2.get_paginator("describe_instances")
        pages = paginator.paginate(
            Filters=ec2_filters(self._flt, self._states), PaginationConfig={"PageSize": self._page_size}
        )
        count = 0

        def walk() -> None:
            nonlocal count
            for page in pages:
                count += 1
                for reservation in page.get("Reservations", ()):
                    for instance in reservation.get("Instances", ()):
                        node = node_from_ec2_instance(instance, region, self._flt)
                        if node is not None:
                            out.append(node)

        _guard(f"describe_instances in {region}", self._settings, walk)
        return count

    def _hyperpod_nodes(self, region: str, out: list[Node], warnings: list[str]) -> None:
        """list_clusters, list_cluster_nodes per wanted cluster, then (optionally) each node's address, and
        the cluster's tags (ListTags): HyperPod's nodes are not EC2 instances of the account, so the storage
        defaults the spec put on the cluster (module_utils/cluster/hyperpod_render.py) are read there."""
        sagemaker = self.client("sagemaker", region)
        clusters = _guard(
            f"sagemaker list_clusters in {region}",
            self._settings,
            lambda: [
                summary
                for page in sagemaker.get_paginator("list_clusters").paginate()
                for summary in page.get("ClusterSummaries", ())
            ],
        )
        wanted = self._flt.cluster_names
        for cluster in clusters:
            name = cluster["ClusterName"]
            if wanted and name not in wanted:
                continue
            summaries = _guard(
                f"sagemaker list_cluster_nodes {name} in {region}",
                self._settings,
                lambda name=name: [
                    node
                    for page in sagemaker.get_paginator("list_cluster_nodes").paginate(ClusterName=name)
                    for node in page.get("ClusterNodeSummaries", ())
                ],
            )
            details = self._node_details(sagemaker, name, region, summaries)
            cluster_id = hyperpod_cluster_id(cluster["ClusterArn"])
            tags = self._optional(
                f"sagemaker list_tags {name} in {region}",
                lambda arn=cluster["ClusterArn"]: [
                    tag
                    for page in sagemaker.get_paginator("list_tags").paginate(ResourceArn=arn)
                    for tag in page.get("Tags", ())
                ],
                warnings,
            )
            storage = storage_from_tags(tag_dict(tags))
            out.extend(
                node_from_hyperpod(
                    name,
                    cluster_id,
                    region,
                    summary,
                    detail,
                    self._hyperpod.head_groups,
                    self._hyperpod.login_groups,
                    storage,
                )
                for summary, detail in zip(summaries, details, strict=True)
            )

    def _node_details(
        self, sagemaker: Any, cluster: str, region: str, summaries: Sequence[Mapping[str, Any]]
    ) -> list[Mapping[str, Any] | None]:
        """describe_cluster_node is the only source of a HyperPod node's address; ask in parallel."""
        if not self._hyperpod.node_details or not summaries:
            return [None] * len(summaries)

        def one(summary: Mapping[str, Any]) -> Mapping[str, Any]:
            answer = _guard(
                f"sagemaker describe_cluster_node {cluster}/{summary['InstanceId']} in {region}",
                self._settings,
                lambda: sagemaker.describe_cluster_node(ClusterName=cluster, NodeId=summary["InstanceId"]),
            )
            return answer.get("NodeDetails", {})

        return _parallel(one, summaries)

    def type_facts(self, types: Iterable[str], region: str) -> tuple[dict[str, TypeFacts], list[str]]:
        """Ask describe_instance_types once per distinct type (100 per call); the catalog fills the gaps.

        The API wins over the catalog whenever it answers for a type; the catalog covers types the endpoint
        does not know and accounts whose policy denies ec2:DescribeInstanceTypes.
        """
        wanted = sorted(set(types))
        facts: dict[str, TypeFacts] = {}
        warnings: list[str] = []
        ec2 = self.client("ec2", region)
        for start in range(0, len(wanted), _DESCRIBE_TYPES_BATCH):
            batch = wanted[start : start + _DESCRIBE_TYPES_BATCH]
            try:
                facts.update(self._describe_types(ec2, batch))
            except ClientError as error:
                code = error.response.get("Error", {}).get("Code", "")
                if code in _DENIED:
                    warnings.append(
                        f"describe_instance_types denied ({code}); GPU/EFA facts from the instance catalog"
                    )
                    break
                if code != "InvalidInstanceType":
                    raise explain(error, f"describe_instance_types in {region}", self._settings) from error
                facts.update(self._describe_types_one_by_one(ec2, batch))
            except BotoCoreError as error:
                raise explain(error, f"describe_instance_types in {region}", self._settings) from error
        for name in wanted:
            fallback = None if name in facts else catalog_type_facts(name)
            if fallback is not None:
                facts[name] = fallback
        unknown = [name for name in wanted if name not in facts]
        if unknown:
            warnings.append(f"no GPU/EFA facts for instance types: {', '.join(unknown)}")
        return facts, warnings

    @staticmethod
    def _describe_types(ec2: Any, batch: Sequence[str]) -> dict[str, TypeFacts]:
        """One call for up to 100 types."""
        answer = ec2.describe_instance_types(InstanceTypes=list(batch))
        return {
            info["InstanceType"]: facts_from_instance_type(info) for info in answer.get("InstanceTypes", ())
        }

    def _describe_types_one_by_one(self, ec2: Any, batch: Sequence[str]) -> dict[str, TypeFacts]:
        """A batch with one unknown type fails whole; ask singly to keep the facts of the known ones."""
        facts: dict[str, TypeFacts] = {}
        for name in batch:
            try:
                facts.update(self._describe_types(ec2, [name]))
            except ClientError as error:
                if error.response.get("Error", {}).get("Code") != "InvalidInstanceType":
                    raise explain(error, "describe_instance_types", self._settings) from error
        return facts
