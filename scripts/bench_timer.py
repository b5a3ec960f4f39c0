#!/usr/bin/env python3
"""Times one command for scripts/bench.sh: bench_timer.py OUT ERR COMMAND [ARG]...

Prints "WALL CPU": the command's wall-clock seconds (to the microsecond) and the CPU seconds
it and its waited-for descendants used (user + system, to the millisecond), with its stdout
written to OUT and its stderr to ERR. Exits with the command's status (128 + N for signal N).

Why not the shell's `time`: bash starts a command with fork(), which copies the page tables
of the whole shell; once bench.sh holds a 4,000-path array, that copy costs milliseconds,
more than a cached `harvest mime` does itself, and it fell inside the timed interval. Here
the command is started with posix_spawn (a vfork: nothing is copied) from this small
process, and only the spawn, the command and the wait are timed.
"""
import os
import sys
import time


def main() -> int:
    if len(sys.argv) < 4:
        print("usage: bench_timer.py OUT ERR COMMAND [ARG]...", file=sys.stderr)
        return 2
    out, err, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    actions = [
        (os.POSIX_SPAWN_OPEN, 1, out, flags, 0o644),
        (os.POSIX_SPAWN_OPEN, 2, err, flags, 0o644),
    ]
    t0 = time.perf_counter()
    try:
        pid = os.posix_spawnp(argv[0], argv, os.environ, file_actions=actions)
    except OSError as e:
        print(f"bench_timer.py: {argv[0]}: {e.strerror}", file=sys.stderr)
        return 127
    _, status, usage = os.wait4(pid, 0)
    t1 = time.perf_counter()
    print(f"{t1 - t0:.6f} {usage.ru_utime + usage.ru_stime:.3f}")
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
