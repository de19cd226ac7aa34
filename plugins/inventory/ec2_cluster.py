# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Inventory of training clusters on AWS, grouped by cluster, role and queue (trainstack.cluster.ec2_cluster).

The plugin is deliberately thin: option handling, the cache round trip and handing a finished plan to
InventoryData. What belongs where is decided in module_utils/inventory/ec2_cluster_model.py; AWS is read in
module_utils/inventory/ec2_cluster_aws.py.
"""

from __future__ import annotations

DOCUMENTATION = r"""
name: ec2_cluster
short_description: Training clusters on AWS (ParallelCluster, PCS, HyperPod, EKS, tagged fleets) as inventory
description:
  - Finds the nodes of AWS ParallelCluster, AWS PCS, SageMaker HyperPod and Amazon EKS clusters, and of plain
    EC2 fleets marked by a tag of your choice, and groups them by cluster, node role (head, login, compute),
    queue or instance group, instance type, availability zone and region.
  - ParallelCluster nodes are found by the tags C(parallelcluster:cluster-name), C(parallelcluster:node-type)
    (C(HeadNode), C(LoginNode), C(Compute)), C(parallelcluster:queue-name) and
    C(parallelcluster:compute-resource-name).
  - AWS PCS nodes are found by the EC2 tags C(aws:pcs:cluster-id) and C(aws:pcs:compute-node-group-id); the
    cluster id is the cluster name and the compute node group id is the queue.
  - Amazon EKS nodes (kind V(eks)) are found by the EC2 tags C(eks:cluster-name) and C(eks:nodegroup-name)
    that EKS writes on the instances of a managed node group; every one is a compute node, its node group the
    queue.
  - "C(cluster_storage) (where a cluster made from a cluster spec keeps training data and checkpoints:
    C(data_dir), C(checkpoint_dir)) comes from the tags C(trainstack:data-dir) and
    C(trainstack:checkpoint-dir): on the instances (ParallelCluster, EKS, tagged fleets, and PCS nodes whose
    launch template writes them); for PCS nodes without them, from the PCS cluster's tags (C(list_clusters),
    C(list_tags_for_resource)); for HyperPod, from the cluster's tags (SageMaker C(list_tags)). A tag read
    that fails or is denied is a warning and leaves C(cluster_storage) unset."
  - HyperPod nodes are read through SageMaker C(list_clusters), C(list_cluster_nodes) and, when
    O(hyperpod_node_details) is on, C(describe_cluster_node). They get C(ansible_ssh_common_args) with an
    ssh C(ProxyCommand) through SSM (target C(sagemaker-cluster:<cluster-id>_<instance-group>-<instance-id>)).
  - Each region is read with one paginated C(describe_instances) call carrying server-side tag filters;
    regions are read in parallel. Instance type facts (GPU count, model and memory, EFA interfaces) come from
    C(describe_instance_types), asked once per type. The API answer wins; the collection's instance catalog
    (C(stacks/instance_types.yml)) is used only for a type the API does not return or when the call is denied.
  - Groups and host variables are built in Python, not by templating per host; O(compose), O(groups) and
    O(keyed_groups) are applied only when set.
  - The configuration file name must end with C(ec2_cluster.yml) or C(ec2_cluster.yaml).
  - "Host variables: C(ansible_host), C(cluster_name), C(cluster_kind), C(cluster_node_role),
    C(cluster_queue), C(cluster_compute_resource) (ParallelCluster), C(cluster_id) (PCS, HyperPod),
    C(cluster_slurm_node_name) (where it can be derived), C(ec2_instance_id), C(ec2_instance_type),
    C(ec2_region),
    C(ec2_availability_zone), C(ec2_private_ip_address), C(ec2_private_dns_name), C(ec2_gpu_count),
    C(ec2_gpu_model), C(ec2_gpu_memory_mib) (per GPU), C(ec2_efa_interfaces) (maximum EFA interfaces),
    C(ec2_tags) (with O(include_tags)), C(cluster_storage), C(hyperpod_ssm_target) and
    C(ansible_ssh_common_args) (HyperPod)."
  - Facts shared by a whole plugin group (instance type facts on C(type_*), cluster name, kind and id on
    C(cluster_<name>), role on C(cluster_<name>_<role>), queue, zone, region) are set once as variables of
    that group rather than on every host; plays and C(ansible-inventory --list) see them as host variables
    as usual, C(--export) shows where they live. A value that differs inside one group stays on the hosts.
  - "Groups (after O(group_prefix)): C(kind_<kind>), C(cluster_<name>) with children C(cluster_<name>_<role>)
    and C(cluster_<name>_queue_<queue>), C(role_<role>), C(type_<instance type>), C(az_<zone>),
    C(region_<region>); characters other than letters, digits and C(_) become C(_)."
