"""HarvestSandbox against the built harvest (HARVEST_BIN), directly and through an exec prefix.

Records are compared field by field with the dataclasses of strands.sandbox.types as the SDK
documents them (copied below), and listings with what the SDK's local environment computes
(os.scandir and os.stat, following symlinks, None when the stat fails).
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import gc
import hashlib
import inspect
import json
import logging
import os
import random
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field
from typing import Literal

import pytest

import harvest_strands
from harvest_strands import (
    ExecutionResult,
    FileInfo,
    HarvestError,
    HarvestSandbox,
    OutputFile,
    SandboxPathNotFoundError,
    SandboxTimeoutError,
    StreamChunk,
)

HARVEST = os.environ.get("HARVEST_BIN", "")
if not os.path.isfile(HARVEST):
    raise RuntimeError(f"HARVEST_BIN must name the built harvest binary (got {HARVEST!r})")

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)


# ---- the seed's records (strands.sandbox.types), field for field ----
@dataclass
class SeedStreamChunk:
    data: str
    stream_type: Literal["stdout", "stderr"] = "stdout"


@dataclass
class SeedFileInfo:
    name: str
    is_dir: bool | None = None
    size: int | None = None


@dataclass
class SeedOutputFile:
    name: str
    content: bytes
    mime_type: str


@dataclass
class SeedExecutionResult:
    exit_code: int
    stdout: str
    stderr: str
    output_files: list = field(default_factory=list)


def same_record(ours, seed_cls, **expected):
    """ours has exactly the seed class's fields, in order, with these values."""
    assert [f.name for f in dataclasses.fields(ours)] == [f.name for f in dataclasses.fields(seed_cls)]
    assert dataclasses.asdict(ours) == dataclasses.asdict(seed_cls(**expected))


def run(coro):
    return asyncio.run(coro)


async def collect(agen):
    return [item async for item in agen]


@pytest.fixture(params=[None, ["env"]], ids=["direct", "exec-env"])
def make(request, tmp_path):
    def factory(working_dir, **kwargs):
        kwargs.setdefault("db", str(tmp_path / "harvest.db"))
        return HarvestSandbox(str(working_dir), harvest=HARVEST, exec=request.param, **kwargs)

    return factory


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def group_members(pgid):
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] != "Z" and int(fields[2]) == pgid:
            pids.append(int(name))
    return pids


def settle(check):
    """Waits (bounded, 10 s) until check() is empty: a killed process leaves when the kernel gets
    to it, not at the instant its killer returns."""
    for _ in range(200):
        left = check()
        if not left:
            return []
        time.sleep(0.05)
    return check()


def reference_listing(path):
    """What the SDK's NotASandboxLocalEnvironment.list_files computes: os.scandir names, stat
    following symlinks, None when that fails."""
    out = []
    for entry in os.scandir(path):
        try:
            st = os.stat(entry.path)
            out.append(SeedFileInfo(entry.name, os.path.isdir(entry.path), st.st_size))
        except OSError:
            out.append(SeedFileInfo(entry.name))
    return out


def test_records_are_the_seeds():
    same_record(StreamChunk("x", "stderr"), SeedStreamChunk, data="x", stream_type="stderr")
    same_record(FileInfo("a"), SeedFileInfo, name="a")
    same_record(OutputFile("a", b"x", "text/plain"), SeedOutputFile, name="a", content=b"x", mime_type="text/plain")
    same_record(ExecutionResult(0, "o", "e"), SeedExecutionResult, exit_code=0, stdout="o", stderr="e")


def test_list_files_hostile_directory(make, tmp_path):
    d = tmp_path / "w"
    d.mkdir()
    names = ["a.txt", "B", "space name", "new\nline", "tab\tname", "ünïcödé", "日本語", "🙂", "-dash", ".hidden", "quo'te\""]
    for i, n in enumerate(names):
        (d / n).write_bytes(b"x" * i)
    (d / "sub").mkdir()
    os.symlink("sub", d / "link-to-dir")
    os.symlink("nowhere", d / "dangling")
    os.symlink("loop", d / "loop")
    os.mkfifo(d / "fifo")
    # Not UTF-8: Python names it with surrogateescape, harvest with \udcff; the same string.
    with open(os.path.join(os.fsencode(d), b"bad\xff.t"), "wb") as f:
        f.write(b"abc")
    sandbox = make(d)
    ours = run(sandbox.list_files(str(d)))
    assert all(type(e) is FileInfo for e in ours)
    reference = sorted(reference_listing(d), key=lambda e: os.fsencode(e.name))
    assert [dataclasses.astuple(e) for e in ours] == [dataclasses.astuple(e) for e in reference]
    assert FileInfo("bad\udcff.t", False, 3) in ours
    assert os.fsencode("bad\udcff.t") == b"bad\xff.t"
    assert FileInfo("dangling", None, None) in ours
    assert run(sandbox.list_files(".")) == ours
    assert run(sandbox.list_files("sub")) == []


