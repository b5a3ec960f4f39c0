"""HarvestSandbox: strands' Sandbox on the harvest CLI.

Each operation is one harvest process: ``run`` for commands and code (StreamChunk events as they
arrive, then the ExecutionResult with the files the command produced), ``ls`` for listings,
``cat``/``put``/``rm`` for files, bytes over pipes. With ``exec`` the process is started through a
command prefix (``["docker", "exec", "-i", "box"]``, ``["ssh", "host"]``) and the adapter touches
no local file.
"""

from __future__ import annotations

import asyncio
import base64
import errno
import json
import os
import posixpath
import re
import shlex
import signal
from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import Any

from .types import (
    ExecutionResult,
    FileInfo,
    OutputFile,
    SandboxBase,
    SandboxPathNotFoundError,
    SandboxTimeoutError,
    StreamChunk,
)

# The SDK's rule for environment names (strands.sandbox.posix_shell.ENV_KEY_PATTERN).
_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# harvest's rule for --language.
_LANGUAGE = re.compile(r"^[A-Za-z0-9._+-]+$")
# How long harvest gets to end a cancelled command (SIGTERM, SIGKILL 2 s later) and record the
# run before its process group is killed.
_CANCEL_GRACE = 10.0
# After that SIGKILL, how long the pipes may stay open (held by a process outside the group)
# before the adapter stops waiting for them.
_PIPE_GRACE = 1.0
# harvest's own failure (``run``: the command ran, but what it produced could not be collected
# or recorded), as env(1) and timeout(1) use it.
_HARVEST_FAILED = 125
# The result line carries every artifact's content in base64: no line limit worth the name.
_LINE_LIMIT = 1 << 40
# A surrogate code point: how harvest's JSON writes a byte that is not UTF-8 (U+DC80..U+DCFF).
_SURROGATE = re.compile("[\ud800-\udfff]")


class HarvestError(OSError):
    """harvest failed: its one-line reason, its exit status and the path concerned.

    ``result`` is the ExecutionResult harvest printed before failing (``harvest run`` exit 125:
    the command ran, but harvest could not collect or record what it produced), else None.
    """

    def __init__(
        self, message: str, exit_code: int, path: str | None = None, result: ExecutionResult | None = None
    ) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.path = path
        self.result = result


def _harvest_line(stderr: bytes) -> str | None:
    """harvest's own error line ("harvest: ..."; --quiet hides warnings, never errors)."""
    for line in stderr.decode("utf-8", "replace").splitlines():
        if line.startswith("harvest: "):
            return line
    return None


def _reason(stderr: bytes, fallback: str) -> str:
    """harvest's error line, else (a prefix's message) the first line, else the fallback."""
    line = _harvest_line(stderr)
    if line is not None:
        return line
    for line in stderr.decode("utf-8", "replace").splitlines():
        if line.strip():
            return line
    return fallback


def _text(data: str) -> str:
    """Output text as the SDK's own sandboxes decode it (``errors="replace"``): harvest writes a
    byte that is not UTF-8 as a lone surrogate (U+DC80..U+DCFF, as surrogateescape does), which
    no codec can encode; it becomes U+FFFD, as bytes.decode("utf-8", "replace") makes it."""
    if not _SURROGATE.search(data):
        return data
    try:
        return data.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    except UnicodeEncodeError:  # a surrogate harvest would not write: replace it alone
        return _SURROGATE.sub("\ufffd", data)


def _size(value: int | str) -> str:
    return str(int(value)) if isinstance(value, int) else value


