"""Each rule of stacks/rules.yml, once passing and once failing, on a stack changed in exactly one field."""

import pytest
from ansible_collections.trainstack.cluster.plugins.module_utils.stack import stack_matrix as sm

from tests.support import SHIPPED_STACK_IDS


def run(stack, rules, rule_id):
    rule = [r for r in rules if r["id"] == rule_id]
    assert rule, f"rule {rule_id} missing from stacks/rules.yml"
    return sm.check(stack, rule)


def test_good_stack_passes_every_rule(good_stack, rules):
    report = sm.check(good_stack, rules)
    assert report.ok, sm.format_report(report)


def test_every_rule_is_cited_and_tested(rules):
    tested = {
        "cuda-driver-minimum",
        "efa-cuda-sync-memops",
        "p5-minimums",
        "blackwell-minimums",
        "kernel-module-flavour",
        "component-os-support",
        "pytorch-nccl-pin",
        "nccl-cuda-major",
        "pyxis-built-against-slurm",
        "aws-ofi-nccl-libfabric",
        # Job-environment rule (never refuses a stack): tested both ways in
        # tests/unit/roles/test_efa_environment.py.
        "efa-device-rdma-read",
    }
    assert {r["id"] for r in rules} == tested
    assert all(r["citation"].strip() for r in rules)


@pytest.mark.parametrize("cuda", ["13.2", "13.0", "12.4"])
def test_cuda_driver_minimum_passes(good_stack, rules, cuda):
    good_stack["components"]["cuda"]["version"] = cuda
    assert run(good_stack, rules, "cuda-driver-minimum").ok


def test_cuda_driver_minimum_rejects_old_driver_for_cuda13(good_stack, rules):
    good_stack["components"]["nvidia_driver"]["version"] = "570.172.08"
    report = run(good_stack, rules, "cuda-driver-minimum")
    assert not report.ok
    messages = [e.message for e in report.errors]
    assert any("570.172.08 is too old for cuda.version 13.2: needs >= 580.65.06" in m for m in messages)
    # The framework's CUDA runtime is checked too, not only the toolkit.
    assert any("pytorch.cuda_runtime 13.0" in m for m in messages)
    assert "cuda-compatibility" in report.errors[0].citation


def test_cuda_driver_minimum_rejects_unknown_cuda_major(good_stack, rules):
    good_stack["components"]["cuda"]["version"] = "14.0"
    report = run(good_stack, rules, "cuda-driver-minimum")
    assert [e.message for e in report.errors] == ["cuda.version 14.0: no minimum driver known for CUDA 14.x"]


def test_efa_sync_memops_rejects_old_efa_with_new_nccl(good_stack, rules):
    good_stack["components"]["efa_installer"]["version"] = "1.28.0"
    report = run(good_stack, rules, "efa-cuda-sync-memops")
    assert not report.ok
    assert "FI_EFA_SET_CUDA_SYNC_MEMOPS=0" in report.errors[0].message


def test_efa_sync_memops_passes_with_env_or_new_efa_or_old_nccl(good_stack, rules):
    good_stack["components"]["efa_installer"]["version"] = "1.28.0"
    good_stack["environment"]["FI_EFA_SET_CUDA_SYNC_MEMOPS"] = "0"
    assert run(good_stack, rules, "efa-cuda-sync-memops").ok
    good_stack["environment"].clear()
    good_stack["components"]["nccl"]["version"] = "2.18.5"
    assert run(good_stack, rules, "efa-cuda-sync-memops").ok
    good_stack["components"]["nccl"]["version"] = "2.29.7"
    good_stack["components"]["efa_installer"]["version"] = "1.29.1"
    assert run(good_stack, rules, "efa-cuda-sync-memops").ok


@pytest.mark.parametrize(
    ("component", "value", "expected"),
    [
        ("cuda", "11.8", "p5 needs cuda.version >= 12.0, stack has 11.8"),
        ("nccl", "2.18.3", "p5 needs nccl.version >= 2.18.5, stack has 2.18.3"),
        ("aws_ofi_nccl", "1.7.2", "p5 needs aws_ofi_nccl.version >= 1.7.3, stack has 1.7.2"),
    ],
)
def test_p5_minimums_reject(good_stack, rules, component, value, expected):
    good_stack["components"][component]["version"] = value
    report = run(good_stack, rules, "p5-minimums")
    assert [e.message for e in report.errors] == [expected]
    assert report.errors[0].target == "ubuntu-24.04/x86_64/p5"


