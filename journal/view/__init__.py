"""`journal view`: a local, read-only web page over a journal, a session store or a server store.

- ``source``: what is shown (a session store directory, one journal, a postgresql:// or nats://
  store), opened read-only: no lock, no repair, no byte changed.
- ``model``: a session's records folded into what the pages show (title, counts, status, the
  resume gate's verdict) and each record as a display item.
- ``searchindex``: the derived full-text index (SQLite FTS5) in a cache directory outside the store.
- ``render``: the HTML, on the server; ``render_session_html`` gives a session's timeline as one
  standalone page (style inlined, no script) for any module that writes one.
- ``server``: the HTTP server (standard library), its token, Host check and routes.
- ``assets``: the page's style and script, held in the package.

docs/VIEWER.md describes the pages and the security model.
"""

from journal.view.render import render_session_html

__all__ = ["render_session_html"]