def test_streaming_order_exact_bytes_before_the_end(make, tmp_path):
    sandbox = make(tmp_path)
    cmd = (
        r"printf 'first \303\251\346\227\245\360\237\231\202 \377 \000\r\t\n'; "
        "while [ ! -e go1 ]; do sleep 0.02; done; printf 'second\\n' >&2; "
        "while [ ! -e go2 ]; do sleep 0.02; done; printf 'third'"
    )

    async def go():
        seen = []
        async for item in sandbox.execute_streaming(cmd, timeout=120):
            seen.append(item)
            if isinstance(item, StreamChunk) and "first" in item.data:
                (tmp_path / "go1").touch()
            if isinstance(item, StreamChunk) and "second" in item.data:
                (tmp_path / "go2").touch()
        return seen

    seen = run(go())
    # The byte \377 is not UTF-8: U+FFFD, as the SDK's sandboxes decode output (errors="replace").
    first = "first é日🙂 \ufffd \x00\r\t\n"
    chunks, result = seen[:-1], seen[-1]
    assert all(isinstance(c, StreamChunk) for c in chunks)
    assert "".join(c.data for c in chunks if c.stream_type == "stdout") == first + "third"
    assert [c.data for c in chunks if c.stream_type == "stderr"] == ["second\n"]
    order = [3 if "third" in c.data else 2 if "second" in c.data else 1 for c in chunks]
    assert order == sorted(order)
    assert isinstance(result, ExecutionResult)
    assert (result.exit_code, result.stdout, result.stderr) == (0, first + "third", "second\n")
    assert sorted(f.name for f in result.output_files) == ["go1", "go2"]
    assert isinstance(result.run_id, int) and result.timed_out is False


def test_output_files_byte_equal_with_mime_types(make, tmp_path):
    w = tmp_path / "w"
    w.mkdir()
    (tmp_path / "p.png").write_bytes(PNG)
    (w / "old.txt").write_text("was here")
    sandbox = make(w)
    r = run(
        sandbox.execute(
            f"cp {tmp_path}/p.png plot.png && mkdir figs && printf 'x,y\\n1,2\\n' > figs/t.csv && "
            "printf '\\001\\002\\003\\377\\376\\000\\200\\201%.0s' $(seq 512) > blob.bin"
        )
    )
    assert r.exit_code == 0
    types = {"plot.png": "image/png", "figs/t.csv": "text/csv", "blob.bin": "application/octet-stream"}
    assert sorted(f.path for f in r.output_files) == sorted(types)
    for f in r.output_files:
        disk = (w / f.path).read_bytes()
        same_record(f, SeedOutputFile, name=os.path.basename(f.path), content=disk, mime_type=types[f.path])
        assert f.size == len(disk)
        assert f.sha256 == hashlib.sha256(disk).hexdigest()
    assert r.skipped == []


def test_limits_are_reported_in_skipped(make, tmp_path):
    sandbox = make(tmp_path, max_file_bytes=10)
    r = run(sandbox.execute("printf small > a.txt; printf 0123456789abcdef > big.txt"))
    assert [f.name for f in r.output_files] == ["a.txt"]
    assert r.skipped == [{"path": "big.txt", "reason": "too_large", "size": 16}]


def test_code_execution(make, tmp_path):
    sandbox = make(tmp_path)
    r = run(sandbox.execute_code("import sys\nprint(6*7)\nsys.stderr.write('é')\nopen('o.txt','w').write('hi')\n", "python3"))
    same_record(
        r,
        SeedExecutionResult,
        exit_code=0,
        stdout="42\n",
        stderr="é",
        output_files=[SeedOutputFile("o.txt", b"hi", "text/plain")],
    )
    items = run(collect(sandbox.execute_code_streaming('echo "$0"; exit 3', "sh")))
    assert (items[-1].exit_code, items[-1].stdout) == (3, "sh\n")
    assert run(sandbox.execute_code("x", "no-such-interpreter")).exit_code == 127
    with pytest.raises(ValueError, match="invalid characters"):
        run(sandbox.execute_code("x", "python3; rm -rf /"))


