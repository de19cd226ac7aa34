"""roles/ecs_agent: the agent's configuration rendered from the role's own files (GPU jobs through the NVIDIA
runtime, no cluster named in an image), and the inputs it refuses, each naming its variable."""

from __future__ import annotations

from tests.support import input_validation_tests, render_role_template, role_data_templar

ROLE = "ecs_agent"
# (case id, os, variables, fragment the failure message must contain)
BAD_INPUT = [
    ("ecs_agent_version", "al2023", {"ecs_agent_version": "1.101"}, "ecs_agent_version"),
    ("ecs_agent_cluster", "al2023", {"ecs_agent_config_extra": {"ECS_CLUSTER": "mine"}}, "ECS_CLUSTER"),
    (
        "ecs_agent_setting_name",
        "al2023",
        {"ecs_agent_config_extra": {"loglevel": "debug"}},
        "ecs_agent_config_extra",
    ),
    ("ecs_agent_config_file", "al2023", {"ecs_agent_config_file": "ecs.config"}, "ecs_agent_config_file"),
]
# (case id, os, variables)
GOOD_INPUT = [
    (
        "ecs_agent_ok",
        "al2023",
        {"ecs_agent_version": "1.101.0", "ecs_agent_config_extra": {"ECS_LOGLEVEL": "info"}},
    ),
]


def test_the_configuration_turns_on_gpus_through_the_nvidia_runtime_and_names_no_cluster() -> None:
    templar = role_data_templar(ROLE, ecs_agent_config_extra={"ECS_LOGLEVEL": "info"})
    lines = [
        line for line in render_role_template(templar, ROLE, "ecs.config.j2").splitlines() if line[:1] != "#"
    ]
    assert lines == ["ECS_ENABLE_GPU_SUPPORT=true", "ECS_LOGLEVEL=info", "ECS_NVIDIA_RUNTIME=nvidia"]


test_bad_input_is_refused_naming_the_variable, test_good_input_passes_validation = input_validation_tests(
    ROLE, BAD_INPUT, GOOD_INPUT
)
