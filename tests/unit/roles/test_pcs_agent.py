"""roles/pcs_agent: the inputs it refuses, each naming its variable (tests/support/roles.py
input_validation_tests). The agent's installation and check are
tests/integration/cluster/test_pcs_agent_standin.py."""

from __future__ import annotations

from tests.support import input_validation_tests

ROLE = "pcs_agent"
# (case id, os, variables, fragment the failure message must contain)
BAD_INPUT = [
    (
        "pcs_agent_version",
        "al2023",
        {"pcs_agent_version": "1.2", "pcs_agent_artifacts": [{}]},
        "pcs_agent_version",
    ),
    (
        "pcs_agent_two_installers",
        "ubuntu2204",
        {"pcs_agent_version": "1.2.0", "pcs_agent_artifacts": [{"name": "a"}, {"name": "b"}]},
        "pcs_agent_artifacts",
    ),
    ("pcs_agent_install_dir", "al2023", {"pcs_agent_install_dir": "opt/aws/pcs"}, "pcs_agent_install_dir"),
    (
        "pcs_agent_installer_timeout",
        "al2023",
        {"pcs_agent_installer_timeout": 0},
        "pcs_agent_installer_timeout",
    ),
]
# (case id, os, variables)
GOOD_INPUT = [
    (
        "pcs_agent_ok",
        "al2023",
        {"pcs_agent_version": "1.2.0", "pcs_agent_artifacts": [{"name": "aws-pcs-agent"}]},
    ),
    ("pcs_agent_unpinned", "debian12", {"pcs_agent_version": "", "pcs_agent_artifacts": []}),
]

test_bad_input_is_refused_naming_the_variable, test_good_input_passes_validation = input_validation_tests(
    ROLE, BAD_INPUT, GOOD_INPUT
)
