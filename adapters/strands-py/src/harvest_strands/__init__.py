"""harvest as a Strands Agents sandbox: ``HarvestSandbox`` and the records it returns.

Standard library only. With ``strands-agents`` installed, HarvestSandbox subclasses
``strands.sandbox.Sandbox`` and returns its record types; without it, dataclasses with the
same names and fields.
"""

from .sandbox import HarvestError, HarvestSandbox
from .types import (
    HAVE_STRANDS,
    ExecutionResult,
    FileInfo,
    OutputFile,
    SandboxPathNotFoundError,
    SandboxTimeoutError,
    StreamChunk,
)

__all__ = [
    "HAVE_STRANDS",
    "ExecutionResult",
    "FileInfo",
    "HarvestError",
    "HarvestSandbox",
    "OutputFile",
    "SandboxPathNotFoundError",
    "SandboxTimeoutError",
    "StreamChunk",
]
__version__ = "0.1.0"
