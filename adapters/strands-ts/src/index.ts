/**
 * harvest as a Strands Agents sandbox.
 *
 * `HarvestSandbox` implements the SDK's `Sandbox` with the `harvest` CLI: `run` for commands and
 * code (streamed chunks, then the ExecutionResult with the files the command produced), `ls` for
 * listings, `cat`/`put`/`rm` for files, bytes over pipes. With `exec` the same calls go through a
 * command prefix (`docker exec -i box`, `ssh host`) to a harvest installed in the remote box, and
 * the adapter itself touches no local file.
 */
import { constants as bufferConstants } from 'node:buffer';
import * as posixPath from 'node:path/posix';
import * as localPath from 'node:path';
import {
  FunctionTool,
  ImageBlock,
  Sandbox,
  SandboxAbortError,
  SandboxPathNotFoundError,
  SandboxTimeoutError,
  TextBlock,
} from '@strands-agents/sdk';
import type {
  ExecuteOptions,
  ExecutionResult,
  FileInfo,
  JSONValue,
  OutputFile,
  StreamChunk,
  Tool,
} from '@strands-agents/sdk';
import {
  HarvestError,
  exitStatus,
  harvestLine,
  ownBytes,
  prefixFailure,
  reason,
  runHarvest,
  signalGroup,
  spawnFailure,
  spawnHarvest,
  type Launcher,
} from './process.js';

export { HarvestError, shellQuote } from './process.js';

/** Limits and filters of the collection that ends every run (harvest run's collect options). */
export interface CollectOptions {
  /** Larger files are skipped as `too_large` (harvest's default 32MiB). A number is bytes. */
  maxFileBytes?: number | string;
  /** At most this many artifacts (default 1000). */
  maxFiles?: number;
  /** At most this many bytes of artifacts (default 256MiB). */
  maxTotalBytes?: number | string;
  /** Keep at most this much of each stream in the result (default 16MiB; chunks are complete). */
  maxOutputBytes?: number | string;
  /** Collect dot-files and `__pycache__` too. */
  includeHidden?: boolean;
  /** Leave out names matching these globs. */
  exclude?: readonly string[];
  /** Record nothing in harvest's history database. */
  noHistory?: boolean;
  /** Do not use the MIME cache. */
  noCache?: boolean;
}

export interface HarvestSandboxOptions {
  /** The sandbox's directory: the default cwd, and what relative paths are relative to. */
  workingDir: string;
  /**
   * The harvest binary. Default: `$HARVEST_BIN` or `harvest` on PATH; with `exec`, `harvest`
   * (the remote PATH's), since a local path means nothing in the remote box.
   */
  harvest?: string;
  /** harvest's history database (`--db`); default harvest's own ($HARVEST_DB, ~/.local/share). */
  db?: string;
  /** A command prefix harvest is started through, e.g. `['docker', 'exec', '-i', 'box']`. */
  exec?: readonly string[];
  /**
   * Pass harvest's arguments as one shell-quoted string, for prefixes that hand their arguments
   * to a remote shell (ssh does). Default: true when `exec[0]` is `ssh`.
   */
  execQuote?: boolean;
  /** Limits of the collection after each run. */
  collect?: CollectOptions;
  /** Label of every run in harvest's history. */
  label?: string;
}

/** An OutputFile with harvest's extra fields. */
export interface HarvestOutputFile extends OutputFile {
  /** Relative to the directory the command ran in, `/`-separated. */
  readonly path: string;
  readonly size: number;
  readonly sha256: string;
}

/** A file the run produced but harvest did not return, and why (`too_large`, `limit`, `symlink`...). */
export interface SkippedFile {
  readonly path: string;
  readonly reason: string;
  readonly size: number | null;
}

/** An ExecutionResult with harvest's extra fields. */
export interface HarvestExecutionResult extends ExecutionResult {
  readonly outputFiles: HarvestOutputFile[];
  readonly skipped: SkippedFile[];
  /** The run in harvest's history, or null with `noHistory`. */
  readonly runId: number | null;
  readonly timedOut: boolean;
  readonly durationMs: number;
  readonly stdoutTruncated: boolean;
  readonly stderrTruncated: boolean;
}

