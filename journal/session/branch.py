"""Branch trees inside one session, as pi keeps them: entries with id and parentId, a movable leaf.

Every entry appended through a BranchTree carries ``data.entryId`` and ``data.parentId`` (the
leaf it grew from; None for a root). The current conversation is the path from the leaf back
to the root; other branches stay in the same log (seed 004, 14.2.5). Moving the leaf to an
older entry appends a ``branch.switched`` event and rewrites nothing, so the log keeps every
branch and every switch, and reloading finds the same leaf: the leaf is the last entry appended
or the target of the last switch, whichever came later.

A branch changes the conversation's future only. Files the session's tools changed stay
changed (seed 003: a fork or a branch is not a rollback of the workspace).

``branch.switched`` is a built-in event type, so any reader of the session understands it.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from journal.api import InvariantError
from journal.session.envelope import Event
from journal.session.errors import SessionError
from journal.session.reducer import Reducer, SessionReducer
from journal.session.registry import EventType, Registry, Role
from journal.session.session import Appended, Session


def _builtin(name: str) -> EventType:
    spec = Registry().get(name)
    if spec is None:
        raise InvariantError(f"{name} is a built-in event type")
    return spec


BRANCH_SWITCHED = _builtin("branch.switched")
ENTRY_ID_HEX = 8


def registry(base: Registry | None = None) -> Registry:
    """``base`` (or the built-ins), which must know the branch tree's event type."""
    reg = base.copy() if base is not None else Registry()
    reg.register(BRANCH_SWITCHED)  # a no-op for the built-ins; adds it to a runtime's own registry
    return reg


class UnknownEntryError(SessionError, KeyError):
    def __init__(self, entry_id: str) -> None:
        super().__init__(f"no entry {entry_id!r} in this session's tree; list the tree's entries to pick one")
        self.entry_id = entry_id


@dataclass
class Node:
    entry_id: str
    parent_id: str | None
    event: Event
    children: list[str] = field(default_factory=list)


class BranchTree:
    """The entry tree of one session; appends go under the leaf."""

    def __init__(self, session: Session) -> None:
        if session.registry.get(BRANCH_SWITCHED.name) is None:
            raise SessionError("open the session with journal.session.branch.registry() to use branch trees")
        self.session = session
        self.nodes: dict[str, Node] = {}
        self.headers: list[tuple[Event, EventType]] = []
        self.leaf: str | None = None
        self.switches = 0
        for event in session.read():
            self._fold(event)

    @classmethod
    def open(cls, path: str | os.PathLike[str], create: bool = False, **kwargs: Any) -> BranchTree:
        kwargs["registry"] = registry(kwargs.get("registry"))
        return cls(Session.open(path, create=create, **kwargs))

    def close(self) -> None:
        self.session.close()

    def __enter__(self) -> BranchTree:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _fold(self, event: Event) -> None:
        spec = self.session.registry.get(event.type)
        if spec is not None and spec.role is Role.HEADER:
            self.headers.append((event, spec))
        if event.type == BRANCH_SWITCHED.name:
            target = event.data.get("leafId")
            if isinstance(target, str) and target in self.nodes:
                self.leaf = target
                self.switches += 1
            return
        ident = event.data.get("entryId")
        if not isinstance(ident, str) or ident in self.nodes:
            return
        parent = event.data.get("parentId")
        parent = parent if isinstance(parent, str) and parent in self.nodes else None
        self.nodes[ident] = Node(ident, parent, event)
        if parent is not None:
            self.nodes[parent].children.append(ident)
        self.leaf = ident

    def append(self, type: str, data: Mapping[str, Any] | None = None, **envelope: Any) -> Appended:  # noqa: A002
        """Append an entry under the current leaf; it becomes the leaf."""
        ident = secrets.token_hex(ENTRY_ID_HEX // 2)
        while ident in self.nodes:
            ident = secrets.token_hex(ENTRY_ID_HEX // 2)
        got = self.session.append(type, {**dict(data or {}), "entryId": ident, "parentId": self.leaf}, **envelope)
        if got.committed:
            self._fold(got.event)
        return got

    def switch(self, entry_id: str) -> Appended:
        """Move the leaf to ``entry_id`` by appending ``branch.switched``; nothing is rewritten."""
        if entry_id not in self.nodes:
            raise UnknownEntryError(entry_id)
        got = self.session.append(BRANCH_SWITCHED.name, {"leafId": entry_id, "fromLeafId": self.leaf})
        if got.committed:
            self._fold(got.event)
        return got

    def path(self, leaf: str | None = None) -> list[Event]:
        """The entries from the root to ``leaf`` (default: the current leaf), in that order."""
        ident = self.leaf if leaf is None else leaf
        if ident is not None and ident not in self.nodes:
            raise UnknownEntryError(ident)
        out: list[Event] = []
        while ident is not None:
            node = self.nodes[ident]
            out.append(node.event)
            ident = node.parent_id
        out.reverse()
        return out

    def leaves(self) -> list[str]:
        """Entries without children: the tips of every branch, oldest first."""
        return [n.entry_id for n in self.nodes.values() if not n.children]

    def replay(self, reducer: Reducer[Any] | None = None, leaf: str | None = None) -> Any:
        """Fold the session's header and the path to ``leaf`` into a state; the other branches are not read."""
        red: Reducer[Any] = reducer or SessionReducer()
        state = red.initial()
        for event, spec in self.headers[:1]:
            state = red.apply(state, event, spec)
        for event in self.path(leaf):
            known = self.session.registry.get(event.type)
            if known is None:  # session.read() decoded it with this registry
                raise InvariantError("a decoded event has a registered type")
            state = red.apply(state, event, known)
        return state
