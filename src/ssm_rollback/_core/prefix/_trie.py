"""A radix tree of token ids: exact prefix lookup at C speed, whatever the number of prefixes.

Each edge holds a run of token ids (a list); a node stands at the end of
its edge, ``depth`` tokens from the root, and may carry a value (the live
entry published at exactly that prefix). Lookup walks one node per branch
point and compares each edge with the query's slice in one list
comparison, so a lookup costs O(len(tokens)) at C speed plus one Python
step per node on the path - never a step per stored prefix, and never a
hash alone: a hit is equal token ids.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Generic, TypeVar

__all__ = ["Trie"]

V = TypeVar("V")


class _Node(Generic[V]):
    __slots__ = ("children", "depth", "label", "parent", "value")

    def __init__(self, label: list[int], depth: int, parent: _Node[V] | None) -> None:
        self.label = label  # the edge from the parent: tokens [depth - len(label), depth)
        self.depth = depth
        self.parent = parent
        self.children: dict[int, _Node[V]] = {}  # the first token of each child's edge
        self.value: V | None = None


class Trie(Generic[V]):
    """Values stored at exact token prefixes; the longest stored prefix of a query, exactly."""

    def __init__(self) -> None:
        self._root: _Node[V] = _Node([], 0, None)

    def longest(self, tokens: list[int], limit: int) -> V | None:
        """The value at the longest stored prefix of ``tokens`` no longer than ``limit``."""
        node, depth, best = self._root, 0, None
        size = len(tokens)
        while depth < limit:
            child = node.children.get(tokens[depth])
            if child is None:
                break
            end = child.depth
            if end > limit or end > size or tokens[depth:end] != child.label:
                break
            node, depth = child, end
            if node.value is not None:
                best = node.value
        return best

    def get(self, tokens: Sequence[int], length: int) -> V | None:
        """The value stored at exactly ``tokens[:length]``, or ``None``."""
        node = self._find(tokens, length)
        return None if node is None else node.value

    def put(self, tokens: Sequence[int], length: int, value: V) -> None:
        """Store ``value`` at exactly ``tokens[:length]`` (``length >= 1``), replacing any."""
        node, depth = self._root, 0
        while depth < length:
            first = tokens[depth]
            child = node.children.get(first)
            if child is None:
                leaf: _Node[V] = _Node(list(tokens[depth:length]), length, node)
                node.children[first] = leaf
                node = leaf
                break
            label = child.label
            shared = _common(label, tokens, depth, min(len(label), length - depth))
            if shared < len(label):  # the new prefix leaves (or ends) inside the edge: split
                child = self._split(child, shared)
            node, depth = child, child.depth
        node.value = value

    def nearest_below(self, tokens: Sequence[int], length: int) -> list[V]:
        """The values stored below exactly ``tokens[:length]`` with none stored in between.

        Costs one step per such value and per valueless node on the way (each
        of which branches), never a step per stored prefix elsewhere.
        """
        node = self._find(tokens, length)
        found: list[V] = []
        stack = [] if node is None else list(node.children.values())
        while stack:
            child = stack.pop()
            if child.value is not None:
                found.append(child.value)
            else:
                stack.extend(child.children.values())
        return found

    def remove(self, tokens: Sequence[int], length: int) -> None:
        """Drop the value at exactly ``tokens[:length]``, and the nodes no longer needed."""
        node = self._find(tokens, length)
        if node is None or node.value is None:
            raise KeyError(length)
        node.value = None
        self._prune(node)

    def items(self) -> Iterator[tuple[list[int], V]]:
        """Every stored prefix (its token ids) and its value, depth first."""
        stack: list[tuple[_Node[V], list[int]]] = [(self._root, [])]
        while stack:
            node, path = stack.pop()
            if node.value is not None:
                yield path, node.value
            for child in node.children.values():
                stack.append((child, path + child.label))

    def check(self) -> None:
        """Raise ``AssertionError`` unless every node is consistent and needed (for tests)."""
        stack = [self._root]
        while stack:
            node = stack.pop()
            for first, child in node.children.items():
                assert child.parent is node, "a child that points at another parent"
                assert child.label, "an empty edge"
                assert child.label[0] == first, "a child filed under another token"
                assert child.depth == node.depth + len(child.label)
                assert child.value is not None or len(child.children) > 1, "an unneeded node"
                stack.append(child)

    def _find(self, tokens: Sequence[int], length: int) -> _Node[V] | None:
        node, depth = self._root, 0
        while depth < length:
            child = node.children.get(tokens[depth])
            if child is None or child.depth > length:
                return None
            if list(tokens[depth : child.depth]) != child.label:
                return None
            node, depth = child, child.depth
        return node

    @staticmethod
    def _split(child: _Node[V], at: int) -> _Node[V]:
        """Cut ``child``'s edge after ``at`` tokens; return the new node standing there."""
        parent = child.parent
        assert parent is not None
        middle: _Node[V] = _Node(child.label[:at], child.depth - len(child.label) + at, parent)
        parent.children[middle.label[0]] = middle
        child.label = child.label[at:]
        child.parent = middle
        middle.children[child.label[0]] = child
        return middle

    def _prune(self, node: _Node[V]) -> None:
        """Remove an empty leaf, and merge a valueless node into its only child."""
        while node.parent is not None and node.value is None:
            parent = node.parent
            if not node.children:
                del parent.children[node.label[0]]
                node = parent
                continue
            if len(node.children) == 1:
                (only,) = node.children.values()
                only.label = node.label + only.label
                only.parent = parent
                parent.children[only.label[0]] = only
            break


def _common(label: list[int], tokens: Sequence[int], start: int, limit: int) -> int:
    """How many of ``label``'s first ``limit`` tokens equal ``tokens[start:]``'s."""
    if list(tokens[start : start + limit]) == label[:limit]:
        return limit
    shared = 0
    while shared < limit and label[shared] == tokens[start + shared]:
        shared += 1
    return shared
