// The same scenarios with harvest started through a command prefix (env stands in for
// docker exec -i / ssh / kubectl exec), and a prefix that takes one shell-quoted command line.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { randomInt } from 'node:crypto';
import { spawnSync } from 'node:child_process';
import { SandboxAbortError } from '@strands-agents/sdk';
import { HarvestSandbox, HarvestError } from '../dist/index.js';
import { defineSuite, everyOperation } from './suite.js';
import { HARVEST, settle, tmpdir } from './helpers.js';

/** The pids of live processes whose command line matches the pattern (pgrep -f). */
function pgrep(pattern) {
  const r = spawnSync('pgrep', ['-f', pattern], { encoding: 'utf8' });
  return r.stdout.split('\n').filter((l) => l !== '').map(Number).filter((pid) => pid !== process.pid);
}

/** Whether the prefix can run here (unshare needs privileges). */
function usable(prefix) {
  return spawnSync(prefix[0], [...prefix.slice(1), 'true']).status === 0;
}

defineSuite("exec ['env']", ['env']);

describe('exec prefix', () => {
  it('quotes the arguments for a prefix that runs them in a shell', async () => {
    const dir = path.join(tmpdir(), "it's a dir");
    fs.mkdirSync(dir);
    const sandbox = new HarvestSandbox({ workingDir: dir, harvest: HARVEST, db: path.join(dir, '..', 'h.db'), exec: ['sh', '-c'], execQuote: true });
    await sandbox.writeText('a $b.txt', 'ok');
    assert.equal(fs.readFileSync(path.join(dir, 'a $b.txt'), 'utf8'), 'ok');
    assert.deepStrictEqual(await sandbox.listFiles('.'), [{ name: 'a $b.txt', isDir: false, size: 2 }]);
    const r = await sandbox.execute("printf '%s' \"$PWD\"");
    assert.equal(r.stdout, dir);
  });

  it('skips lines of the prefix that are not harvest events, even ones that parse as JSON', async () => {
    for (const banner of ['Welcome to the box', 'null', '3']) {
      const dir = tmpdir();
      const prefix = ['sh', '-c', `echo '${banner}'; exec "$@"`, 'sh'];
      const sandbox = new HarvestSandbox({ workingDir: dir, harvest: HARVEST, db: path.join(dir, 'h.db'), exec: prefix });
      const r = await sandbox.execute('echo hi');
      assert.equal(r.stdout, 'hi\n', banner);
      // With no result at all, the line is the reason: an error, never the process ending.
      const quiet = new HarvestSandbox({ workingDir: dir, harvest: '/bin/true', exec: prefix });
      await assert.rejects(quiet.execute('echo hi'), (e) => e instanceof HarvestError && e.message.includes(banner), banner);
    }
  });

  it('raises a HarvestError naming a prefix that cannot start', async () => {
    const broken = new HarvestSandbox({ workingDir: tmpdir(), exec: ['/nonexistent/env'] });
    for (const [name, op] of Object.entries(everyOperation(broken))) {
      await assert.rejects(op(), (e) => e instanceof HarvestError && e.code === undefined && e.exitCode === 127 &&
        e.message === 'cannot start harvest (harvest through /nonexistent/env): No such file or directory', name);
    }
  });

  // Prefixes that do not pass SIGTERM on to harvest: they die of it (or ignore it) and harvest,
  // which holds the pipes, would go on until the command ended.
  const lock = path.join(tmpdir(), 'lock');
  for (const prefix of [
    ['flock', lock],
    ['sh', '-c', '"$@"; exit $?', 'sh'],
    ['unshare', '--fork', '--pid', '--mount-proc'],
  ]) {
    it(`aborts within the grace through ${JSON.stringify(prefix)}, leaving no harvest or command behind`, async (t) => {
      if (!usable(prefix)) {
        t.skip(`${prefix[0]} cannot run here`);
        return;
      }
      const dir = tmpdir();
      const db = path.join(tmpdir(), 'h.db');
      const sandbox = new HarvestSandbox({ workingDir: dir, harvest: HARVEST, db, exec: prefix, label: 'prefix-abort' });
      // A marker in every process's command line: harvest's and sh's argv hold the command, the
      // sleep's its unique duration.
      const mark = `${randomInt(1e9)}`;
      const controller = new AbortController();
      const t0 = Date.now();
      let error;
      try {
        for await (const item of sandbox.executeStreaming(`sleep 60.${mark} & echo started; wait # ${mark}`, { signal: controller.signal })) {
          if (item.type === 'streamChunk') controller.abort();
        }
      } catch (e) {
        error = e;
      }
      const took = Date.now() - t0;
      assert.ok(error instanceof SandboxAbortError, String(error));
      // The documented bound: SIGTERM, SIGKILL 10 s later, then at most 1 s for the pipes.
      assert.ok(took < 11_000, `abort took ${took} ms`);
      assert.deepStrictEqual(await settle(() => pgrep(mark)), []);
    });
  }

  it('stops waiting for pipes held outside the group: SIGKILL 10 s after the abort, then 1 s', async () => {
    const dir = tmpdir();
    const mark = `${randomInt(1e9)}`;
    // The prefix leaves a process in a session of its own holding harvest's stdout and stderr.
    const prefix = ['sh', '-c', `setsid sleep 30.${mark} & exec "$@"`, 'sh'];
    const sandbox = new HarvestSandbox({ workingDir: dir, harvest: HARVEST, db: path.join(tmpdir(), 'h.db'), exec: prefix });
    const controller = new AbortController();
    const t0 = Date.now();
    let error;
    try {
      for await (const item of sandbox.executeStreaming(`sleep 60.${mark} & echo started; wait`, { signal: controller.signal })) {
        if (item.type === 'streamChunk') controller.abort();
      }
    } catch (e) {
      error = e;
    }
    const took = Date.now() - t0;
    const outsider = pgrep(`sleep 30.${mark}`);
    for (const pid of outsider) process.kill(pid, 'SIGKILL');
    assert.ok(error instanceof SandboxAbortError, String(error));
    assert.ok(took >= 10_000 && took < 12_500, `abort took ${took} ms`);
    assert.equal(outsider.length, 1);
    assert.deepStrictEqual(await settle(() => pgrep(`harvest run .*${mark}|sleep 60.${mark}`)), []);
  });

  it('needs an absolute workingDir, and defaults to the remote harvest', () => {
    assert.throws(() => new HarvestSandbox({ workingDir: 'rel', exec: ['env'] }), /absolute/);
    const s = new HarvestSandbox({ workingDir: '/w', exec: ['ssh', 'host'] });
    assert.equal(s.workingDir, '/w');
    assert.equal(s.resolvePath('x/y'), '/w/x/y');
  });
});
