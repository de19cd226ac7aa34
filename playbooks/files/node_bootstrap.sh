#!/usr/bin/env bash
# trainstack node bootstrap: the OnNodeConfigured custom action of every ParallelCluster node a cluster spec
# renders (pcluster_config). ParallelCluster runs it as root once the node is configured, with the Args of the
# cluster configuration:
#
#   node_bootstrap.sh [head|login|compute] --bundle URL --sha256 HEX [--work-dir DIR] [-e KEY=VALUE ...]
#
# It finds the node's role (the first argument when given, else ParallelCluster's own files), fetches the
# bundle (s3:// with the AWS CLI, http(s):// with curl or Python, file://), checks its sha256, installs a pinned
# ansible-core into a virtualenv, installs the bundle's collections and runs trainstack.cluster.node_bootstrap
# on this node with a local connection. Every step logs one line when it starts; a failure prints one line on
# stderr naming the step and exits non-zero, which makes ParallelCluster mark the node failed.
set -euo pipefail

# The other entry points of the collection's node bundle (hyperpod_on_create.sh) source this file for its
# functions (logging, ansible-core and bundle installation) and name their messages with their own PROG.
readonly ANSIBLE_CORE_VERSION="2.19.14"
readonly CFNCONFIG="/etc/parallelcluster/cfnconfig"
readonly DNA_JSON="/etc/chef/dna.json"
PROG="${PROG:-trainstack-bootstrap}"

step="arguments"
role=""
bundle=""
sha256=""
work_dir="/opt/trainstack/bootstrap"
extra_vars=()

log() {
  printf '%s %s [%s] %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$PROG" "$step" "$*"
}

# One line on stderr (ParallelCluster keeps a custom action's stderr in its bootstrap error), then exit 1.
die() {
  trap - ERR
  printf '%s: step %s failed: %s\n' "$PROG" "$step" "$*" >&2
  exit 1
}

on_error() {
  die "command exited with status $1 (line $2)"
}
trap 'on_error $? $LINENO' ERR

usage() {
  printf 'usage: %s [head|login|compute] --bundle URL --sha256 HEX [--work-dir DIR] [-e KEY=VALUE]...\n' "$0"
}

parse_args() {
  while (($# > 0)); do
    case "$1" in
      head | login | compute) role="$1" ;;
      --bundle) (($# > 1)) || die "--bundle needs a URL"; bundle="$2"; shift ;;
      --sha256) (($# > 1)) || die "--sha256 needs a value"; sha256="$2"; shift ;;
      --work-dir) (($# > 1)) || die "--work-dir needs a directory"; work_dir="$2"; shift ;;
      -e) (($# > 1)) || die "-e needs KEY=VALUE"; extra_vars+=(-e "$2"); shift ;;
      -h | --help) usage; exit 0 ;;
      *) die "unknown argument '$1' (a role is head, login or compute)" ;;
    esac
    shift
  done
  [[ -n "$bundle" ]] || die "--bundle URL is required (s3://, https://, http:// or file://)"
  [[ "$sha256" =~ ^[0-9a-f]{64}$ ]] || die "--sha256 must be 64 lowercase hex digits, got '${sha256}'"
  [[ "$work_dir" == /* ]] || die "--work-dir must be an absolute path, got '${work_dir}'"
}

# ParallelCluster's node type (HeadNode, ComputeFleet, LoginNode): dna.json's cluster.node_type first, then
# cfnconfig's cfn_node_type (the older file, kept by ParallelCluster for compatibility). Empty when neither says.
pcluster_node_type() {
  local found=""
  if [[ -r "$DNA_JSON" ]]; then
    found="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("cluster", {}).get("node_type") or "")' \
      "$DNA_JSON" 2>/dev/null || true)"
  fi
  if [[ -z "$found" && -r "$CFNCONFIG" ]]; then
    found="$(sed -n 's/^cfn_node_type=["'"'"']\{0,1\}\([A-Za-z]*\).*/\1/p' "$CFNCONFIG" | tail -n 1)"
  fi
  printf '%s' "$found"
}

pcluster_cluster_name() {
  if [[ -r "$DNA_JSON" ]]; then
    python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("cluster", {}).get("cluster_name") or "")' \
      "$DNA_JSON" 2>/dev/null || true
  fi
}

resolve_role() {
  step="node-type"
  local node_type mapped=""
  node_type="$(pcluster_node_type)"
  case "$node_type" in
    HeadNode) mapped="head" ;;
    ComputeFleet) mapped="compute" ;;
    LoginNode) mapped="login" ;;
    "") ;;
    *) log "unknown ParallelCluster node type '${node_type}' in ${DNA_JSON}/${CFNCONFIG}" ;;
  esac
  if [[ -n "$role" ]]; then
    if [[ -n "$mapped" && "$mapped" != "$role" ]]; then
      log "argument '${role}' overrides ParallelCluster's node type ${node_type} (${mapped})"
    fi
  elif [[ -n "$mapped" ]]; then
    role="$mapped"
  else
    die "no role argument and no node type in ${DNA_JSON} (cluster.node_type) or ${CFNCONFIG} (cfn_node_type)"
  fi
  log "role ${role} (ParallelCluster node type: ${node_type:-none}, cluster: $(pcluster_cluster_name || true))"
}

