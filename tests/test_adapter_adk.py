"""journal.adapters.adk.JournalSessionService: differential tests against ADK's
InMemorySessionService (with and without a reopen after every operation), a SIGKILL test of a
child process using it, group commit, the error paths with injected faults, and the registry."""

from __future__ import annotations

import asyncio
import copy
import errno
import importlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest

if os.environ.get("JOURNAL_REQUIRE_FRAMEWORKS") == "1":  # CI: a framework missing is a failure
    importlib.import_module("google.adk")
else:
    pytest.importorskip("google.adk", reason="the adk extra is not installed (pip install -e '.[adk]')")

from google.adk.cli.service_registry import get_service_registry, load_services_module
from google.adk.cli.utils.service_factory import create_session_service_from_options
from google.adk.errors import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.platform import time as platform_time
from google.adk.platform import uuid as platform_uuid
from google.adk.sessions.base_session_service import BaseSessionService, GetSessionConfig
from google.adk.sessions.in_memory_session_service import InMemorySessionService
from google.adk.sessions.session import Session
from google.genai import types
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import journal
from journal.adapters.adk import JournalSessionService as JSS
from journal.adapters.adk import (
    OutcomeUnknownError,
    ServiceClosedError,
    WriteNotCommittedError,
    WriteTooLargeError,
    app_dir_name,
    register,
)
from journal.crashsim.faults import FaultyFileSystem
from journal.fs import File, OsFileSystem
from tests import child_adk as child
from tests.conftest import report_count

REPO = Path(__file__).resolve().parent.parent
APP = "app"


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def event(eid: str, t: float, text: str = "hi", delta: dict[str, Any] | None = None, partial: bool = False) -> Event:
    return Event(id=eid, invocation_id="inv", author="agent", timestamp=t, partial=partial or None,
                 content=types.Content(role="model", parts=[types.Part(text=text)]),
                 actions=EventActions(state_delta=copy.deepcopy(delta or {})))


async def snapshot(service: BaseSessionService, app: str, users: tuple[str, ...] = child.USERS) -> dict[str, Any]:
    """Everything a caller can see of an app: the listing, each session whole, each user's state."""
    listed = (await service.list_sessions(app_name=app)).sessions
    whole = {}
    for s in listed:
        got = await service.get_session(app_name=app, user_id=s.user_id, session_id=s.id)
        assert got is not None
        whole[f"{s.user_id}/{s.id}"] = got.model_dump(mode="json")
    return {
        "list": [s.model_dump(mode="json") for s in listed],
        "sessions": whole,
        "user_state": {u: await service.get_user_state(app_name=app, user_id=u) for u in users},
    }


# -- 1 and 2: the differential test, plain and with a reopen after every operation -------------

APPS = ("app", "an app/ü")
USERS = ("u1", "u2")
SIDS = (None, "", "s1", "s2", " s1 ", "s/3")
KEYS = ("a", "b", "app:a", "app:b", "user:a", "user:b", "temp:a", "temp:b")
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.text("xyé", max_size=2),
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text("ab", max_size=1), inner, max_size=2),
    max_leaves=3,
)
states = st.dictionaries(st.sampled_from(KEYS), json_values, max_size=4)


class Outcome:
    """What one call did: its value, or the type of the exception it raised."""

    def __init__(self, value: Any = None, error: type[BaseException] | None = None) -> None:
        self.value, self.error = value, error


async def call(coro: Any) -> Outcome:
    try:
        return Outcome(await coro)
    except Exception as exc:
        return Outcome(error=type(exc))


def dumped(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, list):
        return [dumped(v) for v in value]
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    return value


