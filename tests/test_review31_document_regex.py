"""Review of issue 32: a document refused for an integer of thousands of digits is refused in
time linear in its size.

The place of the refused integer was searched with a pattern that, at each digit of every
shorter run of digits, rescanned the run to its end: runs of 3,999 digits (each a valid number)
before the refused one cost 8 million steps each, hours for a document under the size limit.
The guard is a hang guard: the old search needs minutes for this document, the new one a
fraction of a second, and the limit is far from both.
"""

from __future__ import annotations

import pytest

from journal.session.importers.documents import DocumentError, parse_json

RUNS = 2_000  # runs of digits under json's limit, each parsed as a number (8 MB in all)


@pytest.mark.timeout(60)
def test_a_long_integer_after_many_shorter_ones_is_located_without_rescanning() -> None:
    doc = ("[" + ",".join(["9" * 3999] * RUNS) + "," + "9" * 5000 + "]").encode()
    with pytest.raises(DocumentError) as err:
        parse_json(doc, "big.json")
    assert err.value.at == f"line 1, column {1 + RUNS * 4000 + 1}"  # the refused integer's first digit
