"""Every Jinja expression interpolated into a shell or command string is shell-quoted (`| quote`).

The command strings of ansible.builtin.shell, command (free form or cmd:), raw and script tasks in roles,
playbooks and molecule scenarios are read (blocks, rescue and always walked) and each `{{ ... }}` in them must
end in `| quote`, unless ALLOWED names it with the reason it is safe. A quoted expression must also stand
outside shell quotes: `"{{ x | quote }}"` would put literal quote characters into the value. argv lists run no
shell and are not read; nor are creates/removes/chdir, which are paths, not shell. The executable of a
script task is read: Ansible joins it into the shell line unquoted.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
GLOBS = (
    "roles/*/tasks/**/*.yml",
    "roles/*/handlers/**/*.yml",
    "playbooks/*.yml",
    "molecule/*/*.yml",
    "molecule/*/tasks/*.yml",
)
MODULES = frozenset(
    f"{prefix}{name}"
    for prefix in ("", "ansible.builtin.", "ansible.legacy.")
    for name in ("shell", "command", "raw", "script")
)
NESTED = ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks", "handlers")
EXPRESSION = re.compile(r"\{\{(.*?)\}\}", re.S)
QUOTED = re.compile(r"\|\s*quote\s*$")
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

PYTORCH_PROBE = (
    "a shell command built in roles/pytorch/vars/main.yml:10 with its one value quoted"
    " (SHELL_VALUES checks it)"
)

# (file, task name, expression as written between the braces, stripped): why it may stay unquoted.
ALLOWED: dict[tuple[str, str, str], str] = {
    (
        "roles/image_manifest/tasks/main.yml",
        "Read each pinned component's version from the system",
        "__image_manifest_all_probes[item] | default('true')",
    ): (
        "the value is the whole shell command, by design: the role's own probes"
        " (roles/image_manifest/vars/main.yml:4, no template in them; SHELL_VALUES checks it) and"
        " image_manifest_probes_extra, a shell command by its spec"
        " (roles/image_manifest/meta/argument_specs.yml:51)"
    ),
    (
        "roles/pytorch/tasks/install_steps.yml",
        "Read the installed PyTorch version",
        "__pytorch_probe",
    ): PYTORCH_PROBE,
    (
        "roles/pytorch/tasks/install_steps.yml",
        "Read the version now installed",
        "__pytorch_probe",
    ): PYTORCH_PROBE,
}

# Variables that hold shell commands (allowed above as whole commands): their own expressions must be quoted.
SHELL_VALUES: dict[str, tuple[str, ...]] = {
    "roles/pytorch/vars/main.yml": ("__pytorch_probe",),
    "roles/image_manifest/vars/main.yml": ("__image_manifest_probes",),
}


def task_files() -> list[Path]:
    return sorted({path for pattern in GLOBS for path in ROOT.glob(pattern)})


def walk_tasks(node: object) -> Iterator[dict]:
    if isinstance(node, list):
        for item in node:
            yield from walk_tasks(item)
    elif isinstance(node, dict):
        if MODULES.intersection(node):
            yield node
        for key in NESTED:
            if key in node:
                yield from walk_tasks(node[key])


def command_string(task: dict) -> str | None:
    """The shell/command string of a task, or None where it runs argv.

    ansible.builtin.script also puts its executable into the shell line, unquoted, before the script.
    """
    for module in MODULES.intersection(task):
        value = task[module]
        args = task.get("args") if isinstance(task.get("args"), dict) else {}
        params = value if isinstance(value, dict) else args
        command = value if isinstance(value, str) else params.get("cmd")
        if not isinstance(command, str):
            return None
        executable = params.get("executable") if module.endswith("script") else None
        return f"{executable} {command}" if isinstance(executable, str) else command
    return None


def shell_contexts(text: str) -> list[tuple[str, str]]:
    """Each `{{ ... }}` in text with the shell context it stands in: 'bare', 'single', 'double' or 'heredoc'.

    A small reader of POSIX quoting: quotes, backslashes, $( ) (which opens a bare context again inside double
    quotes), comments and here-documents. Jinja expressions are skipped whole, so quotes inside them count
    for nothing.
    """
    found: list[tuple[str, str]] = []
    stack = ["bare"]
    heredocs: list[str] = []
    i = 0
    at_word_start = True
    while i < len(text):
        match = EXPRESSION.match(text, i)
        if match:
            found.append((match.group(1).strip(), stack[-1]))
            i = match.end()
            at_word_start = False
            continue
        char, state = text[i], stack[-1]
        if state == "heredoc":
            line_end = text.find("\n", i)
            line_end = len(text) if line_end < 0 else line_end
            line = text[i:line_end]
            if line.strip() == heredocs[0]:
                heredocs.pop(0)
                if not heredocs:
                    stack.pop()
                i = line_end + 1
                continue
            inner = EXPRESSION.search(line)
            if inner:
                found.append((inner.group(1).strip(), "heredoc"))
                i += inner.end()
            else:
                i = line_end + 1
            continue
        if state == "single":
            if char == "'":
                stack.pop()
            i += 1
            continue
        if char == "\\":
            i += 2
            continue
        if state == "double":
            if char == '"':
                stack.pop()
            elif text.startswith("$(", i):
                stack.append("bare")
                i += 1
            i += 1
            continue
        # bare (top level or inside $( ))
        if char == "'":
            stack.append("single")
        elif char == '"':
            stack.append("double")
        elif text.startswith("$(", i):
            stack.append("bare")
            i += 1
        elif char == ")" and len(stack) > 1:
            stack.pop()
        elif char == "#" and at_word_start:
            line_end = text.find("\n", i)
            i = len(text) if line_end < 0 else line_end
            continue
        elif text.startswith("<<", i):
            heredoc = re.match(r"<<-?\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1", text[i:])
            if heredoc:
                heredocs.append(heredoc.group(2))
                i += heredoc.end()
                continue
        elif char == "\n" and heredocs and stack[-1] == "bare" and len(stack) == 1:
            stack.append("heredoc")
        at_word_start = char in " \t\n;|&("
        i += 1
    return found


def problems(expressions: list[tuple[str, str]]) -> Iterator[tuple[str, str]]:
    """(expression, what is wrong) for each expression that is unquoted or quoted inside shell quotes."""
    for expression, context in expressions:
        if not QUOTED.search(expression):
            yield expression, "not quoted"
        elif context != "bare":
            yield expression, f"quoted inside {context} quotes"


def line_of(path: Path, task_name: str, expression: str) -> int:
    """The line of the expression in the task's command (the first after the task's name), for the message."""
    lines = path.read_text().splitlines()
    start = next(
        (n for n, line in enumerate(lines) if re.search(r"name:\s*[\"']?" + re.escape(task_name), line)), 0
    )
    needle = re.compile(r"\{\{\s*" + re.escape(expression) + r"\s*\}\}")
    return next((n + 1 for n in range(start, len(lines)) if needle.search(lines[n]) and n != start), 0)


@functools.cache
def findings() -> tuple[list[str], set[tuple[str, str, str]]]:
    failures: list[str] = []
    used: set[tuple[str, str, str]] = set()
    for path in task_files():
        rel = path.relative_to(ROOT).as_posix()
        for task in walk_tasks(yaml.load(path.read_text(), Loader=LOADER)):
            command = command_string(task)
            if command is None or "{{" not in command:
                continue
            name = str(task.get("name", "(unnamed)"))
            for expression, why in problems(shell_contexts(command)):
                key = (rel, name, expression)
                if key in ALLOWED and why == "not quoted":
                    used.add(key)
                    continue
                failures.append(
                    f"{rel}:{line_of(path, name, expression)}: {name}: {{{{ {expression} }}}}: {why}"
                )
    return failures, used


def test_every_expression_in_a_shell_or_command_string_is_quoted():
    failures, _used = findings()
    assert not failures, (
        "Quote these with `| quote` and no shell quotes around it (those would become part of the value),"
        " or pass argv, or add them to ALLOWED in tests/unit/test_shell_quoting.py with the place that"
        " validates them:\n" + "\n".join(failures)
    )


def test_allow_list_has_no_stale_entries():
    _failures, used = findings()
    assert set(ALLOWED) - used == set()


@pytest.mark.parametrize(("path", "keys"), sorted(SHELL_VALUES.items()))
def test_shell_valued_variables_quote_their_own_values(path, keys):
    data = yaml.safe_load((ROOT / path).read_text())
    for key in keys:
        value = data[key]
        texts = list(value.values()) if isinstance(value, dict) else [value]
        bad = [expr for text in texts for expr, _why in problems(shell_contexts(text))]
        assert not bad, f"{path}: {key}: {bad}"


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("rm -rf {{ dir }}/x", [("dir", "not quoted")]),
        ("rm -rf {{ (dir ~ '/x') | quote }}", []),
        ('rm -rf "{{ dir | quote }}"', [("dir | quote", "quoted inside double quotes")]),
        ("grep '^{{ name }}-'", [("name", "not quoted")]),
        ("awk '{print {{ x | quote }}}'", [("x | quote", "quoted inside single quotes")]),
        ('pid="$(cat {{ f | quote }})"', []),
        ("{% for k in ks %}echo {{ k | quote }};{% endfor %}", []),
        (
            "cat <<'EOF'\n{{ body | quote }}\nEOF\necho {{ x | quote }}",
            [("body | quote", "quoted inside heredoc quotes")],
        ),
        ("echo it\\'s {{ x | quote }}", []),
    ],
)
def test_the_reader_of_shell_strings(command, expected):
    assert list(problems(shell_contexts(command))) == expected


def test_argv_and_paths_are_not_read():
    task = {
        "ansible.builtin.command": {"argv": ["rm", "{{ x }}"], "creates": "{{ y }}", "chdir": "{{ z }}"},
    }
    assert command_string(task) is None
    assert command_string({"ansible.builtin.shell": "echo {{ x }}"}) == "echo {{ x }}"
    assert command_string({"ansible.builtin.shell": None, "args": {"cmd": "echo {{ x }}"}}) == "echo {{ x }}"
    script = {"ansible.builtin.script": {"cmd": "s.py", "executable": "{{ python }}"}}
    assert command_string(script) == "{{ python }} s.py"
    shell = {"ansible.builtin.shell": {"cmd": "echo", "executable": "{{ bash }}", "creates": "{{ y }}"}}
    assert command_string(shell) == "echo"
    nested = [{"block": [{"rescue": [], "always": [{"ansible.builtin.raw": "x"}]}]}]
    assert len(list(walk_tasks(nested))) == 1
