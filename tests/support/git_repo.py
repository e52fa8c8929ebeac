"""A real git repository whose commits run the installed hooks (the pre-commit guard) with a
test's environment, committing as a given agent (RELAY_AGENT)."""

from __future__ import annotations

import subprocess
from pathlib import Path


class Repo:
    """A real git repository; commits run the installed hooks with the test's environment."""

    def __init__(self, path: Path, env: dict[str, str]) -> None:
        self.path = path
        self.env = dict(env, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.org", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.org")
        self.env.pop("RELAY_AGENT", None)
        path.mkdir()
        self.git("init", "-q")
        self.write("src/auth/login.py", "login\n")
        self.write("README.md", "readme\n")
        self.git("add", "-A")
        self.git("commit", "-qm", "start", "--no-verify")

    def git(self, *args: str, agent: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        env = dict(self.env, RELAY_AGENT=agent) if agent else self.env
        done = subprocess.run(["git", *args], cwd=self.path, env=env, capture_output=True, text=True, timeout=60)
        if check and done.returncode:
            raise AssertionError(f"git {' '.join(args)} exited {done.returncode}: {done.stderr}")
        return done

    def write(self, name: str, text: str) -> None:
        target = self.path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)

    def commit(self, *names: str, agent: str | None = None) -> subprocess.CompletedProcess[str]:
        for name in names:
            self.write(name, f"{name} changed by {agent}\n")
        self.git("add", "-A")
        return self.git("commit", "-qm", f"change {' '.join(names)}", agent=agent, check=False)

    def head_files(self) -> str:
        return self.git("show", "--name-only", "--format=", "HEAD").stdout

    def hooks(self) -> Path:
        return self.path / ".git" / "hooks"
