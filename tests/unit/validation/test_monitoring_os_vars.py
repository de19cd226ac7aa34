"""roles/monitoring resolves the same settings on every OS it names; only Debian 12 runs here, so the Ubuntu
and Amazon Linux files are checked for what they resolve."""

from __future__ import annotations

import yaml

from .conftest import ROOT

VARS = ROOT / "roles/monitoring/vars"


def load(name):
    return yaml.safe_load((VARS / f"{name}.yml").read_text())


def test_every_os_file_defines_the_same_keys():
    keys = set(load("debian"))
    for name in ("ubuntu", "amazon"):
        assert set(load(name)) == keys, name


def test_debian_and_ubuntu_install_distribution_packages():
    for name in ("debian", "ubuntu"):
        values = load(name)
        assert values["__monitoring_supported"] is True
        assert values["__monitoring_server_packages"] == ["prometheus"]
        assert values["__monitoring_node_packages"] == ["prometheus-node-exporter"]
        assert values["__monitoring_node_exporter_service"] == "prometheus-node-exporter"


def test_amazon_linux_is_refused_before_any_change():
    values = load("amazon")
    assert values["__monitoring_supported"] is False and values["__monitoring_server_packages"] == []
    main = yaml.safe_load((ROOT / "roles/monitoring/tasks/main.yml").read_text())
    check = next(task for task in main if task["name"] == "Check the inputs")
    assert "__monitoring_supported" in check["ansible.builtin.assert"]["that"]
    assert main.index(check) < next(i for i, t in enumerate(main) if "import_tasks" in str(t))
