// The same scenarios with harvest started through a command prefix (env stands in for
// docker exec -i / ssh / kubectl exec), and a prefix that takes one shell-quoted command line.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { HarvestSandbox } from '../dist/index.js';
import { defineSuite } from './suite.js';
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

  it('needs an absolute workingDir, and defaults to the remote harvest', () => {
    assert.throws(() => new HarvestSandbox({ workingDir: 'rel', exec: ['env'] }), /absolute/);
    const s = new HarvestSandbox({ workingDir: '/w', exec: ['ssh', 'host'] });
    assert.equal(s.workingDir, '/w');
    assert.equal(s.resolvePath('x/y'), '/w/x/y');
  });
});
