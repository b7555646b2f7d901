"""Runs a command and ends it when the process that started this one dies.

    python -m hubzoo.ray._watchdog CMD ARGS...

A Serve replica starts `hubzoo serve` through this, so a replica killed with SIGKILL leaves
no server behind. (preexec_fn with prctl(PR_SET_PDEATHSIG) is not used: a fork of a
process running Ray's gRPC threads may deadlock or abort before exec, and the signal
follows the parent *thread*, which need not outlive the replica's constructor.)
Exits with the command's status; SIGTERM and SIGINT are passed on to it.
"""

import os
import signal
import subprocess
import sys
import time


def main(argv: list) -> int:
    if not argv:
        print("usage: python -m hubzoo.ray._watchdog CMD [ARGS...]", file=sys.stderr)
        return 2
    parent = os.getppid()
    child = subprocess.Popen(argv)

    def forward(signum, _frame):
        child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    while True:
        code = child.poll()
        if code is not None:
            return code if code >= 0 else 128 - code
        if os.getppid() != parent:  # the replica died: we were re-parented
            child.kill()
            child.wait()
            return 137
        time.sleep(0.2)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
