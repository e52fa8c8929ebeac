"""Glob patterns as automata, and an exact answer to "can one path match both?".

Patterns are repo-relative, `/`-separated, and read as .gitignore and CODEOWNERS read
them:
  `*`        any run of characters inside one segment (never `/`)
  `?`        one character other than `/`
  `[...]`    one character from a set: `[abc]`, ranges `[a-z]`, negation `[!a-z]` / `[^a-z]`;
             a set never matches `/`; `]` first in the set is literal
  `**`       a whole segment: zero or more segments (`src/**` covers `src` and all below)
  `\\c`      the character c itself
Where a pattern matches: one with no `/` other than a trailing one matches at any depth
(`*.go` is `**/*.go`, `build/` is `**/build/**`); one with a `/` at the start or in the
middle is relative to the repository's root (`/Makefile`, `src/*.go`).
A trailing `/` means the directory and everything in it (`src/` is `src/**`).

The normal form (`normalize`, what a reservation stores) spells that out and reads the
same again: `*.go` -> `**/*.go`, `/Makefile` -> `/Makefile` (the one form with a leading
`/`: a single segment at the root), `/src/x.go` -> `src/x.go`. Every function here that
takes a stored pattern reads it through `normalize`, so a pattern stored before this
reading (`*.go`, meant for the top directory only) now covers what it says to a reader
of .gitignore: every `.go` file (docs/coordination.md says so).

Two patterns conflict when some path matches both. That is decided by building each
pattern's automaton over path characters (transitions labelled with character sets, so
the alphabet is all of Unicode) and searching the product automaton for an accepting
state; the search returns the shortest such path as a witness. Paths have non-empty
segments, so the product also tracks "at a segment start" and refuses `/` there.
"""

from __future__ import annotations

try:
    from _functools import _lru_cache_wrapper
except ImportError:  # pragma: no cover - an interpreter without CPython's C helpers
    from functools import _lru_cache_wrapper  # type: ignore[attr-defined,no-redef]

from ..errors import UsageError

MAX_PATTERN = 1024
_MAX_CODE = 0x10FFFF
_SLASH = ord("/")
Charset = tuple[tuple[int, int], ...]  # sorted, disjoint, inclusive code point intervals

NON_SLASH: Charset = ((0, _SLASH - 1), (_SLASH + 1, _MAX_CODE))
SLASH: Charset = ((_SLASH, _SLASH),)


class PatternError(UsageError):
    """A pattern that cannot be read (unclosed `[`, `..`, empty)."""


def _cached(maxsize: int):
    """functools.lru_cache(maxsize), built on the C wrapper it uses, `_functools`, which is
    part of the interpreter: functools itself imports collections and more (several
    milliseconds of the start-up of the pre-commit guard, which loads this module), and a
    memo written in Python costs every call more than the conflict check can spare."""

    def wrap(func):
        cached = _lru_cache_wrapper(func, maxsize, False, _cache_info)
        cached.__doc__, cached.__name__, cached.__wrapped__ = func.__doc__, func.__name__, func
        return cached

    return wrap


def _cache_info(hits: int, misses: int, maxsize: int, currsize: int) -> tuple[int, int, int, int]:
    return hits, misses, maxsize, currsize


# -- character sets -----------------------------------------------------------------------


@_cached(65536)
def _intersect(a: Charset, b: Charset) -> Charset:
    out = []
    i = j = 0
    while i < len(a) and j < len(b):
        lo = max(a[i][0], b[j][0])
        hi = min(a[i][1], b[j][1])
        if lo <= hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return tuple(out)


def _union(ranges: list[tuple[int, int]]) -> Charset:
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return tuple(merged)


def _complement_in_segment(cs: Charset) -> Charset:
    """NON_SLASH minus cs."""
    out = []
    nxt = 0
    for lo, hi in cs:
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = hi + 1
    if nxt <= _MAX_CODE:
        out.append((nxt, _MAX_CODE))
    return _intersect(tuple(out), NON_SLASH)