class Differential(RuleBasedStateMachine):
    """The same random operations on InMemorySessionService and JournalSessionService; every
    result, every exception type and everything observable afterwards must be equal.

    Times: ADK stamps a new session with ``platform_time.get_time()`` and events carry the
    timestamps the test gives them, so both services are run with the same time provider (and
    the same id provider for generated session ids) and nothing needs normalizing. The one
    difference allowed is the one ADK's persistent services have by design: InMemorySessionService
    accepts a stale session object, JournalSessionService raises StaleSessionError (as
    DatabaseSessionService does); the test predicts which objects are stale and checks it."""

    reopen = False

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="adk-diff-")
        self.loop = asyncio.new_event_loop()
        self.mem = InMemorySessionService()
        self.jr = JSS(self.dir)
        self.now = 100.0
        self.ids = 0
        # (session from mem, session from journal, the version of the stored session it reflects)
        self.handles: list[list[Any]] = []
        self.versions: dict[tuple[str, str, str], int] = {}
        self.version = 0
        self.last_events: tuple[Event, Event] | None = None
        self.event_ids: list[str] = ["e0"]

    def teardown(self) -> None:
        self.loop.run_until_complete(self.jr.close())
        self.loop.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def both(self, make: Any) -> tuple[Outcome, Outcome]:
        async def go() -> tuple[Outcome, Outcome]:
            platform_time.set_time_provider(lambda: self.now)
            platform_uuid.set_id_provider(lambda: f"gen-{self.ids}")
            return await call(make(self.mem)), await call(make(self.jr))

        a, b = self.loop.run_until_complete(go())
        assert a.error == b.error, (a.error, b.error)
        assert dumped(a.value) == dumped(b.value)
        return a, b

    def bump(self, key: tuple[str, str, str]) -> int:
        self.version += 1
        self.versions[key] = self.version
        return self.version

    def keep(self, a: Session, b: Session, version: int) -> None:
        self.handles.append([a, b, version])
        del self.handles[:-8]  # a few recent objects, old ones included: some go stale

    @rule(app=st.sampled_from(APPS), user=st.sampled_from(USERS), sid=st.sampled_from(SIDS), state=states)
    def create(self, app: str, user: str, sid: str | None, state: dict[str, Any]) -> None:
        self.now += 1
        self.ids += 1
        a, b = self.both(lambda s: s.create_session(app_name=app, user_id=user, session_id=sid, state=state))
        if a.error is None:
            self.keep(a.value, b.value, self.bump((app, user, a.value.id)))

    @rule(app=st.sampled_from(APPS), user=st.sampled_from(USERS), sid=st.sampled_from(SIDS[2:]),
          recent=st.sampled_from([None, 0, 1, 3]), after=st.none() | st.floats(95, 130).map(round))
    def get_rule(self, app: str, user: str, sid: str, recent: int | None, after: float | None) -> None:
        self.get(app, user, sid, recent, after)

    def get(self, app: str, user: str, sid: str, recent: int | None, after: float | None) -> None:
        config = None if recent is None and after is None else GetSessionConfig(
            num_recent_events=recent, after_timestamp=after)
        a, b = self.both(lambda s: s.get_session(app_name=app, user_id=user, session_id=sid, config=config))
        if a.value is not None:
            self.keep(a.value, b.value, self.versions[(app, user, a.value.id)])

    @precondition(lambda self: self.handles)
    @rule(which=st.integers(0, 7))
    def refetch(self, which: int) -> None:
        """A second object of a session already held: the older one may then go stale."""
        h = self.handles[which % len(self.handles)][0]
        self.get(h.app_name, h.user_id, h.id, None, None)

    @rule(app=st.sampled_from(APPS), user=st.none() | st.sampled_from(USERS))
    def list(self, app: str, user: str | None) -> None:
        a, b = self.both(lambda s: s.list_sessions(app_name=app, user_id=user))
        for x, y in zip(a.value.sessions, b.value.sessions, strict=True):
            self.keep(x, y, self.versions[(app, x.user_id, x.id)])

    @rule(app=st.sampled_from(APPS), user=st.sampled_from(USERS), sid=st.sampled_from(SIDS[2:]))
    def delete(self, app: str, user: str, sid: str) -> None:
        self.both(lambda s: s.delete_session(app_name=app, user_id=user, session_id=sid))
        self.versions.pop((app, user, sid.strip()), None)

    @rule(app=st.sampled_from(APPS), user=st.sampled_from(USERS))
    def user_state(self, app: str, user: str) -> None:
        self.both(lambda s: s.get_user_state(app_name=app, user_id=user))

    def append(self, which: int, new_id: bool, dt: int, text: str, delta: dict[str, Any], partial: bool) -> None:
        if new_id:
            self.event_ids.append(f"e{len(self.event_ids)}")
        eid = self.event_ids[-1]
        self.now += dt  # also ties and out-of-order timestamps
        evs = (event(eid, self.now, text, delta, partial), event(eid, self.now, text, delta, partial))
        self.last_events = evs
        self.append_both(which, *evs)

    # Appends are what the service is about: three rules doing the same weight them up.
    _append_args: Any = dict(which=st.integers(0, 7), new_id=st.booleans(), dt=st.sampled_from([1, 1, 0, -3]),
                             text=st.text("ab ", max_size=5), delta=states, partial=st.booleans())
    append_1 = precondition(lambda self: self.handles)(rule(**_append_args)(append))
    append_2 = precondition(lambda self: self.handles)(rule(**_append_args)(lambda self, **kw: self.append(**kw)))
    append_3 = precondition(lambda self: self.handles)(rule(**_append_args)(lambda self, **kw: self.append(**kw)))

    @precondition(lambda self: self.handles and self.last_events)
    @rule(which=st.integers(0, 7))
    def redeliver(self, which: int) -> None:
        """The same event objects again: an equal re-delivery is a no-op on both."""
        assert self.last_events is not None
        self.append_both(which, *self.last_events)

    def append_both(self, which: int, ev_mem: Event, ev_jr: Event) -> None:
        handle = self.handles[which % len(self.handles)]
        h_mem, h_jr, seen = handle
        key = (h_mem.app_name, h_mem.user_id, h_mem.id)
        stored = self.mem.sessions.get(key[0], {}).get(key[1], {}).get(key[2])
        redelivery = stored is not None and any(e == ev_mem for e in stored.events if e.id == ev_mem.id)
        stale = stored is not None and not ev_mem.partial and not redelivery and self.versions.get(key) != seen
        if stale:
            out = self.loop.run_until_complete(call(self.jr.append_event(h_jr, ev_jr)))
            assert out.error is StaleSessionError
            return
        a, _ = self.both(lambda s: s.append_event(h_mem if s is self.mem else h_jr, ev_mem if s is self.mem else ev_jr))
        assert h_mem.model_dump(mode="json") == h_jr.model_dump(mode="json")
        assert ev_mem.model_dump(mode="json") == ev_jr.model_dump(mode="json")
        if a.error is None and stored is not None and not ev_mem.partial and not redelivery:
            handle[2] = self.bump(key)

    @invariant()
    def same_everywhere(self) -> None:
        async def go() -> None:
            for app in APPS:
                assert await snapshot(self.mem, app, USERS) == await snapshot(self.jr, app, USERS)
            if self.reopen:
                await self.jr.close()
                self.jr = JSS(self.dir)
                for app in APPS:
                    assert await snapshot(self.mem, app, USERS) == await snapshot(self.jr, app, USERS)

        self.loop.run_until_complete(go())


