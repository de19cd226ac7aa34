"""Shared test helpers, one module per concern; every name is importable from here (``from tests.support
import run``), as tests have always imported them.

- collection: where the checkout is and how to run the collection from it (``run``, ``playbook``)
- stacks: the current stack, named in one place (``CURRENT_STACK_ID``, ``current_stack``)
- lab: SSH to the LXC lab's nodes, restoring what a test changed there, waiting for lab state
- moto: the AWS stand-in's server and the environment that points ansible-* commands at it
- downloads: real Debian packages and a local HTTP download host for the artifact tests
- markers: the component and role markers a test file gets from its place and name
- roles: role variables rendered in process as a play resolves them; the roles' input-validation tests
- nvidia: the NVIDIA roles' variables per OS, resolved by one ansible-playbook run
- kubernetes: rendered Kubernetes manifests checked offline against the API models and schemas

The lab's and moto's helpers are product code shared with the benchmarks (bench/support, which never
imports tests/); lab.py, moto.py and collection.py re-export them.
"""

from .collection import LOCALHOST_ARGS, REPO, VENV_BIN, ansible_env, playbook, run
from .downloads import published_sha256, real_debian_debs, serve_directory
from .kubernetes import KUBERNETES_SCHEMA_VERSION, api_model_problems, pytorchjob_problems
from .lab import (
    EFA_EXPORTER_UNITS,
    LAB_KEY,
    LAB_SSH,
    OWN_NODES_LOCK,
    LabNodeState,
    lab_node_state,
    lab_ssh,
    link_exists,
    on_lab_node,
    own_nodes_done,
    restore_lab_node,
    wait_for,
)
from .markers import (
    COMPONENT_ROLES,
    DIRECTORY_COMPONENTS,
    ROLE_COMPONENT,
    markers_for_test_file,
    role_of_test_file,
)
from .moto import MOTO_KEYS, MotoServer, free_port, moto_aws_env, start_moto
from .nvidia import (
    NVIDIA_FACT_KEYS,
    NVIDIA_HOSTS,
    NVIDIA_RESOLVED,
    NVIDIA_ROLES,
    nvidia_inventory,
    nvidia_role_refusal,
    resolve_nvidia_roles,
)
from .roles import (
    CLUSTER_NODE,
    CLUSTER_NODE_VARS,
    OS_FACTS,
    WILDCARD_LISTENER,
    assert_task_failure,
    case_params,
    host_facts,
    init_ansible_plugins,
    input_validation_tests,
    no_wildcard_listener,
    render_role_template,
    resolve_role_vars,
    role_data_templar,
    role_task,
    role_templar,
    role_validation_failure,
    template_value,
    trust_role_data,
)
from .stacks import (
    CURRENT_STACK_FILE,
    CURRENT_STACK_ID,
    SHIPPED_STACK_IDS,
    STACKS_DIR,
    current_stack,
    read_current_stack_id,
    stack_artifact,
)

__all__ = [
    "CLUSTER_NODE",
    "CLUSTER_NODE_VARS",
    "COMPONENT_ROLES",
    "CURRENT_STACK_FILE",
    "CURRENT_STACK_ID",
    "DIRECTORY_COMPONENTS",
    "EFA_EXPORTER_UNITS",
    "KUBERNETES_SCHEMA_VERSION",
    "LAB_KEY",
    "LAB_SSH",
    "LOCALHOST_ARGS",
    "MOTO_KEYS",
    "NVIDIA_FACT_KEYS",
    "NVIDIA_HOSTS",
    "NVIDIA_RESOLVED",
    "NVIDIA_ROLES",
    "OS_FACTS",
    "OWN_NODES_LOCK",
    "REPO",
    "ROLE_COMPONENT",
    "SHIPPED_STACK_IDS",
    "STACKS_DIR",
    "VENV_BIN",
    "WILDCARD_LISTENER",
    "LabNodeState",
    "MotoServer",
    "ansible_env",
    "api_model_problems",
    "assert_task_failure",
    "case_params",
    "current_stack",
    "free_port",
    "host_facts",
    "init_ansible_plugins",
    "input_validation_tests",
    "lab_node_state",
    "lab_ssh",
    "link_exists",
    "markers_for_test_file",
    "moto_aws_env",
    "no_wildcard_listener",
    "nvidia_inventory",
    "nvidia_role_refusal",
    "on_lab_node",
    "own_nodes_done",
    "playbook",
    "published_sha256",
    "pytorchjob_problems",
    "read_current_stack_id",
    "real_debian_debs",
    "render_role_template",
    "resolve_nvidia_roles",
    "resolve_role_vars",
    "restore_lab_node",
    "role_data_templar",
    "role_of_test_file",
    "role_task",
    "role_templar",
    "role_validation_failure",
    "run",
    "serve_directory",
    "stack_artifact",
    "start_moto",
    "template_value",
    "trust_role_data",
    "wait_for",
]