def test_p5_minimums_pass_at_the_boundary(good_stack, rules):
    good_stack["components"]["cuda"]["version"] = "12.0"
    good_stack["components"]["nccl"]["version"] = "2.18.5"
    good_stack["components"]["aws_ofi_nccl"]["version"] = "1.7.3"
    assert run(good_stack, rules, "p5-minimums").ok


def test_p5_minimums_reject_missing_plugin(good_stack, rules):
    del good_stack["components"]["aws_ofi_nccl"]
    report = run(good_stack, rules, "p5-minimums")
    assert [e.message for e in report.errors] == ["p5 needs aws_ofi_nccl.version >= 1.7.3, stack has none"]


def test_p5_minimums_ignore_other_families(good_stack, rules):
    good_stack["scope"]["instance_families"] = ["g5"]
    good_stack["components"]["cuda"]["version"] = "11.8"
    assert run(good_stack, rules, "p5-minimums").ok


def test_blackwell_minimums(good_stack, rules):
    assert run(good_stack, rules, "blackwell-minimums").ok
    good_stack["components"]["cuda"]["version"] = "12.6"
    report = run(good_stack, rules, "blackwell-minimums")
    assert [e.message for e in report.errors] == ["p6-b200 needs cuda.version >= 12.8, stack has 12.6"]


def test_blackwell_minimums_reach_every_blackwell_family_of_the_catalog(good_stack, rules):
    # The rule names a GPU generation; the catalog says which families are Blackwell, p6-b300 included.
    good_stack["scope"]["instance_families"] = ["p6-b300", "p5"]
    good_stack["components"]["cuda"]["version"] = "12.6"
    report = run(good_stack, rules, "blackwell-minimums")
    assert [e.message for e in report.errors] == ["p6-b300 needs cuda.version >= 12.8, stack has 12.6"]


def test_kernel_modules_blackwell_needs_open(good_stack, rules):
    assert run(good_stack, rules, "kernel-module-flavour").ok
    good_stack["components"]["nvidia_driver"]["kernel_modules"] = "proprietary"
    report = run(good_stack, rules, "kernel-module-flavour")
    assert [e.target for e in report.errors] == ["ubuntu-24.04/x86_64/p6-b200"]
    assert "does not support blackwell GPUs" in report.errors[0].message


def test_kernel_modules_volta_needs_proprietary(good_stack, rules):
    good_stack["scope"]["instance_families"] = ["p3"]
    report = run(good_stack, rules, "kernel-module-flavour")
    assert "use proprietary" in report.errors[0].message
    good_stack["components"]["nvidia_driver"]["kernel_modules"] = "proprietary"
    assert run(good_stack, rules, "kernel-module-flavour").ok


def test_kernel_modules_unknown_family_is_an_error(good_stack, rules):
    good_stack["scope"]["instance_families"] = ["x9z"]
    report = run(good_stack, rules, "kernel-module-flavour")
    assert report.errors[0].message == "instance family x9z has no known GPU generation"


def test_os_support(good_stack, rules):
    good_stack["components"]["parallelcluster"] = {
        "version": "3.16.1",
        "os": ["ubuntu-24.04", "debian-12"],
        "arch": ["x86_64"],
        "source": "https://example.invalid",
    }
    assert run(good_stack, rules, "component-os-support").ok
    good_stack["scope"]["os"].append("debian-12")
    report = run(good_stack, rules, "component-os-support")
    assert len(report.errors) == 1
    assert report.errors[0].message.startswith("parallelcluster is not supported on debian-12")


def test_pytorch_nccl_pin(good_stack, rules):
    assert run(good_stack, rules, "pytorch-nccl-pin").ok
    good_stack["components"]["nccl"]["version"] = "2.28.9"
    report = run(good_stack, rules, "pytorch-nccl-pin")
    assert report.errors[0].message == "must be equal: pytorch.nccl_pin=2.29.7, nccl.version=2.28.9"


def test_pytorch_nccl_pin_skipped_for_cpu_build(good_stack, rules):
    good_stack["components"]["pytorch"]["nccl_pin"] = None
    good_stack["components"]["nccl"]["version"] = "2.28.9"
    assert run(good_stack, rules, "pytorch-nccl-pin").ok


def test_nccl_cuda_major(good_stack, rules):
    assert run(good_stack, rules, "nccl-cuda-major").ok
    good_stack["components"]["nccl"]["cuda_major"] = 12
    report = run(good_stack, rules, "nccl-cuda-major")
    assert report.errors[0].message == "must be equal: nccl.cuda_major=12, pytorch.cuda_runtime.major=13"


