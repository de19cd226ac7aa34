"""Product files speak of the product: no tracker numbers, nothing about how the project was developed.

A reader of a role, a doc or a make file cannot open the project's tracker or its development notes, so a
line such as "added for issue 6" or "the machine lent for this session" tells them nothing and ages badly.
Changelog fragments are the one place where such history belongs, so changelogs/ is left out.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.support import REPO

# Each rule: (name shown in a failure, pattern). Case-insensitive; worded so that ordinary uses of the same
# words stay allowed: pytest session scope, SSH and boto3 sessions, test helpers, a template that blocked
# services during a build.
RULES: tuple[tuple[str, str], ...] = (
    ("tracker number", r"\bissues?[ -]#?\d+"),
    ("tracker reference", r"\bthe issue's\b|\bin the issue\b|\bthe issue requires\b"),
    ("development brief", r"(?:\b|_)the[ _]brief(?:\b|_)"),
    ("lent machines", r"\blent\b"),
    ("machine kind of a lending tool", r"\bnvidia-h200(?:-x\d+)?\b"),
    ("device budget", r"\bdevice[- ]minutes?\b|\bdevice (?:tool|calls?|machine)\b|`device` tool"),
    ("work session", r"\bwork sessions?\b|\bin this session\b|\bthe session's \d+ minutes\b"),
    ("tracker state", r"\bmark(?:ing|ed)?\b[^.\n]{0,40}\bblocked\b"),
    ("file outside the repository", r"\bENVIRONMENT\.md\b|\bhelper-common\.md\b|\.\./shared/(?-i:[A-Z])"),
)
PATTERN = re.compile("|".join(f"(?P<r{i}>{rx})" for i, (_rule_name, rx) in enumerate(RULES)), re.IGNORECASE)
SKIPPED_DIRS = ("changelogs/",)
# This file quotes the wording it looks for, as examples for its rules.
SELF = Path(__file__).resolve().relative_to(REPO).as_posix()


def tracked_files() -> list[str]:
    """Files git tracks in this checkout (a built collection has no .git: the test then has nothing to do)."""
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout.decode()
    return [p for p in out.split("\0") if p and p != SELF and not p.startswith(SKIPPED_DIRS)]


def text_of(path: Path) -> str | None:
    """The file's text, or None for binaries (a NUL byte) and for paths deleted but not yet committed."""
    try:
        data = path.read_bytes()
    except (FileNotFoundError, IsADirectoryError):
        return None
    if b"\0" in data:
        return None
    return data.decode("utf-8", errors="replace")


def hits_in(text: str) -> list[tuple[int, str, str]]:
    """(line number, rule name, matched text) for every rule hit in one file's text."""
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        for match in PATTERN.finditer(line):
            rule = RULES[int(match.lastgroup[1:])][0]
            found.append((number, rule, match.group(0)))
    return found


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("# AWS fabric roles (issue 6).", "tracker number"),
        ("The issue-8 runs", "tracker number"),
        ("issues 8, 9, 11 part 1", "tracker number"),
        ("the issue's bar: 1.25x", "tracker reference"),
        ("def test_current_stack_matches_the_brief():", "development brief"),
        ("x4 and x8 were not lent", "lent machines"),
        ("on `nvidia-h200-x2`", "machine kind of a lending tool"),
        ("16.5 device minutes", "device budget"),
        ("in one call of the `device` tool", "device budget"),
        ("16.5 of the session's 30 minutes", "work session"),
        ("### Not run (for marking it blocked)", "tracker state"),
        ("(shared/ENVIRONMENT.md)", "file outside the repository"),
    ],
)
def test_rules_catch_development_wording(line: str, expected: str) -> None:
    """Each rule catches the wording it is for, so a rule that stops matching is noticed."""
    assert [rule for _number, rule, _text in hits_in(line)] == [expected]


@pytest.mark.parametrize(
    "line",
    [
        '@pytest.fixture(scope="session")',
        "aws ssm start-session --document-name AWS-StartSSHSession",
        "Explicit regions, else the session's default region",
        "Shared test helpers: where the repository lives",
        "create: ../shared/create.yml",
        "the template blocked them during the build",
        "node_procs_blocked",
        "limits of a new PAM session",
    ],
)
def test_rules_allow_ordinary_words(line: str) -> None:
    """Sessions, helpers and blocking in their ordinary senses are product wording."""
    assert hits_in(line) == []


def test_product_files_speak_of_the_product() -> None:
    """No tracked file outside changelogs/ carries a tracker number or development-process wording."""
    problems = []
    for name in tracked_files():
        text = text_of(REPO / name)
        if text is None:
            continue
        problems += [f"{name}:{n}: {rule}: {found!r}" for n, rule, found in hits_in(text)]
    assert not problems, "product files speak of how they were made:\n" + "\n".join(problems)
