"""Ansible's plugin loader points at this checkout before this directory's test modules load."""

from tests.support import init_ansible_plugins

init_ansible_plugins()
