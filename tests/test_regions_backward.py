"""Reading a line file backwards in regions (newest inbox lines first, id lookups)."""

from __future__ import annotations

import os

from hypothesis import given, settings
from hypothesis import strategies as st

from relayd.fsio import lines_backward, regions_backward


@settings(max_examples=200, deadline=None)
@given(
    lines=st.lists(st.binary(min_size=0, max_size=40).map(lambda b: b.replace(b"\n", b"x")), max_size=30),
    torn=st.binary(max_size=10).map(lambda b: b.replace(b"\n", b"y")),
    chunk=st.integers(min_value=1, max_value=64),
)
def test_regions_cover_the_file_backwards_and_never_split_a_line(tmp_path_factory, lines, torn, chunk) -> None:
    data = b"".join(line + b"\n" for line in lines) + torn
    path = tmp_path_factory.mktemp("r") / "f"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        regions = list(regions_backward(fd, len(data), chunk))
    finally:
        os.close(fd)
    offsets = [offset for offset, _ in regions]
    assert offsets == sorted(offsets, reverse=True)  # last region first
    assert b"".join(region for _, region in reversed(regions)) == data
    for offset, region in regions:
        assert data[offset : offset + len(region)] == region
        assert offset == 0 or data[offset - 1 : offset] == b"\n"  # starts a line


@settings(max_examples=200, deadline=None)
@given(
    lines=st.lists(st.binary(min_size=0, max_size=40).map(lambda b: b.replace(b"\n", b"x")), max_size=30),
    chunk=st.integers(min_value=1, max_value=64),
)
def test_lines_backward_gives_every_non_empty_line_last_first(tmp_path_factory, lines, chunk) -> None:
    path = tmp_path_factory.mktemp("l") / "f"
    path.write_bytes(b"\n".join(lines))
    fd = os.open(path, os.O_RDONLY)
    try:
        assert list(lines_backward(fd, chunk)) == [line for line in reversed(lines) if line]
    finally:
        os.close(fd)
