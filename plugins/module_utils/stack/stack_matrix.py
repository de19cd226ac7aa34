# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Resolve and check training stacks (stacks/*.yml) against compatibility rules (stacks/rules.yml).

Why this exists: driver, CUDA, NCCL, EFA and aws-ofi-nccl versions break each other in ways that surface
only on a GPU instance, hours into a build. Checking the pinned versions as data, before anything is
installed, turns those failures into a one-line refusal that names the rule and where it comes from. The
module is pure (no I/O, no Ansible imports) so the Ansible module, the filter plugin and the unit tests share
one implementation.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.trainstack.cluster.plugins.module_utils.catalog.instance_catalog import (
    default as default_catalog,
)
from ansible_collections.trainstack.cluster.plugins.module_utils.stack.stack_schema import (
    problems as schema_problems,
)

_NUM_RE = re.compile(r"\d+")
# A URL whose bytes change while it stays the same: a "latest"/"current"/"nightly"/"snapshot" name, or an
# archive of a branch (main, master, HEAD) instead of a tag. A stack pins versions; such a URL would install
# whatever is newest on the day of the build, and a lock entry for it would vouch for bytes that are gone.
_MOVING_NAME_RE = re.compile(r"(?:^|[/_.=-])(latest|current|nightly|snapshot)(?:[/_.-]|$)", re.IGNORECASE)
_BRANCH_ARCHIVE_RE = re.compile(
    r"/(?:archive|tarball|zipball|raw|blob)/(?:refs/heads/)?(main|master|HEAD)(?:[/.]|$)", re.IGNORECASE
)


class StackError(ValueError):
    """A malformed stack or rule file; raised before any rule runs so the message names the bad key."""


@dataclass(frozen=True)
class Finding:
    """One rule violation (or note) for one target; `citation` says where the rule comes from."""

    rule: str
    severity: str
    message: str
    citation: str
    target: str = ""

    def as_dict(self) -> dict[str, str]:
        return {
            "rule": self.rule,
            "severity": self.severity,
            "message": self.message,
            "citation": self.citation,
            "target": self.target,
        }


@dataclass(frozen=True)
class Target:
    """What an image is built for: OS id (`ubuntu-24.04`), CPU architecture, optionally an instance family."""

    os: str
    arch: str
    family: str | None = None

    def __str__(self) -> str:
        return f"{self.os}/{self.arch}" + (f"/{self.family}" if self.family else "")


@dataclass
class Report:
    """Result of checking one stack: errors refuse the build, notes (e.g. missing checksums) only inform."""

    stack_id: str
    errors: list[Finding] = field(default_factory=list)
    notes: list[Finding] = field(default_factory=list)
    targets: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors

    def as_dict(self) -> dict[str, Any]:
        return {
            "stack": self.stack_id,
            "ok": self.ok,
            "errors": [f.as_dict() for f in self.errors],
            "notes": [f.as_dict() for f in self.notes],
            "targets": list(self.targets),
        }


# ---------------------------------------------------------------- versions


def parse_version(value: Any) -> tuple[int, ...]:
    """Numeric parts of a version ('2.29.7', '13.2', '2.13.0+cpu' -> (2, 13, 0)); local suffixes are ignored
    because rules compare releases, not builds."""
    text = str(value).split("+", 1)[0]
    parts = _NUM_RE.findall(text)
    if not parts:
        raise StackError(f"not a version: {value!r}")
    return tuple(int(p) for p in parts)


def compare_versions(left: Any, right: Any) -> int:
    """-1/0/1 like cmp(); missing trailing parts count as zero so '12' == '12.0.0'."""
    a, b = parse_version(left), parse_version(right)
    width = max(len(a), len(b))
    a += (0,) * (width - len(a))
    b += (0,) * (width - len(b))
    return (a > b) - (a < b)