// The SDK's rules, so a name is refused here as the SDK's own sandboxes refuse it.
const ENV_KEY = /^[a-zA-Z_][a-zA-Z0-9_]*$/;
// harvest's rule for --language (the SDK's, plus `+`).
const LANGUAGE = /^[A-Za-z0-9._+-]+$/;
// How long harvest gets to end an aborted command (SIGTERM, SIGKILL 2 s later) and record the
// run, before its process group is killed.
const ABORT_GRACE_MS = 10_000;
// After that SIGKILL, how long the pipes may stay open (held by a process outside the group)
// before the adapter stops waiting for them.
const PIPE_GRACE_MS = 1_000;
// harvest's own failure (`run`: the command ran, but what it produced could not be collected or
// recorded), as env(1) and timeout(1) use it.
const HARVEST_FAILED = 125;

/**
 * @internal What one call takes from harvest's stdout: `readBytes` of a file (fs.readFile's own
 * limit, 2 GiB, so readFile fails as the SDK's own sandboxes do, where the whole file would not
 * fit one Buffer), `lineBytes` of one line of `run` (one JavaScript string). Past them the call
 * fails with an error it can catch, rather than the string or Buffer failing inside a stream
 * handler, which ends the whole process. Tests lower them.
 */
export const limits = {
  readBytes: 2 ** 31 - 1,
  lineBytes: bufferConstants.MAX_STRING_LENGTH,
};
// A lone UTF-16 surrogate: what listFiles returns for a byte of a name that is not UTF-8.
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;
const LONE_SURROGATES = new RegExp(LONE_SURROGATE.source, 'g');

/**
 * Output as a well-formed string: harvest escapes a byte of stdout or stderr that is not UTF-8 as
 * a lone surrogate (\udcXX), which a model's API may refuse in a request; it becomes U+FFFD, as
 * the SDK's own sandboxes decode such bytes.
 */
function wellFormed(text: unknown): string {
  return typeof text === 'string' ? text.replace(LONE_SURROGATES, '\ufffd') : '';
}

const IMAGE_FORMATS: Record<string, 'png' | 'jpeg' | 'gif' | 'webp'> = {
  'image/png': 'png',
  'image/jpeg': 'jpeg',
  'image/gif': 'gif',
  'image/webp': 'webp',
};
// Models refuse larger images (Bedrock: 3.75 MB); a larger one is described like any other file.
const MAX_IMAGE_BYTES = 3_750_000;

function startsWith(b: Uint8Array, at: number, ascii: string): boolean {
  if (b.byteLength < at + ascii.length) return false;
  for (let i = 0; i < ascii.length; i++) if (b[at + i] !== ascii.charCodeAt(i)) return false;
  return true;
}

/**
 * The image format a file is shown to the model as, or undefined. Its MIME type is refined by
 * the name (a text file named plot.png is image/png), and a model refuses an image block that
 * is not one: so the bytes must also begin as that format does (PNG: signature and IHDR;
 * JPEG: SOI; GIF: GIF87a/GIF89a; WebP: RIFF....WEBP).
 */
function imageFormat(f: { mimeType: string; content: Uint8Array }): 'png' | 'jpeg' | 'gif' | 'webp' | undefined {
  const format = IMAGE_FORMATS[f.mimeType];
  const b = f.content;
  if (!format || b.byteLength > MAX_IMAGE_BYTES) return undefined;
  const ok =
    format === 'png'
      ? startsWith(b, 0, '\x89PNG\r\n\x1a\n') && startsWith(b, 12, 'IHDR')
      : format === 'jpeg'
        ? startsWith(b, 0, '\xff\xd8\xff')
        : format === 'gif'
          ? (startsWith(b, 0, 'GIF87a') || startsWith(b, 0, 'GIF89a')) && b.byteLength >= 13
          : startsWith(b, 0, 'RIFF') && startsWith(b, 8, 'WEBP');
  return ok ? format : undefined;
}

interface RawOutputFile {
  name: string;
  path: string;
  mimeType: string;
  size: number;
  sha256: string;
  content: string | null;
}

function toBytes(base64: string | null): Uint8Array {
  if (!base64) return new Uint8Array(0);
  // A plain Uint8Array, as the SDK's type says (a Buffer is a subclass with other methods), that
  // owns its ArrayBuffer (not a view into Node's shared pool).
  return ownBytes(Buffer.from(base64, 'base64'));
}