def test_env_and_cwd(make, tmp_path):
    (tmp_path / "sub").mkdir()
    sandbox = make(tmp_path)
    assert run(sandbox.execute('printf "%s|%s" "$FOO" "$BAR"', env={"FOO": "a b$c'd", "BAR": ""})).stdout == "a b$c'd|"
    with pytest.raises(ValueError, match="Invalid environment variable name"):
        run(sandbox.execute("true", env={"A=B": "x"}))
    assert run(sandbox.execute("pwd")).stdout == f"{tmp_path}\n"
    sub = run(sandbox.execute("pwd; printf x > f.txt", cwd="sub"))
    assert sub.stdout == f"{tmp_path}/sub\n"
    assert [f.path for f in sub.output_files] == ["f.txt"]
    code = run(sandbox.execute_code("import os; print(os.environ['X'], os.getcwd())", "python3", env={"X": "y"}, cwd="sub"))
    assert code.stdout == f"y {tmp_path}/sub\n"


def test_timeout_partial_output_and_group_gone(make, tmp_path):
    sandbox = make(tmp_path)

    async def go():
        seen = []
        with pytest.raises(SandboxTimeoutError) as info:
            async for item in sandbox.execute_streaming('sleep 300 & echo "$$ $!"; wait', timeout=1):
                seen.append(item)
        return seen, info.value

    seen, error = run(go())
    assert len(seen) == 1 and isinstance(seen[0], StreamChunk)
    assert isinstance(error, TimeoutError)
    assert (error.stdout, error.stderr) == (seen[0].data, "")
    shell, sleeper = map(int, seen[0].data.split())
    assert settle(lambda: [p for p in (shell, sleeper) if alive(p)]) == []
    assert settle(lambda: group_members(shell)) == []


def test_elapsed_timeout_runs_nothing(make, tmp_path):
    sandbox = make(tmp_path)
    for timeout in (0, -1, float("nan")):
        with pytest.raises(SandboxTimeoutError) as info:
            run(sandbox.execute("touch ran", timeout=timeout))
        assert (info.value.stdout, info.value.stderr) == ("", "")
        with pytest.raises(SandboxTimeoutError):
            run(sandbox.execute_code("open('ran', 'w')", "python3", timeout=timeout))
    assert not (tmp_path / "ran").exists()


def test_cancel_ends_the_group_and_records_the_run(make, tmp_path):
    db = tmp_path / "c.db"
    sandbox = make(tmp_path, db=str(db), label="cancelled-run")
    pids = []

    async def consume():
        async for item in sandbox.execute_streaming('sleep 300 & echo "$$ $!"; wait'):
            if isinstance(item, StreamChunk):
                pids.extend(map(int, item.data.split()))
                started.set()

    async def go():
        task = asyncio.ensure_future(consume())
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    started = None

    async def main():
        nonlocal started
        started = asyncio.Event()
        await go()

    run(main())
    assert settle(lambda: [p for p in pids if alive(p)]) == []
    assert settle(lambda: group_members(pids[0])) == []
    runs = json.loads(subprocess.check_output([HARVEST, "history", "runs", "--db", str(db), "--label", "cancelled-run"]))
    assert len(runs) == 1
    assert runs[0]["command"] == ["/bin/sh", "-c", 'sleep 300 & echo "$$ $!"; wait']


def pgrep(pattern):
    """The pids of live processes whose command line matches the pattern (pgrep -f)."""
    out = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout
    return [int(p) for p in out.split() if int(p) != os.getpid()]


def usable(prefix):
    return subprocess.run([*prefix, "true"], capture_output=True).returncode == 0


