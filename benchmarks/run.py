"""Run every benchmark side by side in one run; print a table and write JSON.

    python -m benchmarks.run            # full run, writes benchmarks/results/latest.json
    python -m benchmarks.run --quick    # smaller sizes, for a smoke check
    python -m benchmarks.run store mcp  # only some areas

Each area is a module `benchmarks/bench_<area>.py` with `run(quick: bool) -> list[Row]`.
Targets are DESIGN §6's; this machine is noisy, so compare ratios within one run.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import sys
import time

from .common import Row

AREAS = ("store", "daemon", "startup", "delivery", "mcp", "coord", "guard", "prompt", "ignite", "search", "web", "bridge", "wake", "programs")
RESULTS = os.path.join(os.path.dirname(__file__), "results")


def table(rows: list[Row]) -> str:
    lines = [
        "| area | measurement | value | target | met |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        met = "—" if r.ok is None else ("yes" if r.ok else "**no**")
        value = f"{r.value:.3g} {r.unit}" if isinstance(r.value, float) else f"{r.value} {r.unit}"
        note = f" ({r.note})" if r.note else ""
        lines.append(f"| {r.area} | {r.name}{note} | {value} | {r.target or '—'} | {met} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("areas", nargs="*", metavar="AREA", help=f"areas to run: {', '.join(AREAS)} (default: all)")
    parser.add_argument("--quick", action="store_true", help="smaller sizes; results are not comparable")
    parser.add_argument("--out", default=os.path.join(RESULTS, "latest.json"), help="where to write the JSON")
    args = parser.parse_args(argv)
    rows: list[Row] = []
    failed: list[str] = []
    for area in args.areas or AREAS:
        try:
            module = importlib.import_module(f"benchmarks.bench_{area}")
        except ModuleNotFoundError as exc:
            if exc.name == f"benchmarks.bench_{area}":
                print(f"(no benchmarks for {area} yet)", file=sys.stderr)
                continue
            raise
        print(f"running {area} ...", file=sys.stderr, flush=True)
        try:
            rows.extend(module.run(args.quick))
        except Exception as exc:  # one broken area must not cost the others' rows and the JSON
            failed.append(area)
            print(f"{area} failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            rows.append(Row(area, "(the area failed: no rows)", float("nan"), "", ok=False, note=f"{type(exc).__name__}: {exc}"[:200]))
    print(table(rows))
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as fh:
        json.dump(
            {
                "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
                "quick": args.quick,
                "rows": [r.as_dict() for r in rows],
            },
            fh,
            indent=2,
        )
    print(f"\nwrote {args.out}", file=sys.stderr)
    if failed:
        print(f"benchmarks.run: failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
