"""The real agent programs (Claude Code, Codex CLI, Gemini CLI, OpenCode, GitHub Copilot CLI),
installed from npm for tests.

The versions are pinned in tests/agents/package.json; `.ci/run` installs them before the
suite, and a developer's first run installs them here the same way (npm, registry only).
Nothing is faked: a test that needs a program fails when it cannot be installed.
"""

from __future__ import annotations

import fcntl
import json
import shutil
import subprocess
from pathlib import Path

from .npm_kit import NpmKit
from .paths import TESTS

AGENTS_DIR = TESTS / "agents"
PACKAGES = {
    "claude": "@anthropic-ai/claude-code",
    "codex": "@openai/codex",
    "gemini": "@google/gemini-cli",
    "opencode": "opencode-ai",
    "copilot": "@github/copilot",
}
# GitHub Copilot CLI unpacks ~235 MB into $XDG_CACHE_HOME/copilot on its first start; the
# tests' scratch HOMEs share this one (inside the ignored node_modules).
COPILOT_CACHE = AGENTS_DIR / "node_modules" / ".copilot-cache"


KIT = NpmKit(AGENTS_DIR, PACKAGES.values(), PACKAGES, needed_by="the agent-program tests")


def pinned_version(program: str) -> str:
    return KIT.pinned_version(PACKAGES[program])


def installed_version(program: str) -> str | None:
    return KIT.installed_version(PACKAGES[program])


def install() -> None:
    """npm install into tests/agents unless every pinned version is already there, under
    the lock that makes a second worker wait for the first's whole install (npm_kit)."""
    KIT.install()


def program(name: str) -> Path:
    """The path of an agent program's executable (installing the pinned set if needed)."""
    return KIT.command(name)


def claude_signed_in(home: Path, api_key: str, trusted: Path | None = None, channels: bool = False, auto_mode_seen: bool = True) -> None:
    """Write the scratch HOME's ~/.claude.json as a signed-in user's would be, so Claude Code
    starts straight into its prompt: onboarding done, `api_key` approved (Claude Code keeps
    its last 20 characters), the folder `trusted` trusted, and with `channels` the account's
    switch for channels (`tengu_harbor` in `cachedGrowthBookFeatures`, as Claude Code's own
    service sets it) on. With `auto_mode_seen` (the default) the user has already seen
    Claude Code 2.1.332's auto-mode offer ("Make auto mode your default permission mode?")
    and its notice ("Auto mode is now Claude Code's default permission mode."): which of the
    two a fresh HOME meets, if any, varies from start to start, and a test about something
    else must not depend on it (its `hasSeenAutoDefaultNudge`, `hasSeenAutoDefaultNotice`)."""
    state: dict = {"hasCompletedOnboarding": True, "theme": "dark", "customApiKeyResponses": {"approved": [api_key[-20:]], "rejected": []}}
    if auto_mode_seen:
        state.update(hasSeenAutoDefaultNudge=True, hasSeenAutoDefaultNotice=True)
    if trusted is not None:
        state["projects"] = {str(trusted): {"hasTrustDialogAccepted": True, "hasCompletedProjectOnboarding": True}}
    if channels:
        state["cachedGrowthBookFeatures"] = {"tengu_harbor": True}
    home.mkdir(exist_ok=True)
    (home / ".claude.json").write_text(json.dumps(state))


def copilot_env(home: Path, url: str, trusted: Path | None = None, model: str = "gpt-4.1") -> dict[str, str]:
    """The environment that runs GitHub Copilot CLI against the scripted model at `url`
    (its "completions" wire, /v1/chat/completions) with no sign-in, and the scratch HOME's
    ~/.copilot/config.json with the folder `trusted` trusted, as Copilot's own question
    at the first start in a folder records it."""
    copilot_home = home / ".copilot"
    copilot_home.mkdir(parents=True, exist_ok=True)
    config = {"trustedFolders": [str(trusted)]} if trusted is not None else {}
    (copilot_home / "config.json").write_text(json.dumps(config))
    return {"COPILOT_PROVIDER_BASE_URL": f"{url}/v1", "COPILOT_MODEL": model, "COPILOT_OFFLINE": "true",
            "COPILOT_AUTO_UPDATE": "false", "XDG_CACHE_HOME": str(COPILOT_CACHE)}


