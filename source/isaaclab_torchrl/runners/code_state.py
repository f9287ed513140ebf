"""The git state of the code a run trained with, stored in its run folder as rsl_rl does (``git/<repo>.diff``)."""

from __future__ import annotations

import os
import subprocess


def _git(directory: str, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=directory, capture_output=True, text=True, check=True, timeout=30
    ).stdout.strip()


def store_code_state(log_dir: str, source_files: list[str]) -> list[str]:
    """Writes ``<log_dir>/git/<repository>.diff`` (commit, status and diff against it) for the repository of each
    file in ``source_files`` (this package, the task's package); files outside a git checkout (an installed
    package) are skipped. Returns the files written."""
    written = []
    for source in source_files:
        try:
            top = _git(os.path.dirname(os.path.abspath(source)), "rev-parse", "--show-toplevel")
            path = os.path.join(log_dir, "git", f"{os.path.basename(top)}.diff")
            if path in written:  # a repository holding several of the files
                continue
            commit = _git(top, "rev-parse", "HEAD")
            status, diff = _git(top, "status", "--short"), _git(top, "diff", "HEAD")
        except (OSError, subprocess.SubprocessError):
            continue
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as file:
            file.write(f"--- git commit ---\n{commit}\n\n--- git status ---\n{status}\n\n--- git diff ---\n{diff}\n")
        written.append(path)
    return written
