"""Every Jinja expression interpolated into a shell or command string is shell-quoted (`| quote`).

The command strings of ansible.builtin.shell, command (free form or cmd:), raw and script tasks in roles,
playbooks and molecule scenarios are read (blocks, rescue and always walked) and each `{{ ... }}` in them must
end in `| quote`, unless ALLOWED names it with the reason it is safe. A quoted expression must also stand
outside shell quotes: `"{{ x | quote }}"` would put literal quote characters into the value. argv lists run no
shell and are not read; nor are creates/removes/chdir, which are paths, not shell. The executable of a
script task is read: Ansible joins it into the shell line unquoted.

The roles' shell script templates (SCRIPT_GLOBS) are read the same way, with their Jinja statements and
comments taken out: each value is `| quote`d (or a call of a macro that quotes), an integer (`| int`), a
literal, or named in SCRIPT_ALLOWED with the check that validates it; and each shell parameter expansion of
the script's text (`$x`, `${x...}`) stands in double quotes, where no word splitting or globbing reaches it,
unless SCRIPT_ALLOWED names it (splitting on purpose). Comment lines are the script's text, not its shell,
and are not read: that includes the `#SBATCH` lines, which sbatch reads (their values are checked by
module_utils/launch/plan.py).
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
# A shell parameter expansion: $name, ${...}, or a special or positional parameter.
PARAMETER = re.compile(r"\$(\{[^}]*\}|[A-Za-z_][A-Za-z0-9_]*|[0-9?@*#$!-])")
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


SCRIPT_GLOBS = ("roles/*/templates/*.sh.j2", "roles/*/templates/*.sbatch.j2")
# Values safe anywhere in a script: an integer, or a literal (template text written as an expression).
INTEGER = re.compile(r"\|\s*int\s*$")
LITERAL = re.compile(r"^(?:'[^']*'|\"[^\"]*\")$")
JINJA_STATEMENT = re.compile(r"\{#.*?#\}|\{%.*?%\}", re.S)
QUOTING_MACRO = re.compile(r"\{%-?\s*macro\s+(\w+)\(.*?%\}\s*\{\{(.*?)\}\}\s*\{%-?\s*endmacro", re.S)
LAUNCH_PLAN = "module_utils/launch/plan.py checks it before a script is written"

# (template, expression between the braces or shell expansion, as written): why it may stand unquoted.
SCRIPT_ALLOWED: dict[tuple[str, str], str] = {
    ("roles/efa/templates/fabric-profile.sh.j2", "key"): (
        "an upper-case shell name: roles/efa/tasks/validate.yml refuses any other before the file is written"
    ),
    ("roles/training_job/templates/job.sbatch.j2", "key"): (
        f"an environment variable name (ENV_NAME) or a long option's name (OPTION_NAME): {LAUNCH_PLAN}"
    ),
    ("roles/training_job/templates/run-local.sh.j2", "key"): (
        f"an environment variable name (ENV_NAME) or a long option's name (OPTION_NAME): {LAUNCH_PLAN}"
    ),
    ("roles/training_job/templates/job.sbatch.j2", "__training_job_plan.image.pinned | default('')"): (
        f"an image reference with its digest, of [A-Za-z0-9._:/@#+-] (IMAGE_REF): {LAUNCH_PLAN}"
    ),
    ("roles/training_job/templates/nsys-wrap.sh.j2", "training_job_nsys_ranks | join(',')"): (
        "integers joined by ',': the argument spec's elements: int"
        " (roles/training_job/meta/argument_specs.yml)"
    ),
    ("roles/training_job/templates/nsys-wrap.sh.j2", "training_job_nsys_args"): (
        f"nsys's options, split into words on purpose (the template says so), of [A-Za-z0-9_=,.:/ +-] "
        f"(NSYS_ARGS): {LAUNCH_PLAN}"
    ),
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


def shell_contexts(text: str, bare_expansions: list[str] | None = None) -> list[tuple[str, str]]:
    """Each `{{ ... }}` in text with the shell context it stands in: 'bare', 'single', 'double' or 'heredoc'.

    A small reader of POSIX quoting: quotes, backslashes, $( ) (which opens a bare context again inside double
    quotes), comments and here-documents. Jinja expressions are skipped whole, so quotes inside them count
    for nothing. With ``bare_expansions``, the shell parameter expansions that stand outside any quotes (where
    the shell splits and globs them) are appended to it.
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
        parameter = PARAMETER.match(text, i) if bare_expansions is not None else None
        if parameter:
            bare_expansions.append(parameter.group(0))
            i = parameter.end()
            at_word_start = False
            continue
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