def version_matches(installed: Any, pinned: Any) -> bool:
    """Whether an installed version is the pinned release: the pinned parts must all agree.

    Pins name as much as matters ('13.2' for a CUDA toolkit, '1.34' for Kubernetes); what a system reports
    carries more ('13.2.51', 'v1.34.2-eks-...'), so only the pinned prefix is compared. Build suffixes
    ('+cpu') and packaging revisions ('-4') do not count.
    """
    if installed is None or pinned is None:
        return False
    want = parse_version(pinned)
    have = parse_version(str(installed).lstrip("vV"))
    return have[: len(want)] == want


_OPS: dict[str, Callable[[int], bool]] = {
    "lt": lambda c: c < 0,
    "le": lambda c: c <= 0,
    "eq": lambda c: c == 0,
    "ge": lambda c: c >= 0,
    "gt": lambda c: c > 0,
}


# ---------------------------------------------------------------- stack structure


def validate_stack(stack: Mapping[str, Any], source: str | None = None) -> None:
    """Refuse a stack whose shape is wrong, naming the file and the key, before any rule looks at versions.

    The schema (module_utils/stack/stack_schema.py) catches unknown or misspelt keys, wrong types and null
    sections; the checks after it are the ones a schema cannot state (cross-references between sections).
    """
    label = source or (f"stack {stack.get('id')}" if isinstance(stack, Mapping) else "stack")
    found = schema_problems(stack)
    if found:
        raise StackError("\n".join(f"{label}: {line}" for line in found))
    scope = stack["scope"]
    for lab_os in scope.get("lab_os") or []:
        if lab_os not in scope["os"]:
            raise StackError(f"{label}: scope.lab_os: '{lab_os}' must also be listed in scope.os")
    for name, comp in stack["components"].items():
        for override_os in comp.get("by_os") or {}:
            if override_os not in comp["os"]:
                raise StackError(
                    f"{label}: components.{name}.by_os.{override_os}: overrides an OS the component is not "
                    "scoped to"
                )
    moving = moving_url_problems(stack)
    if moving:
        raise StackError("\n".join(f"{label}: {line}" for line in moving))


def moving_url_marker(url: str) -> str | None:
    """The part of an artifact URL that names a moving target ('latest', a branch archive), or None."""
    path = url.split("?", 1)[0].split("://", 1)[-1]
    found = _MOVING_NAME_RE.search(path) or _BRANCH_ARCHIVE_RE.search(path)
    return found.group(1) if found else None


def moving_url_problems(stack: Mapping[str, Any]) -> list[str]:
    """One line per artifact URL of the stack (components and their by_os overrides) that names a moving
    target: its checksum or lock entry would stop matching the day the vendor publishes a new file."""
    problems = []
    for name, comp in stack["components"].items():
        places = [(f"components.{name}", comp)]
        places += [(f"components.{name}.by_os.{o}", over) for o, over in (comp.get("by_os") or {}).items()]
        for where, part in places:
            for index, art in enumerate(part.get("artifacts") or []):
                marker = moving_url_marker(str(art.get("url", "")))
                if marker:
                    problems.append(
                        f"{where}.artifacts[{index}].url: '{art['url']}' names a moving target ('{marker}'); "
                        "pin the versioned URL of the release"
                    )
    return problems


def unverified_artifacts(stack: Mapping[str, Any], os_id: str, arch: str) -> list[dict[str, Any]]:
    """The artifacts one OS/arch installs without a checksum, because the stack says so for each of them."""
    return [
        {"name": a["name"], "url": a["url"], "component": a["component"], "reason": a["unverified_reason"]}
        for a in artifacts(stack, os_id, arch)
        if a.get("verify") is False
    ]


