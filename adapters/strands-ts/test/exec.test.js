// The same scenarios with harvest started through a command prefix (env stands in for
// docker exec -i / ssh / kubectl exec), and a prefix that takes one shell-quoted command line.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { HarvestSandbox, HarvestError } from '../dist/index.js';
import { defineSuite, everyOperation } from './suite.js';
import { HARVEST, tmpdir } from './helpers.js';

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

  it('raises a HarvestError naming a prefix that cannot start', async () => {
    const broken = new HarvestSandbox({ workingDir: tmpdir(), exec: ['/nonexistent/env'] });
    for (const [name, op] of Object.entries(everyOperation(broken))) {
      await assert.rejects(op(), (e) => e instanceof HarvestError && e.code === undefined && e.exitCode === 127 &&
        e.message === 'cannot start harvest (harvest through /nonexistent/env): No such file or directory', name);
    }
  });

  it('needs an absolute workingDir, and defaults to the remote harvest', () => {
    assert.throws(() => new HarvestSandbox({ workingDir: 'rel', exec: ['env'] }), /absolute/);
    const s = new HarvestSandbox({ workingDir: '/w', exec: ['ssh', 'host'] });
    assert.equal(s.workingDir, '/w');
    assert.equal(s.resolvePath('x/y'), '/w/x/y');
  });
});
