/**
 * Starting harvest (directly or through an exec prefix) and reading what it writes.
 *
 * Everything the adapter does is one harvest process: its arguments, bytes on its stdin, JSON
 * or bytes on its stdout, a one-line reason on its stderr and an exit status.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { constants } from 'node:os';
import { getSystemErrorMap } from 'node:util';
import type { HarvestExecutionResult } from './index.js';

/**
 * A harvest failure that is not one of the SDK's errors; `code` is `ENOENT` for a missing path.
 * `result` is the ExecutionResult harvest printed before failing (`harvest run` exit 125: the
 * command ran, but harvest could not collect or record what it produced), else undefined.
 */
export class HarvestError extends Error {
  readonly exitCode: number;
  readonly path: string | undefined;
  readonly code: string | undefined;
  readonly result: HarvestExecutionResult | undefined;
  constructor(message: string, exitCode: number, path?: string, code?: string, result?: HarvestExecutionResult) {
    super(message);
    this.name = 'HarvestError';
    this.exitCode = exitCode;
    this.path = path;
    this.code = code;
    this.result = result;
  }
}

/** How to reach harvest: the binary, and the command prefix it is started through. */
export interface Launcher {
  harvest: string;
  exec: readonly string[];
  /** Join harvest's argv into one shell-quoted string (a prefix such as ssh runs it in a shell). */
  execQuote: boolean;
}