def opencode_config(project: Path, url: str, extra: dict | None = None) -> None:
    """The project's opencode.json with one OpenAI-compatible provider, the scripted model
    at `url` (OpenCode speaks /v1/chat/completions to it), as the model; `extra` adds keys
    (such as relay's `mcp` block)."""
    config = {
        "$schema": "https://opencode.ai/config.json",
        "provider": {"scripted": {"npm": "@ai-sdk/openai-compatible", "name": "Scripted",
                                  "options": {"baseURL": f"{url}/v1", "apiKey": "sk-scripted"},
                                  "models": {"scripted-model": {"name": "Scripted", "tool_call": True}}}},
        "model": "scripted/scripted-model",
        "autoupdate": False,
        "share": "disabled",
        **(extra or {}),
    }
    (project / "opencode.json").write_text(json.dumps(config, indent=2))


def opencode_env(project: Path, home: Path) -> dict[str, str]:
    """OpenCode offline: no fetch of the public model list, and an empty one in its place
    (the scripted provider is in opencode.json). With its built-in list of every public
    model, a start costs about 5 CPU-seconds more and an idle session a third of a core.
    It reads its configuration from $PWD, not from the directory it was started in, so PWD
    names the project. The scratch `home` and the project get the plugin package OpenCode's
    first start installs there."""
    for folder in (home / ".config" / "opencode", project / ".opencode"):
        _opencode_plugin_package(folder)
    models = home / ".cache" / "opencode-models.json"
    models.parent.mkdir(parents=True, exist_ok=True)
    models.write_text("{}")
    return {"OPENCODE_DISABLE_MODELS_FETCH": "1", "OPENCODE_MODELS_PATH": str(models), "PWD": str(project)}


def _opencode_plugin_package(folder: Path) -> None:
    """OpenCode npm-installs its plugin package into each folder it reads plugins from, at
    the first start that finds the folder without it: ~/.config/opencode always, the
    project's .opencode once it exists (relay's plugin is there). That costs about 8
    CPU-seconds a folder here, more than the rest of the start. It skips the install when
    the package, its package.json and its package-lock.json are there: the tests' scratch
    folders share one install (inside the ignored node_modules, like COPILOT_CACHE), made
    the same way."""
    kit = _opencode_plugin_install()
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("package.json", "package-lock.json"):
        shutil.copyfile(kit / name, folder / name)
    (folder / "node_modules").symlink_to(kit / "node_modules")


def _opencode_plugin_install() -> Path:
    install()
    kit = AGENTS_DIR / "node_modules" / ".opencode-home" / "opencode"  # named as OpenCode's own directory: the lock records it
    wanted = {"dependencies": {"@opencode-ai/plugin": installed_version("opencode")}}

    def ready() -> bool:
        try:
            return json.loads((kit / "package.json").read_text()) == wanted and (kit / "package-lock.json").exists()
        except (OSError, ValueError):
            return False

    kit.mkdir(parents=True, exist_ok=True)
    with open(kit.parent / ".install.lock", "a") as lock:  # held as npm_kit holds its own
        fcntl.flock(lock, fcntl.LOCK_SH)
        if ready():
            return kit
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not ready():
            (kit / "package-lock.json").unlink(missing_ok=True)
            (kit / "package.json").write_text(json.dumps(wanted, indent=2) + "\n")
            subprocess.run([shutil.which("npm") or "npm", "install", "--no-audit", "--no-fund", "--loglevel=error"],
                           cwd=kit, check=True, timeout=600)
    return kit