@pytest.mark.parametrize(
    "prefix",
    [["flock", "{lock}"], ["sh", "-c", '"$@"; exit $?', "sh"], ["unshare", "--fork", "--pid", "--mount-proc"]],
    ids=["flock", "sh-c", "unshare"],
)
def test_cancel_through_a_prefix_that_does_not_forward_signals(tmp_path, prefix):
    """The prefix dies of SIGTERM (or never passes it on) while harvest holds the pipes: the
    cancel must reach harvest all the same, end within the documented bound, leave no harvest or
    command behind and no asyncio noise ("Event loop is closed") when the loop ends."""
    prefix = [a.replace("{lock}", str(tmp_path / "lock")) for a in prefix]
    if not usable(prefix):
        pytest.skip(f"{prefix[0]} cannot run here")
    mark = str(random.randrange(10**9))
    script = textwrap.dedent(
        f"""
        import asyncio, time
        from harvest_strands import HarvestSandbox, StreamChunk
        s = HarvestSandbox({str(tmp_path)!r}, harvest={HARVEST!r}, db={str(tmp_path / "h.db")!r}, exec={prefix!r})
        async def consume(started):
            async for item in s.execute_streaming("sleep 60.{mark} & echo started; wait # {mark}"):
                if isinstance(item, StreamChunk):
                    started.set()
        async def main():
            started = asyncio.Event()
            task = asyncio.ensure_future(consume(started))
            await started.wait()
            t0 = time.monotonic()
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                print(round(time.monotonic() - t0, 2))
        asyncio.run(main())
        """
    )
    src = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
    out = subprocess.run(
        [sys.executable, "-c", script], env=dict(os.environ, PYTHONPATH=src), capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    # The documented bound: SIGTERM, SIGKILL 10 s later, then at most 1 s for the pipes.
    assert float(out.stdout) < 11, out.stdout
    assert out.stderr == ""
    assert settle(lambda: pgrep(mark)) == []


def test_cancel_stops_waiting_for_pipes_held_outside_the_group(tmp_path):
    """A process outside harvest's group (here: in a session of its own) holds the pipes: the
    cancel gives up on them 1 s after the SIGKILL, 10 s after the SIGTERM."""
    mark = str(random.randrange(10**9))
    prefix = ["sh", "-c", f'setsid sleep 30.{mark} & exec "$@"', "sh"]
    sandbox = HarvestSandbox(str(tmp_path), harvest=HARVEST, db=str(tmp_path / "h.db"), exec=prefix)

    async def consume(started):
        async for item in sandbox.execute_streaming(f"sleep 60.{mark} & echo started; wait"):
            started.set()

    async def go():
        started = asyncio.Event()
        task = asyncio.ensure_future(consume(started))
        await started.wait()
        t0 = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return time.monotonic() - t0

    took = run(go())
    outsider = pgrep(f"sleep 30.{mark}")
    for pid in outsider:
        os.kill(pid, 9)
    assert 10 <= took < 12.5
    assert len(outsider) == 1
    assert settle(lambda: pgrep(f"harvest run .*{mark}|sleep 60.{mark}")) == []


def test_aclose_ends_the_run_before_returning(make, tmp_path):
    """Closing the generator closes the run at once: harvest and the command are gone when
    aclose() returns, not when the garbage collector finalizes the inner generator."""
    sandbox = make(tmp_path)
    mark = str(random.randrange(10**9))

    async def go():
        gen = sandbox.execute_streaming(f'echo "$$ $PPID"; sleep 60.{mark} # {mark}')
        first = await gen.__anext__()
        await gen.aclose()
        # At once: harvest has exited (the adapter waited for it), and so has the shell, which
        # harvest ended and reaped before exiting.
        return [int(p) for p in first.data.split()], [p for p in map(int, first.data.split()) if alive(p)]

    (shell, harvest), running = run(go())
    assert running == []
    # The sleep, SIGTERMed with the shell's group, leaves when the kernel gets to it.
    assert settle(lambda: pgrep(mark)) == []


def test_output_text_is_decoded_as_the_sdk_does(make, tmp_path):
    """stdout/stderr bytes that are not UTF-8 become U+FFFD, as bytes.decode("utf-8", "replace")
    (the SDK's sandboxes) makes them, in the chunks and the result; file names stay exact."""
    raw = b"caf\xe9 \xe6\x97x \xed\xa0\x80 \xff\xfe ok \xe6\x97\xa5\n"
    octal = "".join(f"\\{b:03o}" for b in raw)
    sandbox = make(tmp_path)

    async def go():
        return await collect(sandbox.execute_streaming(f"printf '{octal}'; printf '{octal}' >&2; printf x > \"$(printf 'n\\377')\""))

    items = run(go())
    chunks, result = items[:-1], items[-1]
    expected = raw.decode("utf-8", "replace")
    assert "".join(c.data for c in chunks if c.stream_type == "stdout") == expected
    assert "".join(c.data for c in chunks if c.stream_type == "stderr") == expected
    assert (result.stdout, result.stderr) == (expected, expected)
    result.stdout.encode("utf-8")
    json.dumps([c.data for c in chunks], ensure_ascii=False).encode("utf-8")
    assert [f.name for f in result.output_files] == ["n\udcff"]
    assert os.fsencode(result.output_files[0].name) == b"n\xff"


def test_harvest_failure_after_the_run_is_an_error(make, tmp_path):
    """harvest run exits 125 when the command ran but what it produced could not be collected or
    recorded: a HarvestError with harvest's reason and the partial result, not a result whose
    files silently vanished."""
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"\x07" * 8192)
    w = tmp_path / "w"
    w.mkdir()
    sandbox = make(w, db=str(garbage), no_history=True)
    with pytest.raises(HarvestError) as info:
        run(sandbox.execute("echo data > report.csv; echo done"))
    error = info.value
    assert error.exit_code == 125
    assert str(error).startswith("harvest: collecting the produced files: ")
    assert str(error).endswith("garbage.db: not a SQLite database")
    assert isinstance(error.result, ExecutionResult)
    assert (error.result.exit_code, error.result.stdout, error.result.output_files) == (0, "done\n", [])
    assert (w / "report.csv").exists()

    async def stream():
        seen = []
        with pytest.raises(HarvestError) as info:
            async for item in sandbox.execute_streaming("echo again > b.csv; echo chunk"):
                seen.append(item)
        return seen, info.value

    seen, error = run(stream())
    assert seen == [StreamChunk("chunk\n", "stdout")]
    assert error.exit_code == 125 and error.result.stdout == "chunk\n"
    # A command's own exit status 125 is its result.
    own = run(make(w).execute("echo x > c.txt; exit 125"))
    assert own.exit_code == 125 and [f.name for f in own.output_files] == ["c.txt"]


