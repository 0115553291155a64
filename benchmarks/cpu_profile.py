"""Run ``python -m trioperator ARGS`` under cProfile timed by CPU (not wall) time.

    python benchmarks/cpu_profile.py OUT.prof run --standalone -n NS operator.py

A wall-clock profile of an operator on a busy machine shows mostly waiting (epoll, a socket
call preempted by another process); CPU time shows what the operator itself spends. The
profile is written when the operator exits (e.g. after SIGINT, which it handles gracefully).
"""

import cProfile
import runpy
import sys
import time


def main() -> None:
    out, args = sys.argv[1], sys.argv[2:]
    profile = cProfile.Profile(time.process_time)
    sys.argv = ["trioperator", *args]
    profile.enable()
    try:
        runpy.run_module("trioperator", run_name="__main__", alter_sys=True)
    except SystemExit:
        pass
    finally:
        profile.disable()
        profile.dump_stats(out)


if __name__ == "__main__":
    main()
