"""The oracles' memory: every prefix of every sequence computed so far, without limit.

A radix tree whose edges are runs of token ids: ``longest`` walks one node
per branch point and compares each edge with one slice comparison (a binary
search of slices inside the edge where the query leaves it), so a lookup
costs C-speed work proportional to the query, whatever the trace length.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs

from ._requests import Request

__all__ = ["Bound", "PrefixSet", "unlimited_bound"]


class _Node:
    __slots__ = ("children", "label")

    def __init__(self, label: list[int]) -> None:
        self.label = label  # the edge from the parent
        self.children: dict[int, _Node] = {}


class PrefixSet:
    """Every prefix of every sequence ``add``-ed; ``longest`` finds a query's longest one."""

    def __init__(self) -> None:
        self._root = _Node([])

    def longest(self, tokens: Sequence[int], limit: int) -> int:
        """The length of the longest stored prefix ``tokens`` starts with, at most ``limit``."""
        node, depth = self._root, 0
        while depth < limit:
            child = node.children.get(tokens[depth])
            if child is None:
                return depth
            shared = _shared(child.label, tokens, depth, limit)
            depth += shared
            if shared < len(child.label):
                return depth
            node = child
        return limit

    def edges(self, tokens: Sequence[int], size: int) -> list[tuple[object, int]]:
        """The edges ``tokens[:size]`` runs along, root first: ``(edge, depth at its end)``.

        Only for a stored sequence (``add``-ed, or a prefix of one): the walk
        follows each edge by its first token and skips the comparison of the
        rest. An edge is an opaque key, the same for every sequence through it
        until the next ``add`` (which may split it).
        """
        node, depth = self._root, 0
        edges: list[tuple[object, int]] = []
        while depth < size:
            node = node.children[tokens[depth]]
            depth += len(node.label)
            edges.append((node, depth))
        return edges

    def add(self, tokens: Sequence[int]) -> None:
        """Store every prefix of ``tokens``."""
        node, depth, size = self._root, 0, len(tokens)
        while depth < size:
            child = node.children.get(tokens[depth])
            if child is None:
                node.children[tokens[depth]] = _Node(list(tokens[depth:]))
                return
            shared = _shared(child.label, tokens, depth, size)
            if shared < len(child.label):
                if depth + shared == size:
                    return  # a prefix of what is stored already
                middle = _Node(child.label[:shared])
                child.label = child.label[shared:]
                middle.children[child.label[0]] = child
                node.children[middle.label[0]] = middle
                child = middle
            node, depth = child, depth + shared


def _shared(label: list[int], tokens: Sequence[int], start: int, limit: int) -> int:
    """How many of ``label``'s tokens equal ``tokens[start:limit]``'s, from the first."""
    size = min(len(label), limit - start)
    if list(tokens[start : start + size]) == label[:size]:
        return size
    low, high = 0, size  # label[:low] matches, label[:high] does not
    while high - low > 1:
        middle = (low + high) // 2
        if list(tokens[start : start + middle]) == label[:middle]:
            low = middle
        else:
            high = middle
    return low


@attrs.frozen(eq=False)  # holds a tree: compare by identity
class Bound:
    """The unlimited bound over a trace: where it starts each request, and all that was fed."""

    #: Per request: the longest prefix of its prompt any earlier request fed (at most all
    #: but its last token).
    starts: tuple[int, ...]
    #: Every prefix of every request's prompt and output but the last token (never fed).
    fed: PrefixSet


def unlimited_bound(
    trace: Sequence[Request], progress: Callable[[int], None] | None = None
) -> Bound:
    """One pass over ``trace``: each request starts at the longest prefix fed before it."""
    seen = PrefixSet()
    starts = []
    for done, request in enumerate(trace, start=1):
        tokens = request.tokens()
        starts.append(seen.longest(tokens, len(tokens) - 1))
        seen.add(tokens + list(request.output[:-1]))  # the last output token is never fed
        if progress is not None and done % 256 == 0:
            progress(done)
    return Bound(tuple(starts), seen)