/** POSIX shell quoting: single quotes, with each ' written as '\''. */
export function shellQuote(value: string): string {
  return "'" + value.replace(/'/g, "'\\''") + "'";
}

/**
 * Starts `harvest ARGS...`, through the prefix when there is one. Node reports ENOENT and EACCES
 * with an 'error' event (see spawnFailure) and throws the other exec failures (ENOTDIR...): those
 * are thrown as the same HarvestError.
 *
 * `group`: start it in a session (and so a process group) of its own, whose id is its pid, so
 * that signalGroup reaches harvest even through a prefix that does not forward signals (flock,
 * `sh -c`, `unshare --fork`).
 */
export function spawnHarvest(launcher: Launcher, args: readonly string[], group = false): ChildProcess {
  const argv = [launcher.harvest, ...args];
  let file = argv[0]!;
  let rest = argv.slice(1);
  if (launcher.exec.length > 0) {
    file = launcher.exec[0]!;
    rest = [...launcher.exec.slice(1), ...(launcher.execQuote ? [argv.map(shellQuote).join(' ')] : argv)];
  }
  try {
    return spawn(file, rest, { stdio: ['pipe', 'pipe', 'pipe'], detached: group });
  } catch (err) {
    throw spawnFailure(launcher, err as NodeJS.ErrnoException);
  }
}

/**
 * harvest (or the prefix) could not be started: exit status 127 (not found) or 126, as a shell
 * reports it, and no `code`, so that it is never read as a missing sandbox path.
 */
export function cannotStart(launcher: Launcher, why: string, exitCode: number): HarvestError {
  const what = launcher.exec.length > 0 ? `${launcher.harvest} through ${launcher.exec[0]}` : launcher.harvest;
  return new HarvestError(`cannot start harvest (${what}): ${why}`, exitCode);
}

/** The HarvestError for a ChildProcess 'error' event from spawn; any other error as it is. */
export function spawnFailure(launcher: Launcher, err: NodeJS.ErrnoException): Error {
  if (!err.syscall?.startsWith('spawn')) return err;
  // libuv's text for the errno ("no such file or directory"), capitalised as strerror's.
  const known = typeof err.errno === 'number' ? getSystemErrorMap().get(err.errno)?.[1] : undefined;
  const text = known ?? err.code ?? err.message;
  return cannotStart(launcher, text.charAt(0).toUpperCase() + text.slice(1), err.code === 'ENOENT' ? 127 : 126);
}

/**
 * Through a prefix, 126/127 without harvest's output is the prefix's "cannot execute" or "not
 * found" (harvest's own commands never exit so; `run` prints its result first).
 */
export function prefixFailure(launcher: Launcher, code: number, stderr: string): HarvestError | undefined {
  if (launcher.exec.length === 0 || (code !== 126 && code !== 127)) return undefined;
  return cannotStart(launcher, reason(stderr, `exit status ${code}`), code);
}

/** What a finished harvest process gave back. */
export interface Finished {
  code: number;
  stdout: Buffer;
  stderr: string;
}

/**
 * Whether any process is still in process group pgid (read from /proc). Once the group is empty
 * its number may be given to a new group, which must not be signalled.
 */
export function groupAlive(pgid: number): boolean {
  let names: string[];
  try {
    names = readdirSync('/proc');
  } catch {
    return true; // no /proc: cannot tell, and the group was ours
  }
  for (const name of names) {
    if (!/^[0-9]+$/.test(name)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${name}/stat`, 'latin1');
    } catch {
      continue;
    }
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    if (fields[2] === String(pgid)) return true;
  }
  return false;
}

/**
 * Sends sig to the process group of a child started with `group` (its id is the child's pid).
 * Once the child has exited and been reaped, the group may be empty and its number free for
 * another: it is signalled only while a process is still in it.
 */
export function signalGroup(proc: ChildProcess, sig: NodeJS.Signals): void {
  if (proc.pid === undefined) return;
  if ((proc.exitCode !== null || proc.signalCode !== null) && !groupAlive(proc.pid)) return;
  try {
    process.kill(-proc.pid, sig);
  } catch {
    // ESRCH: the whole group is gone already.
  }
}

/** The exit status as a shell reports it: 128+N for signal N (SIGABRT 134, SIGSEGV 139...). */
export function exitStatus(code: number | null, signal: NodeJS.Signals | null): number {
  if (code !== null) return code;
  const number = signal ? (constants.signals as Record<string, number | undefined>)[signal] : undefined;
  return 128 + (number ?? 1);
}

/** At most `bytes` of stdout are taken: past them harvest is stopped and `error()` is raised. */
export interface OutputLimit {
  bytes: number;
  error: () => Error;
}

/**
 * Runs harvest to the end: `input` is written to its stdin (with back-pressure, so a 100 MiB
 * file streams through the pipe), stdout is kept as bytes.
 */
export function runHarvest(
  launcher: Launcher,
  args: readonly string[],
  input?: Uint8Array,
  limit?: OutputLimit,
): Promise<Finished> {
  return new Promise((resolve, reject) => {
    const proc = spawnHarvest(launcher, args);
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    let outBytes = 0;
    let tooLarge = false;
    proc.stdout!.on('data', (b: Buffer) => {
      if (tooLarge) return;
      outBytes += b.length;
      if (limit && outBytes > limit.bytes) {
        // More than one Buffer can hold (or the caller takes): nothing more is kept, and
        // harvest is stopped rather than read to the end.
        tooLarge = true;
        out.length = 0;
        proc.kill('SIGTERM');
        return;
      }
      out.push(b);
    });
    proc.stderr!.on('data', (b: Buffer) => err.push(b));
    // harvest may exit before reading all of stdin (a missing parent it cannot create): the
    // EPIPE is not the error to report, its exit status and message are.
    proc.stdin!.on('error', () => {});
    proc.on('error', (e) => reject(spawnFailure(launcher, e)));
    proc.on('close', (code, signal) => {
      if (tooLarge) {
        reject(limit!.error());
        return;
      }
      const status = exitStatus(code, signal);
      const stderr = Buffer.concat(err).toString('utf8');
      const failed = prefixFailure(launcher, status, stderr);
      if (failed) reject(failed);
      else resolve({ code: status, stdout: Buffer.concat(out), stderr });
    });
    if (input !== undefined) proc.stdin!.end(input);
    else proc.stdin!.end();
  });
}

/** harvest's own error line ("harvest: ..."; --quiet hides warnings, never errors), if any. */
export function harvestLine(stderr: string): string | undefined {
  return stderr.split('\n').find((l) => l.startsWith('harvest: '));
}

/**
 * The line of harvest's message, for an Error: its own error line, else (a prefix's message)
 * the first line, else a fallback naming the command.
 */
export function reason(stderr: string, fallback: string): string {
  const line = harvestLine(stderr) ?? stderr.split('\n').find((l) => l.trim() !== '');
  return line ?? fallback;
}

/**
 * Bytes as a plain Uint8Array that owns its whole ArrayBuffer: a small Buffer is a view into
 * Node's shared 8 KiB pool, whose `.buffer` holds other data (an earlier read's bytes). A large
 * one already has an ArrayBuffer of its own and is not copied.
 */
export function ownBytes(b: Buffer): Uint8Array {
  if (b.byteOffset === 0 && b.buffer.byteLength === b.byteLength) return new Uint8Array(b.buffer, 0, b.byteLength);
  return new Uint8Array(b);
}