class DifferentialReopened(Differential):
    reopen = True


_SETTINGS = settings(max_examples=50, stateful_step_count=40, deadline=None,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
TestDifferential = Differential.TestCase
TestDifferential.settings = _SETTINGS
TestDifferentialReopened = DifferentialReopened.TestCase
TestDifferentialReopened.settings = _SETTINGS


# -- 3: SIGKILL ---------------------------------------------------------------------------

KILL_ROUNDS = 60
OPS_PER_ROUND = 8


def _line(proc: subprocess.Popen[bytes]) -> dict[str, Any]:
    assert proc.stdout is not None
    raw = proc.stdout.readline()
    assert raw, "the fork server died"
    msg: dict[str, Any] = json.loads(raw)
    return msg


def test_sigkill_at_random_points_keeps_every_acknowledged_op(tmp_path: Path) -> None:
    """A child runs ops and says "ack" after each returns. Half the rounds, the test SIGKILLs it
    once it said the k-th (k random: the kill lands in the op after it, or after the last); the
    other half, the child SIGKILLs itself just after its j-th committed write, before that op is
    acknowledged. A reopen must then equal InMemorySessionService given a prefix of the ops holding
    every acknowledged one, and at most the one in flight beyond it."""
    rnd = random.Random(20261201)
    model = InMemorySessionService()
    proc = subprocess.Popen([sys.executable, "-m", "tests.child_adk"], cwd=REPO,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None
    rounds = cut_short = one_more = 0
    try:
        for r in range(KILL_ROUNDS):
            ops = child.make_ops(r, OPS_PER_ROUND)
            by_test = r % 2 == 0
            kill_after = rnd.randrange(OPS_PER_ROUND + 1) if by_test else None
            cmd = {"dir": str(tmp_path), "app": APP, "seed": r, "n": OPS_PER_ROUND,
                   "die_after_writes": None if by_test else rnd.randrange(1, OPS_PER_ROUND + 1)}
            proc.stdin.write((json.dumps(cmd) + "\n").encode())
            proc.stdin.flush()
            pid = _line(proc)["pid"]
            results: list[str] = []
            ended = False
            if kill_after is not None:
                while len(results) < kill_after:
                    results.append(_line(proc)["result"])
                # The grandchild never exits by itself (it waits for this signal after its last
                # op), so it is not reaped yet and the pid is still its own.
                os.kill(pid, signal.SIGKILL)
            while True:
                msg = _line(proc)
                if "reaped" in msg:
                    assert msg["reaped"] == pid
                    break
                if "end" in msg:
                    ended = True
                    if kill_after is None:  # a self-killing round with fewer writes than j
                        os.kill(pid, signal.SIGKILL)
                else:
                    results.append(msg["result"])
            rounds += 1
            cut_short += not ended
            one_more += run(_check_round(tmp_path, model, ops, results))
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
    report_count("adk kill -9 rounds", rounds)
    report_count("adk kill -9 rounds cut short (with the op in flight stored)", f"{cut_short} ({one_more})")
    assert rounds >= 50 and one_more > 0


async def _check_round(path: Path, model: InMemorySessionService, ops: list[dict[str, Any]], results: list[str]) -> int:
    """Bring the model up to the acknowledged ops (their results must be the model's), compare;
    if the journal holds one more, it is the op that was in flight. 1 if it was."""
    for op, result in zip(ops, results, strict=False):
        assert await child.apply_op(model, APP, op) == result, op
    async with JSS(path) as service:
        got = await snapshot(service, APP)
        if got == await snapshot(model, APP):
            return 0
        assert len(results) < len(ops), "the journal holds more than every op of the round"
        await child.apply_op(model, APP, ops[len(results)])
        assert got == await snapshot(model, APP), "the journal is neither the acknowledged prefix nor one more"
        return 1


# -- 4: group commit ----------------------------------------------------------------------


class CountingFileSystem(OsFileSystem):
    """The real file layer, counting fdatasyncs (as tests/test_aio.py does)."""

    def __init__(self) -> None:
        self.fdatasyncs = 0
        self.mu = threading.Lock()

    def open_write(self, path: str, create: bool) -> File:
        f = super().open_write(path, create)
        inner = f.fdatasync

        def fdatasync() -> None:
            with self.mu:
                self.fdatasyncs += 1
            inner()

        f.fdatasync = fdatasync  # type: ignore[method-assign]
        return f


def test_concurrent_appends_on_many_sessions_share_fdatasyncs(tmp_path: Path) -> None:
    n = 120
    fs = CountingFileSystem()

    async def main() -> None:
        async with JSS(tmp_path, fs=fs) as service:
            sessions = [await service.create_session(app_name=APP, user_id="u", session_id=f"s{i}") for i in range(n)]
            before = fs.fdatasyncs
            await asyncio.gather(*(
                service.append_event(s, event(f"e{i}", 200.0 + i, delta={"app:last": i, "user:n": i, "mine": i}))
                for i, s in enumerate(sessions)))
            syncs = fs.fdatasyncs - before
            report_count("adk group commit: fdatasyncs for concurrent appends", f"{syncs} for {n}")
            assert syncs <= n // 10, syncs
            seen = await snapshot(service, APP, ("u",))
        async with JSS(tmp_path) as service:
            assert await snapshot(service, APP, ("u",)) == seen  # the fold in seq order is the replay
        assert all(seen["sessions"][f"u/s{i}"]["state"]["mine"] == i for i in range(n))
        assert len({s["state"]["app:last"] for s in seen["sessions"].values()}) == 1

    run(main())


# -- 5: error paths -----------------------------------------------------------------------


def _journal_last_seq(path: Path, app: str = APP) -> int:
    with journal.open(path / "apps" / app_dir_name(app), readonly=True) as j:
        return j.last_seq


def test_stale_session_object_is_refused_and_nothing_written(tmp_path: Path) -> None:
    async def main() -> None:
        async with JSS(tmp_path) as service:
            a = await service.create_session(app_name=APP, user_id="u", session_id="s")
            b = await service.get_session(app_name=APP, user_id="u", session_id="s")
            assert b is not None
            await service.append_event(a, event("e1", 10.0, delta={"k": 1}))
            last = service.last_seq(APP)
            with pytest.raises(StaleSessionError):
                await service.append_event(b, event("e2", 11.0, delta={"k": 2}))
            assert service.last_seq(APP) == last and b.events == [] and "k" not in b.state
            # A session object made elsewhere (no storage marker): stale when storage is newer
            # and ends in another event, as DatabaseSessionService judges it.
            with pytest.raises(StaleSessionError):
                await service.append_event(Session(id="s", app_name=APP, user_id="u", last_update_time=5.0),
                                           event("e3", 12.0))
            fresh = await service.get_session(app_name=APP, user_id="u", session_id="s")
            assert fresh is not None
            await service.append_event(fresh, event("e4", 13.0, delta={"k": 4}))
            assert fresh.state["k"] == 4 and [e.id for e in fresh.events] == ["e1", "e4"]
        assert _journal_last_seq(tmp_path) == last + 1

    run(main())


def test_unknown_session_and_duplicate_id_are_adk_errors_and_nothing_written(tmp_path: Path) -> None:
    async def main() -> None:
        async with JSS(tmp_path) as service:
            await service.create_session(app_name=APP, user_id="u", session_id="s", state={"app:x": 1})
            last = service.last_seq(APP)
            with pytest.raises(SessionNotFoundError):
                await service.append_event(Session(id="nope", app_name=APP, user_id="u"), event("e", 1.0))
            with pytest.raises(AlreadyExistsError):
                await service.create_session(app_name=APP, user_id="u", session_id=" s ", state={"app:x": 2})
            await service.delete_session(app_name=APP, user_id="u", session_id="nope")  # a no-op, as ADK's
            assert service.last_seq(APP) == last
            assert (await service.list_sessions(app_name=APP)).sessions[0].state == {"app:x": 1}
            await service.delete_session(app_name=APP, user_id="u", session_id="s")
            assert await service.get_session(app_name=APP, user_id="u", session_id="s") is None
            assert (await service.list_sessions(app_name=APP, user_id="u")).sessions == []
            with pytest.raises(SessionNotFoundError):
                await service.append_event(Session(id="s", app_name=APP, user_id="u"), event("e", 1.0))
        async with JSS(tmp_path) as service:
            assert await service.get_session(app_name=APP, user_id="u", session_id="s") is None

    run(main())


def test_reads_of_an_app_never_written_make_nothing(tmp_path: Path) -> None:
    async def main() -> None:
        async with JSS(tmp_path / "d") as service:
            assert await service.get_session(app_name="nope", user_id="u", session_id="s") is None
            assert (await service.list_sessions(app_name="nope")).sessions == []
            assert await service.get_user_state(app_name="nope", user_id="u") == {}
            await service.delete_session(app_name="nope", user_id="u", session_id="s")
            with pytest.raises(SessionNotFoundError):
                await service.append_event(Session(id="s", app_name="nope", user_id="u"), event("e", 1.0))
        assert not (tmp_path / "d" / "apps").exists()

    run(main())


def test_event_too_large_is_refused_and_nothing_written(tmp_path: Path) -> None:
    async def main() -> None:
        async with JSS(tmp_path, record_size_bytes_max=4096) as service:
            s = await service.create_session(app_name=APP, user_id="u", session_id="s")
            last = service.last_seq(APP)
            big = event("big", 1.0, text="x" * 10_000, delta={"temp:t": 1, "k": 1})
            with pytest.raises(WriteTooLargeError, match="4096-byte limit") as info:
                await service.append_event(s, big)
            assert info.value.limit_bytes == 4096 and info.value.size_bytes > 4096
            assert service.last_seq(APP) == last
            assert s.events == [] and s.state == {} and "temp:t" in big.actions.state_delta  # untouched
            await service.append_event(s, event("small", 2.0))  # the service goes on
        assert _journal_last_seq(tmp_path) == last + 1

    run(main())


def test_not_committed_write_raises_and_changes_nothing(tmp_path: Path) -> None:
    fs = FaultyFileSystem(OsFileSystem())

    async def main() -> None:
        async with JSS(tmp_path, fs=fs) as service:
            s = await service.create_session(app_name=APP, user_id="u", session_id="s", state={"app:a": 1})
            await service.append_event(s, event("e1", 1.0, delta={"k": 1}))
            before = await snapshot(service, APP, ("u",))
            handle_before = s.model_dump(mode="json")
            last = service.last_seq(APP)
            ev = event("e2", 2.0, delta={"k": 2, "app:a": 2, "user:b": 3, "temp:t": 4})
            fs.fail("pwrite", errno.ENOSPC, after=fs.calls["pwrite"])
            with pytest.raises(WriteNotCommittedError, match="not stored") as info:
                await service.append_event(s, ev)
            assert info.value.outcome is not None and info.value.outcome.errno == errno.ENOSPC
            assert await snapshot(service, APP, ("u",)) == before
            assert s.model_dump(mode="json") == handle_before and "temp:t" in ev.actions.state_delta
            assert service.last_seq(APP) == last
            fs.fail("pwrite", errno.EIO, after=fs.calls["pwrite"])
            with pytest.raises(WriteNotCommittedError):
                await service.create_session(app_name=APP, user_id="u", session_id="t", state={"app:a": 9})
            assert await snapshot(service, APP, ("u",)) == before
            await service.append_event(s, ev)  # the retry, with the same objects
            assert s.state == {"k": 2, "app:a": 2, "user:b": 3, "temp:t": 4}
            after = await snapshot(service, APP, ("u",))
        async with JSS(tmp_path) as service:
            assert await snapshot(service, APP, ("u",)) == after

    run(main())


def test_ack_lost_raises_closes_the_app_and_the_next_call_reads_the_disk(tmp_path: Path) -> None:
    fs = FaultyFileSystem(OsFileSystem())

    async def main() -> None:
        async with JSS(tmp_path, fs=fs) as service:
            s = await service.create_session(app_name=APP, user_id="u", session_id="s")
            fs.fail("fdatasync", errno.EIO, after=fs.calls["fdatasync"])
            with pytest.raises(OutcomeUnknownError, match="unknown") as info:
                await service.append_event(s, event("e1", 1.0, delta={"app:a": 1}))
            assert isinstance(info.value.outcome, journal.AckLost)
            assert s.events == []  # the caller's object is not told a write it cannot know took
            fs.clear()
            # The app's journal was closed: this call reopens it (recovery) and folds the disk,
            # where the bytes did arrive (the OS had them; only the fdatasync failed).
            got = await service.get_session(app_name=APP, user_id="u", session_id="s")
            assert got is not None and [e.id for e in got.events] == ["e1"] and got.state == {"app:a": 1}
            await service.append_event(got, event("e2", 2.0))
        async with JSS(tmp_path) as service:
            got = await service.get_session(app_name=APP, user_id="u", session_id="s")
            assert got is not None and [e.id for e in got.events] == ["e1", "e2"]

    run(main())


def test_partial_events_and_temp_state_are_never_stored(tmp_path: Path) -> None:
    async def main() -> None:
        async with JSS(tmp_path) as service:
            s = await service.create_session(app_name=APP, user_id="u", session_id="s", state={"temp:x": 1, "a": 1})
            assert s.state == {"a": 1}
            last = service.last_seq(APP)
            p = event("p", 1.0, delta={"a": 2}, partial=True)
            assert await service.append_event(s, p) is p and s.events == [] and service.last_seq(APP) == last
            await service.append_event(s, event("e", 2.0, delta={"temp:t": 5, "a": 3}))
            assert s.state == {"a": 3, "temp:t": 5}  # temp: on the caller's object only
        async with JSS(tmp_path) as service:
            got = await service.get_session(app_name=APP, user_id="u", session_id="s")
            assert got is not None and got.state == {"a": 3} and got.events[0].actions.state_delta == {"a": 3}
        with journal.open(tmp_path / "apps" / APP, readonly=True) as j:
            assert "temp:" not in json.dumps([r.event for r in j.read()])

    run(main())


def test_one_service_per_directory_and_close(tmp_path: Path) -> None:
    async def main() -> None:
        first = JSS(tmp_path)
        await first.create_session(app_name=APP, user_id="u", session_id="s")
        second = JSS(tmp_path)
        with pytest.raises(journal.JournalLockedError):
            await second.get_session(app_name=APP, user_id="u", session_id="s")
        await first.close()
        with pytest.raises(ServiceClosedError):
            await first.list_sessions(app_name=APP)
        assert await second.get_session(app_name=APP, user_id="u", session_id="s") is not None
        await second.close()

    run(main())


def test_a_cancelled_caller_waits_for_its_write_and_the_write_is_whole(tmp_path: Path) -> None:
    gate = threading.Event()
    in_sync = threading.Event()

    class Gated(OsFileSystem):
        def open_write(self, path: str, create: bool) -> File:
            f = super().open_write(path, create)
            inner = f.fdatasync

            def fdatasync() -> None:
                if not gate.is_set():
                    in_sync.set()
                    gate.wait(30)
                inner()

            f.fdatasync = fdatasync  # type: ignore[method-assign]
            return f

    async def main() -> None:
        gate.set()
        async with JSS(tmp_path, fs=Gated()) as service:
            s = await service.create_session(app_name=APP, user_id="u", session_id="s")
            gate.clear()
            task = asyncio.create_task(service.append_event(s, event("e", 1.0, delta={"k": 1})))
            await asyncio.to_thread(in_sync.wait, 30)  # the write is in the kernel
            task.cancel()
            await asyncio.sleep(0)
            assert not task.done()  # still waiting for the outcome
            gate.set()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert s.state == {"k": 1}  # it took, and the caller's object shows it
            got = await service.get_session(app_name=APP, user_id="u", session_id="s")
            assert got is not None and [e.id for e in got.events] == ["e"]

    run(main())


# -- 6: the registry ----------------------------------------------------------------------


def test_registry_makes_the_service_from_journal_uris(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    register()
    registry = get_service_registry()
    service = registry.create_session_service(f"journal://{tmp_path}/abs", agents_dir=str(tmp_path))
    assert isinstance(service, JSS) and service.path == str(tmp_path / "abs")
    monkeypatch.chdir(tmp_path)
    service = registry.create_session_service("journal://rel/dir", agents_dir=str(tmp_path))
    assert isinstance(service, JSS) and service.path == str(tmp_path / "rel" / "dir")
    # As `adk web` makes it, from --session_service_uri:
    service = create_session_service_from_options(base_dir=tmp_path, session_service_uri=f"journal://{tmp_path}/x")
    assert isinstance(service, JSS) and service.path == str(tmp_path / "x")
    with pytest.raises(ValueError, match="names no directory"):
        registry.create_session_service("journal://")


def test_services_py_in_the_agents_dir_registers_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ADK's CLI imports ``services.py`` from the agents directory: the documented one-liner."""
    agents = tmp_path / "agents"
    agents.mkdir()
    (agents / "services.py").write_text("from journal.adapters.adk import register\nregister('journal-test')\n")
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "services", raising=False)
    load_services_module(str(agents))
    service = get_service_registry().create_session_service(f"journal-test://{tmp_path}/s")
    assert isinstance(service, JSS)
    sys.modules.pop("services", None)
