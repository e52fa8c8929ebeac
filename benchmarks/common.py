"""Shared helpers for the benchmark modules: result rows, timing, child environments."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import shutil
import tempfile
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Callable, Iterator


@dataclass
class Row:
    """One line of the results table.

    `target` is the DESIGN §6 goal as text (e.g. "<= 0.5 ms"), `ok` whether this run met
    it (None when the row is a reference point with no target of its own).
    """

    area: str
    name: str
    value: float
    unit: str
    target: str = ""
    ok: bool | None = None
    note: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def p99_ms(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000


def time_calls(func: Callable[[], object], count: int) -> list[float]:
    samples = []
    for _ in range(count):
        start = time.perf_counter()
        func()
        samples.append(time.perf_counter() - start)
    return samples


def time_process(argv: list[str], env: dict[str, str] | None = None, count: int = 20) -> list[float]:
    """Wall time of whole processes, each run to completion."""
    samples = []
    for _ in range(count):
        start = time.perf_counter()
        subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        samples.append(time.perf_counter() - start)
    return samples


def scratch_dir(prefix: str = "rb-") -> str:
    return tempfile.mkdtemp(prefix=prefix, dir="/tmp")


def child_env(store: str, socket: str | None = None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RELAY_", "OVLD_"))}
    env["RELAY_DIR"] = store
    env["RELAY_SOCKET"] = socket or os.path.join(store, "relayd.sock")
    env.pop("XDG_RUNTIME_DIR", None)
    env.update(extra)
    return env


PYTHON = sys.executable


_PLAIN: list[str] = []  # the regular install's interpreter, made once per run


def plain_install() -> tuple[str, str]:
    """(python, note): an interpreter with relay installed as users install it, `pip install .`
    into a scratch venv (relayctl is the project's own script, bin/relayctl), made once per run. An editable
    install (`pip install -e`, this checkout's venv) runs setuptools' editable finder in
    every interpreter start, python -c pass included, which inflates the baseline. The
    dependencies come from this venv through a .pth line (a plain path: its own .pth files,
    the editable finder among them, are not run). Without pip's network, this venv."""
    if not _PLAIN:
        import atexit
        import sysconfig

        root = tempfile.mkdtemp(prefix="rb-plain-", dir="/tmp")
        atexit.register(shutil.rmtree, root, ignore_errors=True)
        python = os.path.join(root, "bin", "python")
        source = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        made = subprocess.run([PYTHON, "-m", "venv", "--without-pip", root], capture_output=True).returncode == 0 and subprocess.run(
            [PYTHON, "-m", "pip", "--python", python, "install", "-q", "--no-deps", source], capture_output=True, env=dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1")
        ).returncode == 0
        if made:
            site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], capture_output=True, text=True, check=True).stdout.strip()
            with open(os.path.join(site, "relay-dependencies.pth"), "w") as pth:
                pth.write(sysconfig.get_path("purelib") + "\n")
            _PLAIN.extend([python, "a regular install, pip install . into a scratch venv"])
        else:
            _PLAIN.extend([PYTHON, "this venv, an editable install (pip install . failed: no index?)"])
    return _PLAIN[0], _PLAIN[1]


# What pip writes for a [project.scripts] entry point (relayctl was one until start-up was
# measured on a regular install: its `import re` cost more than the fast path's imports).
ENTRY_POINT_WRAPPER = """#!{python}
import re
import sys
from relayctl.fast import main
if __name__ == '__main__':
    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])
    sys.exit(main())
"""


