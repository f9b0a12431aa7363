"""`journal view`'s speed: the store page of 10,000 sessions and the session page of a
100,000-event session, measured in headless Chromium (navigation start to first contentful
paint, and to the first row or event in the DOM), and the search index of 1,000 sessions (build
rate, query time).

    .venv/bin/python bench/bench_view.py                      # the figures of docs/VIEWER.md
    .venv/bin/python bench/bench_view.py --sessions 2000 --events 20000 --search-sessions 200

Needs /usr/bin/chromium and Playwright (the view-test extra). The stores are written into
--workdir (a temp dir by default, removed afterwards) with buffered appends: how they are
written is not what is measured. Each page is loaded --runs times; the median and the worst are
printed, the first load (the server's first read of the index) apart.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import journal
from journal.session.session import new_session_id
from journal.session.store import SessionStore
from journal.view.searchindex import SearchIndex
from journal.view.server import Viewer, ViewerServer
from journal.view.source import open_source

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]
WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa "
         "quebec romeo sierra tango uniform victor whiskey xray yankee zulu build test deploy refactor parser "
         "cache index schema migration timeout retry journal segment frame checksum").split()
FCP_JS = """() => new Promise(resolve => {
  new PerformanceObserver(list => {
    for (const e of list.getEntries()) if (e.name === 'first-contentful-paint') resolve(e.startTime);
  }).observe({type: 'paint', buffered: true});
})"""


def events_for(sid: str, rng: random.Random, turns: int, t0: int) -> list[dict[str, Any]]:
    """A session's events: a header, then turns of a user message, a step, an assistant message
    with usage, a tool call and its result, the ends (11 events a turn)."""
    def ev(kind: str, data: dict[str, Any], **ids: str) -> dict[str, Any]:
        return {"schemaVersion": 1, "sessionId": sid, "type": kind, "time": f"2026-01-01T00:{t0 % 60:02d}:00Z",
                **ids, "data": data}

    out = [ev("session.started", {"workspace": {"path": f"/repo/{rng.randrange(20)}"}, "lineage": {"depth": 0}})]
    for t in range(turns):
        tid, step, call = f"t{t}", f"t{t}.s", f"t{t}.c"
        text = " ".join(rng.choices(WORDS, k=12))
        out += [
            ev("user.message", {"text": f"turn {t}: {text}"}),
            ev("turn.started", {}, turnId=tid),
            ev("step.started", {}, turnId=tid, stepId=step),
            ev("model.requested", {}, turnId=tid, stepId=step),
            ev("assistant.message", {"text": " ".join(rng.choices(WORDS, k=40)),
                                     "usage": {"input_tokens": 1000 + t, "output_tokens": 90}},
               turnId=tid, stepId=step, attemptId=f"{step}.a"),
            ev("tool.requested", {"tool": rng.choice(["bash", "read", "edit", "grep"]),
                                  "args": {"cmd": " ".join(rng.choices(WORDS, k=5))}, "sideEffect": "process",
                                  "idempotency": "unsafe"}, turnId=tid, stepId=step, toolCallId=call),
            ev("tool.started", {}, turnId=tid, stepId=step, toolCallId=call),
            ev("tool.result", {"status": "ok", "output": "\n".join(" ".join(rng.choices(WORDS, k=10))
                                                                  for _ in range(rng.randrange(1, 30)))},
               turnId=tid, stepId=step, toolCallId=call),
            ev("assistant.message", {"text": "done " + " ".join(rng.choices(WORDS, k=10))}, turnId=tid,
               stepId=step, attemptId=f"{step}.b"),
            ev("step.ended", {"reason": "completed"}, turnId=tid, stepId=step),
            ev("turn.ended", {"reason": "completed"}, turnId=tid),
        ]
    return out


def write_store(root: str, sessions: int, turns_each: int, seed: int) -> float:
    """Session journals in the store's layout, then the store's own index rebuilt from them."""
    rng = random.Random(seed)
    os.makedirs(os.path.join(root, "sessions"), exist_ok=True)
    t = time.perf_counter()
    for i in range(sessions):
        sid = new_session_id()
        d = os.path.join(root, "sessions", sid)
        os.makedirs(d)
        with journal.open(os.path.join(d, "journal"), create=True, reserve_bytes=0) as j:
            evs = events_for(sid, rng, turns_each, i)
            for k in range(0, len(evs), 1000):
                j.append_many(evs[k: k + 1000], durability="buffered")
    SessionStore(root).rebuild_index()
    return time.perf_counter() - t


class Served:
    def __init__(self, root: str, cache: str) -> None:
        self.viewer = Viewer(open_source(root), cache, index_in_background=False)
        self.server = ViewerServer(self.viewer)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def load_times(browser: Any, served: Served, path: str, marker: str, runs: int) -> list[tuple[float, float]]:
    """(first contentful paint, marker in the DOM) in ms from navigation start, per load."""
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    page = ctx.new_page()
    page.set_default_timeout(60_000)
    page.goto(served.server.url)
    out = []
    port = served.server.server_address[1]
    for _ in range(runs):
        page.goto(f"http://127.0.0.1:{port}{path}", wait_until="commit")
        page.wait_for_selector(marker)
        at = page.evaluate("() => performance.now()")
        fcp = page.evaluate(FCP_JS)
        out.append((float(fcp), float(at)))
    ctx.close()
    return out


def report(name: str, times: list[tuple[float, float]]) -> dict[str, Any]:
    first, rest = times[0], times[1:] or times
    fcp = [t[0] for t in rest]
    dom = [t[1] for t in rest]
    row = {"page": name, "first_load_fcp_ms": round(first[0], 1), "first_load_marker_ms": round(first[1], 1),
           "fcp_median_ms": round(statistics.median(fcp), 1), "fcp_worst_ms": round(max(fcp), 1),
           "marker_median_ms": round(statistics.median(dom), 1), "marker_worst_ms": round(max(dom), 1)}
    print(f"{name}: first load FCP {row['first_load_fcp_ms']} ms (marker {row['first_load_marker_ms']} ms); "
          f"then FCP median {row['fcp_median_ms']} ms, worst {row['fcp_worst_ms']} ms; marker median "
          f"{row['marker_median_ms']} ms, worst {row['marker_worst_ms']} ms")
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sessions", type=int, default=10_000, help="sessions of the store page's store")
    ap.add_argument("--events", type=int, default=100_000, help="events of the big session (about)")
    ap.add_argument("--search-sessions", type=int, default=1_000, help="sessions of the search index's store")
    ap.add_argument("--search-turns", type=int, default=10, help="turns per session there (11 events a turn)")
    ap.add_argument("--runs", type=int, default=6)
    ap.add_argument("--workdir", help="keep the stores here (default: a temp dir, removed)")
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON object too")
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    work = args.workdir or tempfile.mkdtemp(prefix="bench-view-")
    figures: dict[str, Any] = {"sessions": args.sessions, "events": args.events,
                               "searchSessions": args.search_sessions, "cpus": os.cpu_count()}
    try:
        many, big, corpus = (os.path.join(work, n) for n in ("many", "big", "search"))
        if not os.path.isdir(many):
            took = write_store(many, args.sessions, 1, 1)
            print(f"wrote {args.sessions:,} sessions in {took:.1f} s")
        if not os.path.isdir(big):
            took = write_store(big, 1, max(1, args.events // 11), 2)
            print(f"wrote a session of about {args.events:,} events in {took:.1f} s")
        if not os.path.isdir(corpus):
            write_store(corpus, args.search_sessions, args.search_turns, 3)

        # The search index of the --search-sessions store: build rate and query time.
        src = open_source(corpus)
        idx = SearchIndex(os.path.join(work, "cache-search"), corpus, rebuild=True)
        entries = src.entries()
        t = time.perf_counter()
        events = 0
        for sid in entries:
            events += idx.update_session(src, sid).events
        build_s = time.perf_counter() - t
        rng = random.Random(4)
        queries = [" ".join(rng.choices(WORDS, k=rng.choice((1, 2)))) for _ in range(200)]
        lat = []
        for q in queries:
            t = time.perf_counter()
            idx.search(q, 50)
            lat.append((time.perf_counter() - t) * 1000)
        lat.sort()
        figures["search"] = {"sessions": len(entries), "events": events, "build_s": round(build_s, 2),
                             "sessions_per_s": round(len(entries) / build_s, 1),
                             "events_per_s": round(events / build_s), "query_median_ms": round(lat[len(lat) // 2], 2),
                             "query_p95_ms": round(lat[int(len(lat) * 0.95)], 2), "queries": len(lat)}
        s = figures["search"]
        print(f"search index: {s['sessions']:,} sessions, {s['events']:,} events in {s['build_s']} s "
              f"({s['sessions_per_s']} sessions/s, {s['events_per_s']:,} events/s); "
              f"{s['queries']} queries: median {s['query_median_ms']} ms, p95 {s['query_p95_ms']} ms")

        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            served = Served(many, os.path.join(work, "cache-many"))
            t = time.perf_counter()
            served.viewer.indexer.one_pass()
            took = time.perf_counter() - t
            print(f"the store page's summaries: {args.sessions:,} sessions indexed in {took:.1f} s")
            figures["store_index_s"] = round(took, 1)
            figures["store_page"] = report(f"store page, {args.sessions:,} sessions",
                                           load_times(browser, served, "/", "#rows tr[data-sid]", args.runs))
            served.close()
            served = Served(big, os.path.join(work, "cache-big"))
            (sid,) = served.viewer.entries()
            figures["session_page"] = report(f"session page, {served.viewer.entries()[sid].info.last_seq:,} events",
                                             load_times(browser, served, f"/s/{sid}", "#e1", args.runs))
            served.close()
            browser.close()
        if args.json:
            print(json.dumps(figures))
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