def _pick(cs: Charset) -> str:
    """A readable character from a non-empty set, for witness paths."""
    for preferred in ("a", "b", "x", "0", "_", "-", "."):
        code = ord(preferred)
        if any(lo <= code <= hi for lo, hi in cs):
            return preferred
    for lo, hi in cs:
        for start, end in ((0x61, 0x7A), (0x41, 0x5A), (0x30, 0x39), (0x21, 0x7E)):
            if lo <= end and hi >= start:
                return chr(max(lo, start))
    return chr(cs[0][0])


# -- parsing ------------------------------------------------------------------------------

GLOBSTAR = "**"
STAR = "*"
Atom = str | Charset  # STAR or a one-character set
Segment = str | tuple[Atom, ...]  # GLOBSTAR or the atoms of one segment


@_cached(8192)
def normalize(pattern: str) -> str:
    """The canonical text of a pattern (used for the reservation key and display)."""
    return _parse(pattern)[0]


def _parse(pattern: str) -> tuple[str, tuple[Segment, ...]]:
    if not isinstance(pattern, str) or not pattern.strip():
        raise PatternError("empty pattern: give a path or glob, e.g. 'src/auth/**'")
    if len(pattern) > MAX_PATTERN:
        raise PatternError(f"pattern is too long ({len(pattern)} characters, at most {MAX_PATTERN})")
    if "\x00" in pattern or "\n" in pattern:
        raise PatternError("pattern contains a NUL or newline character")
    text = pattern.strip()
    rooted = "/" in text.rstrip("/")  # at the start or in the middle; one at the end only says "directory"
    if text.endswith("/"):
        text += GLOBSTAR
    parts: list[str] = []
    for part in text.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            raise PatternError(f"pattern {pattern!r} leaves the repository ('..'); use a path inside it")
        if part == GLOBSTAR and parts and parts[-1] == GLOBSTAR:
            continue  # `**/**` is `**`
        parts.append(part)
    if not parts:
        raise PatternError(f"pattern {pattern!r} names no path")
    if not rooted and parts[0] != GLOBSTAR:
        parts.insert(0, GLOBSTAR)  # at any depth
    segments = tuple(GLOBSTAR if part == GLOBSTAR else _parse_segment(part, pattern) for part in parts)
    if len(parts) == 1 and parts[0] != GLOBSTAR:
        return "/" + parts[0], segments  # rooted, one segment: the `/` keeps it so when read again
    return "/".join(parts), segments


def _parse_segment(part: str, pattern: str) -> tuple[Atom, ...]:
    atoms: list[Atom] = []
    i = 0
    while i < len(part):
        ch = part[i]
        if ch == "*":
            if not atoms or atoms[-1] != STAR:
                atoms.append(STAR)
            i += 1
        elif ch == "?":
            atoms.append(NON_SLASH)
            i += 1
        elif ch == "[":
            charset, i = _parse_class(part, i, pattern)
            atoms.append(charset)
        elif ch == "\\":
            if i + 1 >= len(part):
                raise PatternError(f"pattern {pattern!r} ends with a lone backslash")
            atoms.append(((ord(part[i + 1]), ord(part[i + 1])),))
            i += 2
        else:
            atoms.append(((ord(ch), ord(ch)),))
            i += 1
    return tuple(atoms)


def _parse_class(part: str, i: int, pattern: str) -> tuple[Charset, int]:
    """`part[i]` is `[`; returns the set and the index after the closing `]`."""
    j = i + 1
    negate = j < len(part) and part[j] in "!^"
    if negate:
        j += 1
    ranges: list[tuple[int, int]] = []
    first = True
    while True:
        if j >= len(part):
            raise PatternError(f"pattern {pattern!r} has an unclosed '[' (a set cannot contain '/')")
        ch = part[j]
        if ch == "]" and not first:
            j += 1
            break
        if ch == "\\" and j + 1 < len(part):
            j += 1
            ch = part[j]
        lo = ord(ch)
        j += 1
        if j + 1 < len(part) and part[j] == "-" and part[j + 1] != "]":
            hi_ch = part[j + 1]
            j += 2
            if hi_ch == "\\" and j < len(part):
                hi_ch = part[j]
                j += 1
            hi = ord(hi_ch)
            if hi < lo:
                raise PatternError(f"pattern {pattern!r} has a reversed range {chr(lo)}-{chr(hi)}")
            ranges.append((lo, hi))
        else:
            ranges.append((lo, lo))
        first = False
    charset = _intersect(_union(ranges), NON_SLASH)
    return (_complement_in_segment(charset) if negate else charset), j