version_added: 0.1.0
author:
  - trainstack maintainers (@trainstack)
requirements:
  - boto3
  - botocore
extends_documentation_fragment:
  - ansible.builtin.constructed
  - ansible.builtin.inventory_cache
options:
  plugin:
    description: Marks the file as a configuration of this plugin.
    required: true
    type: str
    choices: [trainstack.cluster.ec2_cluster]
  regions:
    description:
      - Regions to read, in parallel.
      - When empty, the region of the AWS profile or environment (C(AWS_REGION), C(AWS_DEFAULT_REGION)) is
        used; with none of these the plugin stops with an error naming this option.
    type: list
    elements: str
    default: []
  cluster_names:
    description:
      - Only these clusters (ParallelCluster, EKS and tagged names, PCS cluster ids, HyperPod cluster names).
      - A name that is not found in any region is an error, so a typo does not give an empty inventory.
      - Empty means every cluster of the selected kinds.
    type: list
    elements: str
    default: []
  cluster_kinds:
    description:
      - Which sources to read. V(tagged) needs O(tagged_cluster_tag).
    type: list
    elements: str
    choices: [parallelcluster, pcs, hyperpod, eks, tagged]
    default: [parallelcluster, pcs, hyperpod]
  tagged_cluster_tag:
    description: Tag key whose value names the cluster of a plain EC2 fleet (kind V(tagged)).
    type: str
  tagged_role_tag:
    description:
      - Tag key whose value gives the role of a tagged node; V(head), V(headnode), V(controller) mean head,
        V(login), V(loginnode) mean login, anything else (or no tag) means compute.
    type: str
  tagged_queue_tag:
    description: Tag key whose value gives the queue of a tagged node.
    type: str
  pcs_login_node_groups:
    description: PCS compute node group ids that serve as login nodes; nodes of other groups are compute.
    type: list
    elements: str
    default: []
  pcs_cluster_tags:
    description:
      - Read the tags of each PCS cluster whose nodes carry no C(trainstack:data-dir) or
        C(trainstack:checkpoint-dir) of their own, for their C(cluster_storage) (one C(list_clusters) per
        region and one C(list_tags_for_resource) per cluster).
      - Turn it off for an endpoint that has no PCS API, where each read would fail after its retries.
    type: bool
    default: true
  hyperpod_head_groups:
    description: HyperPod instance group names that hold the Slurm controller (role head).
    type: list
    elements: str
    default: [controller-machine, controller]
  hyperpod_login_groups:
    description: HyperPod instance group names that hold login nodes (role login).
    type: list
    elements: str
    default: [login-group, login]
  hyperpod_node_details:
    description:
      - Call C(describe_cluster_node) for every HyperPod node to learn its private address, host name and
        zone (one call per node, 8 at a time). Without it HyperPod hosts are named by instance id and
        reached only through SSM.
    type: bool
    default: true
  hyperpod_ssm:
    description: Give HyperPod hosts an ssh C(ProxyCommand) through C(aws ssm start-session).
    type: bool
    default: true
  slurm_node_name_tag:
    description:
      - EC2 tag key holding the Slurm node name, for ParallelCluster, PCS and tagged nodes whose launch
        templates write one. Neither service exposes Slurm node names through EC2 by itself.
      - HyperPod node names are derived from the node host name (C(ip-10-1-2-3)), which is how HyperPod names
        its Slurm nodes.
    type: str
  instance_states:
    description: Instance states to include (server-side filter).
    type: list
    elements: str
    default: [pending, running]
  hostnames:
    description:
      - Preference order for the inventory host name; the first value a node has wins, the instance id
        closes the list.
    type: list
    elements: str
    choices: [private-dns-name, private-ip-address, instance-id, slurm-node-name]
    default: [private-dns-name, private-ip-address, instance-id]
  group_prefix:
    description: Prefix for every group this plugin makes (not for O(groups) and O(keyed_groups)).
    type: str
    default: ""
  include_tags:
    description: Add all EC2 tags as the C(ec2_tags) dictionary (larger inventory, slower cached runs).
    type: bool
    default: false
  page_size:
    description: C(MaxResults) of each C(describe_instances) page.
    type: int
    default: 1000
  access_key:
    description: AWS access key id; otherwise the usual boto3 sources (environment, profile, instance role).
    type: str
    aliases: [aws_access_key_id, aws_access_key]
    env:
      - name: AWS_ACCESS_KEY_ID
  secret_key:
    description: AWS secret access key.
    type: str
    aliases: [aws_secret_access_key, aws_secret_key]
    env:
      - name: AWS_SECRET_ACCESS_KEY
  session_token:
    description: AWS session token for temporary credentials.
    type: str
    aliases: [aws_session_token]
    env:
      - name: AWS_SESSION_TOKEN
  profile:
    description: Named profile from the AWS shared configuration; also passed to the SSM ProxyCommand.
    type: str
    aliases: [aws_profile]
    env:
      - name: AWS_PROFILE
  assume_role_arn:
    description: Role to assume (C(sts:AssumeRole)) with the credentials above before reading anything.
    type: str
  assume_role_session_name:
    description: Session name used with O(assume_role_arn).
    type: str
    default: trainstack-ec2-cluster-inventory
  endpoint_url:
    description:
      - One endpoint for every AWS service the plugin calls (EC2, SageMaker, PCS, STS), for moto, LocalStack
        or a VPC endpoint proxy.
    type: str
    aliases: [aws_endpoint_url]
  connect_timeout:
    description:
      - Seconds to wait for a TCP/TLS connection to an AWS endpoint, per attempt.
      - A call that reaches this limit is not retried (see O(max_attempts)).
    type: int
    default: 30
  read_timeout:
    description:
      - Seconds to wait for an answer from an AWS endpoint once connected, per attempt.
      - A call that reaches this limit is not retried, so an endpoint that accepts connections and never
        answers stops the inventory after about this many seconds, with an error naming the endpoint.
    type: int
    default: 30
  max_attempts:
    description:
      - Attempts per AWS call, the first one included (botocore's C(standard) retry mode; V(1) means no
        retry).
      - Retried, with exponential backoff of up to 20 seconds between attempts, are throttling errors,
        transient server errors (HTTP 500, 502, 503, 504) and connections that are refused or reset.
      - Not retried are calls that reached O(connect_timeout) or O(read_timeout); the timeout is already
        the patience chosen, and repeating it would multiply the wait.
      - Every page of a paginated read is one call with its own attempts.
    type: int
    default: 3
  allow_empty:
    description:
      - Accept an inventory in which no node was found.
      - By default finding no node at all is an error naming the regions and kinds read, so that a wrong
        region, account or tag does not give a playbook that silently does nothing.
    type: bool
    default: false