def script_text(text: str) -> tuple[str, set[str]]:
    """A shell template as the shell reads it, less what Jinja alone reads: statements and comments taken out,
    each expression on one line (so that a comment line holds its expressions whole); and the names of its
    macros whose whole output is a quoted value."""
    macros = {name for name, body in QUOTING_MACRO.findall(text) if QUOTED.search(body.strip())}
    shell = JINJA_STATEMENT.sub("", text)
    return EXPRESSION.sub(lambda m: "{{ " + " ".join(m.group(1).split()) + " }}", shell), macros


def script_problems(text: str) -> Iterator[tuple[str, str]]:
    """(expression or expansion, what is wrong) for each value of a shell template that may be split, globbed
    or read as shell syntax."""
    shell, macros = script_text(text)
    expansions: list[str] = []
    for expression, context in shell_contexts(shell, expansions):
        if INTEGER.search(expression) or LITERAL.match(expression):
            continue
        call = re.match(r"^(\w+)\(", expression)
        if call and call.group(1) in macros:
            expression = f"{expression} | quote"
        for found, why in problems([(expression, context)]):
            yield found.removesuffix(" | quote") if call else found, why
    for expansion in expansions:
        yield expansion, "unquoted shell expansion"


@functools.cache
def script_findings() -> tuple[list[str], set[tuple[str, str]]]:
    failures: list[str] = []
    used: set[tuple[str, str]] = set()
    for path in sorted({path for pattern in SCRIPT_GLOBS for path in ROOT.glob(pattern)}):
        rel = path.relative_to(ROOT).as_posix()
        for found, why in script_problems(path.read_text()):
            if (rel, found) in SCRIPT_ALLOWED and why in ("not quoted", "unquoted shell expansion"):
                used.add((rel, found))
                continue
            failures.append(f"{rel}: {found}: {why}")
    return failures, used


def test_every_value_in_a_shell_script_template_is_quoted_or_validated():
    failures, _used = script_findings()
    assert not failures, (
        'Quote these (`| quote` for a Jinja value, outside shell quotes; "$x" for a shell variable), or make'
        " an integer `| int`, or add them to SCRIPT_ALLOWED in tests/unit/test_shell_quoting.py with the"
        " check that validates them:\n" + "\n".join(failures)
    )


def test_script_allow_list_has_no_stale_entries():
    _failures, used = script_findings()
    assert set(SCRIPT_ALLOWED) - used == set()


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ('d="{{ dir }}/x"\n', [("dir", "not quoted")]),
        ('d={{ dir | quote }}\nrm -rf "$d"\n', []),
        ("rm -rf $d\n", [("$d", "unquoted shell expansion")]),
        ("x=\"${1:-$d}\"; n=$(( {{ n | int }} * 2 )); echo {{ '{' }}\n", []),
        ("rc=$?\n", [("$?", "unquoted shell expansion")]),
        ("# {{ note }} $x\n{# {{ y }} $z #}{% if a %}echo ok{% endif %}\n", []),
        ("{% macro w(v) %}{{ v | quote }}{% endmacro %}\nrun {{ w(x) }}\n", []),
        (
            '{% macro w(v) %}{{ v }}{% endmacro %}\nrun "{{ w(x) }}"\n',
            [("v", "not quoted"), ("w(x)", "not quoted")],
        ),
        ("bash -c 'echo $1' _ {{ x | quote }}\n", []),
    ],
)
def test_the_reader_of_shell_templates(template, expected):
    assert list(script_problems(template)) == expected


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
