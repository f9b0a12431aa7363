"""The NATS client library (nats-py), imported once for the package: MissingExtraError, which
says how to install it, where it is missing."""

from __future__ import annotations

from journal.errors import MissingExtraError

try:
    import nats
    import nats.errors
    import nats.js.errors
    from nats.aio.client import Client as NATS
    from nats.aio.msg import Msg
    from nats.aio.subscription import Subscription
    from nats.js import api as js_api
except ImportError as exc:  # the extra is not installed
    raise MissingExtraError("journal.remote.jetstream", "nats-py 2.6 or later", "nats", exc) from exc

__all__ = ["NATS", "Msg", "Subscription", "js_api", "nats"]