class HarvestSandbox(SandboxBase):
    """A strands Sandbox whose every operation is a harvest process.

    ``working_dir`` is the default cwd and what relative paths are relative to. ``harvest`` is
    the binary (default ``$HARVEST_BIN`` or ``harvest`` on PATH; with ``exec``, ``harvest``: a
    local path means nothing in the remote box). ``db`` is harvest's history database.
    ``exec_quote`` passes harvest's argv as one shell-quoted string, for prefixes that hand it to
    a remote shell (default: when ``exec[0]`` is ``ssh``). The collect limits are harvest run's
    options of the same names.

    The SDK's methods take, and ignore, keyword arguments they do not know, as the SDK declares
    them (``**kwargs``, for forward compatibility). A harvest that cannot be started (missing,
    not executable; through a prefix, its exit status 127 or 126) raises HarvestError, never
    the FileNotFoundError of a missing sandbox path.
    """

    def __init__(
        self,
        working_dir: str,
        harvest: str | None = None,
        db: str | None = None,
        exec: Sequence[str] | None = None,  # noqa: A002 - the name the SDK adapters share
        *,
        exec_quote: bool | None = None,
        label: str | None = None,
        max_file_bytes: int | str | None = None,
        max_files: int | None = None,
        max_total_bytes: int | str | None = None,
        max_output_bytes: int | str | None = None,
        include_hidden: bool = False,
        exclude: Sequence[str] = (),
        no_history: bool = False,
    ) -> None:
        super().__init__()
        self.exec = list(exec or [])
        if self.exec and not posixpath.isabs(working_dir):
            raise ValueError(f"working_dir must be absolute with an exec prefix: {working_dir}")
        self.working_dir = posixpath.normpath(working_dir) if self.exec else os.path.abspath(working_dir)
        self.harvest = harvest or ("harvest" if self.exec else os.environ.get("HARVEST_BIN", "harvest"))
        self.db = db
        self.label = label
        self.exec_quote = (
            exec_quote if exec_quote is not None else bool(self.exec) and posixpath.basename(self.exec[0]) == "ssh"
        )
        self._collect: list[str] = []
        if max_file_bytes is not None:
            self._collect += ["--max-file-bytes", _size(max_file_bytes)]
        if max_files is not None:
            self._collect += ["--max-files", str(max_files)]
        if max_total_bytes is not None:
            self._collect += ["--max-total-bytes", _size(max_total_bytes)]
        if max_output_bytes is not None:
            self._collect += ["--max-output-bytes", _size(max_output_bytes)]
        if include_hidden:
            self._collect.append("--include-hidden")
        for glob in exclude:
            self._collect += ["--exclude", glob]
        if no_history:
            self._collect.append("--no-history")

    # ---- paths and processes ----

    def resolve_path(self, path: str) -> str:
        """A sandbox path: absolute as given, else relative to working_dir ('' is working_dir
        itself). Never normalized: '.' and '..' reach harvest as written, which refuses to remove
        them."""
        if posixpath.isabs(path):
            return path
        return posixpath.join(self.working_dir, path) if path else self.working_dir

    def _removal(self, path: str) -> str:
        """The path a removal names: '' names nothing (rm(1)'s "No such file"), not working_dir."""
        return self.resolve_path(path) if path else ""

    def _argv(self, args: Sequence[str]) -> list[str]:
        argv = [self.harvest, *args]
        if not self.exec:
            return argv
        if self.exec_quote:
            return [*self.exec, " ".join(shlex.quote(a) for a in argv)]
        return [*self.exec, *argv]

    async def _spawn(self, args: Sequence[str], session: bool = False) -> asyncio.subprocess.Process:
        """Starts harvest; ``session``: in a session (so a process group) of its own, whose id is
        its pid, so that a cancel reaches harvest even through a prefix that does not forward
        signals (flock, ``sh -c``, ``unshare --fork``)."""
        argv = self._argv(args)
        try:
            return await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                limit=_LINE_LIMIT,
                start_new_session=session,
            )
        except OSError as e:
            # Not the FileNotFoundError of a missing sandbox path: the binary (or the prefix's).
            raise self._cannot_start(e.strerror or str(e), 127 if e.errno == errno.ENOENT else 126) from e

    def _cannot_start(self, why: str, code: int) -> HarvestError:
        what = f"{self.harvest} through {self.exec[0]}" if self.exec else self.harvest
        return HarvestError(f"cannot start harvest ({what}): {why}", code)

    def _started(self, code: int, err: bytes) -> None:
        """Through a prefix, 126/127 without harvest's output is the prefix's "cannot execute" /
        "not found" (harvest's own commands never exit so)."""
        if self.exec and code in (126, 127):
            raise self._cannot_start(_reason(err, f"exit status {code}"), code)

    async def _call(self, args: Sequence[str], data: bytes | None = None) -> tuple[int, bytes, bytes]:
        proc = await self._spawn(args)
        try:
            out, err = await proc.communicate(data)
        except BrokenPipeError:
            # harvest exited before reading all of stdin: its status and message tell why.
            out, err = await proc.communicate()
        await _stdin_closed(proc)
        code = _status(proc.returncode)
        self._started(code, err)
        return code, out, err

    def _check(self, code: int, err: bytes, what: str, full: str) -> None:
        if code == 0:
            return
        why = _reason(err, f"harvest {what} {full}: exit status {code}")
        if code == 3:
            # harvest's "does not exist": the FileNotFoundError the local sandbox raises here.
            raise FileNotFoundError(errno.ENOENT, why, full)
        raise HarvestError(why, code, full)

    # ---- execution ----

    def _run_args(self, timeout: float | None, cwd: str | None, env: Mapping[str, str] | None) -> list[str]:
        # --quiet hides harvest's warnings; its errors ("harvest: ...") are still on stderr.
        args = ["run", "--case", "snake", "--quiet", "--dir", self.resolve_path(cwd or self.working_dir)]
        if timeout is not None and not timeout > 0:
            # Elapsed already (0, negative, NaN): a timeout at once, as asyncio.wait_for gives
            # it, with nothing run.
            error = SandboxTimeoutError(timeout)
            error.stdout = ""  # type: ignore[attr-defined]
            error.stderr = ""  # type: ignore[attr-defined]
            raise error
        if timeout is not None:
            args += ["--timeout", str(timeout)]
        for key, value in (env or {}).items():
            if not _ENV_KEY.match(key):
                raise ValueError(f"Invalid environment variable name: {key}")
            args += ["--env", f"{key}={value}"]
        args += self._collect
        if self.label is not None:
            args += ["--label", self.label]
        if self.db is not None:
            args += ["--db", self.db]
        return args

    async def execute_streaming(
        self,
        command: str,
        *,
        timeout: float | None = None,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> AsyncGenerator[StreamChunk | ExecutionResult, None]:
        """Runs ``sh -c COMMAND``: each StreamChunk as harvest prints it, then the ExecutionResult.

        A timeout raises SandboxTimeoutError (with ``stdout``/``stderr`` so far) after the chunks;
        harvest's own failure after the command ran (exit 125) raises HarvestError with harvest's
        reason and the ``result``. Cancelling the task, or closing the generator (``aclose()``),
        sends harvest's process group SIGTERM (harvest ends the command's process group and
        records the run), SIGKILL 10 s later, and returns (re-raises CancelledError) once harvest
        has exited.
        """
        args = self._run_args(timeout, cwd, env) + ["--shell", "--", command]
        run = self._run(args, None, timeout)
        try:
            async for item in run:
                yield item
        finally:
            # Closing this generator closes the run now (its cleanup ends harvest), not when the
            # garbage collector gets to it.
            await run.aclose()

    async def execute_code_streaming(
        self,
        code: str,
        language: str,
        *,
        timeout: float | None = None,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> AsyncGenerator[StreamChunk | ExecutionResult, None]:
        """Feeds ``code`` to the interpreter ``language`` on its stdin, as execute_streaming."""
        if not _LANGUAGE.match(language):
            raise ValueError(f"language parameter contains invalid characters: {language}")
        args = self._run_args(timeout, cwd, env) + ["--language", language]
        run = self._run(args, code.encode("utf-8", "surrogateescape"), timeout)
        try:
            async for item in run:
                yield item
        finally:
            await run.aclose()

    async def _run(
        self, args: list[str], data: bytes | None, timeout: float | None
    ) -> AsyncGenerator[StreamChunk | ExecutionResult, None]:
        proc = await self._spawn(args, session=True)
        assert proc.stdin and proc.stdout and proc.stderr
        stderr_task = asyncio.ensure_future(proc.stderr.read())

        async def feed() -> None:
            try:
                if data:
                    proc.stdin.write(data)
                    await proc.stdin.drain()
                proc.stdin.close()
            except (BrokenPipeError, ConnectionResetError):
                pass
            await _stdin_closed(proc)

        feed_task = asyncio.ensure_future(feed())
        result: dict[str, Any] | None = None
        bad_line: str | None = None
        finished = False
        try:
            while True:
                line = await proc.stdout.readline()
                if not line:
                    break
                try:
                    event = json.loads(line)
                except ValueError:
                    event = None
                if not isinstance(event, dict):
                    # Not harvest's (a prefix's login banner): skipped, and the reason when
                    # no result follows.
                    if bad_line is None and line.strip():
                        bad_line = line[:200].decode("utf-8", "replace").strip()
                    continue
                kind = event.get("type")
                if kind == "stream_chunk":
                    yield StreamChunk(data=_text(event["data"]), stream_type=event["stream_type"])
                elif kind == "execution_result":
                    result = event
            await proc.wait()
            await feed_task
            finished = True
        finally:
            if not finished:
                # Cancelled, or the consumer stopped early: end the run as harvest ends a
                # timed-out one, and wait so that harvest and the command are gone when we return.
                await asyncio.shield(_terminate(proc, stderr_task))
                stderr_task.cancel()
                feed_task.cancel()
        err = await stderr_task
        code = _status(proc.returncode)
        if result is None:
            self._started(code, err)
            raise HarvestError(_reason(err, bad_line or f"harvest run exited with status {code}"), code)
        final = _result(result)
        # 125 is also the status of a command that exits 125: harvest's own failure is a status
        # that is not the command's, or harvest's error line.
        if code == _HARVEST_FAILED and (final.exit_code != _HARVEST_FAILED or _harvest_line(err) is not None):
            why = _reason(err, f"harvest run exited with status {code} after the command ended")
            raise HarvestError(why, code, result=final)
        if final.timed_out:  # type: ignore[attr-defined]
            error = SandboxTimeoutError(timeout)
            error.stdout = final.stdout  # type: ignore[attr-defined]
            error.stderr = final.stderr  # type: ignore[attr-defined]
            error.result = final  # type: ignore[attr-defined]
            raise error
        yield final

    # ---- files ----

    async def read_file(self, path: str, **kwargs: Any) -> bytes:
        full = self.resolve_path(path)
        code, out, err = await self._call(["cat", "--", full])
        self._check(code, err, "cat", full)
        return out

    async def write_file(self, path: str, content: bytes, mode: int | None = None, **kwargs: Any) -> None:
        """Writes through ``harvest put``: a temporary file beside it, renamed; parents created."""
        full = self.resolve_path(path)
        args = ["put"] + (["--mode", format(mode, "o")] if mode is not None else []) + ["--", full]
        code, _out, err = await self._call(args, bytes(content))
        self._check(code, err, "put", full)

    async def remove_file(self, path: str, **kwargs: Any) -> None:
        full = self._removal(path)
        code, _out, err = await self._call(["rm", "--", full])
        self._check(code, err, "rm", full)

    async def remove_tree(self, path: str) -> None:
        """Removes a directory tree (``harvest rm -r``), never following a symlink."""
        full = self._removal(path)
        code, _out, err = await self._call(["rm", "-r", "--", full])
        self._check(code, err, "rm", full)

    async def list_files(self, path: str, **kwargs: Any) -> list[FileInfo]:
        full = self.resolve_path(path)
        code, out, err = await self._call(["ls", "--case", "snake", "--quiet", "--", full])
        if code == 3:
            raise SandboxPathNotFoundError(path)
        if code in (0, 1):
            # Exit 1 with a listing is a warning: the entries harvest could not stat already
            # have is_dir/size None.
            try:
                entries = json.loads(out)
            except ValueError:
                entries = None
            if isinstance(entries, list):
                return [FileInfo(name=e["name"], is_dir=e.get("is_dir"), size=e.get("size")) for e in entries]
        raise HarvestError(_reason(err, f"harvest ls {full}: exit status {code}"), code, full)


def _status(code: int | None) -> int:
    if code is None:
        return 1
    return 128 - code if code < 0 else code


async def _stdin_closed(proc: asyncio.subprocess.Process) -> None:
    """Waits for the stdin pipe's closing and takes its error: harvest may exit without reading
    all of stdin (a refused path), and asyncio logs an error never asked for ("Future exception
    was never retrieved ... BrokenPipeError")."""
    if proc.stdin is None:
        return
    try:
        await proc.stdin.wait_closed()
    except (BrokenPipeError, ConnectionResetError):
        pass


def _group_alive(pgid: int) -> bool:
    """Whether any process is still in process group pgid (read from /proc). Once the group is
    empty its number may be given to a new group: it must not be signalled then."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return True  # no /proc: cannot tell, and the group was ours
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 2 and fields[2] == str(pgid).encode():
            return True
    return False


def _signal_group(proc: asyncio.subprocess.Process, sig: int) -> None:
    """Sends sig to harvest's process group (started with start_new_session: its id is the pid).
    Once harvest has exited and been reaped the group may be empty and its number free for
    another: it is signalled only while a process is still in it."""
    if proc.returncode is not None and not _group_alive(proc.pid):
        return
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


async def _ended(proc: asyncio.subprocess.Process, stderr_task: asyncio.Future, seconds: float) -> bool:
    """Whether, within seconds, harvest (and the prefix) exited and closed their pipes."""

    async def drain() -> None:
        assert proc.stdin and proc.stdout
        while await proc.stdout.read(1 << 16):
            pass
        await asyncio.wait([stderr_task])
        proc.stdin.close()
        await _stdin_closed(proc)
        await proc.wait()

    try:
        await asyncio.wait_for(drain(), seconds)
        return True
    except asyncio.TimeoutError:
        return False


async def _terminate(proc: asyncio.subprocess.Process, stderr_task: asyncio.Future) -> None:
    """Ends a run: SIGTERM to harvest's process group (harvest ends the command's group and
    records the run), SIGKILL after _CANCEL_GRACE; returns once harvest has exited and closed its
    pipes, or _PIPE_GRACE after the SIGKILL if something outside the group still holds them."""
    assert proc.stdin and proc.stdout
    if proc.returncode is None or not proc.stdout.at_eof():
        _signal_group(proc, signal.SIGTERM)
    if await _ended(proc, stderr_task, _CANCEL_GRACE):
        return
    _signal_group(proc, signal.SIGKILL)
    if await _ended(proc, stderr_task, _PIPE_GRACE):
        return
    # Stop waiting for the pipes: close them here (a transport left open would be closed by the
    # garbage collector, after the event loop, with "Event loop is closed" errors).
    if not proc.stdin.transport.is_closing():
        proc.stdin.transport.abort()
    transport = getattr(proc, "_transport", None)
    if transport is not None:
        transport.close()


def _result(raw: dict[str, Any]) -> ExecutionResult:
    """The ExecutionResult, harvest's extra fields kept as attributes (the record's fields, and
    so its equality, stay the SDK's)."""
    files = []
    for f in raw.get("output_files") or []:
        out = OutputFile(name=f["name"], content=base64.b64decode(f["content"] or ""), mime_type=f["mime_type"])
        out.path = f["path"]  # type: ignore[attr-defined]
        out.size = f["size"]  # type: ignore[attr-defined]
        out.sha256 = f["sha256"]  # type: ignore[attr-defined]
        files.append(out)
    result = ExecutionResult(
        exit_code=raw["exit_code"], stdout=_text(raw["stdout"]), stderr=_text(raw["stderr"]), output_files=files
    )
    for key in ("skipped", "run_id", "timed_out", "duration_ms", "stdout_truncated", "stderr_truncated"):
        setattr(result, key, raw.get(key))
    return result