def test_failed_write_logs_no_unretrieved_exception(tmp_path):
    """harvest refuses the path before reading stdin: the HarvestError, and no "Future exception
    was never retrieved ... BrokenPipeError" from asyncio."""
    (tmp_path / "f").write_text("x")
    sandbox = HarvestSandbox(str(tmp_path), harvest=HARVEST)
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    handler = Keep()
    logging.getLogger("asyncio").addHandler(handler)
    try:

        async def go():
            for _ in range(5):
                with pytest.raises(HarvestError, match="Not a directory"):
                    await sandbox.write_file("f/x", bytes(1 << 20))
                gc.collect()

        run(go())
        gc.collect()
    finally:
        logging.getLogger("asyncio").removeHandler(handler)
    assert records == []


def test_100_mib_round_trip(make, tmp_path):
    sandbox = make(tmp_path)
    data = os.urandom(100 * 1024 * 1024)
    run(sandbox.write_file("big/blob.bin", data))
    assert (tmp_path / "big/blob.bin").read_bytes() == data
    back = run(sandbox.read_file(str(tmp_path / "big/blob.bin")))
    assert type(back) is bytes and back == data
    os.unlink(tmp_path / "big/blob.bin")  # pytest keeps the last runs' temporary directories


def test_write_creates_parents_and_replaces(make, tmp_path):
    sandbox = make(tmp_path)
    run(sandbox.write_text("a/b/c/d.txt", "héllo\n"))
    assert (tmp_path / "a/b/c/d.txt").read_text() == "héllo\n"
    assert run(sandbox.read_text("a/b/c/d.txt")) == "héllo\n"
    run(sandbox.write_text("a/b/c/d.txt", "x"))
    assert (tmp_path / "a/b/c/d.txt").read_text() == "x"
    run(sandbox.write_file("empty", b""))
    assert run(sandbox.read_file("empty")) == b""
    run(sandbox.write_file("run.sh", b"#!/bin/sh\n", mode=0o755))
    assert os.stat(tmp_path / "run.sh").st_mode & 0o777 == 0o755
    assert os.listdir(tmp_path / "a/b/c") == ["d.txt"]