/**
 * A path harvest can be given: Node passes arguments as UTF-8, so a lone surrogate (a name that
 * is not UTF-8, as listFiles returns it) would become U+FFFD and name another file. harvest has
 * no way to take a path's raw bytes other than as an argument: such a path is refused.
 */
function checkPath(path: string, given: string): string {
  if (LONE_SURROGATE.test(path)) {
    const err = new TypeError(
      `path ${JSON.stringify(given)} is not valid UTF-8 (it holds a lone surrogate, as listFiles names a ` +
        'file whose name is not UTF-8): it cannot be passed as a process argument from Node',
    );
    Object.assign(err, { code: 'ERR_INVALID_ARG_VALUE', path: given });
    throw err;
  }
  return path;
}

function toResult(raw: Record<string, unknown>): HarvestExecutionResult {
  const files = (raw.outputFiles as RawOutputFile[] | undefined) ?? [];
  return {
    ...raw,
    type: 'executionResult',
    stdout: wellFormed(raw.stdout),
    stderr: wellFormed(raw.stderr),
    outputFiles: files.map((f) => ({ ...f, content: toBytes(f.content) })),
  } as unknown as HarvestExecutionResult;
}

function sizeArg(v: number | string): string {
  return typeof v === 'number' ? String(Math.floor(v)) : v;
}

/**
 * The Strands `Sandbox` on harvest. Each operation is one harvest process; nothing is kept
 * between calls, so one instance serves any number of concurrent calls.
 */
export class HarvestSandbox extends Sandbox {
  readonly workingDir: string;
  readonly db: string | undefined;
  readonly label: string | undefined;
  readonly collect: CollectOptions;
  private readonly _launcher: Launcher;

  constructor(options: HarvestSandboxOptions) {
    super();
    const exec = [...(options.exec ?? [])];
    if (exec.length > 0 && !posixPath.isAbsolute(options.workingDir)) {
      // With a prefix the directory is in another box: there is no local cwd to resolve it by.
      throw new Error(`workingDir must be absolute with an exec prefix: ${options.workingDir}`);
    }
    this.workingDir = exec.length > 0 ? posixPath.normalize(options.workingDir) : localPath.resolve(options.workingDir);
    this.db = options.db;
    this.label = options.label;
    this.collect = { ...(options.collect ?? {}) };
    this._launcher = {
      harvest: options.harvest ?? (exec.length > 0 ? 'harvest' : (process.env.HARVEST_BIN ?? 'harvest')),
      exec,
      execQuote: options.execQuote ?? (exec.length > 0 && posixPath.basename(exec[0]!) === 'ssh'),
    };
  }

  /**
   * A sandbox path: absolute as given, else relative to workingDir ('' is workingDir itself).
   * Never normalized: '.' and '..' reach harvest as written, so `removeTree('..')` is refused
   * as `harvest rm -r DIR/..` is, instead of becoming the working directory's parent.
   */
  resolvePath(path: string): string {
    if (posixPath.isAbsolute(path)) return path;
    if (path === '') return this.workingDir;
    return this.workingDir.endsWith('/') ? this.workingDir + path : `${this.workingDir}/${path}`;
  }

  /** The path a removal names: '' names nothing (rm(1)'s "No such file"), not workingDir. */
  private _removal(path: string): string {
    return path === '' ? '' : this._path(path);
  }

  /** resolvePath, refusing a path that is not valid UTF-8 (see checkPath). */
  private _path(path: string): string {
    return checkPath(this.resolvePath(path), path);
  }

  override async *executeStreaming(
    command: string,
    options?: ExecuteOptions,
  ): AsyncGenerator<StreamChunk | HarvestExecutionResult> {
    yield* this._run(['--shell', '--', command], undefined, options);
  }

  override async *executeCodeStreaming(
    code: string,
    language: string,
    options?: ExecuteOptions,
  ): AsyncGenerator<StreamChunk | HarvestExecutionResult> {
    if (!LANGUAGE.test(language)) {
      throw new Error(`language parameter contains invalid characters: ${language}`);
    }
    yield* this._run(['--language', language], new TextEncoder().encode(code), options);
  }

