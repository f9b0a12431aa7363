"""A hypothesis state machine: the journal against a list, through appends, reopens and cut tails."""

from __future__ import annotations

import shutil
import tempfile

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import journal
from tests.conftest import frames_of, live_segment

EVENTS = st.one_of(
    st.dictionaries(st.text(max_size=5), st.one_of(st.integers(), st.text(max_size=300), st.booleans()), max_size=4),
    st.binary(max_size=400),
)
LEVELS = st.sampled_from(["buffered", "flush", "sync"])


class JournalModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp()
        self.path = self.dir + "/j"
        self.j = journal.open(self.path, create=True, segment_size_bytes=4096, index_interval_bytes=512)
        self.model: list[object] = []

    def teardown(self) -> None:
        self.j.close()
        shutil.rmtree(self.dir)

    @rule(event=EVENTS, level=LEVELS)
    def append(self, event: object, level: str) -> None:
        out = self.j.append(event, durability=level)
        self.model.append(event)
        assert out == journal.Committed(len(self.model), level)  # type: ignore[arg-type]

    @rule(events=st.lists(EVENTS, max_size=8), level=LEVELS)
    def append_many(self, events: list[object], level: str) -> None:
        outs = self.j.append_many(events, durability=level)
        first = len(self.model) + 1
        self.model.extend(events)
        assert [o.seq for o in outs if isinstance(o, journal.Committed)] == list(range(first, len(self.model) + 1))

    @rule()
    def reopen(self) -> None:
        self.j.close()
        self.j = journal.open(self.path, segment_size_bytes=4096, index_interval_bytes=512)
        assert self.j.recovery.truncated_at is None

    @precondition(lambda self: len(self.model) > 0)
    @rule(data=st.data())
    def cut_live_tail(self, data: st.DataObject) -> None:
        """Lose the end of the live segment at any byte, as a crash before a sync could."""
        self.j.close()
        seg = live_segment(self.path)
        size = seg.stat().st_size
        cut = data.draw(st.integers(min_value=64, max_value=size))
        frames = frames_of(seg)
        kept = [f for f in frames if f.end <= cut and f.flags & 0x0C in (0x0, 0xC)]  # whole data and block frames
        base_seq = int(seg.name.split(".")[0])
        with open(seg, "r+b") as f:
            f.truncate(cut)
        self.j = journal.open(self.path, segment_size_bytes=4096, index_interval_bytes=512)
        del self.model[kept[-1].seq if kept else base_seq - 1 :]
        assert self.j.last_seq == len(self.model)
        boundaries = {64} | {f.end for f in frames}
        assert (self.j.recovery.truncated_at is not None) == (cut not in boundaries)

    @rule(after=st.integers(min_value=0, max_value=200))
    def read(self, after: int) -> None:
        got = [(r.seq, r.event) for r in self.j.read(after_seq=after)]
        assert got == list(enumerate(self.model, start=1))[after:]

    @invariant()
    def last_seq_matches(self) -> None:
        assert self.j.last_seq == len(self.model)


JournalModel.TestCase.settings = settings(
    max_examples=40, stateful_step_count=25, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestJournalModel = JournalModel.TestCase
