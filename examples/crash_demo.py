"""The story every crash-safe tool example tells (examples/*_crash_safe_tool.py), told once.

Each example is a script with three lives, each its own process, and a ``step(directory, life,
answer)`` that runs one of them and returns what it saw as JSON:

* ``run``: the agent calls its ``deploy`` tool, which is killed with SIGKILL mid-call;
* ``resume``: a new process runs the agent again: the guard asks instead of deploying again;
* ``answer``: a third one gives the answer (happened / run_again / abandon) and the run finishes.

``python examples/<example>.py demo DIR [answer]`` runs the three and prints what happened;
``python examples/<example>.py <life> DIR [answer]`` runs one life (the demo runs itself so).
This file is the part that is the same for every framework: the framework's own code is in each
example.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

Step = Callable[[str, str, "str | None"], dict[str, Any]]


def main(script: str, step: Step, shown: str) -> None:
    """The example's command line: ``demo DIR [answer]``, or one life. ``shown``: the key of the
    answered life's outcome that says what the agent ended with."""
    cmd, target = sys.argv[1], sys.argv[2]
    given = sys.argv[3] if len(sys.argv) > 3 else None
    if cmd == "demo":
        demo(script, target, given or "happened", shown)
    else:
        print(json.dumps(step(target, cmd, given)))


def demo(script: str, directory: str, answer: str, shown: str) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, script, *args], capture_output=True, text=True, check=False)

    crashed = run("run", directory)
    print(f"run: the process was killed inside deploy (exit {crashed.returncode})")
    resumed = json.loads(run("resume", directory).stdout)
    for ask in resumed["asks"]:
        print(f"resume: {ask['tool']}({ask['args']}) may have run: {ask['reasons'][0]['message']}")
        for option in ask["options"]:
            print(f"  {option['answer']}: {option['means']}")
    if resumed.get(shown) is not None:
        print(f"resume: {shown}={resumed[shown]!r}")
    done = json.loads(run("answer", directory, answer).stdout)
    print(f"answer {answer}: finished={done['finished']} {shown}={done[shown]!r}")
    with open(os.path.join(directory, "deployed.log")) as f:
        print(f"deployed.log has {len(f.readlines())} line(s)")
