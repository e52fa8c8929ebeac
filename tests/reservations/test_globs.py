"""Glob overlap: a table of cases people reserve, then brute force against an independent
matcher (fnmatch per segment, recursion for `**`, .gitignore's rule for where a pattern
matches)."""

from __future__ import annotations

import itertools
import re
from fnmatch import fnmatchcase

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relayd.reservations.globs import PatternError, compile_glob, matches_path, normalize, overlaps, patterns_overlap, witness

OVERLAP_TABLE = [
    # (a, b, overlap?)
    ("src/auth/**", "src/auth/login.go", True),
    ("src/a/*", "src/b/*", False),
    ("src/*.py", "src/a*", True),
    ("src/**", "src/auth/login.go", True),
    ("src/**", "src", True),
    ("src/**", "srcs/x", False),
    ("*.go", "src/main.go", True),  # no slash: at any depth, as in .gitignore
    ("/*.go", "src/main.go", False),  # a leading slash: the root only
    ("/*.go", "main.go", True),
    ("**/*.go", "src/main.go", True),
    ("**/*.go", "main.go", True),
    ("**/*.go", "**/*.py", False),
    ("**", "anything/at/all", True),
    ("README.md", "README.md", True),
    ("README.md", "readme.md", False),
    ("README.md", "*.md", True),
    ("docs/*.md", "docs/api/*.md", False),
    ("docs/**/*.md", "docs/api/*.md", True),
    ("a/**/b", "a/b", True),
    ("a/**/b", "a/x/y/b", True),
    ("a/**/b", "a/x/y/c", False),
    ("a/**/b/**/c", "a/b/c", True),
    ("a/*/c", "a/**/c", True),
    ("a/*/c", "a/c", False),
    ("src/[a-c]*.py", "src/b*", True),
    ("src/[a-c]*.py", "src/d*", False),
    ("src/[!a-c]*", "src/a*", False),
    ("src/[!a-c]*", "src/ab*", False),
    ("src/[^a]*", "src/b", True),
    ("src/?", "src/ab", False),
    ("src/??", "src/ab", True),
    ("src/?.go", "src/*.go", True),
    ("*", "a/b", True),
    ("/*", "a/b", False),
    ("*/*", "a/b", True),
    ("*/*", "/*", False),
    ("*/*", "*", True),
    ("src/*_test.go", "src/*.go", True),
    ("src/*_test.go", "src/*.py", False),
    ("src/*a*b*", "src/*b*a*", True),
    ("src/x*y", "src/*z", False),
    ("lib/", "lib/util.js", True),
    ("lib/", "src/lib/util.js", True),  # a trailing slash alone does not root a pattern
    ("/lib/", "src/lib/util.js", False),
    ("src/lib/", "vendor/src/lib/x.js", False),  # a slash in the middle does
    ("./lib/util.js", "lib/util.js", True),
    (r"src/\*.go", "src/a.go", False),
    (r"src/\*.go", "src/*.go", True),
    ("src/[ab]", "src/[bc]", True),
    ("src/[ab]", "src/[cd]", False),
    ("tests/**", "src/**", False),
    ("src/auth/**", "src/*/login.go", True),
    ("src/auth/**", "src/a?th", True),
    ("src/auth/**", "src/*.go", False),
    ("src/auth/**", "**/*.go", True),
    ("src/auth/**", "src/auth*/x", True),
    ("src/auth/**", "src/[!a]*/**", False),
]


@pytest.mark.parametrize(("a", "b", "expected"), OVERLAP_TABLE)
def test_overlap_table(a: str, b: str, expected: bool) -> None:
    assert patterns_overlap(a, b) is expected
    assert patterns_overlap(b, a) is expected
    found = witness(compile_glob(a), compile_glob(b))
    assert (found is not None) is expected
    if found is not None:
        assert ref_match(normalize(a), found) and ref_match(normalize(b), found), found


def test_witness_examples() -> None:
    assert witness(compile_glob("src/*.py"), compile_glob("src/a*")) == "src/a.py"
    assert witness(compile_glob("src/auth/**"), compile_glob("src/auth/login.go")) == "src/auth/login.go"


