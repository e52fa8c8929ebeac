"""The one error table (relayd/errors.py): one class per wire code, complete at import."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from relayd import errors
from support.paths import ROOT



def test_a_code_comes_back_as_its_class_before_its_module_is_imported() -> None:
    """The client of a relayd that failed a wake-up (or an IGNITE parse, or a queue lock)
    gets WakeFailed etc., although the client never imported relayd.team.wake."""
    script = (
        "import sys\n"
        "from relayd.errors import from_wire\n"
        "for code in ('wake_failed', 'invalid_message', 'queue_busy', 'startup_failed', 'dropped', 'internal'):\n"
        "    print(code, type(from_wire({'code': code, 'message': 'm'})).__name__)\n"
        "print(sorted(m for m in sys.modules if m in ('relayd.team.wake', 'relayd.ignite.mime', 'relayd.ignite.queue', 'relayd.daemon.lifecycle')))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == [
        "wake_failed WakeFailed",
        "invalid_message InvalidMessage",
        "queue_busy QueueBusy",
        "startup_failed StartupError",
        "dropped Dropped",
        "internal Internal",
        "[]",
    ]


def test_every_code_is_one_class_with_a_docstring() -> None:
    classes = list(errors.BY_CODE.values())
    assert len({cls.code for cls in classes}) == len(classes)
    for code, cls in errors.BY_CODE.items():
        assert cls.code == code and cls.__module__ == "relayd.errors"
        assert cls.__doc__ and len(cls.__doc__.split()) >= 5, f"{cls.__name__} says nothing about when it is raised"
    # the two that reused other codes before
    assert errors.StartupError.code not in ("unavailable", "conflict") and errors.QueueBusy.code != "conflict"
    # what an unknown code from a newer relayd becomes: the base, keeping the code
    unknown = errors.from_wire({"code": "from_the_future", "message": "m", "details": {"x": 1}})
    assert type(unknown) is errors.RelayError and unknown.code == "from_the_future" and unknown.details == {"x": 1}


def test_misuse_and_a_misbehaving_peer_are_two_classes() -> None:
    assert not issubclass(errors.PeerError, errors.ProtocolError) and not issubclass(errors.ProtocolError, errors.PeerError)
    assert errors.from_wire({"code": "protocol_error", "message": "m"}).__class__ is errors.ProtocolError


def test_no_wire_code_is_spelled_outside_the_table() -> None:
    """Everyone names an error by its class (`Unavailable.code`), so a code has one home."""
    codes = "|".join(re.escape(code) for code in errors.BY_CODE if code != "error")
    spelled = re.compile(rf"""(\bcode\s*[=!]=?\s*|Violation\(\s*)["']({codes})["']""")
    found = []
    for package in ("relayd", "relayctl", "mcp_shim"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.name == "errors.py" and path.parent.name == "relayd":
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if spelled.search(line):
                    found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert found == []
