#!/bin/bash
# STAND-IN for AWS's PCS agent installer (tests only; AWS's bucket is unreachable from this network).
# Same use as the real one (run from the unpacked aws-pcs-agent directory, as root); instead of AWS's agent it
# writes what the pcs_agent role checks: the agent's version record (version.json, as AWS's installer writes
# it) and a placeholder agent that says it is one. It registers nothing with PCS.
# TRAINSTACK_STANDIN_ROOT (stand-in only) installs under another root directory, for tests that run no node.
set -euo pipefail
VERSION="@VERSION@"
root="${TRAINSTACK_STANDIN_ROOT:-}"
case "${1:-}" in
  "") ;;
  -h|--help) echo "usage: $0"; exit 0 ;;
  *) echo "installer.sh: unknown option $1" >&2; exit 2 ;;
esac
[ -n "$root" ] || [ "$(id -u)" = 0 ] || { echo "installer.sh: must run as root" >&2; exit 1; }
install -d "$root/opt/aws/pcs/bin"
cat > "$root/opt/aws/pcs/bin/pcs_agent" <<AGENT
#!/bin/sh
echo "pcs_agent $VERSION (STAND-IN: scripts/mirror_standins/pcs_agent; registers nothing)"
AGENT
chmod 0755 "$root/opt/aws/pcs/bin/pcs_agent"
printf '{"AgentInstallDate": "%s", "AgentVersion": "%s", "AgentRelease": "v1", "StandIn": true}\n' \
  "1970-01-01T00:00:00Z" "$VERSION" > "$root/opt/aws/pcs/version.json"
echo "installer.sh (stand-in): PCS agent $VERSION installed under ${root:-/}opt/aws/pcs"