def cli_start(
    area: str,
    env: dict[str, str],
    commands: dict[str, list[str]],
    target: float | dict[str, float],
    situation: str,
    runs: int,
    stdin: dict[str, bytes] | None = None,
    floors: dict[str, tuple[str, str]] | None = None,
) -> list[Row]:
    """Whole `relayctl` processes, started as users start them (the installed script) on a
    regular install (`plain_install`), next to that interpreter's own `python -c pass`,
    interleaved so drift hits all alike: one ratio row each, with both absolute times. For
    the first command also through an entry-point wrapper as pip writes it, for reference.
    `stdin`: what a command reads (a hook's event), by its name. `target`: one ratio for
    all, or one per command. `floors`: `python -c CODE` runs timed in the same rounds, each a
    row of its own (label -> (CODE, what it shows)): what no command can start faster than,
    or a client to compare with.
    Bytecode cached as an installed package runs (`bytecode_cached`), filled by a first
    untimed round."""
    python, installed = plain_install()
    script = os.path.join(os.path.dirname(python), "relayctl")
    wrapper = os.path.join(os.path.dirname(python), "relayctl-entry-point")
    with open(wrapper, "w") as out:
        out.write(ENTRY_POINT_WRAPPER.format(python=python))
    os.chmod(wrapper, 0o755)
    first = next(iter(commands))
    floors = floors or {}
    argvs = {
        "python -c pass": [python, "-c", "pass"],
        **{name: [script, *argv] for name, argv in commands.items()},
        "wrapper": [wrapper, *commands[first]],
        **{name: [python, "-c", code] for name, (code, _) in floors.items()},
    }
    samples: dict[str, list[float]] = {name: [] for name in argvs}
    with bytecode_cached(env) as cached:
        for round_ in range(runs + 1):
            for name, argv in argvs.items():
                start = time.perf_counter()
                subprocess.run(argv, env=cached, cwd="/", input=(stdin or {}).get(name, b""), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
                if round_:  # the first round fills the bytecode cache
                    samples[name].append(time.perf_counter() - start)
    base = median_ms(samples["python -c pass"])
    rows = [Row(area, f"python -c pass, {situation} (reference: the interpreter of {installed})", round(base, 1), "ms", note=f"median of {runs}, interleaved with the rows below")]
    for name in commands:
        took = median_ms(samples[name])
        goal = target[name] if isinstance(target, dict) else target
        rows.append(Row(area, f"relayctl {name}, {situation}: whole process / python -c pass", round(took / base, 2), "x", f"<= {goal:g}x", took / base <= goal, f"{took:.1f} ms vs {base:.1f} ms"))
    took = median_ms(samples["wrapper"])
    rows.append(Row(area, f"  relayctl {first}, {situation}, through a [project.scripts] wrapper as pip writes it (reference)", round(took / base, 2), "x", note=f"{took:.1f} ms; its `import re` is what relayctl's own script saves"))
    for name, (code, shows) in floors.items():
        took = median_ms(samples[name])
        rows.append(Row(area, f"  {name}, {situation}: python -c / python -c pass", round(took / base, 2), "x", note=f"{took:.1f} ms; {shows}; python -c {code!r}"))
    fast, full = import_ms([script, *commands[first]], env, python), import_ms(["-m", "relayctl.cli", *commands[first]], env, python)
    rows.append(Row(area, f"  imports of relayctl {first}, {situation} (-X importtime)", round(fast, 1), "ms", note=f"the full click CLI, as every command started before the fast path: {full:.1f} ms"))
    return rows


def import_ms(args: list[str], env: dict[str, str], python: str = PYTHON, runs: int = 5) -> float:
    """Median over `runs` of the time a process spends importing (the top-level entries of
    `python -X importtime`, which nest everything below them), bytecode caches warm."""
    totals = []
    with bytecode_cached(env) as cached:
        for round_ in range(runs + 1):
            done = subprocess.run([python, "-X", "importtime", *args], env=cached, cwd="/", stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            total = 0
            for line in done.stderr.splitlines():
                # "import time:  self [us] | cumulative | package"; nested ones are indented.
                if line.startswith("import time:") and "|" in line:
                    _, cumulative, name = line.split("|", 2)
                    if cumulative.strip().isdigit() and not name[1:].startswith(" "):
                        total += int(cumulative)
            if round_:  # the first round fills the bytecode cache
                totals.append(total / 1000)
    return statistics.median(totals)


@contextmanager
def bytecode_cached(env: dict[str, str]) -> Iterator[dict[str, str]]:
    """`env` for processes that run as an installed package runs, with bytecode caches:
    PYTHONDONTWRITEBYTECODE (some sandboxes set it) would make every start recompile
    relay's modules, so the caches go to a scratch PYTHONPYCACHEPREFIX, removed after."""
    cache = tempfile.mkdtemp(prefix="rb-pyc-", dir="/tmp")
    try:
        yield {**{k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}, "PYTHONPYCACHEPREFIX": cache}
    finally:
        shutil.rmtree(cache, ignore_errors=True)