  override async execute(command: string, options?: ExecuteOptions): Promise<HarvestExecutionResult> {
    return (await super.execute(command, options)) as HarvestExecutionResult;
  }

  override async executeCode(code: string, language: string, options?: ExecuteOptions): Promise<HarvestExecutionResult> {
    return (await super.executeCode(code, language, options)) as HarvestExecutionResult;
  }

  private _runArgs(options: ExecuteOptions | undefined): string[] {
    // --quiet hides harvest's warnings; its errors ("harvest: ...") are still on stderr.
    const args = ['run', '--case', 'camel', '--quiet', '--dir', this._path(options?.cwd ?? this.workingDir)];
    if (options?.timeout !== undefined) args.push('--timeout', String(options.timeout));
    for (const [key, value] of Object.entries(options?.env ?? {})) {
      if (!ENV_KEY.test(key)) throw new Error(`Invalid environment variable name: ${key}`);
      args.push('--env', `${key}=${value}`);
    }
    const c = this.collect;
    if (c.maxFileBytes !== undefined) args.push('--max-file-bytes', sizeArg(c.maxFileBytes));
    if (c.maxFiles !== undefined) args.push('--max-files', String(c.maxFiles));
    if (c.maxTotalBytes !== undefined) args.push('--max-total-bytes', sizeArg(c.maxTotalBytes));
    if (c.maxOutputBytes !== undefined) args.push('--max-output-bytes', sizeArg(c.maxOutputBytes));
    if (c.includeHidden) args.push('--include-hidden');
    for (const glob of c.exclude ?? []) args.push('--exclude', glob);
    if (c.noHistory) args.push('--no-history');
    if (c.noCache) args.push('--no-cache');
    if (this.label !== undefined) args.push('--label', this.label);
    if (this.db !== undefined) args.push('--db', this.db);
    return args;
  }

