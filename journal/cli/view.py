"""`journal view [PATH_OR_URL]`: a local web page over a session store, a journal or a server store.

Read-only: it takes no lock, repairs nothing and changes no byte of what it shows. It binds to
127.0.0.1, prints a URL holding a random token, and serves until Ctrl-C. docs/VIEWER.md.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading

from journal.cli.common import OK, int_at_least


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", nargs="?", default=".",
                        help="a session store's root, a journal directory, or a postgresql:// / nats:// URL "
                             "(default: the current directory)")
    parser.add_argument("--port", type=int_at_least(0), default=0, help="the port on 127.0.0.1 (default: any free one)")
    parser.add_argument("--cache-dir", metavar="DIR",
                        help="where the search index lives (default: $XDG_CACHE_HOME/journal-view/<hash>)")
    parser.add_argument("--rebuild-index", action="store_true", help="delete the search index and build it again")
    parser.add_argument("--no-browser", action="store_true", help="print the URL without opening a browser")
    parser.add_argument("--verbose", action="store_true", help="log every request on stderr")


def run(args: argparse.Namespace) -> int:
    from journal.view.searchindex import default_cache_dir
    from journal.view.server import Viewer, ViewerServer
    from journal.view.source import open_source

    source = open_source(args.target)
    cache = args.cache_dir or default_cache_dir(source.location)
    viewer = Viewer(source, os.path.abspath(cache), rebuild_index=args.rebuild_index)
    server = ViewerServer(viewer, args.port, verbose=args.verbose)
    # Ctrl-C (and SIGTERM) ask the serving loop to stop, from a thread of their own: a
    # KeyboardInterrupt raised wherever the main thread happens to be (inside a request's thread
    # start, a lock) can leave the interpreter unable to exit. Set before the URL is printed and
    # the browser started, so that a stop asked for then is a clean stop too (serve_forever
    # returns at once when a shutdown was asked before it began).
    def stop(_signum: int, _frame: object) -> None:
        threading.Thread(target=server.shutdown, name="journal-view-stop", daemon=True).start()

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    launch = None
    try:
        print(f"journal view: {source.kind} {source.location} (read-only)", file=sys.stderr)
        print(f"search index: {viewer.index.path}", file=sys.stderr)
        print(server.url, flush=True)
        if not args.no_browser:
            import webbrowser

            from journal.view.launch import open_in_browser

            # Through a private file, never the URL itself: a browser's command line is readable
            # by every local user, and the URL holds the token (journal/view/launch.py).
            launch = open_in_browser(server.url, webbrowser.open)
        server.serve_forever()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        server.server_close()
        if launch is not None:
            from journal.view.launch import remove_launch_file

            remove_launch_file(launch)
    return OK