@pytest.mark.parametrize("bad", ["", "   ", "src/[ab", "../etc/passwd", "a/../../b", "src/\\", "x/[z-a]"])
def test_bad_patterns_are_refused(bad: str) -> None:
    with pytest.raises(PatternError):
        compile_glob(bad)


def test_normalize() -> None:
    assert normalize("./src//auth/") == "src/auth/**"
    assert normalize("/src/**/**/x") == "src/**/x"


# Every shape of pattern, its normal form (what a reservation stores: the same pattern
# when read again), paths it takes and paths it does not.
SHAPES = [
    ("main.go", "**/main.go", ["main.go", "cmd/main.go", "a/b/main.go"], ["main.go.orig", "cmd/main.go/x"]),
    ("*.go", "**/*.go", ["main.go", "src/main.go", "a/b/c.go"], ["main.py", "src/go"]),
    ("/main.go", "/main.go", ["main.go"], ["cmd/main.go"]),
    ("/*.go", "/*.go", ["main.go"], ["src/main.go"]),
    ("src/main.go", "src/main.go", ["src/main.go"], ["x/src/main.go", "main.go"]),
    ("/src/main.go", "src/main.go", ["src/main.go"], ["x/src/main.go"]),
    ("src/*.go", "src/*.go", ["src/a.go"], ["src/a/b.go", "x/src/a.go"]),
    ("build/", "**/build/**", ["build", "build/x", "a/build/x/y"], ["builds/x", "a/rebuild/x"]),
    ("/build/", "build/**", ["build/x"], ["a/build/x"]),
    ("src/build/", "src/build/**", ["src/build/x"], ["a/src/build/x"]),
    ("**/test", "**/test", ["test", "a/test", "a/b/test"], ["test/x", "a/tests"]),
    ("src/**", "src/**", ["src", "src/a", "src/a/b"], ["x/src/a"]),
    ("a/**/b", "a/**/b", ["a/b", "a/x/b", "a/x/y/b"], ["x/a/b", "a/b/c"]),
    ("**", "**", ["a", "a/b/c"], []),
    ("te?t.[ch]", "**/te?t.[ch]", ["test.c", "x/text.h"], ["test.o", "tet.c"]),
]


@pytest.mark.parametrize(("pattern", "normal", "taken", "free"), SHAPES)
def test_every_pattern_shape_reads_as_gitignore_does(pattern: str, normal: str, taken: list[str], free: list[str]) -> None:
    assert normalize(pattern) == normal
    assert normalize(normal) == normal  # stored, then read again: the same pattern
    for path in taken:
        assert matches_path(normal, path) and compile_glob(pattern).matches(path), path
        assert patterns_overlap(pattern, "/" + path) and patterns_overlap(normal, path if "/" in path else "/" + path), path
    for path in free:
        assert not matches_path(normal, path) and not compile_glob(pattern).matches(path), path
        assert not patterns_overlap(pattern, "/" + path), path


def test_a_pattern_stored_before_the_any_depth_reading_is_read_with_it() -> None:
    """Reservations stored `*.go` and `Makefile` meaning the top directory only; they are
    read as .gitignore reads them now: at any depth (only more conflicts, never fewer)."""
    assert matches_path("*.go", "src/main.go") and matches_path("Makefile", "docs/Makefile")
    assert patterns_overlap("*.go", "/src/main.go")
    assert matches_path("src/*.go", "src/a.go") and not matches_path("src/*.go", "x/src/a.go")  # as before


def test_the_unicode_alphabet_is_covered() -> None:
    assert patterns_overlap("docs/[!a-z]*", "docs/日本*")
    assert witness(compile_glob("docs/[!a-z]"), compile_glob("docs/?")) is not None


# -- brute force ------------------------------------------------------------------------