  /**
   * One `harvest run`: yields each StreamChunk as harvest prints it, then the ExecutionResult.
   * A timeout (harvest's own, so it also holds through a prefix) raises SandboxTimeoutError
   * after the chunks. harvest's own failure after the command ran (exit 125 with a result: the
   * files could not be collected or recorded) raises HarvestError with harvest's reason and the
   * result. harvest runs in a process group of its own (with the prefix, if any): an abort
   * sends the group SIGTERM (harvest ends the command's process group and records the run),
   * SIGKILL ABORT_GRACE_MS later, and raises SandboxAbortError once harvest has exited (after
   * the SIGKILL, at most PIPE_GRACE_MS more).
   */
  private async *_run(
    tail: string[],
    input: Uint8Array | undefined,
    options: ExecuteOptions | undefined,
  ): AsyncGenerator<StreamChunk | HarvestExecutionResult> {
    const args = [...this._runArgs(options), ...tail];
    const signal = options?.signal;
    if (signal?.aborted) throw new SandboxAbortError();
    // A timeout of 0 or less (or NaN) has elapsed already: the SDK's own sandboxes time such a
    // command out at once, so it raises SandboxTimeoutError here too, and nothing runs.
    const timeout = options?.timeout;
    if (timeout !== undefined && !(timeout > 0)) throw new SandboxTimeoutError(timeout, '', '');

    const proc = spawnHarvest(this._launcher, args, true);
    const events: StreamChunk[] = [];
    let result: Record<string, unknown> | undefined;
    let badLine: string | undefined;
    let pending: Buffer[] = [];
    let pendingBytes = 0;
    // The size of the longest line too long to be one string (its bytes are not kept).
    let tooLong = 0;
    const stderr: Buffer[] = [];
    let closed = false;
    let status = 0;
    let spawnError: Error | undefined;
    let aborted = false;
    let stopping = false;
    let killTimer: NodeJS.Timeout | undefined;
    let wake: (() => void) | undefined;
    const notify = () => {
      const w = wake;
      wake = undefined;
      w?.();
    };

    const takeLine = (line: string) => {
      if (line === '') return;
      let event: Record<string, unknown> | null;
      try {
        event = JSON.parse(line) as Record<string, unknown> | null;
      } catch {
        event = null;
      }
      // Not harvest's (a prefix's banner; a line such as `null` or `3` parses, but is no event).
      if (typeof event !== 'object' || event === null) {
        badLine ??= line.slice(0, 200);
        return;
      }
      if (event.type === 'streamChunk') {
        events.push({ type: 'streamChunk', data: wellFormed(event.data), streamType: event.streamType as 'stdout' | 'stderr' });
      } else if (event.type === 'executionResult') {
        result = event;
      }
    };
    // A part of a line: kept while the line can still become one string, else only counted.
    const keep = (part: Buffer) => {
      pendingBytes += part.length;
      if (pendingBytes > limits.lineBytes) pending = [];
      else pending.push(part);
    };
    const endLine = () => {
      if (pendingBytes > limits.lineBytes) tooLong = Math.max(tooLong, pendingBytes);
      else if (pending.length > 0) takeLine(Buffer.concat(pending).toString('utf8'));
      pending = [];
      pendingBytes = 0;
    };
    proc.stdout!.on('data', (b: Buffer) => {
      // Lines end at 0x0A, which is never inside a UTF-8 sequence: decode whole lines only.
      let start = 0;
      let nl = b.indexOf(10);
      while (nl !== -1) {
        keep(b.subarray(start, nl));
        endLine();
        start = nl + 1;
        nl = b.indexOf(10, start);
      }
      if (start < b.length) keep(b.subarray(start));
      notify();
    });
    proc.stderr!.on('data', (b: Buffer) => stderr.push(b));
    proc.stdin!.on('error', () => {});
    proc.on('error', (err) => {
      spawnError = err;
      closed = true;
      notify();
    });
    proc.on('close', (code, sig) => {
      endLine();
      status = exitStatus(code, sig);
      closed = true;
      notify();
    });
    // Ends the run: SIGTERM to harvest's group, SIGKILL after the grace, and then, if something
    // outside the group still holds the pipes, stop waiting for them.
    const stop = () => {
      if (stopping || closed) return;
      stopping = true;
      signalGroup(proc, 'SIGTERM');
      killTimer = setTimeout(() => {
        if (closed) return;
        signalGroup(proc, 'SIGKILL');
        killTimer = setTimeout(() => {
          if (closed) return;
          proc.stdout!.destroy();
          proc.stderr!.destroy();
          closed = true;
          notify();
        }, PIPE_GRACE_MS);
      }, ABORT_GRACE_MS);
    };
    const onAbort = () => {
      if (aborted || closed) return;
      aborted = true;
      stop();
      notify();
    };
    signal?.addEventListener('abort', onAbort, { once: true });
    proc.stdin!.end(input ?? new Uint8Array(0));

    try {
      for (;;) {
        if (!aborted) {
          while (events.length > 0) yield events.shift()!;
        }
        if (closed) break;
        await new Promise<void>((resolve) => {
          wake = resolve;
        });
      }
      if (aborted) throw new SandboxAbortError();
      if (spawnError) throw spawnFailure(this._launcher, spawnError);
      const stderrText = Buffer.concat(stderr).toString('utf8');
      if (result === undefined) {
        const failed = prefixFailure(this._launcher, status, stderrText);
        if (failed) throw failed;
        if (tooLong > 0) {
          // The command ran (and the run is in the history): only its result cannot be read.
          throw new HarvestError(
            `harvest run: the result is ${tooLong} bytes of JSON, more than one JavaScript string holds ` +
              `(${limits.lineBytes}): lower collect.maxTotalBytes or collect.maxOutputBytes, or read the ` +
              'files with readFile',
            status,
          );
        }
        const why = reason(stderrText, badLine ?? `harvest run exited with status ${status}`);
        throw new HarvestError(why, status);
      }
      const final = toResult(result);
      // 125 is also the status of a command that exits 125: harvest's own failure is a status
      // that is not the command's, or harvest's error line.
      if (status === HARVEST_FAILED && (final.exitCode !== HARVEST_FAILED || harvestLine(stderrText) !== undefined)) {
        const why = reason(stderrText, `harvest run exited with status ${status} after the command ended`);
        throw new HarvestError(why, status, undefined, undefined, final);
      }
      if (final.timedOut) {
        const err = new SandboxTimeoutError(options?.timeout ?? 0, final.stdout, final.stderr);
        // SDKs before 1.19 take only the seconds: the partial output rides along all the same.
        Object.assign(err, { stdout: final.stdout, stderr: final.stderr, result: final });
        throw err;
      }
      yield final;
    } finally {
      signal?.removeEventListener('abort', onAbort);
      // The consumer stopped early (or an error): end the run as an abort would, and return once
      // harvest has exited.
      if (!closed) {
        stop();
        while (!closed) {
          await new Promise<void>((resolve) => {
            wake = resolve;
          });
        }
      }
      if (killTimer !== undefined) clearTimeout(killTimer);
    }
  }

