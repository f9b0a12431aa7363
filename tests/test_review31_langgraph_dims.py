"""Review of issue 31: a store's vectors made by another embedder (other dims) are a typed error.

The vectors are stored with the puts, and a reopen never embeds again; a store reopened with an
index of other dims (the embedding model changed) made every ranked search raise numpy's bare
ValueError (shapes not aligned), or, without numpy, rank by truncated vectors. The search now says
which dims it found and what to do.
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("langgraph")

from journal.adapters.langgraph_store import JournalStore, JournalStoreError


def embedder(dims: int) -> Callable[[list[str]], list[list[float]]]:
    def embed(texts: list[str]) -> list[list[float]]:
        return [[float(len(t) % (i + 2)) + 1.0 for i in range(dims)] for t in texts]
    return embed


def index(dims: int) -> Any:
    return {"dims": dims, "embed": embedder(dims), "fields": ["s"]}


def test_a_query_of_other_dims_than_the_stored_vectors_is_a_typed_error(tmp_path: pathlib.Path) -> None:
    with JournalStore(tmp_path, index=index(8)) as store:
        store.put(("docs",), "a", {"s": "alpha"})
    with JournalStore(tmp_path, index=index(4)) as store:
        with pytest.raises(JournalStoreError, match="8 dimensions") as err:
            store.search(("docs",), query="alpha")
        assert isinstance(err.value, ValueError)
        assert store.search(("docs",)) != []  # a search without a query ranks nothing and still works
