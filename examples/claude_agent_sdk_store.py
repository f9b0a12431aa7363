"""Claude Code transcripts in journals, through the Claude Agent SDK's own session-store calls.

    python examples/claude_agent_sdk_store.py TRANSCRIPT.jsonl STORE_DIR

With an agent, the store is one option (the SDK then mirrors every transcript line into it,
and resumes from it)::

    async with JournalSessionStore("transcripts/") as store:
        async for message in query(prompt="hi", options=ClaudeAgentOptions(session_store=store)): ...

This script needs no model and no network: it plays a local Claude Code transcript (a
``~/.claude/projects/*/<session id>.jsonl`` file; one is made from TRANSCRIPT in a scratch
config directory) into the store with the SDK's ``import_session_to_store``, twice (the second
time stores only the lines without a uuid, such as file-history snapshots, which the SDK's
Protocol says to append without dedup; every line with a uuid is stored once), then lists the project's sessions with
``list_sessions_from_store`` (from the store's index; no transcript is read) and reads the
messages back with ``get_session_messages_from_store``. It ends with the ``journal export``
command that writes the stored transcript back byte for byte.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from claude_agent_sdk import (
    get_session_messages_from_store,
    import_session_to_store,
    list_sessions_from_store,
    project_key_for_directory,
)

from journal.adapters.claude_agent_sdk import JournalSessionStore, journal_name


def session_id_of(transcript: Path) -> str:
    for line in transcript.read_text(encoding="utf-8").splitlines():
        sid = json.loads(line).get("sessionId") if line.strip() else None
        if isinstance(sid, str):
            return sid
    raise SystemExit(f"{transcript}: no line names its sessionId; is it a Claude Code transcript?")


async def main(transcript: Path, store_dir: Path) -> None:
    workspace = os.getcwd()
    session_id = session_id_of(transcript)
    project_key = project_key_for_directory(workspace)
    config = Path(tempfile.mkdtemp(prefix="claude-config-"))
    os.environ["CLAUDE_CONFIG_DIR"] = str(config)  # where the SDK looks for local transcripts
    try:
        local = config / "projects" / project_key / f"{session_id}.jsonl"
        local.parent.mkdir(parents=True)
        shutil.copyfile(transcript, local)
        async with JournalSessionStore(store_dir) as store:
            key = {"project_key": project_key, "session_id": session_id}
            for attempt in (1, 2):
                await import_session_to_store(session_id, store, directory=workspace, batch_size=8)
                stored = await store.load(key) or []  # type: ignore[arg-type]
                print(f"import {attempt}: {len(stored)} entries stored")
            for info in await list_sessions_from_store(store, directory=workspace):
                print(f"listed: {info.session_id} {info.summary!r}")
            messages = await get_session_messages_from_store(store, session_id, directory=workspace)
            print(f"messages read back: {len(messages)}")
        print(f"export: journal export {store_dir / journal_name(key)} out.jsonl  # byte for byte: {transcript}")  # type: ignore[arg-type]
    finally:
        shutil.rmtree(config, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    asyncio.run(main(Path(sys.argv[1]), Path(sys.argv[2])))
