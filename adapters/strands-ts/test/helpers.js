// Shared by the adapter's tests: the harvest binary, temporary trees, the SDK's own local
// sandbox (the reference), and process checks.
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

export const HARVEST = process.env.HARVEST_BIN;
if (!HARVEST || !fs.existsSync(HARVEST)) {
  throw new Error(`HARVEST_BIN must name the built harvest binary (got ${HARVEST ?? 'nothing'})`);
}

/** The root of the installed SDK (whichever version this run resolves). */
export function sdkRoot() {
  const entry = fileURLToPath(import.meta.resolve('@strands-agents/sdk'));
  let dir = path.dirname(entry);
  while (!fs.existsSync(path.join(dir, 'package.json'))) dir = path.dirname(dir);
  return dir;
}

export function sdkVersion() {
  return JSON.parse(fs.readFileSync(path.join(sdkRoot(), 'package.json'), 'utf8')).version;
}

/**
 * The SDK's NotASandboxLocalEnvironment: not in the package's exports map, so it is loaded by
 * its file (present with that name from 1.5 to 1.19).
 */
export async function localEnvironment() {
  const file = path.join(sdkRoot(), 'dist/src/sandbox/not-a-sandbox-local-environment.js');
  const mod = await import(pathToFileURL(file).href);
  return new mod.NotASandboxLocalEnvironment();
}

const made = [];
export function tmpdir(prefix = 'harvest-strands-') {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  made.push(d);
  return d;
}
process.on('exit', () => {
  for (const d of made) fs.rmSync(d, { recursive: true, force: true });
});

/** A process that still runs (a zombie has ended: only its parent has not reaped it yet). */
export function alive(pid) {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false;
  }
}

/** Live processes whose process group is pgid. */
export function groupMembers(pgid) {
  const pids = [];
  for (const name of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${name}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (fields[0] !== 'Z' && Number(fields[2]) === pgid) pids.push(Number(name));
    } catch {
      // gone meanwhile
    }
  }
  return pids;
}

/**
 * Waits (bounded) until none of the processes runs: a killed process leaves when the kernel
 * gets to it, not at the instant its killer returns. Returns those still running after 10 s.
 */
export async function settle(check) {
  for (let i = 0; i < 200; i++) {
    const left = check();
    if (left.length === 0) return [];
    await new Promise((r) => setTimeout(r, 50));
  }
  return check();
}

// A 1x1 PNG and a 1x1 GIF, as libmagic recognises them.
export const PNG = Buffer.from(
  'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==',
  'base64',
);
export const GIF = Buffer.from('R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7', 'base64');

/** A plain Uint8Array view, for deepStrictEqual against the adapter's contents. */
export function u8(buf) {
  return new Uint8Array(buf.buffer, buf.byteOffset, buf.byteLength);
}