def test_removal(make, tmp_path):
    sandbox = make(tmp_path)
    (tmp_path / "f").write_text("x")
    (tmp_path / "d/e").mkdir(parents=True)
    (tmp_path / "d/e/g").write_text("y")
    os.symlink("d", tmp_path / "link")
    run(sandbox.remove_file("f"))
    assert not (tmp_path / "f").exists()
    run(sandbox.remove_file("link"))
    assert not os.path.lexists(tmp_path / "link") and (tmp_path / "d/e/g").exists()
    with pytest.raises(HarvestError):
        run(sandbox.remove_file("d"))
    assert (tmp_path / "d/e/g").exists()
    run(sandbox.remove_tree("d"))
    assert not (tmp_path / "d").exists()


def test_removal_refuses_dot_dotdot_and_empty(make, tmp_path):
    box = tmp_path / "box"
    (box / "sub").mkdir(parents=True)
    (tmp_path / "sibling").mkdir()
    (tmp_path / "sibling/data").write_text("precious")
    sandbox = make(box)
    for p in ["..", ".", "sub/..", "sub/."]:
        with pytest.raises(HarvestError) as info:
            run(sandbox.remove_tree(p))
        assert info.value.exit_code == 2, p
        with pytest.raises(HarvestError):
            run(sandbox.remove_file(p))
    for op in (sandbox.remove_tree, sandbox.remove_file):
        with pytest.raises(FileNotFoundError):
            run(op(""))
    assert (tmp_path / "sibling/data").read_text() == "precious"
    assert (box / "sub").is_dir()
    assert sandbox.resolve_path("") == str(box)
    assert sandbox.resolve_path("a/../b") == f"{box}/a/../b"


def test_missing_paths(make, tmp_path):
    (tmp_path / "file").write_text("x")
    sandbox = make(tmp_path)
    for p in ["missing", "missing/child", "file"]:
        with pytest.raises(SandboxPathNotFoundError, match=f"Path not found: {p}"):
            run(sandbox.list_files(p))
        with pytest.raises(FileNotFoundError):
            run(sandbox.list_files(str(tmp_path / p)))
    for op in (sandbox.read_file, sandbox.remove_file):
        for p in ["missing", "missing/child"]:
            with pytest.raises(FileNotFoundError) as info:
                run(op(p))
            assert info.value.filename == str(tmp_path / p)
            assert not isinstance(info.value, SandboxPathNotFoundError)
    with pytest.raises(HarvestError, match="missing"):
        run(sandbox.execute("true", cwd="missing"))


def every_operation(sandbox):
    """Each operation of the sandbox once."""
    return {
        "execute": lambda: sandbox.execute("true"),
        "execute_streaming": lambda: collect(sandbox.execute_streaming("true")),
        "execute_code": lambda: sandbox.execute_code("pass", "python3"),
        "execute_code_streaming": lambda: collect(sandbox.execute_code_streaming("pass", "python3")),
        "read_file": lambda: sandbox.read_file("f"),
        "read_text": lambda: sandbox.read_text("f"),
        "write_file": lambda: sandbox.write_file("f", b"x"),
        "write_text": lambda: sandbox.write_text("f", "x"),
        "remove_file": lambda: sandbox.remove_file("f"),
        "remove_tree": lambda: sandbox.remove_tree("d"),
        "list_files": lambda: sandbox.list_files("."),
    }


@pytest.mark.parametrize(
    "kind, why, status",
    [("missing", "No such file or directory", 127), ("not-executable", "Permission denied", 126),
     ("not-a-directory", "Not a directory", 126)],
)
def test_harvest_that_cannot_start(make, tmp_path, kind, why, status):
    """A missing or non-executable binary is a HarvestError naming it, never the
    FileNotFoundError of a missing sandbox path."""
    binary = "/nonexistent/harvest"
    if kind != "missing":
        binary = str(tmp_path / "harvest")
        with open(binary, "w") as f:
            f.write("#!/bin/sh\n")
        os.chmod(binary, 0o644)
        if kind == "not-a-directory":
            binary += "/harvest"
    (tmp_path / "f").write_text("x")
    probe = make(tmp_path)
    sandbox = HarvestSandbox(str(tmp_path), harvest=binary, exec=probe.exec or None)
    what = f"{binary} through env" if probe.exec else binary
    for name, op in every_operation(sandbox).items():
        with pytest.raises(HarvestError) as info:
            run(op())
        error = info.value
        assert not isinstance(error, FileNotFoundError), name
        assert str(error).startswith(f"cannot start harvest ({what}): "), (name, str(error))
        assert why in str(error), (name, str(error))
        assert error.exit_code == status, name
    assert (tmp_path / "f").read_text() == "x"


