/**
 * Starting harvest (directly or through an exec prefix) and reading what it writes.
 *
 * Everything the adapter does is one harvest process: its arguments, bytes on its stdin, JSON
 * or bytes on its stdout, a one-line reason on its stderr and an exit status.
 */
import { spawn, type ChildProcess } from 'node:child_process';

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

/** Starts `harvest ARGS...`, through the prefix when there is one. */
export function spawnHarvest(launcher: Launcher, args: readonly string[]): ChildProcess {
  const argv = [launcher.harvest, ...args];
  if (launcher.exec.length === 0) {
    return spawn(argv[0]!, argv.slice(1), { stdio: ['pipe', 'pipe', 'pipe'] });
  }
  const rest = launcher.execQuote ? [argv.map(shellQuote).join(' ')] : argv;
  return spawn(launcher.exec[0]!, [...launcher.exec.slice(1), ...rest], {
    stdio: ['pipe', 'pipe', 'pipe'],
  });
}

/** What a finished harvest process gave back. */
export interface Finished {
  code: number;
  stdout: Buffer;
  stderr: string;
}

/** The exit status as a shell reports it: 128+N for a signal. */
export function exitStatus(code: number | null, signal: NodeJS.Signals | null): number {
  if (code !== null) return code;
  const numbers: Record<string, number> = { SIGHUP: 1, SIGINT: 2, SIGKILL: 9, SIGPIPE: 13, SIGTERM: 15 };
  return 128 + (signal ? (numbers[signal] ?? 1) : 1);
}

/**
 * Runs harvest to the end: `input` is written to its stdin (with back-pressure, so a 100 MiB
 * file streams through the pipe), stdout is kept as bytes.
 */
export function runHarvest(launcher: Launcher, args: readonly string[], input?: Uint8Array): Promise<Finished> {
  return new Promise((resolve, reject) => {
    const proc = spawnHarvest(launcher, args);
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    proc.stdout!.on('data', (b: Buffer) => out.push(b));
    proc.stderr!.on('data', (b: Buffer) => err.push(b));
    // harvest may exit before reading all of stdin (a missing parent it cannot create): the
    // EPIPE is not the error to report, its exit status and message are.
    proc.stdin!.on('error', () => {});
    proc.on('error', reject);
    proc.on('close', (code, signal) => {
      resolve({ code: exitStatus(code, signal), stdout: Buffer.concat(out), stderr: Buffer.concat(err).toString('utf8') });
    });
    if (input !== undefined) proc.stdin!.end(input);
    else proc.stdin!.end();
  });
}

/** The first line of harvest's message, for an Error (or a fallback naming the command). */
export function reason(stderr: string, fallback: string): string {
  const line = stderr.split('\n').find((l) => l.trim() !== '');
  return line ?? fallback;
}