  override async readFile(path: string): Promise<Uint8Array> {
    const full = this._path(path);
    const r = await runHarvest(this._launcher, ['cat', '--', full], undefined, {
      bytes: limits.readBytes,
      error: () =>
        Object.assign(new RangeError(`File size is greater than ${limits.readBytes} bytes (2 GiB): ${full}`), {
          code: 'ERR_FS_FILE_TOO_LARGE',
          path: full,
        }),
    });
    this._check(r.code, r.stderr, 'cat', full);
    return ownBytes(r.stdout);
  }

  /** Writes through `harvest put`: a temporary file beside it, renamed; parents are created. */
  override async writeFile(path: string, content: Uint8Array, mode?: number | string): Promise<void> {
    const full = this._path(path);
    const args = ['put'];
    if (mode !== undefined) args.push('--mode', typeof mode === 'number' ? mode.toString(8) : mode);
    args.push('--', full);
    const r = await runHarvest(this._launcher, args, content);
    this._check(r.code, r.stderr, 'put', full);
  }

  override async removeFile(path: string): Promise<void> {
    const full = this._removal(path);
    const r = await runHarvest(this._launcher, ['rm', '--', full]);
    this._check(r.code, r.stderr, 'rm', full);
  }

  /** Removes a directory tree (`harvest rm -r`), never following a symlink. */
  async removeTree(path: string): Promise<void> {
    const full = this._removal(path);
    const r = await runHarvest(this._launcher, ['rm', '-r', '--', full]);
    this._check(r.code, r.stderr, 'rm', full);
  }

  override async listFiles(path: string): Promise<FileInfo[]> {
    const full = this._path(path);
    const r = await runHarvest(this._launcher, ['ls', '--case', 'camel', '--quiet', '--', full]);
    if (r.code === 3) throw new SandboxPathNotFoundError(path);
    // Exit 1 with a listing is a warning (harvest already gave isDir/size up for the entries it
    // could not stat); without one it is a failure.
    if (r.code === 0 || r.code === 1) {
      let entries: { name: string; isDir?: boolean | null; size?: number | null }[] | undefined;
      try {
        entries = JSON.parse(r.stdout.toString('utf8'));
      } catch {
        // fall through to the error
      }
      if (Array.isArray(entries)) {
        // Unknown is absent, never null (harvest's camelCase leaves the keys out already).
        return entries.map((e) => {
          const info: { name: string; isDir?: boolean; size?: number } = { name: e.name };
          if (e.isDir !== undefined && e.isDir !== null) info.isDir = e.isDir;
          if (e.size !== undefined && e.size !== null) info.size = e.size;
          return info;
        });
      }
    }
    throw new HarvestError(reason(r.stderr, `harvest ls ${full}: exit status ${r.code}`), r.code, full);
  }

  private _check(code: number, stderr: string, what: string, full: string): void {
    if (code === 0) return;
    const why = reason(stderr, `harvest ${what} ${full}: exit status ${code}`);
    // Exit 3 is harvest's "does not exist", the ENOENT the SDK's local sandbox throws here.
    throw new HarvestError(why, code, full, code === 3 ? 'ENOENT' : undefined);
  }