def test_exec_prefix_that_cannot_start(tmp_path):
    sandbox = HarvestSandbox(str(tmp_path), exec=["/nonexistent/env"])
    for name, op in every_operation(sandbox).items():
        with pytest.raises(HarvestError, match=r"^cannot start harvest \(harvest through /nonexistent/env\): No such file"):
            run(op())


def test_exec_prefix_that_prints_a_banner(tmp_path):
    """A prefix that writes a line of its own before harvest's (a login banner): the run's
    events are still read, the banner skipped, as the TypeScript adapter does; with no result
    at all the banner is the reason, a HarvestError, never a JSON error."""
    prefix = ["sh", "-c", 'echo "Welcome to the box"; exec "$@"', "sh"]
    sandbox = HarvestSandbox(str(tmp_path), harvest=HARVEST, db=str(tmp_path / "h.db"), exec=prefix)
    r = run(sandbox.execute("echo hi"))
    assert r.exit_code == 0 and r.stdout == "hi\n"
    quiet = HarvestSandbox(str(tmp_path), harvest="/bin/true", exec=prefix)
    with pytest.raises(HarvestError, match="Welcome to the box"):
        run(quiet.execute("echo hi"))


def test_unknown_keyword_arguments_are_ignored(make, tmp_path):
    """The SDK's methods take **kwargs for forward compatibility, and its read_text/write_text
    pass theirs on to read_file/write_file."""
    sandbox = make(tmp_path)
    run(sandbox.write_file("w.txt", b"abc", future=1))
    assert run(sandbox.read_file("w.txt", encoding="x")) == b"abc"
    run(sandbox.write_text("t.txt", "é", "utf-8", future=1))
    assert run(sandbox.read_text("t.txt", future=1)) == "é"
    run(sandbox.write_text("m.sh", "#!/bin/sh\n", mode=0o700))
    assert os.stat(tmp_path / "m.sh").st_mode & 0o777 == 0o700
    assert run(sandbox.list_files(".", future=1)) == run(sandbox.list_files("."))
    run(sandbox.remove_file("m.sh", future=1))
    assert not (tmp_path / "m.sh").exists()
    items = run(collect(sandbox.execute_streaming("echo $X", env={"X": "1"}, future=1)))
    assert items[-1].stdout == "1\n"
    items = run(collect(sandbox.execute_code_streaming("print(2)", "python3", timeout=60, future=1)))
    assert items[-1].stdout == "2\n"
    assert run(sandbox.execute("pwd", cwd=str(tmp_path), future=1)).stdout == f"{tmp_path}\n"
    assert run(sandbox.execute_code("print(3)", "python3", future=1)).stdout == "3\n"
    assert sandbox.get_tools() == []


@pytest.mark.parametrize(
    "name", ["execute_streaming", "execute_code_streaming", "read_file", "write_file", "remove_file", "list_files"]
)
def test_signatures_are_the_sdks(name):
    """timeout/cwd/env keyword-only, and **kwargs, as strands.sandbox.Sandbox declares them."""
    params = inspect.signature(getattr(HarvestSandbox, name)).parameters
    assert list(params.values())[-1].kind is inspect.Parameter.VAR_KEYWORD
    if name.startswith("execute"):
        assert [p for p in params if params[p].kind is inspect.Parameter.KEYWORD_ONLY] == ["timeout", "cwd", "env"]


def test_16_concurrent_executions(make, tmp_path):
    sandbox = make(tmp_path)
    for i in range(16):
        (tmp_path / f"d{i}").mkdir()

    async def go():
        return await asyncio.gather(*(sandbox.execute(f"echo {i}; printf {i} > f{i}.txt", cwd=f"d{i}") for i in range(16)))

    results = run(go())
    for i, r in enumerate(results):
        same_record(
            r, SeedExecutionResult, exit_code=0, stdout=f"{i}\n", stderr="",
            output_files=[SeedOutputFile(f"f{i}.txt", str(i).encode(), "text/plain")],
        )
    assert len({r.run_id for r in results}) == 16