# -- automata -----------------------------------------------------------------------------


class Glob:
    """A compiled pattern: an epsilon-free NFA plus the literal ends used as a quick filter.

    A plain class, not a dataclass: `dataclasses` imports `inspect`, several milliseconds
    of the start-up of every process that checks a path (the pre-commit guard)."""

    __slots__ = ("text", "literal", "path", "start", "moves", "accepting", "steps")

    def __init__(self, *, text: str, literal: bool, path: str, start: int, moves: tuple[tuple[tuple[Charset, int], ...], ...], accepting: frozenset[int]) -> None:
        self.text = text
        self.literal = literal  # no wildcard at all: the pattern is one path
        self.path = path  # that path, when literal
        self.start = start
        self.moves = moves  # per state: (label, target)
        self.accepting = accepting
        self.steps: dict = {}  # memo of `after`

    def __repr__(self) -> str:
        return f"Glob({self.text!r})"

    def matches(self, path: str) -> bool:
        """Does this concrete path match? (Used for literal-vs-glob checks.)"""
        return not path.endswith("/") and bool(self.after(path) & self.accepting)

    def after(self, text: str) -> frozenset[int]:
        """The states reached by reading `text` from the start (empty for an empty segment).

        Steps are memoized per (state set, character): a lazily built DFA, so checking many
        similar paths against one pattern costs a dict lookup per character.
        """
        states = frozenset((self.start,))
        steps = self.steps
        at_start = True
        for ch in text:
            code = ord(ch)
            if code == _SLASH and at_start:
                return frozenset()  # empty segment
            key = (states, code)
            nxt = steps.get(key)
            if nxt is None:
                nxt = frozenset(t for s in states for label, t in self.moves[s] if any(lo <= code <= hi for lo, hi in label))
                if len(steps) < 4096:
                    steps[key] = nxt
            if not nxt:
                return nxt
            states = nxt
            at_start = code == _SLASH
        return states if text else frozenset()


class _Builder:
    def __init__(self) -> None:
        self.moves: list[list[tuple[Charset, int]]] = []
        self.eps: list[list[int]] = []

    def state(self) -> int:
        self.moves.append([])
        self.eps.append([])
        return len(self.moves) - 1

    def move(self, a: int, label: Charset, b: int) -> None:
        self.moves[a].append((label, b))


@_cached(8192)
def compile_glob(pattern: str) -> Glob:
    text, segments = _parse(pattern)
    b = _Builder()
    start = cur = b.state()
    accepting: set[int] = set()
    need_slash = False  # the next segment starts with '/'
    last = len(segments) - 1
    for index, segment in enumerate(segments):
        if segment == GLOBSTAR:
            if not need_slash:
                # Leading `**`: (SEG '/')* — and, alone, any non-empty path.
                inside = b.state()
                b.move(cur, NON_SLASH, inside)
                b.move(inside, NON_SLASH, inside)
                b.move(inside, SLASH, cur)
                if index == last:
                    accepting.add(inside)
            else:
                # `**` after a segment: ('/' SEG)* from a fresh join state.
                join, seg_start, inside = b.state(), b.state(), b.state()
                b.eps[cur].append(join)
                b.move(join, SLASH, seg_start)
                b.move(seg_start, NON_SLASH, inside)
                b.move(inside, NON_SLASH, inside)
                b.eps[inside].append(join)
                cur = join
                if index == last:
                    accepting.add(join)
            continue
        if need_slash:
            nxt = b.state()
            b.move(cur, SLASH, nxt)
            cur = nxt
        for atom in segment:
            if atom == STAR:
                loop = b.state()
                b.eps[cur].append(loop)
                b.move(loop, NON_SLASH, loop)
                cur = loop
            else:
                nxt = b.state()
                b.move(cur, atom, nxt)  # type: ignore[arg-type]
                cur = nxt
        need_slash = True
        if index == last:
            accepting.add(cur)
    moves, final = _remove_epsilons(b, accepting)
    flat = _flatten(segments)
    literal = None not in flat
    return Glob(text=text, literal=literal, path="".join(flat) if literal else "", start=start, moves=moves, accepting=final)


