"""A session as one standalone HTML file (``journal export --format html``): the viewer's session
timeline with its style inlined, no script, nothing fetched from the network.

Read-only like the viewer: the journal is opened read-only and verified read-only, so a torn
tail or corruption is shown as damage with its segment, offset and seq, never cut. Secrets are
redacted (journal/session/redact.py) in every event, in the title and in the gate's words before
anything is rendered, so no part of the page can hold one the rules find; ``Redactor(enabled=
False)`` (``--no-redact``) keeps them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from journal.api import JournalError
from journal.session.redact import Redactor
from journal.view.model import Folder, Item
from journal.view.render import render_session_html
from journal.view.source import SingleJournal


@dataclass
class Exported:
    html: str
    events: int
    damage: list[str] = field(default_factory=list)


def _redacted(it: Item, r: Redactor) -> Item:
    raw = r.value(it.raw)
    # An item's data is its event's "data": taken from the redacted event, each secret is counted once.
    inner = raw.get("data") if isinstance(raw, dict) else None
    data: dict[str, Any] = inner if isinstance(inner, dict) else r.value(it.data)
    return dataclasses.replace(it, raw=raw, data=data)


def export_html(target: str, redactor: Redactor) -> Exported:
    """Render the session in journal ``target`` (a directory or a journal URL) as one page."""
    src = SingleJournal(target)
    sid = src.session_id
    folder = Folder()
    items: list[Item] = []
    read_error: dict[str, Any] | None = None
    with src.open_journal(sid) as j:
        try:
            for rec in j.read():
                items.append(_redacted(folder.feed(rec), redactor))
        except JournalError as exc:  # the reader stopped at damage: show what was read, and where
            read_error = {"message": str(exc)}
    summary = folder.finish()
    summary.title = redactor.text(summary.title) if summary.title else summary.title
    if summary.gate is not None:
        summary.gate = redactor.value(summary.gate)
    report = src.verify(sid)
    damage = [p.get("reason", "?") for p in (report or {}).get("problems") or [] if isinstance(p, dict)]
    torn = (report or {}).get("tornTail")
    if isinstance(torn, dict):
        damage.insert(0, f"torn tail in {torn.get('segment')} at offset {torn.get('offset')}")
    if read_error is not None:
        damage.append(read_error["message"])
    page = render_session_html(sid, items, summary, report, read_error)
    return Exported(page, len(items), damage)