"""

EXAMPLES = r"""
---
# inventories/aws/training.ec2_cluster.yml: every ParallelCluster and HyperPod cluster of two regions.
plugin: trainstack.cluster.ec2_cluster
regions: [us-east-1, us-west-2]
cluster_kinds: [parallelcluster, hyperpod]

---
# One cluster by name, cached for an hour in JSON files, with an extra group of the 8-GPU nodes.
plugin: trainstack.cluster.ec2_cluster
regions: [us-east-1]
cluster_names: [llm-pretrain]
cache: true
cache_plugin: ansible.builtin.jsonfile
cache_connection: ~/.cache/trainstack-inventory
cache_timeout: 3600
groups:
  gpu8: ec2_gpu_count == 8

---
# A plain EC2 fleet marked by tags, reached by private DNS name, through an assumed role.
plugin: trainstack.cluster.ec2_cluster
regions: [eu-west-1]
cluster_kinds: [tagged]
tagged_cluster_tag: training-cluster
tagged_role_tag: training-role
tagged_queue_tag: training-partition
assume_role_arn: arn:aws:iam::123456789012:role/inventory-reader
keyed_groups:
  - key: ec2_gpu_model | default('cpu')
    prefix: gpu
"""

import gc
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from ansible import constants
from ansible.errors import AnsibleParserError
from ansible.plugins.inventory import BaseInventoryPlugin, Cacheable, Constructable
from ansible_collections.trainstack.cluster.plugins.module_utils.inventory.ec2_cluster_model import (
    Ec2ClusterError,
    Node,
    Plan,
    SourceFilter,
    TypeFacts,
    build_plan,
    pack_records,
    unpack_records,
)


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while the inventory is read and built, back as it was after.

    Why: reading and building the inventory allocates a few container objects per host and frees almost
    none, which is the pattern that makes the collector scan every object built so far again and again
    (measured: 0.8 s of the 6.1 s of CPU of a cached `ansible all --list-hosts` at 45,000 hosts). What is
    built here holds no reference cycles, so nothing is left for the collector to free meanwhile.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class InventoryModule(BaseInventoryPlugin, Constructable, Cacheable):
    """Reads or restores cluster nodes, then adds one prepared plan to the inventory."""

    NAME = "trainstack.cluster.ec2_cluster"

    def verify_file(self, path: str) -> bool:
        """Claim only files named for this plugin, so other YAML inventories are left to their plugins."""
        return super().verify_file(path) and path.endswith(("ec2_cluster.yml", "ec2_cluster.yaml"))

    def parse(self, inventory: Any, loader: Any, path: str, cache: bool = True) -> None:
        """Cached path: records from the cache plugin; otherwise AWS. Either way the same plan builder."""
        super().parse(inventory, loader, path, cache)
        config = self._read_config_data(path)
        with collector_paused():
            try:
                self._reject_unknown_options(config)
                nodes, facts = self._records(path, cache)
                self._check_found(nodes)
                plan = build_plan(
                    nodes,
                    facts,
                    self.get_option("hostnames"),
                    prefix=self.get_option("group_prefix"),
                    ssm=self.get_option("hyperpod_ssm"),
                    ssm_profile=self.get_option("profile"),
                )
            except Ec2ClusterError as error:
                # from None: the sentence already carries what the AWS error said, and Ansible would print
                # every link of the chain after it, repeating it.
                raise AnsibleParserError(f"{self.NAME} ({path}): {error}") from None
            for host in plan.duplicates:
                self.display.warning(f"{self.NAME}: host name {host} appears twice; kept the first node")
            self._apply(plan)

    def _reject_unknown_options(self, config: Mapping[str, Any]) -> None:
        """Ansible ignores unknown keys in inventory files; a misspelt option would then be silently lost."""
        definitions = constants.config.get_configuration_definitions("inventory", self._load_name) or {}
        known = set(definitions)
        for definition in definitions.values():
            known.update(definition.get("aliases") or ())
        unknown = sorted(str(key) for key in config if key not in known)
        if unknown:
            raise Ec2ClusterError(f"unknown option(s): {', '.join(unknown)}")

    def _records(self, path: str, cache: bool) -> tuple[list[Node], dict[str, TypeFacts]]:
        """The Cacheable round trip: read when allowed, fetch on a miss, write back what was fetched."""
        use_cache = bool(self.get_option("cache"))
        key = self.get_cache_key(path)
        if use_cache and cache:
            try:
                restored = unpack_records(self._cache[key])
            except KeyError:
                restored = None
            if restored is not None:
                self.display.vvv(f"{self.NAME}: {len(restored[0])} nodes from cache {key}")
                return restored
        nodes, facts = self._fetch()
        # Checked before caching too: a result that is an error must not be served from the cache later.
        self._check_found(nodes)
        if use_cache:
            self._cache[key] = pack_records(nodes, facts)
        return nodes, facts

    def _source_filter(self) -> SourceFilter:
        """Validate the kind options together, before any AWS call, and name the option at fault."""
        kinds = tuple(self.get_option("cluster_kinds"))
        if not kinds:
            raise Ec2ClusterError(
                "cluster_kinds: choose at least one of parallelcluster, pcs, hyperpod, eks, tagged"
            )
        tagged_tag = self.get_option("tagged_cluster_tag")
        if "tagged" in kinds and not tagged_tag:
            raise Ec2ClusterError("tagged_cluster_tag: required when cluster_kinds includes 'tagged'")
        page_size = self.get_option("page_size")
        if not 5 <= page_size <= 1000:
            raise Ec2ClusterError(f"page_size: must be between 5 and 1000, got {page_size}")
        return SourceFilter(
            kinds=kinds,
            cluster_names=frozenset(self.get_option("cluster_names")),
            tagged_cluster_tag=tagged_tag,
            tagged_role_tag=self.get_option("tagged_role_tag"),
            tagged_queue_tag=self.get_option("tagged_queue_tag"),
            pcs_login_node_groups=frozenset(self.get_option("pcs_login_node_groups")),
            slurm_node_name_tag=self.get_option("slurm_node_name_tag"),
            include_tags=self.get_option("include_tags"),
        )

    def _aws_settings(self, aws: Any) -> Any:
        """Option values as one frozen object handed to the AWS layer, checked before any AWS call."""
        for name in ("connect_timeout", "read_timeout", "max_attempts"):
            value = self.get_option(name)
            if value < 1:
                raise Ec2ClusterError(f"{name}: must be 1 or more, got {value}")
        return aws.AwsSettings(
            access_key=self.get_option("access_key"),
            secret_key=self.get_option("secret_key"),
            session_token=self.get_option("session_token"),
            profile=self.get_option("profile"),
            assume_role_arn=self.get_option("assume_role_arn"),
            assume_role_session_name=self.get_option("assume_role_session_name"),
            endpoint_url=self.get_option("endpoint_url"),
            connect_timeout=self.get_option("connect_timeout"),
            read_timeout=self.get_option("read_timeout"),
            max_attempts=self.get_option("max_attempts"),
        )

    def _regions(self, session: Any) -> list[str]:
        """Explicit regions, else the session's default region, else a clear error."""
        # str(): option values carry ansible-core's trust/origin tags; rows built from them would be cached
        # as tagged objects, whose decoding dominates the cached path.
        regions = [str(region) for region in dict.fromkeys(self.get_option("regions"))]
        if regions:
            return regions
        if session is not None and session.region_name:
            return [str(session.region_name)]
        raise Ec2ClusterError(
            "regions: no region given and none configured in the AWS profile or environment"
        )

    def _fetch(self) -> tuple[list[Node], dict[str, TypeFacts]]:
        """Cold path: all regions in parallel, then one describe_instance_types pass for the types seen."""
        flt = self._source_filter()
        # Imported here, not at module load: boto3 costs about 0.3 s to import and the cached path
        # never needs it, which matters for the `ansible all --list-hosts` target of 3 s.
        from ansible_collections.trainstack.cluster.plugins.module_utils.inventory import (
            ec2_cluster_aws as aws,
        )

        aws.require_boto3()
        settings = self._aws_settings(aws)
        first = self.get_option("regions")[0] if self.get_option("regions") else None
        session = aws.make_session(settings, first or "us-east-1")
        regions = self._regions(session)
        fetcher = aws.Fetcher(
            session,
            settings,
            flt,
            self.get_option("instance_states"),
            self.get_option("page_size"),
            aws.HyperPodSettings(
                head_groups=frozenset(self.get_option("hyperpod_head_groups")),
                login_groups=frozenset(self.get_option("hyperpod_login_groups")),
                node_details=self.get_option("hyperpod_node_details"),
            ),
            pcs_tags=self.get_option("pcs_cluster_tags"),
        )
        result = fetcher.fetch(regions)
        for region, pages in result.pages.items():
            self.display.vvv(f"{self.NAME}: {region}: describe_instances pages={pages}")
        facts, warnings = fetcher.type_facts((node.instance_type for node in result.nodes), regions[0])
        for warning in result.warnings + warnings:
            self.display.warning(f"{self.NAME}: {warning}")
        return result.nodes, facts

    def _check_found(self, nodes: list[Node]) -> None:
        """No node at all, or a requested cluster that matched nothing, is an error: an empty group or
        inventory would hide the typo and let a playbook do nothing and succeed."""
        kinds = ", ".join(self.get_option("cluster_kinds"))
        regions = ", ".join(self.get_option("regions")) or "the default region of the AWS profile"
        wanted = self.get_option("cluster_names")
        found = {node.cluster_name for node in nodes}
        missing = [name for name in wanted if name not in found]
        if missing:
            raise Ec2ClusterError(
                f"cluster_names: no cluster named {', '.join(missing)} among kinds {kinds} "
                f"in regions {regions}"
            )
        if not nodes and not self.get_option("allow_empty"):
            raise Ec2ClusterError(
                f"no node found (cluster_kinds: {kinds}; regions: {regions}; instance_states: "
                f"{', '.join(self.get_option('instance_states'))}); check these options and the AWS account "
                "of the credentials, or set allow_empty: true"
            )

    def _apply(self, plan: Plan) -> None:
        """Hand the plan to InventoryData: groups once, hosts once, then memberships and variables."""
        inventory = self.inventory
        for group in plan.groups:
            inventory.add_group(group)
        for parent, kids in plan.children.items():
            for kid in kids:
                inventory.add_child(parent, kid)
        for group, groupvars in plan.groupvars.items():
            for name, value in groupvars.items():
                inventory.set_variable(group, name, value)
        for host, hostvars in plan.host_only.items():
            inventory.add_host(host)
            for name, value in hostvars.items():
                inventory.set_variable(host, name, value)
        for group, hosts in plan.groups.items():
            for host in hosts:
                inventory.add_child(group, host)
        self._construct(plan.hostvars)

    def _construct(self, hostvars: Mapping[str, Mapping[str, Any]]) -> None:
        """compose/groups/keyed_groups template per host, so they run only when the user asked for them."""
        compose = self.get_option("compose")
        groups = self.get_option("groups")
        keyed = self.get_option("keyed_groups")
        if not (compose or groups or keyed):
            return
        strict = self.get_option("strict")
        for host, variables in hostvars.items():
            # `variables` is the host's complete set (group-held facts included), which get_vars() of the
            # host would not give: the shared facts live on groups.
            self._set_composite_vars(compose, variables, host, strict=strict)
            merged = {**variables, **self.inventory.get_host(host).get_vars()}
            self._add_host_to_composed_groups(groups, merged, host, strict=strict, fetch_hostvars=False)
            self._add_host_to_keyed_groups(keyed, merged, host, strict=strict, fetch_hostvars=False)
