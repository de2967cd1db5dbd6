"""``python -m astrai.envs.openenv_serve <module:app> <port>``: OpenEnv's server for one app
(uvicorn on 127.0.0.1), as ``envs.openenv_env.OpenEnvServer`` starts it, ending when the process
that started it ends: a trainer killed with ``kill -9`` runs no ``atexit``, and a server left behind
would serve on (the parent is polled: Linux's parent-death signal follows the starting thread,
and a host's thread may end before the run does)."""

from __future__ import annotations

import os
import sys
import threading
import time

import uvicorn

POLL_S = 0.5


def _exit_with(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(POLL_S)
    os._exit(0)


def main() -> None:
    app, port = sys.argv[1], int(sys.argv[2])
    threading.Thread(target=_exit_with, args=(os.getppid(),), daemon=True).start()
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
