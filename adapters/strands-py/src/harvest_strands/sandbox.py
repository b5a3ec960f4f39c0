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
# run before it is killed itself.
_CANCEL_GRACE = 10.0
# The result line carries every artifact's content in base64: no line limit worth the name.
_LINE_LIMIT = 1 << 40


class HarvestError(OSError):
    """harvest failed: its one-line reason, its exit status and the path concerned."""

    def __init__(self, message: str, exit_code: int, path: str | None = None) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.path = path


def _reason(stderr: bytes, fallback: str) -> str:
    for line in stderr.decode("utf-8", "replace").splitlines():
        if line.strip():
            return line
    return fallback


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
        """A sandbox path: absolute as given, else relative to working_dir."""
        return path if posixpath.isabs(path) else posixpath.join(self.working_dir, path)

    def _argv(self, args: Sequence[str]) -> list[str]:
        argv = [self.harvest, *args]
        if not self.exec:
            return argv
        if self.exec_quote:
            return [*self.exec, " ".join(shlex.quote(a) for a in argv)]
        return [*self.exec, *argv]

    async def _spawn(self, args: Sequence[str]) -> asyncio.subprocess.Process:
        argv = self._argv(args)
        try:
            return await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                limit=_LINE_LIMIT,
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
        args = ["run", "--case", "snake", "--quiet", "--dir", self.resolve_path(cwd or self.working_dir)]
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
        cancelling the task sends harvest SIGTERM, which ends the command's process group and
        records the run, and re-raises CancelledError once harvest has exited.
        """
        args = self._run_args(timeout, cwd, env) + ["--shell", "--", command]
        async for item in self._run(args, None, timeout):
            yield item

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
        async for item in self._run(args, code.encode("utf-8", "surrogateescape"), timeout):
            yield item

    async def _run(
        self, args: list[str], data: bytes | None, timeout: float | None
    ) -> AsyncGenerator[StreamChunk | ExecutionResult, None]:
        proc = await self._spawn(args)
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

        feed_task = asyncio.ensure_future(feed())
        result: dict[str, Any] | None = None
        finished = False
        try:
            while True:
                line = await proc.stdout.readline()
                if not line:
                    break
                event = json.loads(line)
                kind = event.get("type")
                if kind == "stream_chunk":
                    yield StreamChunk(data=event["data"], stream_type=event["stream_type"])
                elif kind == "execution_result":
                    result = event
            await proc.wait()
            finished = True
        finally:
            if not finished:
                # Cancelled, or the consumer stopped early: end the run as harvest ends a
                # timed-out one, and wait so that the command's group is gone when we return.
                await asyncio.shield(_terminate(proc))
                stderr_task.cancel()
            feed_task.cancel()
        err = await stderr_task
        if result is None:
            code = _status(proc.returncode)
            self._started(code, err)
            raise HarvestError(_reason(err, f"harvest run exited with status {code}"), code)
        final = _result(result)
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
        full = self.resolve_path(path)
        code, _out, err = await self._call(["rm", "--", full])
        self._check(code, err, "rm", full)

    async def remove_tree(self, path: str) -> None:
        """Removes a directory tree (``harvest rm -r``), never following a symlink."""
        full = self.resolve_path(path)
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


async def _terminate(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        try:
            proc.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            await asyncio.wait_for(proc.wait(), _CANCEL_GRACE)
        except asyncio.TimeoutError:
            proc.kill()
            await proc.wait()


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
        exit_code=raw["exit_code"], stdout=raw["stdout"], stderr=raw["stderr"], output_files=files
    )
    for key in ("skipped", "run_id", "timed_out", "duration_ms", "stdout_truncated", "stderr_truncated"):
        setattr(result, key, raw.get(key))
    return result