def resolve(stack: Mapping[str, Any], os_id: str, arch: str) -> dict[str, dict[str, Any]]:
    """Components that apply to one OS and architecture, with `by_os` overrides merged in.

    Artifacts restricted to another architecture are dropped, so callers see exactly what a build downloads.
    Every caller (filters, modules, environment) goes through here, so none of them reads an invalid stack.
    """
    validate_stack(stack)
    _in_scope(stack, os_id, arch)
    resolved: dict[str, dict[str, Any]] = {}
    for name, comp in stack["components"].items():
        if os_id not in comp["os"] or arch not in comp["arch"]:
            continue
        merged = {k: plain_copy(v) for k, v in comp.items() if k != "by_os"}
        merged.update(plain_copy((comp.get("by_os") or {}).get(os_id, {})))
        merged["artifacts"] = [a for a in merged.get("artifacts") or [] if a.get("arch", arch) == arch]
        resolved[name] = merged
    return resolved


def plain_copy(value: Any) -> Any:
    """A copy of a stack value made of plain dicts and lists.

    Why not copy.deepcopy: inside a template, Ansible hands filters its lazy containers, and deep-copying
    those re-wraps every nested value; for a whole stack that took seconds of controller time per resolution.
    The stack is YAML data (mappings, lists, scalars), so a structural copy is the same value.
    """
    if isinstance(value, Mapping):
        return {key: plain_copy(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_copy(item) for item in value]
    return value


def _in_scope(stack: Mapping[str, Any], os_id: str | None, arch: str | None) -> None:
    """A target outside the stack's scope is an error, not an empty component list."""
    scope = stack["scope"]
    for value, key in ((os_id, "os"), (arch, "arch")):
        if value is not None and value not in scope[key]:
            raise StackError(f"stack {stack['id']}: {key} '{value}' is outside scope.{key} {scope[key]}")


def versions(stack: Mapping[str, Any], os_id: str, arch: str) -> dict[str, str]:
    """Flat {component: version} for one OS/arch: what the image manifest and self-check compare against."""
    return {name: str(comp["version"]) for name, comp in resolve(stack, os_id, arch).items()}


def artifacts(stack: Mapping[str, Any], os_id: str, arch: str) -> list[dict[str, Any]]:
    """Every artifact a build for this OS/arch downloads, tagged with its component."""
    out: list[dict[str, Any]] = []
    for name, comp in resolve(stack, os_id, arch).items():
        for art in comp["artifacts"]:
            out.append({**art, "component": name, "version": str(comp["version"])})
    return out


def all_artifacts(stack: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every distinct artifact of a stack over its whole scope (what `make mirror` fetches), by name."""
    seen: dict[str, dict[str, Any]] = {}
    for os_id in stack["scope"]["os"]:
        for arch in stack["scope"]["arch"]:
            for art in artifacts(stack, os_id, arch):
                previous = seen.setdefault(art["name"], art)
                if previous["url"] != art["url"]:
                    raise StackError(
                        f"stack {stack['id']}: artifact name '{art['name']}' is used for two URLs "
                        f"({previous['url']} and {art['url']}); names key the lock file and must be unique"
                    )
    return sorted(seen.values(), key=lambda a: a["name"])


def field_value(components: Mapping[str, Mapping[str, Any]], path: str) -> Any:
    """Look up 'component.key' (or 'component.key.major') in resolved components; None where absent."""
    parts = path.split(".")
    comp = components.get(parts[0])
    if comp is None or len(parts) < 2:
        return None
    value = comp.get(parts[1])
    if value is None:
        return None
    if len(parts) == 3 and parts[2] == "major":
        return str(parse_version(value)[0])
    return value


# ---------------------------------------------------------------- rule evaluators


def _finding(rule: Mapping[str, Any], message: str, target: Target) -> Finding:
    return Finding(rule["id"], "error", message, str(rule.get("citation", "")), str(target))


def _rule_driver_for_cuda(
    rule: Mapping[str, Any], comps: Mapping, stack: Mapping, target: Target
) -> list[Finding]:
    driver = field_value(comps, "nvidia_driver.version")
    if driver is None:
        return []
    out = []
    for path in rule["cuda_fields"]:
        cuda = field_value(comps, path)
        if cuda is None:
            continue
        major = str(parse_version(cuda)[0])
        minimum = rule["minimum_driver"].get(major)
        if minimum is None:
            out.append(_finding(rule, f"{path} {cuda}: no minimum driver known for CUDA {major}.x", target))
        elif compare_versions(driver, minimum) < 0:
            out.append(
                _finding(
                    rule, f"nvidia_driver {driver} is too old for {path} {cuda}: needs >= {minimum}", target
                )
            )
    return out


def _matches(condition: Mapping[str, Any], comps: Mapping) -> bool:
    value = field_value(comps, condition["field"])
    if value is None:
        return False
    ops = [op for op in _OPS if op in condition]
    return all(_OPS[op](compare_versions(value, condition[op])) for op in ops)


def _rule_conditional_env(
    rule: Mapping[str, Any], comps: Mapping, stack: Mapping, target: Target
) -> list[Finding]:
    if not all(_matches(c, comps) for c in rule["when"]):
        return []
    env = stack.get("environment") or {}
    out = []
    for key, wanted in rule["require_env"].items():
        if str(env.get(key)) != str(wanted):
            found = ", ".join(f"{c['field']}={field_value(comps, c['field'])}" for c in rule["when"])
            out.append(
                _finding(rule, f"{found} needs environment {key}={wanted} (stack has {env.get(key)})", target)
            )
    return out


def _rule_family_minimum(
    rule: Mapping[str, Any], comps: Mapping, stack: Mapping, target: Target
) -> list[Finding]:
    # A rule names families, GPU generations (resolved through the instance catalog), or both.
    generation = default_catalog().family_generation(target.family) if target.family else None
    named = target.family in (rule.get("families") or [])
    if not named and generation not in (rule.get("generations") or []):
        return []
    out = []
    for path, minimum in rule["minimum"].items():
        value = field_value(comps, path)
        if value is None:
            out.append(_finding(rule, f"{target.family} needs {path} >= {minimum}, stack has none", target))
        elif compare_versions(value, minimum) < 0:
            out.append(
                _finding(rule, f"{target.family} needs {path} >= {minimum}, stack has {value}", target)
            )
    return out


def _rule_kernel_modules(
    rule: Mapping[str, Any], comps: Mapping, stack: Mapping, target: Target
) -> list[Finding]:
    flavour = field_value(comps, rule["field"])
    if flavour is None or target.family is None:
        return []
    # The GPU generation of a family is a fact of the instance catalog, not of the rule.
    generation = default_catalog().family_generation(target.family)
    if generation is None:
        return [_finding(rule, f"instance family {target.family} has no known GPU generation", target)]
    allowed = rule["allowed"][generation]
    if flavour not in allowed:
        return [
            _finding(
                rule,
                f"{rule['field']}={flavour} does not support {generation} GPUs ({target.family}); "
                f"use {'/'.join(allowed)}",
                target,
            )
        ]
    return []


def _rule_os_support(
    rule: Mapping[str, Any], comps: Mapping, stack: Mapping, target: Target
) -> list[Finding]:
    out = []
    for name, supported in rule["supported"].items():
        if name in comps and target.os not in supported:
            out.append(
                _finding(
                    rule,
                    f"{name} is not supported on {target.os} (supported: {', '.join(supported)})",
                    target,
                )
            )
    return out


def _rule_equal_fields(
    rule: Mapping[str, Any], comps: Mapping, stack: Mapping, target: Target
) -> list[Finding]:
    values = [field_value(comps, path) for path in rule["fields"]]
    if any(v is None for v in values):
        return []
    if len({str(v) for v in values}) > 1:
        pairs = ", ".join(f"{p}={v}" for p, v in zip(rule["fields"], values, strict=True))
        return [_finding(rule, f"must be equal: {pairs}", target)]
    return []


def _rule_built_against(
    rule: Mapping[str, Any], comps: Mapping, stack: Mapping, target: Target
) -> list[Finding]:
    """A plugin compiled against another component's headers loads only beside that component's release, so
    the stack must pin both wherever it pins the plugin; the role that builds it checks the versions match."""
    name, against = rule["component"], rule["against"]
    if name not in comps or against in comps:
        return []
    return [
        _finding(
            rule,
            f"{name} {comps[name].get('version')} is built against {against}, "
            "which the stack does not pin here",
            target,
        )
    ]


def _rule_component_minimum(
    rule: Mapping[str, Any], comps: Mapping, stack: Mapping, target: Target
) -> list[Finding]:
    """Where the stack pins `component`, every field it pins among `minimum` must be at least that version.

    A field the stack does not pin (a library another component brings along) is left to the build that finds
    it: no finding here."""
    if rule["component"] not in comps:
        return []
    out = []
    for path, minimum in rule["minimum"].items():
        value = field_value(comps, path)
        if value is not None and compare_versions(value, minimum) < 0:
            out.append(
                _finding(rule, f"{rule['component']} needs {path} >= {minimum}, stack has {value}", target)
            )
    return out


def _rule_recommended_env(
    rule: Mapping[str, Any], comps: Mapping, stack: Mapping, target: Target
) -> list[Finding]:
    """Never refuses a build: these rules only shape the job environment (see `environment`)."""
    return []


EVALUATORS: dict[str, Callable[[Mapping[str, Any], Mapping, Mapping, Target], list[Finding]]] = {
    "driver_for_cuda": _rule_driver_for_cuda,
    "conditional_env": _rule_conditional_env,
    "instance_family_minimum": _rule_family_minimum,
    "kernel_modules": _rule_kernel_modules,
    "os_support": _rule_os_support,
    "equal_fields": _rule_equal_fields,
    "built_against": _rule_built_against,
    "component_minimum": _rule_component_minimum,
    "recommended_env": _rule_recommended_env,
}


# The keys each kind of rule reads: (required, optional), each with the type its value must have. A key that
# is not listed is refused with the nearest known one, so that a typo (``familes:``) cannot switch a rule off,
# and a missing one (``cuda_field:`` for ``cuda_fields:``) is named before any evaluator would fail on it.
_COMMON_KEYS = {"id": str, "kind": str, "citation": str, "description": str}
_RULE_KEYS: dict[str, tuple[dict[str, type], dict[str, type]]] = {
    "driver_for_cuda": ({"cuda_fields": list, "minimum_driver": dict}, {}),
    "conditional_env": ({"when": list, "require_env": dict}, {}),
    "instance_family_minimum": ({"minimum": dict}, {"families": list, "generations": list}),
    "kernel_modules": ({"field": str, "allowed": dict}, {}),
    "os_support": ({"supported": dict}, {}),
    "equal_fields": ({"fields": list}, {}),
    "built_against": ({"component": str, "against": str}, {}),
    "component_minimum": ({"component": str, "minimum": dict}, {}),
    "recommended_env": ({}, {"families": list, "when": list, "set_env": dict, "unset_env": list}),
}
_TYPE_NAMES = {str: "a string", list: "a list", dict: "a mapping"}


def _did_you_mean(key: str, known: Iterable[str]) -> str:
    import difflib

    close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _condition_problems(rid: str, conditions: list[Any]) -> list[str]:
    """A ``when`` entry is {field: <component.key>, <op>: <version>, ...} with at least one known operator."""
    problems = []
    for index, condition in enumerate(conditions):
        where = f"rule {rid}: when[{index}]"
        if not isinstance(condition, Mapping) or not isinstance(condition.get("field"), str):
            problems.append(f"{where} must be a mapping with a 'field' (component.key) and an operator")
            continue
        ops = [key for key in condition if key != "field"]
        for key in ops:
            if key not in _OPS:
                known = ", ".join(_OPS)
                problems.append(
                    f"{where}: unknown operator '{key}'{_did_you_mean(key, _OPS)}; known: {known}"
                )
        if not ops:
            problems.append(f"{where} names no operator ({', '.join(_OPS)})")
    return problems


def _rule_problems(rule: Mapping[str, Any], rid: str) -> list[str]:
    """What is wrong with one rule's keys and their types (its kind is known)."""
    required, optional = _RULE_KEYS[str(rule["kind"])]
    allowed = {**_COMMON_KEYS, **required, **optional}
    problems = []
    for key in rule:
        if key not in allowed:
            problems.append(
                f"rule {rid}: unknown key '{key}'{_did_you_mean(str(key), allowed)} for kind {rule['kind']} "
                f"(its keys: {', '.join(sorted(allowed))})"
            )
    for key in required:
        if key not in rule:
            problems.append(f"rule {rid}: kind {rule['kind']} needs '{key}'")
    for key, wanted in allowed.items():
        if key in rule and not isinstance(rule[key], wanted):
            problems.append(
                f"rule {rid}: '{key}' must be {_TYPE_NAMES[wanted]}, not {type(rule[key]).__name__}"
            )
    if rule["kind"] == "instance_family_minimum" and not (rule.get("families") or rule.get("generations")):
        problems.append(f"rule {rid}: kind instance_family_minimum needs 'families' or 'generations'")
    if isinstance(rule.get("when"), list):
        problems += _condition_problems(rid, rule["when"])
    return problems


def validate_rules(rules: Iterable[Mapping[str, Any]]) -> None:
    """Every rule needs an id, a known kind, a citation (an uncited rule cannot be reviewed) and exactly the
    keys its kind reads; every problem of the file is named at once, before any rule runs."""
    seen: set[str] = set()
    problems: list[str] = []
    for index, rule in enumerate(rules):
        if not isinstance(rule, Mapping):
            problems.append(f"rules[{index}] must be a mapping")
            continue
        rid = rule.get("id")
        if not rid:
            problems.append(f"rules[{index}]: rule without 'id'")
            continue
        if rid in seen:
            problems.append(f"rule id '{rid}' is used twice")
        seen.add(rid)
        if rule.get("kind") not in EVALUATORS:
            kind = str(rule.get("kind"))
            problems.append(
                f"rule {rid}: unknown kind '{kind}'{_did_you_mean(kind, EVALUATORS)} "
                f"(known: {', '.join(EVALUATORS)})"
            )
            continue
        if not rule.get("citation"):
            problems.append(f"rule {rid}: 'citation' is required")
        problems += _rule_problems(rule, rid)
    if problems:
        raise StackError("; ".join(problems))


# ---------------------------------------------------------------- entry points


def targets(stack: Mapping[str, Any], os_id: str | None = None, arch: str | None = None) -> list[Target]:
    """Every OS x arch x family combination of the stack's scope, optionally narrowed to one OS/arch."""
    _in_scope(stack, os_id, arch)
    scope = stack["scope"]
    oses = [os_id] if os_id else scope["os"]
    arches = [arch] if arch else scope["arch"]
    lab_only = set(scope.get("lab_os") or [])
    out = []
    for o in oses:
        # A lab-only OS (the local LXC image) never boots on an instance: no family rules apply to it.
        families: list[str | None] = [None] if o in lab_only else list(scope["instance_families"])
        out.extend(Target(o, a, f) for a in arches for f in families)
    return out


def unverified_notes(stack: Mapping[str, Any], lock: Mapping[str, Any] | None = None) -> list[Finding]:
    """One note per artifact with no sha256 in stack or lock (a build refuses it), and one per artifact the
    stack itself accepts unchecked (`verify: false`), with the stack's reason."""
    locked = (lock or {}).get("artifacts", {})
    notes = []
    for art in all_artifacts(stack):
        entry = locked.get(art["name"]) or {}
        if art.get("sha256") is not None or (entry.get("sha256") and entry.get("url") == art["url"]):
            continue
        if art.get("verify") is False:
            message = f"{art['name']} ({art['url']}) is accepted unverified: {art['unverified_reason']}"
            notes.append(Finding("checksum-waived", "note", message, "stacks/<id>.yml verify: false", ""))
            continue
        notes.append(
            Finding(
                "checksum-unknown",
                "note",
                f"{art['name']} ({art['url']}) has no known sha256: a build refuses it until `make mirror` "
                "locks it or its stack entry says verify: false with a reason",
                "stacks/README: never invent a checksum",
                "",
            )
        )
    return notes


def check(
    stack: Mapping[str, Any],
    rules: Iterable[Mapping[str, Any]],
    os_id: str | None = None,
    arch: str | None = None,
    lock: Mapping[str, Any] | None = None,
    source: str | None = None,
) -> Report:
    """Run every rule against every target in the stack's scope; one error per distinct message.

    The schema runs first (`source` names the file in its errors), so no rule ever sees a malformed stack.
    """
    rules = list(rules)
    validate_stack(stack, source)
    validate_rules(rules)
    report = Report(stack_id=str(stack["id"]))
    grouped: dict[tuple[str, str], tuple[Finding, list[str]]] = {}
    for target in targets(stack, os_id, arch):
        report.targets.append(str(target))
        comps = resolve(stack, target.os, target.arch)
        for rule in rules:
            for finding in EVALUATORS[rule["kind"]](rule, comps, stack, target):
                entry = grouped.setdefault((finding.rule, finding.message), (finding, []))
                entry[1].append(str(target))
    for finding, where in grouped.values():
        report.errors.append(
            Finding(finding.rule, finding.severity, finding.message, finding.citation, _summarise(where))
        )
    report.notes.extend(unverified_notes(stack, lock))
    return report


def _summarise(where: list[str]) -> str:
    """Targets an error applies to, shortened: the same error on 40 targets is one line, not 40."""
    shown = ", ".join(where[:3])
    return shown if len(where) <= 3 else f"{shown} and {len(where) - 3} more"


def format_report(report: Report) -> str:
    """Human-readable lines for the terminal: one per error with its citation, then a count of notes."""
    verdict = "OK" if report.ok else "REJECTED"
    lines = [f"stack {report.stack_id}: {verdict} ({len(report.targets)} targets checked)"]
    for f in report.errors:
        lines.append(f"  ERROR [{f.rule}] {f.target}: {f.message}\n        source: {f.citation}")
    for f in report.notes:
        lines.append(f"  note  [{f.rule}] {f.message}")
    return "\n".join(lines)


# ---------------------------------------------------------------- job environment (fabric roles)


def _env_rule_applies(rule: Mapping[str, Any], comps: Mapping, family: str | None) -> bool:
    """A rule's version conditions all hold and, where it names families, the target is one of them.

    A family-scoped rule does not apply when the family is unknown (an image built for several families):
    the profile then keeps the stack's value, and the node's boot-time role run narrows it.
    """
    families = rule.get("families")
    if families is not None and family not in families:
        return False
    return all(_matches(c, comps) for c in rule.get("when") or [])


def environment(
    stack: Mapping[str, Any],
    rules: Iterable[Mapping[str, Any]],
    os_id: str,
    arch: str,
    family: str | None = None,
) -> dict[str, str]:
    """The FI_*/NCCL_* job environment that is right for one target's installed versions.

    Why here and not in a role: the same rules that refuse a stack (`conditional_env`: a required variable
    the stack lacks) also say what a node's profile must export, so the profile cannot drift from the checker.
    Order: the stack's `environment`, then each `conditional_env` rule's `require_env` whose versions match,
    then each `recommended_env` rule's `set_env`/`unset_env` (rules file order; later rules win).
    """
    rules = list(rules)
    validate_rules(rules)
    comps = resolve(stack, os_id, arch)
    env = {str(k): str(v) for k, v in (stack.get("environment") or {}).items()}
    for rule in rules:
        if rule["kind"] == "conditional_env" and all(_matches(c, comps) for c in rule["when"]):
            env.update({str(k): str(v) for k, v in rule["require_env"].items()})
        elif rule["kind"] == "recommended_env" and _env_rule_applies(rule, comps, family):
            env.update({str(k): str(v) for k, v in (rule.get("set_env") or {}).items()})
            for key in rule.get("unset_env") or []:
                env.pop(str(key), None)
    return dict(sorted(env.items()))