def test_exec_prefix_quoted_for_a_shell(tmp_path):
    d = tmp_path / "it's a dir"
    d.mkdir()
    sandbox = HarvestSandbox(str(d), harvest=HARVEST, db=str(tmp_path / "h.db"), exec=["sh", "-c"], exec_quote=True)
    run(sandbox.write_text("a $b.txt", "ok"))
    assert (d / "a $b.txt").read_text() == "ok"
    assert run(sandbox.list_files(".")) == [FileInfo("a $b.txt", False, 2)]
    assert run(sandbox.execute('printf %s "$PWD"')).stdout == str(d)
    with pytest.raises(ValueError, match="absolute"):
        HarvestSandbox("rel", exec=["env"])
    assert HarvestSandbox("/w", exec=["ssh", "host"]).exec_quote is True


def test_subclasses_strands_when_importable(tmp_path):
    """With a `strands` package on the path (a stand-in with strands.sandbox's names, since
    strands-agents itself is not installable here), the adapter uses its classes."""
    pkg = tmp_path / "strands" / "sandbox"
    pkg.mkdir(parents=True)
    (tmp_path / "strands" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text(
        textwrap.dedent(
            """
            from abc import ABC, abstractmethod
            from .types import ExecutionResult, FileInfo, OutputFile, StreamChunk
            class Sandbox(ABC):
                @abstractmethod
                async def execute_streaming(self, command, *, timeout=None, cwd=None, env=None, **kwargs): ...
                @abstractmethod
                async def execute_code_streaming(self, code, language, *, timeout=None, cwd=None, env=None, **kwargs): ...
                @abstractmethod
                async def read_file(self, path, **kwargs): ...
                @abstractmethod
                async def write_file(self, path, content, **kwargs): ...
                @abstractmethod
                async def remove_file(self, path, **kwargs): ...
                @abstractmethod
                async def list_files(self, path, **kwargs): ...
                async def execute(self, command, *, timeout=None, cwd=None, env=None, **kwargs):
                    async for x in self.execute_streaming(command, timeout=timeout, cwd=cwd, env=env, **kwargs):
                        if isinstance(x, ExecutionResult):
                            return x
                async def read_text(self, path, encoding="utf-8", **kwargs):
                    return (await self.read_file(path, **kwargs)).decode(encoding)
                async def write_text(self, path, content, encoding="utf-8", **kwargs):
                    await self.write_file(path, content.encode(encoding), **kwargs)
                def get_tools(self):
                    return []
            """
        )
    )
    (pkg / "types.py").write_text(
        textwrap.dedent(
            """
            from dataclasses import dataclass, field
            @dataclass
            class StreamChunk:
                data: str
                stream_type: str = "stdout"
            @dataclass
            class FileInfo:
                name: str
                is_dir: bool | None = None
                size: int | None = None
            @dataclass
            class OutputFile:
                name: str
                content: bytes
                mime_type: str
            @dataclass
            class ExecutionResult:
                exit_code: int
                stdout: str
                stderr: str
                output_files: list = field(default_factory=list)
            """
        )
    )
    (pkg / "errors.py").write_text(
        "class SandboxTimeoutError(TimeoutError):\n    def __init__(self, seconds):\n        super().__init__(seconds)\n"
        "class SandboxPathNotFoundError(FileNotFoundError):\n    def __init__(self, path):\n        super().__init__(path)\n"
    )
    script = textwrap.dedent(
        f"""
        import asyncio, strands.sandbox as s, strands.sandbox.types as t, strands.sandbox.errors as e
        import harvest_strands as h
        assert h.HAVE_STRANDS and issubclass(h.HarvestSandbox, s.Sandbox)
        sb = h.HarvestSandbox({str(tmp_path)!r}, harvest={HARVEST!r}, db={str(tmp_path / 'h.db')!r})
        r = asyncio.run(sb.execute("echo hi > o.txt"))
        assert type(r) is t.ExecutionResult and type(r.output_files[0]) is t.OutputFile, r
        assert all(type(x) is t.FileInfo for x in asyncio.run(sb.list_files(".")))
        asyncio.run(sb.write_text("w.txt", "hé", future=1))
        assert asyncio.run(sb.read_text("w.txt", encoding="utf-8", future=1)) == "hé"
        assert sb.get_tools() == []
        try:
            asyncio.run(sb.list_files("missing"))
        except e.SandboxPathNotFoundError:
            print("ok")
        """
    )
    src = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}:{src}")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "ok\n"
