// The adapters section of scripts/bench.sh: HarvestSandbox against the SDK's own sandboxes.
//   node bench/bench.mjs HARVEST TMPDIR ROUNDS
// Prints "key value..." lines that bench.sh formats. Every comparison runs interleaved, round by
// round, after one warm-up; the figure is the median of the rounds.
import * as fs from 'node:fs';
import * as path from 'node:path';
import { spawn } from 'node:child_process';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { PosixShellSandbox } from '@strands-agents/sdk';
import { HarvestSandbox } from '../dist/index.js';

const [harvest, tmp, roundsArg, mode] = process.argv.slice(2);
const rounds = Number(roundsArg);

function sdkFile(rel) {
  let dir = path.dirname(fileURLToPath(import.meta.resolve('@strands-agents/sdk')));
  while (!fs.existsSync(path.join(dir, 'package.json'))) dir = path.dirname(dir);
  return pathToFileURL(path.join(dir, rel)).href;
}
const { NotASandboxLocalEnvironment } = await import(sdkFile('dist/src/sandbox/not-a-sandbox-local-environment.js'));

/** The SDK's shell-based sandboxes (Docker, SSH) on the local sh: what they do, minus transport. */
class LocalShellSandbox extends PosixShellSandbox {
  async *executeStreaming(command) {
    const proc = spawn('sh', ['-c', command]);
    let stdout = '';
    let stderr = '';
    proc.stdout.setEncoding('utf8').on('data', (d) => (stdout += d));
    proc.stderr.setEncoding('utf8').on('data', (d) => (stderr += d));
    const exitCode = await new Promise((resolve, reject) => {
      proc.on('error', reject);
      proc.on('close', (code) => resolve(code ?? 1));
    });
    yield { type: 'executionResult', exitCode, stdout, stderr, outputFiles: [] };
  }
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
const now = () => Number(process.hrtime.bigint()) / 1e6; // ms

async function interleaved(cases, op, perRound = 1) {
  const times = Object.fromEntries(Object.keys(cases).map((k) => [k, []]));
  for (const s of Object.values(cases)) await op(s); // warm-up
  for (let r = 0; r < rounds; r++) {
    for (const [name, s] of Object.entries(cases)) {
      const t0 = now();
      for (let i = 0; i < perRound; i++) await op(s);
      times[name].push((now() - t0) / perRound);
    }
  }
  return Object.fromEntries(Object.entries(times).map(([k, v]) => [k, median(v)]));
}

if (mode === 'shell-write') {
  // In its own process: the shell sandbox's writeFile of a 100 MiB file, which may take the
  // whole heap to build its base64 argument before the kernel refuses it.
  const dir = path.join(tmp, 'shell-write');
  fs.mkdirSync(dir, { recursive: true });
  const size = Number(process.argv[6]);
  try {
    await new LocalShellSandbox().writeFile(path.join(dir, 'big.bin'), new Uint8Array(size));
    console.log(`ok ${fs.statSync(path.join(dir, 'big.bin')).size}`);
  } catch (e) {
    console.log(`failed ${String(e.code ?? e.message).split('\n')[0]}`);
  }
  process.exit(0);
}

const work = path.join(tmp, 'adapters');
fs.mkdirSync(work, { recursive: true });
const db = path.join(tmp, 'adapters.db');
const local = new NotASandboxLocalEnvironment();
const hv = new HarvestSandbox({ workingDir: work, harvest, db, collect: { noHistory: true } });
const hvRecorded = new HarvestSandbox({ workingDir: work, harvest, db });

// execute('true'), per call: 20 calls a round.
const ex = await interleaved({ local, hv, hvRecorded }, (s) => s.execute('true', { cwd: work }), 20);
console.log(`execute ${ex.local} ${ex.hv} ${ex.hvRecorded}`);

// listFiles of a 10,000-entry directory: files of mixed sizes, some directories and symlinks.
const big = path.join(tmp, 'adapters-ls');
fs.mkdirSync(big);
for (let i = 0; i < 10000; i++) {
  const name = path.join(big, `entry-${String(i).padStart(5, '0')}${i % 7 === 0 ? '.png' : '.txt'}`);
  if (i % 100 === 0) fs.mkdirSync(name);
  else if (i % 101 === 0) fs.symlinkSync(i % 2 ? 'entry-00001.txt' : 'missing', name);
  else fs.writeFileSync(name, 'x'.repeat(i % 64));
}
const shell = new LocalShellSandbox();
const counts = {
  local: (await local.listFiles(big)).length,
  hv: (await hv.listFiles(big)).length,
  shell: (await shell.listFiles(big)).length,
};
const withSize = {
  local: (await local.listFiles(big)).filter((e) => e.size !== undefined).length,
  hv: (await hv.listFiles(big)).filter((e) => e.size !== undefined).length,
  shell: (await shell.listFiles(big)).filter((e) => e.size !== undefined).length,
};
const ls = await interleaved({ local, hv, shell }, (s) => s.listFiles(big));
console.log(`ls ${ls.local} ${ls.hv} ${ls.shell} ${counts.local} ${counts.hv} ${counts.shell} ${withSize.local} ${withSize.hv} ${withSize.shell}`);

// writeFile of 100 MiB: harvest put vs the local environment's fs.writeFile (no sandbox at all).
const data = new Uint8Array(100 * 1024 * 1024);
for (let i = 0; i < data.length; i += 4096) data[i] = i & 0xff;
const target = path.join(work, 'big.bin');
const wr = await interleaved({ local, hv }, async (s) => {
  await s.writeFile(target, data);
  if (fs.statSync(target).size !== data.length) throw new Error('short write');
});
fs.rmSync(target);
console.log(`write ${wr.local} ${wr.hv}`);
