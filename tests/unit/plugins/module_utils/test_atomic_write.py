"""write_text_atomic: the file appears whole with its mode, or the old one stays and no temporary is left."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.trainstack.cluster.plugins.module_utils.files.atomic import write_text_atomic


def test_the_file_is_replaced_whole_at_its_mode_and_its_directory_made(tmp_path: Path) -> None:
    path = tmp_path / "runs" / "r1" / "job.sbatch"
    write_text_atomic(str(path), "#!/bin/bash\n", 0o755, dir_mode=0o750)
    assert path.read_text() == "#!/bin/bash\n" and oct(path.stat().st_mode & 0o777) == "0o755"
    assert oct(path.parent.stat().st_mode & 0o777) == "0o750"
    write_text_atomic(str(path), "secret\n", 0o600)
    assert path.read_text() == "secret\n" and oct(path.stat().st_mode & 0o777) == "0o600"
    assert [p.name for p in path.parent.iterdir()] == ["job.sbatch"]


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "attempts.json"
    path.write_text("[]\n")
    with pytest.raises(ValueError):
        write_text_atomic(str(path), "\ud800 not encodable", 0o644)
    assert path.read_text() == "[]\n" and [p.name for p in tmp_path.iterdir()] == ["attempts.json"]


def test_without_dir_mode_a_missing_directory_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        write_text_atomic(str(tmp_path / "missing" / "f"), "x", 0o644)
