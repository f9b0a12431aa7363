"""A JetStream journal's trained zstd dictionaries (docs/REMOTE.md, "Dictionaries").

Dictionary ``id`` of a journal is the one message on subject ``<base>-meta.<name>.dict.<id>``
of the journal's stream (under the stream's ``<base>-meta.>``, beside the journal's metadata
subject, whose exact name no dictionary subject matches). Its body is the engine's dictionary
file (checksum and digest verified on every load). A writer opened with ``dictionary=`` publishes
it at open, after the claim and the catch-up, chained on the subject being empty (expected
subject sequence 0), and waits for the ack, which JetStream gives once the message is stored
on the stream's replicas: only then is any frame naming the id published. The subjects a journal
holds are found with STREAM.INFO's ``subjects_filter``. A delete purges them after the metadata
(the commit point), a new journal purges what a delete cut short left there, and a store's copy
publishes the source's before the target's metadata. Which id, and the readers' cache:
journal/remote/dictionaries.py.
"""

from __future__ import annotations

from journal.engine.dictionary import Dictionary
from journal.errors import InvalidArgumentError
from journal.remote import dictionaries
from journal.remote.dictionaries import STORED_DICTIONARY_BYTES_MAX
from journal.remote.jetstream.headers import H_EXPECT_STREAM, H_EXPECT_SUBJECT_SEQ
from journal.remote.jetstream.state import _State


class _Dictionaries(_State):
    """Publishing the writer's dictionary at open; loading one for the readers' cache."""

    def _dictionary_subject(self, dict_id: int) -> str:
        return f"{self._meta_subject}.dict.{dict_id}"

    def _dictionary_place(self, dict_id: int) -> str:
        return f"the message on subject {self._dictionary_subject(dict_id)} of stream {self._stream}"

    def _dictionary_body(self, dict_id: int) -> bytes | None:
        """The stored body of dictionary ``dict_id``, or None when the journal has none."""
        got = self._call(
            self._c().get_msg(self._stream, {"last_by_subj": self._dictionary_subject(dict_id)}, self._ack_timeout_s),
            self._ack_timeout_s,
        )
        if got is None:
            return None
        if len(got.data) > STORED_DICTIONARY_BYTES_MAX:
            raise dictionaries.too_large(dict_id, len(got.data))
        return got.data

    def _dictionary_ids(self) -> list[int]:
        """The ids of the dictionaries the stream holds for this journal (their bodies unread)."""
        prefix = f"{self._meta_subject}.dict."
        subjects: dict[str, int] = {}
        while True:
            req = {"subjects_filter": prefix + "*", "offset": len(subjects)}
            info = self._api(f"$JS.API.STREAM.INFO.{self._stream}", req)
            page = (info.get("state") or {}).get("subjects") or {}
            before = len(subjects)
            subjects.update(page)
            if len(subjects) == before or len(subjects) >= int(info.get("total", 0) or 0):
                break
        ids = [s[len(prefix) :] for s in subjects]
        return sorted(int(i) for i in ids if i.isdigit())

    def dictionaries(self) -> list[Dictionary]:
        """The journal's stored dictionaries that verify, by id (``journal copy`` carries them)."""
        self._check_open()
        return dictionaries.verified(self._dictionary_ids(), self._dictionary_body)

    def _install_dictionary(self, d: Dictionary) -> int:
        """Publish ``d`` for this journal (unless it holds it: journal/remote/dictionaries.py's
        rule) under the writer's claim; the id its frames carry. Acknowledged (stored on the
        stream's replicas) when this returns."""

        def store(dict_id: int, body: bytes) -> None:
            if len(body) > self._payload_max:
                raise InvalidArgumentError(
                    f"{self._where}: a dictionary of {len(body)} bytes does not fit one message of this server "
                    f"(max_payload leaves {self._payload_max}); train a smaller one, or raise the server's max_payload"
                )
            headers = {H_EXPECT_SUBJECT_SEQ: "0", H_EXPECT_STREAM: self._stream}
            self._call(
                self._c().publish(self._dictionary_subject(dict_id), body, headers, self._ack_timeout_s),
                self._ack_timeout_s,
            )

        return dictionaries.install(d, self._dictionary_ids, self._dictionary_body, store)

    def _purge_dictionaries(self) -> int:
        """Remove every dictionary of this journal's name (a delete's, or leftovers of one)."""
        return self._purge(f"{self._meta_subject}.dict.>")
