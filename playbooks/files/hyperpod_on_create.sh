#!/usr/bin/env bash
# trainstack on SageMaker HyperPod (Slurm orchestrator): the OnCreate lifecycle script. HyperPod copies the
# lifecycle bundle (this script as on_create.sh, provisioning_parameters.json and node-bundle.tar.gz) from S3
# onto every node and runs this script there as root, on all nodes at about the same time:
#
#   on_create.sh [--resource-config FILE] [--provisioning-parameters FILE] [--bundle FILE] [--work-dir DIR]
#                [--check-only] [-e KEY=VALUE ...]
#
# It reads HyperPod's /opt/ml/config/resource_config.json (TRAINSTACK_HYPERPOD_RESOURCE_CONFIG overrides the
# path) and the bundle's provisioning_parameters.json, finds this node by its own addresses (CustomerIpAddress)
# and so its role: controller (controller_group), login (login_group) or worker (worker_groups, with its
# partition). Every input is checked before anything is changed. It then installs a pinned ansible-core and
# the bundle's collections (with node_bootstrap.sh's functions, read from the bundle) and runs
# trainstack.cluster.hyperpod_node on this node with a local connection. --check-only stops after the checks
# and prints the plan (this node's role and the cluster the playbook gets), changing nothing. A failure prints one line on stderr
# naming the step and exits non-zero, which makes HyperPod fail the node's creation.
set -euo pipefail

PROG="trainstack-hyperpod"
readonly DEFAULT_RESOURCE_CONFIG="/opt/ml/config/resource_config.json"

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
resource_config="${TRAINSTACK_HYPERPOD_RESOURCE_CONFIG:-$DEFAULT_RESOURCE_CONFIG}"
parameters="$here/provisioning_parameters.json"
bundle_file="$here/node-bundle.tar.gz"
hp_work_dir="/opt/trainstack/hyperpod"
hp_extra_vars=()
check_only=false
scratch=""

# Until node_bootstrap.sh's die is loaded from the bundle.
early_die() {
  printf '%s: step %s failed: %s\n' "$PROG" "$1" "$2" >&2
  exit 1
}

cleanup() {
  if [[ -n "$scratch" ]]; then rm -rf "$scratch"; fi
}
trap cleanup EXIT

usage() {
  printf 'usage: %s [--resource-config FILE] [--provisioning-parameters FILE] [--bundle FILE]' "$0"
  printf ' [--work-dir DIR] [--check-only] [-e KEY=VALUE]...\n'
}