def ref_match(pattern: str, path: str) -> bool:
    """Independent matcher: fnmatch on each segment, recursion for `**`; a pattern with no
    `/` but a trailing one matches at any depth (.gitignore), a trailing `/` is `/**`.

    fnmatch knows neither `[^...]` nor backslash escapes: they are spelled its way first.
    """
    spelled = re.sub(r"\\(.)", lambda m: "[" + m.group(1) + "]", pattern.replace("[^", "[!")).strip()
    rooted = "/" in spelled.rstrip("/")
    if spelled.endswith("/"):
        spelled += "**"
    segments = [s for s in spelled.split("/") if s not in ("", ".")]
    if not rooted:
        segments.insert(0, "**")
    return _ref(segments, path.split("/")) and all(path.split("/"))


def _ref(pat: list[str], segs: list[str]) -> bool:
    if not pat:
        return not segs
    if pat[0] == "**":
        return any(_ref(pat[1:], segs[i:]) for i in range(len(segs) + 1))
    return bool(segs) and fnmatchcase(segs[0], pat[0]) and _ref(pat[1:], segs[1:])


_piece = st.sampled_from(["a", "b", ".", "*", "?", "[ab]", "[!a]", "[a-b]", "[!.b]", "ab"])
_segment = st.one_of(st.just("**"), st.lists(_piece, min_size=1, max_size=3).map("".join).filter(lambda s: s not in (".", "..")))
_pattern = st.lists(_segment, min_size=1, max_size=4).map("/".join).filter(lambda p: "**/**" not in p and "***" not in p)
_path = st.lists(st.text(alphabet="abc.", min_size=1, max_size=3), min_size=1, max_size=4).map("/".join)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(_pattern, _pattern, st.lists(_path, min_size=1, max_size=20))
def test_brute_force_against_an_independent_matcher(a: str, b: str, paths: list[str]) -> None:
    ga, gb = compile_glob(a), compile_glob(b)
    found = witness(ga, gb)
    # The quick filters never change the exact answer.
    assert overlaps(ga, gb) is (found is not None)
    for path in paths:
        # The compiled automaton matches exactly what the reference matcher matches...
        assert ga.matches(path) is ref_match(a, path), (a, path)
        # ...and a path matching both means the patterns overlap.
        if ref_match(a, path) and ref_match(b, path):
            assert found is not None, (a, b, path)
    if found is not None:
        # An overlap always comes with a real path that both match.
        assert all(found.split("/")), found
        assert ref_match(a, found) and ref_match(b, found), (a, b, found)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(_pattern, _pattern)
def test_overlap_is_symmetric(a: str, b: str) -> None:
    assert patterns_overlap(a, b) is patterns_overlap(b, a)


def _small_universe() -> list[str]:
    segments = [a + b for a in "ab." for b in ["", *"ab."]]
    paths = list(segments)
    for depth in (2, 3):
        paths += ["/".join(p) for p in itertools.product(segments, repeat=depth)]
    return paths


SMALL_UNIVERSE = _small_universe()


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(_pattern, _pattern)
def test_no_overlap_means_no_path_in_a_whole_small_universe(a: str, b: str) -> None:
    """Every path of up to 3 segments of up to 2 characters from {a, b, .}: none may match
    both patterns when the automata say they do not overlap."""
    if patterns_overlap(a, b):
        return
    both = [path for path in SMALL_UNIVERSE if ref_match(a, path) and ref_match(b, path)]
    assert both == [], (a, b, both[:3])


_git_path = _path.filter(lambda p: all(s not in (".", "..") for s in p.split("/")))  # as git names files
_literal_pattern = st.lists(st.sampled_from(["a", "b", "ab", "a.b", "src"]), min_size=1, max_size=3).map("/".join)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(st.one_of(_pattern, _literal_pattern, _literal_pattern.map(lambda p: p + "/**")), st.lists(_git_path, min_size=1, max_size=20))
def test_a_path_in_a_commit_is_matched_as_reserve_decides_overlap(pattern: str, paths: list[str]) -> None:
    """The pre-commit guard's `matches_path` (a concrete path against a reservation, by the
    pattern's wildcard tail) agrees with the reference matcher and with the overlap of the
    path, spelled as a literal pattern, with the reservation."""
    text = normalize(pattern)
    for path in paths:
        literal = "/" + re.sub(r"([*?\[\\])", r"\\\1", path)  # rooted: this one path
        assert matches_path(text, path) is ref_match(text, path) is patterns_overlap(literal, text), (text, path)