fetch_bundle() {
  step="fetch"
  local dest="$1"
  log "fetching ${bundle}"
  case "$bundle" in
    s3://*)
      command -v aws >/dev/null || die "the AWS CLI (aws) is needed for ${bundle}"
      aws s3 cp --only-show-errors "$bundle" "$dest" || die "aws s3 cp ${bundle} failed"
      ;;
    http://* | https://*)
      if command -v curl >/dev/null; then
        curl -fsSL --retry 3 --retry-delay 2 --connect-timeout 10 -o "$dest" "$bundle" \
          || die "download of ${bundle} failed"
      else
        # Minimal images (no curl): Python's urllib, which honours http_proxy/https_proxy/no_proxy too.
        python3 -c 'import shutil, sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=60) as r, open(sys.argv[2], "wb") as f:
    shutil.copyfileobj(r, f)' "$bundle" "$dest" 2>/dev/null || die "download of ${bundle} failed"
      fi
      ;;
    file://*)
      cp "${bundle#file://}" "$dest" || die "cannot copy ${bundle#file://}"
      ;;
    *) die "unsupported bundle URL '${bundle}' (s3://, https://, http:// or file://)" ;;
  esac
}

verify_bundle() {
  step="verify"
  local file="$1" actual
  actual="$(sha256sum "$file" | cut -d' ' -f1)"
  [[ "$actual" == "$sha256" ]] || die "sha256 of ${bundle} is ${actual}, expected ${sha256}"
  log "sha256 ${actual} matches"
}

# A virtualenv needs ensurepip, which Debian and Ubuntu ship apart (python3-venv).
ensure_venv_support() {
  step="python"
  command -v python3 >/dev/null || die "python3 is not installed"
  python3 -c 'import ensurepip' 2>/dev/null && return 0
  log "python3 has no ensurepip; installing python3-venv"
  command -v apt-get >/dev/null || die "python3 cannot make a virtualenv (no ensurepip) and apt-get is missing"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-venv >/dev/null \
    || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-venv >/dev/null; } \
    || die "apt-get install python3-venv failed"
}

install_ansible() {
  local venv="$work_dir/venv" installed=""
  if [[ -x "$venv/bin/python" ]]; then
    installed="$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("ansible-core"))' 2>/dev/null || true)"
  fi
  if [[ "$installed" == "$ANSIBLE_CORE_VERSION" ]]; then
    step="ansible"
    log "ansible-core ${ANSIBLE_CORE_VERSION} already in ${venv}"
    return 0
  fi
  ensure_venv_support
  step="ansible"
  log "installing ansible-core ${ANSIBLE_CORE_VERSION} into ${venv}"
  rm -rf "$venv"
  python3 -m venv "$venv" || die "python3 -m venv ${venv} failed"
  "$venv/bin/pip" install -q --disable-pip-version-check --retries 5 "ansible-core==${ANSIBLE_CORE_VERSION}" \
    || die "pip install ansible-core==${ANSIBLE_CORE_VERSION} failed"
}

# The bundle: trainstack-cluster-*.tar.gz (our collection, as ansible-galaxy builds it) and
# ansible_collections/<namespace>/<name>/ trees of the collections it needs, copied from the controller.
install_bundle() {
  step="install"
  local file="$1" marker="$work_dir/collections/.bundle-sha256" unpacked="$work_dir/bundle"
  if [[ -f "$marker" && "$(cat "$marker")" == "$sha256" ]]; then
    log "bundle ${sha256:0:12} already installed in ${work_dir}/collections"
    return 0
  fi
  log "installing the bundle's collections into ${work_dir}/collections"
  rm -rf "$unpacked" "$work_dir/collections"
  mkdir -p "$unpacked" "$work_dir/collections"
  tar -xzf "$file" -C "$unpacked" || die "cannot unpack ${bundle}"
  local tarballs=("$unpacked"/trainstack-cluster-*.tar.gz)
  [[ -f "${tarballs[0]}" ]] || die "the bundle holds no trainstack-cluster-*.tar.gz"
  if [[ -d "$unpacked/ansible_collections" ]]; then
    cp -a "$unpacked/ansible_collections" "$work_dir/collections/"
  fi
  "$work_dir/venv/bin/ansible-galaxy" collection install --offline --no-deps --force \
    -p "$work_dir/collections" "${tarballs[0]}" >/dev/null \
    || die "ansible-galaxy collection install ${tarballs[0]##*/} failed"
  rm -rf "$unpacked"
  printf '%s\n' "$sha256" >"$marker"
}

run_playbook() {
  step="playbook"
  log "running trainstack.cluster.node_bootstrap for role ${role}"
  ANSIBLE_COLLECTIONS_PATH="$work_dir/collections" \
    ANSIBLE_LOCAL_TEMP="$work_dir/tmp" \
    ANSIBLE_RETRY_FILES_ENABLED=false \
    ANSIBLE_FORCE_COLOR=false \
    "$work_dir/venv/bin/ansible-playbook" -i localhost, -c local \
    -e node_bootstrap_role="$role" -e ansible_python_interpreter=/usr/bin/python3 \
    "${extra_vars[@]}" trainstack.cluster.node_bootstrap \
    || die "ansible-playbook trainstack.cluster.node_bootstrap failed (its output is above)"
}

main() {
  parse_args "$@"
  [[ "$(id -u)" == 0 ]] || die "must run as root (ParallelCluster runs custom actions as root)"
  resolve_role
  step="prepare"
  mkdir -p "$work_dir/tmp"
  chmod 0700 "$work_dir"
  local download="$work_dir/bundle.tar.gz"
  fetch_bundle "$download"
  verify_bundle "$download"
  install_ansible
  install_bundle "$download"
  run_playbook
  step="done"
  log "node bootstrap finished for role ${role}"
}

# Run only when executed; a script that sources this file gets the functions and its own main.
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  main "$@"
fi
