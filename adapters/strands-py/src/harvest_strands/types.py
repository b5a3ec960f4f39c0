"""The sandbox records and errors: strands-agents' own when it is installed, else the same.

With ``strands`` importable, these names are ``strands.sandbox``'s classes, so results compare
equal to and are instances of what the rest of the SDK expects. Without it they are dataclasses
with exactly the names and fields of ``strands.sandbox.types`` (and errors that subclass the
same standard exceptions as ``strands.sandbox.errors``).
"""

from __future__ import annotations

from abc import ABC
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

try:  # pragma: no cover - depends on whether strands-agents is installed
    from strands.sandbox import Sandbox as SandboxBase
    from strands.sandbox.types import ExecutionResult, FileInfo, OutputFile, StreamChunk
    from strands.sandbox.errors import SandboxPathNotFoundError, SandboxTimeoutError

    HAVE_STRANDS = True
except ImportError:
    HAVE_STRANDS = False

    StreamType = Literal["stdout", "stderr"]

    @dataclass
    class StreamChunk:
        """A typed chunk of streaming output from command or code execution."""

        data: str
        stream_type: StreamType = "stdout"

    @dataclass
    class FileInfo:
        """Metadata about a file or directory; ``is_dir``/``size`` are None when unknown."""

        name: str
        is_dir: bool | None = None
        size: int | None = None

    @dataclass
    class OutputFile:
        """A file produced by an execution: its base name, bytes and MIME type."""

        name: str
        content: bytes
        mime_type: str

    @dataclass
    class ExecutionResult:
        """Result of command or code execution."""

        exit_code: int
        stdout: str
        stderr: str
        output_files: list[OutputFile] = field(default_factory=list)

    class SandboxTimeoutError(TimeoutError):
        """Raised when the configured timeout elapses."""

        def __init__(self, seconds: float | None) -> None:
            super().__init__(f"Execution timed out after {seconds} seconds")
            self.seconds = seconds

    class SandboxPathNotFoundError(FileNotFoundError):
        """Raised by list_files when the path does not exist (or is not a directory)."""

        def __init__(self, path: str) -> None:
            super().__init__(f"Path not found: {path}")
            self.path = path

    class SandboxBase(ABC):  # type: ignore[no-redef]
        """The convenience half of strands' Sandbox, built on the abstract operations; unknown
        keyword arguments are passed on, as the SDK's are."""

        async def execute(
            self,
            command: str,
            *,
            timeout: float | None = None,
            cwd: str | None = None,
            env: Mapping[str, str] | None = None,
            **kwargs: Any,
        ) -> ExecutionResult:
            stream = self.execute_streaming(  # type: ignore[attr-defined]
                command, timeout=timeout, cwd=cwd, env=env, **kwargs
            )
            async for item in stream:
                if isinstance(item, ExecutionResult):
                    return item
            raise RuntimeError("execute_streaming() did not yield an ExecutionResult")

        async def execute_code(
            self,
            code: str,
            language: str,
            *,
            timeout: float | None = None,
            cwd: str | None = None,
            env: Mapping[str, str] | None = None,
            **kwargs: Any,
        ) -> ExecutionResult:
            stream = self.execute_code_streaming(  # type: ignore[attr-defined]
                code, language, timeout=timeout, cwd=cwd, env=env, **kwargs
            )
            async for item in stream:
                if isinstance(item, ExecutionResult):
                    return item
            raise RuntimeError("execute_code_streaming() did not yield an ExecutionResult")

        async def read_text(self, path: str, encoding: str = "utf-8", **kwargs: Any) -> str:
            return (await self.read_file(path, **kwargs)).decode(encoding)  # type: ignore[attr-defined]

        async def write_text(self, path: str, content: str, encoding: str = "utf-8", **kwargs: Any) -> None:
            await self.write_file(path, content.encode(encoding), **kwargs)  # type: ignore[attr-defined]

        def get_tools(self) -> list:
            """The SDK's base vends no tools; HarvestSandbox does not override it."""
            return []


__all__ = [
    "HAVE_STRANDS",
    "ExecutionResult",
    "FileInfo",
    "OutputFile",
    "SandboxBase",
    "SandboxPathNotFoundError",
    "SandboxTimeoutError",
    "StreamChunk",
]