def _flatten(segments: tuple[Segment, ...]) -> list[str | None]:
    """The pattern as literal characters, with None for every wildcard."""
    flat: list[str | None] = []
    for index, segment in enumerate(segments):
        if index:
            flat.append("/")
        if segment == GLOBSTAR:
            flat.append(None)
            continue
        for atom in segment:
            single = atom != STAR and len(atom) == 1 and atom[0][0] == atom[0][1]
            flat.append(chr(atom[0][0]) if single else None)  # type: ignore[index]
    return flat


def _remove_epsilons(b: _Builder, accepting: set[int]) -> tuple[tuple[tuple[tuple[Charset, int], ...], ...], frozenset[int]]:
    closures = []
    for state in range(len(b.moves)):
        seen = {state}
        todo = [state]
        while todo:
            for nxt in b.eps[todo.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        closures.append(seen)
    moves = tuple(tuple(move for member in sorted(closure) for move in b.moves[member]) for closure in closures)
    final = frozenset(state for state, closure in enumerate(closures) if closure & accepting)
    return moves, final


# -- overlap ------------------------------------------------------------------------------


def witness(a: Glob, b: Glob) -> str | None:
    """The shortest path that matches both, or None when no path does."""
    start = (a.start, b.start, True)
    parent: dict[tuple[int, int, bool], tuple[tuple[int, int, bool], Charset] | None] = {start: None}
    queue = [start]  # breadth first: a for loop over a list also visits what is appended during it
    for node in queue:
        qa, qb, at_start = node
        if not at_start and qa in a.accepting and qb in b.accepting:
            chars = []
            while parent[node] is not None:
                node, label = parent[node]  # type: ignore[misc]
                chars.append(_pick(label))
            return "".join(reversed(chars))
        for label_a, ta in a.moves[qa]:
            for label_b, tb in b.moves[qb]:
                label = _intersect(label_a, label_b)
                if not label:
                    continue
                is_slash = label == SLASH
                if is_slash and at_start:
                    continue
                nxt = (ta, tb, is_slash)
                if nxt not in parent:
                    parent[nxt] = (node, label)
                    queue.append(nxt)
    return None


_overlap_cache: dict[tuple[str, str], bool] = {}


def _rooted_body(text: str) -> str:
    """A normal form without the `/` of a one-segment rooted pattern (`/Makefile`): the
    text that the paths it matches start with."""
    return text[1:] if text[:1] == "/" else text


@_cached(16384)
def _ends(text: str) -> tuple[bool, str, str]:
    """(no wildcard at all, literal prefix, literal suffix) of a pattern, cheaply.

    Every path the pattern matches starts with the prefix and ends with the suffix: the
    prefix stops before the first `*?[\\`, the suffix starts after the last `*?]\\` (text
    after the last `]` is outside every set). The slash next to a `**` is dropped, since
    `a/**` also matches `a` and `**/b` also matches `b`.
    """
    text = _rooted_body(normalize(text))  # (a stored pattern: see the module's docstring)
    first = len(text)
    for ch in "*?[\\":  # a loop, not min() over generators: the guard calls this for 1,000 patterns at start-up
        at = text.find(ch, 0, first)
        if at >= 0:
            first = at
    if first == len(text):
        return True, text, text
    last = max(text.rfind("*"), text.rfind("?"), text.rfind("]"), text.rfind("\\"))
    return False, text[:first].rstrip("/"), text[last + 1 :].lstrip("/")


def fixed_ends(pattern: str) -> tuple[str, str]:
    """(prefix, suffix) that every path a stored pattern matches starts and ends with."""
    return _ends(pattern)[1:]


def matches_path(pattern: str, path: str) -> bool:
    """Does one concrete path (a file in a commit) match a stored pattern? The same
    answer as `normalized_overlap` with the path as a literal pattern, without building
    an automaton for the path, and for most patterns only for their wildcard tail:
    `pkg/p1/*.go` and `pkg/p2/*.go` share the one for `/*.go`."""
    literal, prefix, _ = _ends(pattern)
    if literal:
        return path == prefix
    if _is_directory(pattern):
        return path == pattern[:-3] or path.startswith(pattern[:-2])
    cut = pattern.rfind("/", 0, len(prefix) + 1) + 1  # the literal directories before the first wildcard
    if cut <= 1:
        return compile_glob(pattern).matches(path)
    # Only `L/**` (above) also matches L itself: any other match lies below those directories.
    # The tail is read from that directory: rooted there, hence the `/`.
    return len(path) > cut and path.startswith(pattern[:cut]) and compile_glob("/" + pattern[cut:]).matches(path[cut:])


def patterns_overlap(a: str, b: str) -> bool:
    """Exact: True iff some path matches both patterns (any spelling)."""
    return normalized_overlap(normalize(a), normalize(b))


def normalized_overlap(a: str, b: str) -> bool:
    """`patterns_overlap` for patterns as reservations store them. (Only their text is
    looked at here, through `_ends`, which reads it in normal form; the automata read any
    spelling as `normalize` does.)"""
    literal_a, prefix_a, suffix_a = _ends(a)
    literal_b, prefix_b, suffix_b = _ends(b)
    if not (prefix_a.startswith(prefix_b) or prefix_b.startswith(prefix_a)):
        return False
    if not (suffix_a.endswith(suffix_b) or suffix_b.endswith(suffix_a)):
        return False
    if literal_a and literal_b:
        return prefix_a == prefix_b  # (the paths themselves)
    key = (a, b) if a <= b else (b, a)
    found = _overlap_cache.get(key)
    if found is None:
        if len(_overlap_cache) > 65536:
            _overlap_cache.clear()
        if _is_directory(a):
            found = _covers_directory(compile_glob(b), a[:-3])
        elif _is_directory(b):
            found = _covers_directory(compile_glob(a), b[:-3])
        elif literal_a:
            found = compile_glob(b).matches(prefix_a)
        elif literal_b:
            found = compile_glob(a).matches(prefix_b)
        else:
            ga, gb = compile_glob(a), compile_glob(b)
            if ga.literal:  # escaped wildcards only, e.g. `src/\*.go`
                found = gb.matches(ga.path)
            elif gb.literal:
                found = ga.matches(gb.path)
            else:
                found = witness(ga, gb) is not None
        _overlap_cache[key] = found
    return found


def overlaps(a: Glob, b: Glob) -> bool:
    return normalized_overlap(a.text, b.text)


# -- the most common reservation, `some/dir/**`, without building a product ----------------


def _is_directory(text: str) -> bool:
    """`L/**` with L a plain path: it matches L and everything below L."""
    if not text.endswith("/**") or len(text) <= 3:
        return False
    for ch in "*?[\\":  # L without a wildcard (`_ends` would read a one-segment L as `**/L`)
        if ch in text[:-3]:
            return False
    return True


def _covers_directory(g: Glob, directory: str) -> bool:
    """Does `g` match `directory` itself or some path below it?"""
    if g.matches(directory):
        return True
    return bool(g.after(directory + "/") & _live_at_segment_start(g.text))


@_cached(8192)
def _live_at_segment_start(text: str) -> frozenset[int]:
    """States from which, at the start of a segment, some non-empty rest of a path is accepted."""
    g = compile_glob(text)
    # good[(state, at_start)]: an accepting end is reachable; solved backwards to a fixpoint.
    good = {(q, False) for q in g.accepting}
    changed = True
    while changed:
        changed = False
        for q, moves in enumerate(g.moves):
            for at_start in (True, False):
                if (q, at_start) in good:
                    continue
                for label, t in moves:
                    is_slash = label == SLASH
                    if is_slash and at_start:
                        continue
                    if (t, is_slash) in good:
                        good.add((q, at_start))
                        changed = True
                        break
    return frozenset(q for q, at_start in good if at_start)


def covers_everything(pattern: str) -> bool:
    """`**`, `*`, `**/*`, ...: a pattern of nothing but wildcard segments, which holds every
    file of its repository (or every top-level one)."""
    return all(segment and set(segment) <= {"*"} for segment in pattern.rstrip("/").split("/"))
