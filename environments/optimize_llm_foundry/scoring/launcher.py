"""Starts the agent's finetune.sh for the scorer (score.py passes this file's source to `python -P -c`
through the helper's confinement, so the agent cannot replace it).

    python -P -c SOURCE READ_FD WRITE_FD SOLUTION_DIR GUARD ENV_JSON

With GUARD "guard" it first installs the SIGCHLD guard (rebench/kit/proctree.py) in its no-effect
form, so that no process of the run can have its children reaped without their CPU time being
counted, while libraries that set a SIGCHLD handler keep working. It reports
{"sigchld_guard": ...} over the pipe, closes it, sets the environment score.py asked for and
replaces itself with `bash finetune.sh` (same pid: the scorer waits for it and charges it and
everything it starts).
"""

import json
import os
import sys

from rebench.kit.confined import Channel
from rebench.kit.proctree import guard_sigchld


def main():
    channel = Channel(sys.argv)
    solution, guard, env_json = channel.args
    status = guard_sigchld(refuse=False) if guard == "guard" else "off"
    channel.send({"sigchld_guard": status})
    channel.inbox.close()
    channel.outbox.close()
    os.environ.update(json.loads(env_json))
    os.chdir(solution)
    sys.stdout.flush()
    os.execvp("bash", ["bash", "finetune.sh"])


if __name__ == "__main__":
    main()