parse_args() {
  while (($# > 0)); do
    case "$1" in
      --resource-config) (($# > 1)) || early_die arguments "--resource-config needs a file"; resource_config="$2"; shift ;;
      --provisioning-parameters) (($# > 1)) || early_die arguments "--provisioning-parameters needs a file"; parameters="$2"; shift ;;
      --bundle) (($# > 1)) || early_die arguments "--bundle needs a file"; bundle_file="$2"; shift ;;
      --work-dir) (($# > 1)) || early_die arguments "--work-dir needs a directory"; hp_work_dir="$2"; shift ;;
      -e) (($# > 1)) || early_die arguments "-e needs KEY=VALUE"; hp_extra_vars+=(-e "$2"); shift ;;
      --check-only) check_only=true ;;
      -h | --help) usage; exit 0 ;;
      *) early_die arguments "unknown argument '$1'" ;;
    esac
    shift
  done
  [[ "$hp_work_dir" == /* ]] || early_die arguments "--work-dir must be an absolute path, got '${hp_work_dir}'"
  [[ -r "$bundle_file" ]] || early_die arguments "the node bundle ${bundle_file} is missing (build it with trainstack.cluster.node_bundle)"
}

# node_bootstrap.sh, as packed in the bundle's collection, gives the logging and installation steps; one copy
# of that code serves ParallelCluster and HyperPod nodes.
load_bootstrap_functions() {
  scratch="$(mktemp -d)"
  tar -xzOf "$bundle_file" --wildcards '*trainstack-cluster-*.tar.gz' 2>/dev/null \
    | tar -xzOf - --wildcards '*playbooks/files/node_bootstrap.sh' >"$scratch/node_bootstrap.sh" 2>/dev/null \
    || early_die bundle "${bundle_file} holds no trainstack-cluster-*.tar.gz with playbooks/files/node_bootstrap.sh"
  # shellcheck source=node_bootstrap.sh
  source "$scratch/node_bootstrap.sh"
  work_dir="$hp_work_dir"
  # shellcheck disable=SC2034 # read by node_bootstrap.sh's functions, sourced above
  bundle="$bundle_file"
}

# This node's IPv4 addresses, one per line: what resource_config.json's CustomerIpAddress is matched against.
own_addresses() {
  if command -v ip >/dev/null; then
    ip -o -4 addr show | awk '{ split($4, a, "/"); print a[1] }'
  else
    hostname -I | tr ' ' '\n'
  fi
}

# Reads both files, checks them and finds this node: prints the plan (JSON, the playbook's extra vars) on
# stdout, or one line naming the file and the key that is wrong on stderr and exits 2.
#   plan_inputs RESOURCE_CONFIG PROVISIONING_PARAMETERS HOSTNAME ADDRESS...
plan_inputs() {
  python3 - "$@" <<'PY'
import ipaddress, json, re, sys

resource_path, params_path, hostname = sys.argv[1:4]
addresses = set(sys.argv[4:])


def fail(message):
    print(message, file=sys.stderr)
    sys.exit(2)


def load(path, label):
    try:
        with open(path) as handle:
            data = json.load(handle)
    except OSError as err:
        fail(f"cannot read {label} {path}: {err.strerror}")
    except ValueError as err:
        fail(f"{label} {path} is not JSON: {err}")
    if not isinstance(data, dict):
        fail(f"{label} {path} must hold a JSON object")
    return data


resource = load(resource_path, "resource_config.json")
params = load(params_path, "provisioning_parameters.json")
rc = f"resource_config.json ({resource_path})"
pp = f"provisioning_parameters.json ({params_path})"

groups = resource.get("InstanceGroups")
if not isinstance(groups, list) or not groups:
    fail(f"{rc}: InstanceGroups must be a non-empty list")
by_name = {}
for index, group in enumerate(groups):
    name = group.get("Name") if isinstance(group, dict) else None
    if not isinstance(name, str) or not name:
        fail(f"{rc}: InstanceGroups[{index}].Name must be a non-empty string")
    instances = group.get("Instances")
    if not isinstance(instances, list):
        fail(f"{rc}: InstanceGroups[{index}] ({name}).Instances must be a list")
    for number, instance in enumerate(instances):
        address = instance.get("CustomerIpAddress") if isinstance(instance, dict) else None
        try:
            ipaddress.IPv4Address(address)
        except (ipaddress.AddressValueError, ValueError):
            fail(f"{rc}: InstanceGroups[{index}] ({name}).Instances[{number}].CustomerIpAddress must be an IPv4 address (got {address!r})")
    by_name[name] = group

known = ", ".join(sorted(by_name))
manager = params.get("workload_manager")
if manager != "slurm":
    fail(f"{pp}: workload_manager must be slurm (got {manager!r})")
controller_group = params.get("controller_group")
if not isinstance(controller_group, str) or not controller_group:
    fail(f"{pp}: controller_group is required (the instance group of the Slurm controller; groups: {known})")
if controller_group not in by_name:
    fail(f"{pp}: controller_group {controller_group!r} is not an instance group of {rc} (groups: {known})")
controllers = len(by_name[controller_group]["Instances"])
if controllers != 1:
    fail(f"{pp}: controller_group {controller_group!r} must hold exactly one instance (it holds {controllers})")
login_group = params.get("login_group") or ""
if login_group and login_group not in by_name:
    fail(f"{pp}: login_group {login_group!r} is not an instance group of {rc} (groups: {known})")
workers = params.get("worker_groups")
if not isinstance(workers, list) or not workers:
    fail(f"{pp}: worker_groups must be a non-empty list of {{instance_group_name, partition_name}}")
roles = {controller_group: ("controller", "")}
if login_group:
    roles[login_group] = ("login", "")
partitions = []
for index, worker in enumerate(workers):
    group = worker.get("instance_group_name") if isinstance(worker, dict) else None
    partition = worker.get("partition_name") if isinstance(worker, dict) else None
    if group not in by_name:
        fail(f"{pp}: worker_groups[{index}].instance_group_name {group!r} is not an instance group of {rc} (groups: {known})")
    if group in roles:
        fail(f"{pp}: worker_groups[{index}].instance_group_name {group!r} is already the {roles[group][0]} group")
    if not isinstance(partition, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}", partition):
        fail(f"{pp}: worker_groups[{index}].partition_name must be letters, digits, - and _ (got {partition!r})")
    roles[group] = ("worker", partition)
    if partition not in [p["name"] for p in partitions]:
        partitions.append({"name": partition, "groups": []})
    next(p for p in partitions if p["name"] == partition)["groups"].append(group)

# Where the nodes read the cluster's munge key: an SSM SecureString (hyperpod_cluster writes it) in a region.
key_parameter = params.get("munge_key_ssm_parameter") or ""
region = params.get("aws_region") or ""
if key_parameter and not (isinstance(key_parameter, str) and re.fullmatch(r"/[A-Za-z0-9_./-]{1,1010}", key_parameter)):
    fail(f"{pp}: munge_key_ssm_parameter must be an SSM parameter name starting with / (got {key_parameter!r})")
if key_parameter and not (isinstance(region, str) and re.fullmatch(r"[a-z]{2}(-[a-z]+)+-[0-9]", region)):
    fail(f"{pp}: aws_region must be the AWS region of munge_key_ssm_parameter, such as us-east-1 (got {region!r})")

nodes = []
for group in groups:
    role, partition = roles.get(group["Name"], ("", ""))
    for instance in group["Instances"]:
        nodes.append({"group": group["Name"], "role": role, "partition": partition,
                      "instance_type": group.get("InstanceType", ""),
                      "instance_name": instance.get("InstanceName", ""),
                      "address": instance["CustomerIpAddress"]})
mine = [n for n in nodes if n["address"] in addresses] or [n for n in nodes if n["instance_name"] == hostname]
if not mine:
    fail(f"{rc}: no instance has a CustomerIpAddress of this node ({', '.join(sorted(addresses)) or 'no address'}) or the InstanceName {hostname!r}")
node = mine[0]
if not node["role"]:
    own_group = node["group"]
    fail(f"{pp}: the instance group of this node, {own_group!r}, is not named by controller_group, login_group or worker_groups")
cluster = str((resource.get("ClusterConfig") or {}).get("ClusterName") or "hyperpod").lower()
cluster = re.sub(r"[^a-z0-9_-]", "-", cluster)
cluster = (cluster if cluster[0].isalpha() else "hp-" + cluster)[:40]
print(json.dumps({
    "hyperpod_role": node["role"],
    "hyperpod_group": node["group"],
    "hyperpod_partition": node["partition"],
    "hyperpod_address": node["address"],
    "hyperpod_instance_type": node["instance_type"],
    "hyperpod_cluster_name": cluster,
    "hyperpod_nodes": [n for n in nodes if n["role"]],
    "hyperpod_partitions": partitions,
    "hyperpod_fsx": {"dns_name": params.get("fsx_dns_name") or "", "mount_name": params.get("fsx_mountname") or ""},
    "hyperpod_munge_key_parameter": key_parameter,
    "hyperpod_aws_region": region,
}, indent=1))
PY
}

make_plan() {
  step="plan"
  local out="$1" message
  command -v python3 >/dev/null || die "python3 is not installed"
  # shellcheck disable=SC2046 # one argument per address
  if ! message="$(plan_inputs "$resource_config" "$parameters" "$(hostname -s)" $(own_addresses) 2>&1 >"$out.new")"; then
    rm -f "$out.new"
    die "$message"
  fi
  mv "$out.new" "$out"
  log "$(python3 -c 'import json,sys; p = json.load(open(sys.argv[1]))
partition = " (partition " + p["hyperpod_partition"] + ")" if p["hyperpod_partition"] else ""
print("this node is the " + p["hyperpod_role"] + " of instance group " + p["hyperpod_group"] + partition
      + " at " + p["hyperpod_address"] + " in cluster " + p["hyperpod_cluster_name"])' "$out")"
}

# The bundle's sha256 names what is installed (install_bundle skips a bundle already installed); a sha256
# file beside the bundle, when there is one, must match it.
bundle_digest() {
  step="verify"
  sha256="$(sha256sum "$bundle_file" | cut -d' ' -f1)"
  if [[ -r "$bundle_file.sha256" ]]; then
    local expected
    expected="$(cut -d' ' -f1 "$bundle_file.sha256")"
    [[ "$expected" == "$sha256" ]] || die "sha256 of ${bundle_file} is ${sha256}, ${bundle_file}.sha256 says ${expected}"
  fi
  log "bundle sha256 ${sha256}"
}

run_node_playbook() {
  step="playbook"
  local plan="$1"
  log "running trainstack.cluster.hyperpod_node"
  ANSIBLE_COLLECTIONS_PATH="$work_dir/collections" \
    ANSIBLE_LOCAL_TEMP="$work_dir/tmp" \
    ANSIBLE_RETRY_FILES_ENABLED=false \
    ANSIBLE_FORCE_COLOR=false \
    "$work_dir/venv/bin/ansible-playbook" -i "$(hostname -s)," -c local \
    -e ansible_python_interpreter=/usr/bin/python3 -e "@${plan}" \
    "${hp_extra_vars[@]}" trainstack.cluster.hyperpod_node \
    || die "ansible-playbook trainstack.cluster.hyperpod_node failed (its output is above)"
}

main() {
  parse_args "$@"
  load_bootstrap_functions
  local plan="$scratch/plan.json"
  make_plan "$plan"
  if [[ "$check_only" == true ]]; then
    cat "$plan"
    return 0
  fi
  [[ "$(id -u)" == 0 ]] || die "must run as root (HyperPod runs lifecycle scripts as root)"
  bundle_digest
  step="prepare"
  mkdir -p "$work_dir/tmp"
  chmod 0700 "$work_dir"
  cp "$plan" "$work_dir/plan.json"
  install_ansible
  install_bundle "$bundle_file"
  run_node_playbook "$work_dir/plan.json"
  # shellcheck disable=SC2034 # read by node_bootstrap.sh's log, sourced by install_bundle
  step="done"
  log "HyperPod node setup finished"
}

main "$@"