  /**
   * `harvest_shell` and `harvest_code`: like the SDK's shell tool, but the model also gets the
   * files the command produced: images (PNG, JPEG, GIF, WebP up to 3.75 MB) as image blocks, the
   * others by name, path, MIME type and size.
   */
  override getTools(): Tool[] {
    const sandbox = this;
    const shell = new FunctionTool({
      name: 'harvest_shell',
      description:
        'Run a shell command (sh -c) in the sandbox. Returns its exit code, output, error output ' +
        'and the files it created or changed; images among them are shown to you.',
      inputSchema: {
        type: 'object',
        properties: {
          command: { type: 'string', description: 'The shell command to execute.' },
          timeout: { type: 'number', description: 'Timeout in seconds (default: 120).' },
        },
        required: ['command'],
      },
      callback: async (input: unknown) => {
        const { command, timeout } = toolInput('harvest_shell', input, ['command'], []);
        return toolResult(await runForTool(() => sandbox.execute(command!, { timeout: timeout ?? 120 })));
      },
    });
    const code = new FunctionTool({
      name: 'harvest_code',
      description:
        'Run source code with an interpreter (e.g. python3, node) in the sandbox. Returns its ' +
        'exit code, output, error output and the files it created or changed; images among them ' +
        'are shown to you.',
      inputSchema: {
        type: 'object',
        properties: {
          code: { type: 'string', description: 'The source code.' },
          language: { type: 'string', description: 'The interpreter, e.g. python3.' },
          timeout: { type: 'number', description: 'Timeout in seconds (default: 120).' },
        },
        required: ['code', 'language'],
      },
      callback: async (input: unknown) => {
        const { code: source, language, timeout } = toolInput('harvest_code', input, ['code'], ['language']);
        return toolResult(
          await runForTool(() => sandbox.executeCode(source!, language!, { timeout: timeout ?? 120 })),
        );
      },
    });
    return [shell, code];
  }
}

/**
 * A tool's input, checked as the SDK's own tools check theirs: the model gets an error naming
 * the field it got wrong, never a run of the command `undefined` or a timeout of "abc" seconds.
 * `strings` must be strings, `names` non-empty strings; `timeout`, when given, a positive number
 * of seconds.
 */
function toolInput(
  tool: string,
  input: unknown,
  strings: string[],
  names: string[],
): { command?: string; code?: string; language?: string; timeout?: number } {
  if (typeof input !== 'object' || input === null || Array.isArray(input)) {
    throw new Error(`${tool}: the input must be an object`);
  }
  const given = input as Record<string, unknown>;
  for (const key of strings) {
    if (typeof given[key] !== 'string') throw new Error(`${tool}: '${key}' must be a string`);
  }
  for (const key of names) {
    if (typeof given[key] !== 'string' || given[key] === '') {
      throw new Error(`${tool}: '${key}' must be a non-empty string`);
    }
  }
  const timeout = given.timeout;
  if (timeout !== undefined && timeout !== null &&
      (typeof timeout !== 'number' || !Number.isFinite(timeout) || timeout <= 0)) {
    throw new Error(`${tool}: 'timeout' must be a positive number of seconds`);
  }
  return {
    command: given.command as string | undefined,
    code: given.code as string | undefined,
    language: given.language as string | undefined,
    timeout: (timeout ?? undefined) as number | undefined,
  };
}

async function runForTool(run: () => Promise<HarvestExecutionResult>): Promise<HarvestExecutionResult> {
  try {
    return await run();
  } catch (err) {
    if (err instanceof SandboxTimeoutError) {
      const e = err as SandboxTimeoutError & { stdout?: string; stderr?: string };
      const partial = { output: e.stdout ?? '', error: e.stderr ?? '', exit_code: 124 };
      throw new Error(`${err.message}\n${JSON.stringify(partial)}`);
    }
    throw err;
  }
}

/**
 * The tool result: a JSON summary as text, then an image block per image. (FunctionTool passes
 * an array of content blocks through as the result's content; its type says JSONValue only.)
 */
function toolResult(r: HarvestExecutionResult): JSONValue {
  const images = r.outputFiles.filter((f) => imageFormat(f) !== undefined);
  const summary = {
    exit_code: r.exitCode,
    output: r.stdout,
    error: r.stderr,
    output_files: r.outputFiles.map((f) => ({
      name: f.name,
      path: f.path,
      mime_type: f.mimeType,
      size: f.size,
      shown: images.includes(f),
    })),
    skipped: r.skipped,
  };
  const blocks: (TextBlock | ImageBlock)[] = [new TextBlock(JSON.stringify(summary))];
  for (const f of images) {
    blocks.push(new ImageBlock({ format: imageFormat(f)!, source: { bytes: f.content } }));
  }
  return blocks as unknown as JSONValue;
}