def test_pyxis_built_against_slurm(good_stack, rules):
    """pyxis without a Slurm to build against is refused; with one, or without pyxis, the stack passes."""
    comps = good_stack["components"]
    comps["pyxis"] = {**comps["cuda"], "version": "0.24.0"}
    report = run(good_stack, rules, "pyxis-built-against-slurm")
    assert [e.message for e in report.errors] == [
        "pyxis 0.24.0 is built against slurm, which the stack does not pin here"
    ] * len(report.errors)
    assert report.errors and "pyxis/blob/v0.24.0/README.md" in report.errors[0].citation
    comps["slurm"] = {**comps["cuda"], "version": "25.11.8"}
    assert run(good_stack, rules, "pyxis-built-against-slurm").ok
    del comps["pyxis"], comps["slurm"]
    assert run(good_stack, rules, "pyxis-built-against-slurm").ok


def test_aws_ofi_nccl_libfabric_minimum(good_stack, rules):
    """A pinned libfabric below 1.11.0 is refused beside aws-ofi-nccl; 1.11.0, no libfabric pin (the EFA
    installer's), or no plugin pass."""
    comps = good_stack["components"]
    comps["libfabric"] = {**comps["cuda"], "version": "1.10.1"}
    report = run(good_stack, rules, "aws-ofi-nccl-libfabric")
    assert report.errors and {e.message for e in report.errors} == {
        "aws_ofi_nccl needs libfabric.version >= 1.11.0, stack has 1.10.1"
    }
    assert "check_pkg_libfabric.m4" in report.errors[0].citation
    comps["libfabric"]["version"] = "1.11.0"
    assert run(good_stack, rules, "aws-ofi-nccl-libfabric").ok
    comps["libfabric"]["version"] = "1.10.1"
    del comps["aws_ofi_nccl"]
    assert run(good_stack, rules, "aws-ofi-nccl-libfabric").ok
    del comps["libfabric"]
    assert run(good_stack, rules, "aws-ofi-nccl-libfabric").ok


@pytest.mark.parametrize("stack_id", SHIPPED_STACK_IDS)
def test_shipped_stacks_pass(shipped_stacks, rules, stack_id):
    report = sm.check(shipped_stacks[stack_id], rules)
    assert report.ok, sm.format_report(report)


# ---------------------------------------------------------------- the rules file's own schema


def _with(rules, rule_id, change):
    """A copy of the rules with one rule changed by ``change(rule)``."""
    import copy

    changed = copy.deepcopy(rules)
    change(next(r for r in changed if r["id"] == rule_id))
    return changed


def _rename(old, new):
    def change(rule):
        rule[new] = rule.pop(old)

    return change


@pytest.mark.parametrize(
    ("rule_id", "change", "message"),
    [
        # A typo used to switch the rule off without a word (the evaluator read rule.get("families")).
        (
            "p5-minimums",
            _rename("families", "familes"),
            "rule p5-minimums: unknown key 'familes' (did you mean 'families'?)",
        ),
        # A typo used to crash the checker with a KeyError.
        (
            "cuda-driver-minimum",
            _rename("cuda_fields", "cuda_field"),
            "rule cuda-driver-minimum: kind driver_for_cuda needs 'cuda_fields'",
        ),
        (
            "efa-cuda-sync-memops",
            lambda r: r["when"][0].update(lte="1.0"),
            "when[0]: unknown operator 'lte' (did you mean 'lt'?); known: lt, le, eq, ge, gt",
        ),
        (
            "pytorch-nccl-pin",
            lambda r: r.update(fields="pytorch.nccl"),
            "rule pytorch-nccl-pin: 'fields' must be a list, not str",
        ),
        (
            "nccl-cuda-major",
            lambda r: r.update(kind="equal_field"),
            "unknown kind 'equal_field' (did you mean 'equal_fields'?)",
        ),
        ("blackwell-minimums", lambda r: r.pop("generations"), "needs 'families' or 'generations'"),
    ],
)
def test_a_malformed_rule_is_named_before_any_rule_runs(good_stack, rules, rule_id, change, message):
    bad = _with(rules, rule_id, change)
    with pytest.raises(sm.StackError) as err:
        sm.check(good_stack, bad)
    assert message in str(err.value), str(err.value)


def test_every_problem_of_the_rules_file_is_named_at_once(good_stack, rules):
    bad = _with(
        _with(rules, "p5-minimums", _rename("families", "familes")),
        "cuda-driver-minimum",
        _rename("cuda_fields", "cuda_field"),
    )
    with pytest.raises(sm.StackError) as err:
        sm.validate_rules(bad)
    assert "familes" in str(err.value) and "cuda_field" in str(err.value)


def test_the_shipped_rules_pass_their_schema(rules):
    sm.validate_rules(rules)
