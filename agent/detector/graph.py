"""Small graph helpers for the topology-aware rules (pause graph, credit graph).

Graphs are given as a node list plus a successor function, so a rule can derive edges on
the fly from the topology instead of materialising an adjacency list. Everything here is
iterative: a storm tree across thousands of ports must not hit Python's recursion limit.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import TypeVar

N = TypeVar("N", bound=Hashable)


def tarjan_scc(nodes: Iterable[N], succ: Callable[[N], Iterable[N]]) -> list[list[N]]:
    """Strongly connected components, in reverse topological order (sinks first).

    Successors that are not in ``nodes`` are ignored. Iterative Tarjan: O(V + E).
    """
    node_list = list(nodes)
    members = set(node_list)
    index: dict[N, int] = {}
    low: dict[N, int] = {}
    on_stack: set[N] = set()
    stack: list[N] = []
    out: list[list[N]] = []
    counter = 0
    for root in node_list:
        if root in index:
            continue
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        work: list[tuple[N, Iterable[N]]] = [(root, iter([s for s in succ(root) if s in members]))]
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:  # type: ignore[attr-defined]
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter([s for s in succ(w) if s in members])))
                    advanced = True
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                out.append(comp)
    return out
