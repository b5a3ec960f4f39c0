// The sandbox scenarios, run once with harvest started directly and once through an exec
// prefix (sandbox.test.js, exec.test.js).
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { createHash, randomBytes } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { SandboxAbortError, SandboxPathNotFoundError, SandboxTimeoutError } from '@strands-agents/sdk';
import { HarvestSandbox, HarvestError, limits } from '../dist/index.js';
import { HARVEST, GIF, PNG, alive, groupMembers, localEnvironment, settle, tmpdir, u8 } from './helpers.js';

/** Byte order of names, as harvest sorts them (UTF-8 order is code point order). */
function byBytes(a, b) {
  return Buffer.compare(Buffer.from(a.name), Buffer.from(b.name));
}

async function collect(iterable) {
  const items = [];
  for await (const item of iterable) items.push(item);
  return items;
}

/** Each operation of the sandbox once. */
export function everyOperation(sandbox) {
  return {
    execute: () => sandbox.execute('true'),
    executeStreaming: () => collect(sandbox.executeStreaming('true')),
    executeCode: () => sandbox.executeCode('pass', 'python3'),
    executeCodeStreaming: () => collect(sandbox.executeCodeStreaming('pass', 'python3')),
    readFile: () => sandbox.readFile('f'),
    readText: () => sandbox.readText('f'),
    writeFile: () => sandbox.writeFile('f', new Uint8Array([120])),
    writeText: () => sandbox.writeText('f', 'x'),
    removeFile: () => sandbox.removeFile('f'),
    removeTree: () => sandbox.removeTree('d'),
    listFiles: () => sandbox.listFiles('.'),
  };
}

/**
 * @param {string} label
 * @param {string[] | undefined} exec  the prefix harvest is started through
 */
export function defineSuite(label, exec) {
  const make = (workingDir, extra = {}) => {
    const db = path.join(tmpdir(), 'harvest.db');
    return new HarvestSandbox({ workingDir, harvest: HARVEST, db, exec, ...extra });
  };

  describe(`HarvestSandbox (${label})`, () => {
    it('lists a hostile directory exactly as the SDK local environment does', async () => {
      const dir = tmpdir();
      const names = ['a.txt', 'B', 'space name', 'new\nline', 'tab\tname', 'ünïcödé', '日本語', '🙂', '-dash', '.hidden', '\\back', "quo'te\"", 'empty'];
      for (const [i, n] of names.entries()) fs.writeFileSync(path.join(dir, n), 'x'.repeat(i));
      fs.mkdirSync(path.join(dir, 'sub'));
      fs.symlinkSync('sub', path.join(dir, 'link-to-dir'));
      fs.symlinkSync('a.txt', path.join(dir, 'link-to-file'));
      fs.symlinkSync('nowhere', path.join(dir, 'dangling'));
      fs.symlinkSync('loop', path.join(dir, 'loop'));
      execFileSync('mkfifo', [path.join(dir, 'fifo')]);
      // A name that is not UTF-8: harvest writes the byte 0xFF as \udcff (Node would give U+FFFD).
      fs.writeFileSync(Buffer.from([...Buffer.from(dir + '/bad'), 0xff, 0x2e, 0x74]), 'abc');

      const sandbox = make(dir);
      const ours = await sandbox.listFiles(dir);
      const reference = await (await localEnvironment()).listFiles(dir);

      const valid = (e) => !/[\ud800-\udfff]/.test(e.name.replace(/[\ud800-\udbff][\udc00-\udfff]/g, ''));
      const lossy = (e) => !e.name.includes('\ufffd');
      assert.deepStrictEqual(ours.filter(valid), reference.filter(lossy).sort(byBytes));
      assert.deepStrictEqual(ours.filter((e) => !valid(e)), [{ name: 'bad\udcff.t', isDir: false, size: 3 }]);
      // harvest's order: bytewise.
      assert.deepStrictEqual(ours.map((e) => e.name), [...ours].sort(byBytes).map((e) => e.name));
      // Unknown is absent, not null: the keys are not there at all.
      const dangling = ours.find((e) => e.name === 'dangling');
      assert.deepStrictEqual(Object.keys(dangling), ['name']);
      assert.deepStrictEqual(ours.find((e) => e.name === 'link-to-dir'), { name: 'link-to-dir', isDir: true, size: fs.statSync(path.join(dir, 'sub')).size });
      // Relative paths are relative to workingDir.
      assert.deepStrictEqual(await sandbox.listFiles('.'), ours);
      assert.deepStrictEqual(await sandbox.listFiles('sub'), []);
    });

    it('streams chunks in order, with exact text, before the command ends', async () => {
      const dir = tmpdir();
      const sandbox = make(dir);
      // The command cannot end before the test has seen its first chunks: it waits for files the
      // test creates when it sees them. (The timeout only bounds a broken adapter.)
      const cmd =
        "printf 'first \\303\\251\\346\\227\\245\\360\\237\\231\\202 \\377 \\000\\r\\t\\n'; " +
        'while [ ! -e go1 ]; do sleep 0.02; done; ' +
        "printf 'second\\n' >&2; " +
        'while [ ! -e go2 ]; do sleep 0.02; done; ' +
        "printf 'third'";
      const seen = [];
      for await (const item of sandbox.executeStreaming(cmd, { timeout: 120 })) {
        seen.push(item);
        if (item.type === 'streamChunk' && item.data.includes('first')) fs.writeFileSync(path.join(dir, 'go1'), '');
        if (item.type === 'streamChunk' && item.data.includes('second')) fs.writeFileSync(path.join(dir, 'go2'), '');
      }
      // The byte 0xFF, not UTF-8, as U+FFFD: the SDK's own sandboxes decode output so, and a lone
      // surrogate (harvest's escape of it) would make the string ill-formed for a model's API.
      const first = 'first é日🙂 \ufffd \u0000\r\t\n';
      const chunks = seen.slice(0, -1);
      assert.ok(chunks.every((c) => c.type === 'streamChunk'));
      assert.equal(chunks.filter((c) => c.streamType === 'stdout').map((c) => c.data).join(''), first + 'third');
      assert.deepStrictEqual(chunks.filter((c) => c.streamType === 'stderr').map((c) => c.data), ['second\n']);
      // Order: all of `first` before `second`, `second` before `third`.
      const order = chunks.map((c) => (c.data.includes('third') ? 3 : c.data.includes('second') ? 2 : 1));
      assert.deepStrictEqual(order, [...order].sort());
      const result = seen.at(-1);
      assert.equal(result.type, 'executionResult');
      assert.equal(result.exitCode, 0);
      assert.equal(result.stdout, first + 'third');
      assert.equal(result.stderr, 'second\n');
      assert.equal(result.timedOut, false);
      assert.equal(typeof result.runId, 'number');
      // go1 and go2 were made by the test, during the run: they are outputs too.
      assert.deepStrictEqual(result.outputFiles.map((f) => f.name).sort(), ['go1', 'go2']);
    });

    it('returns the files a command produced, byte-equal, with their MIME types', async () => {
      const dir = tmpdir();
      const src = tmpdir();
      fs.writeFileSync(path.join(src, 'p.png'), PNG);
      fs.writeFileSync(path.join(src, 'g.gif'), GIF);
      fs.writeFileSync(path.join(dir, 'old.txt'), 'was here');
      const sandbox = make(dir);
      const result = await sandbox.execute(
        `cp '${src}/p.png' plot.png && mkdir figs && cp '${src}/g.gif' figs/anim.gif && ` +
          "printf 'x,y\\n1,2\\n' > table.csv && printf '{\"a\": 1}\\n' > figs/data.json && printf '\\001\\002\\003\\377\\376\\000\\200\\201%.0s' $(seq 512) > blob.bin",
      );
      assert.equal(result.exitCode, 0);
      const byPath = Object.fromEntries(result.outputFiles.map((f) => [f.path, f]));
      assert.deepStrictEqual(Object.keys(byPath).sort(), ['blob.bin', 'figs/anim.gif', 'figs/data.json', 'plot.png', 'table.csv']);
      const types = { 'plot.png': 'image/png', 'figs/anim.gif': 'image/gif', 'table.csv': 'text/csv', 'figs/data.json': 'application/json', 'blob.bin': 'application/octet-stream' };
      for (const [p, f] of Object.entries(byPath)) {
        const disk = fs.readFileSync(path.join(dir, p));
        assert.equal(f.content.constructor, Uint8Array, p);
        assert.deepStrictEqual(f.content, u8(disk), p);
        assert.equal(f.mimeType, types[p], p);
        assert.equal(f.name, path.basename(p));
        assert.equal(f.size, disk.length);
        assert.equal(f.sha256, createHash('sha256').update(disk).digest('hex'));
      }
      assert.deepStrictEqual(result.skipped, []);
    });

    it('reports what the limits left out in skipped', async () => {
      const dir = tmpdir();
      const sandbox = make(dir, { collect: { maxFileBytes: 10 } });
      const result = await sandbox.execute("printf 'small' > a.txt; printf '0123456789abcdef' > big.txt");
      assert.deepStrictEqual(result.outputFiles.map((f) => f.name), ['a.txt']);
      assert.deepStrictEqual(result.skipped, [{ path: 'big.txt', reason: 'too_large', size: 16 }]);
    });

    it('executes code through an interpreter', async () => {
      const dir = tmpdir();
      const sandbox = make(dir);
      const r = await sandbox.executeCode("import sys\nprint(6*7)\nsys.stderr.write('é')\nopen('out.txt','w').write('hi')\n", 'python3');
      assert.equal(r.exitCode, 0);
      assert.equal(r.stdout, '42\n');
      assert.equal(r.stderr, 'é');
      assert.deepStrictEqual(r.outputFiles.map((f) => [f.name, f.mimeType]), [['out.txt', 'text/plain']]);
      const sh = await collect(sandbox.executeCodeStreaming('echo "$0"; exit 3', 'sh'));
      assert.equal(sh.at(-1).exitCode, 3);
      assert.equal(sh.at(-1).stdout, 'sh\n');
      const missing = await sandbox.executeCode('x', 'no-such-interpreter');
      assert.equal(missing.exitCode, 127);
      await assert.rejects(sandbox.executeCode('x', 'python3; rm -rf /'), /invalid characters/);
    });

    it('honours env and cwd', async () => {
      const dir = tmpdir();
      fs.mkdirSync(path.join(dir, 'sub'));
      const sandbox = make(dir);
      const env = await sandbox.execute('printf "%s|%s" "$FOO" "$BAR"', { env: { FOO: "a b$c'd", BAR: '' } });
      assert.equal(env.stdout, "a b$c'd|");
      await assert.rejects(sandbox.execute('true', { env: { 'A=B': 'x' } }), /Invalid environment variable name/);
      assert.equal((await sandbox.execute('pwd')).stdout, `${dir}\n`);
      const sub = await sandbox.execute('pwd; printf x > f.txt', { cwd: 'sub' });
      assert.equal(sub.stdout, `${dir}/sub\n`);
      assert.deepStrictEqual(sub.outputFiles.map((f) => f.path), ['f.txt']);
      assert.equal((await sandbox.execute('pwd', { cwd: path.join(dir, 'sub') })).stdout, `${dir}/sub\n`);
      const code = await sandbox.executeCode('import os; print(os.environ["X"], os.getcwd())', 'python3', { env: { X: 'y' }, cwd: 'sub' });
      assert.equal(code.stdout, `y ${dir}/sub\n`);
    });

    it('times out at once, running nothing, when the timeout has elapsed already (0, negative, NaN)', async () => {
      const dir = tmpdir();
      const sandbox = make(dir);
      for (const timeout of [0, -1, NaN]) {
        const err = await sandbox.execute('touch ran', { timeout }).catch((e) => e);
        assert.ok(err instanceof SandboxTimeoutError, `${timeout}: ${err}`);
        await assert.rejects(sandbox.executeCode("open('ran', 'w')", 'python3', { timeout }), SandboxTimeoutError);
      }
      assert.equal(fs.existsSync(path.join(dir, 'ran')), false);
    });

    it('times out with the partial output after the chunks, and ends the process group', async () => {
      const dir = tmpdir();
      const sandbox = make(dir);
      const seen = [];
      let error;
      try {
        for await (const item of sandbox.executeStreaming('sleep 300 & echo "$$ $!"; wait', { timeout: 1 })) seen.push(item);
      } catch (e) {
        error = e;
      }
      assert.ok(error instanceof SandboxTimeoutError, String(error));
      assert.equal(seen.length, 1);
      assert.equal(seen[0].type, 'streamChunk');
      assert.equal(error.stdout, seen[0].data);
      assert.equal(error.stderr, '');
      const [shell, sleeper] = seen[0].data.trim().split(' ').map(Number);
      assert.deepStrictEqual(await settle(() => [shell, sleeper].filter(alive)), []);
      assert.deepStrictEqual(await settle(() => groupMembers(shell)), []);
    });

    it('aborts on the signal, ends the process group and still records the run', async () => {
      const dir = tmpdir();
      const db = path.join(tmpdir(), 'h.db');
      const sandbox = make(dir, { db, label: 'aborted-run' });
      const controller = new AbortController();
      let pids;
      let error;
      try {
        for await (const item of sandbox.executeStreaming('sleep 300 & echo "$$ $!"; wait', { signal: controller.signal })) {
          if (item.type === 'streamChunk') {
            pids = item.data.trim().split(' ').map(Number);
            controller.abort();
          }
        }
      } catch (e) {
        error = e;
      }
      assert.ok(error instanceof SandboxAbortError, String(error));
      assert.deepStrictEqual(await settle(() => pids.filter(alive)), []);
      assert.deepStrictEqual(await settle(() => groupMembers(pids[0])), []);
      const runs = JSON.parse(execFileSync(HARVEST, ['history', 'runs', '--db', db, '--label', 'aborted-run']));
      assert.equal(runs.length, 1);
      assert.deepStrictEqual(runs[0].command, ['/bin/sh', '-c', 'sleep 300 & echo "$$ $!"; wait']);
      assert.notEqual(runs[0].exit_code, 0);

      // Already aborted: nothing runs.
      const gone = new AbortController();
      gone.abort();
      await assert.rejects(sandbox.execute('touch ran', { signal: gone.signal }), SandboxAbortError);
      assert.equal(fs.existsSync(path.join(dir, 'ran')), false);
    });

    it('round-trips a 100 MiB binary file through writeFile and readFile', async () => {
      const dir = tmpdir();
      const sandbox = make(dir);
      const data = u8(randomBytes(100 * 1024 * 1024));
      await sandbox.writeFile('big/blob.bin', data);
      const disk = fs.readFileSync(path.join(dir, 'big/blob.bin'));
      assert.equal(disk.length, data.length);
      assert.ok(Buffer.from(data.buffer, data.byteOffset, data.byteLength).equals(disk));
      const back = await sandbox.readFile(path.join(dir, 'big/blob.bin'));
      assert.equal(back.constructor, Uint8Array);
      assert.equal(back.byteLength, data.byteLength);
      assert.ok(Buffer.from(back.buffer, back.byteOffset, back.byteLength).equals(disk));
    });

    it('writes text, creates parent directories, replaces files whole', async () => {
      const dir = tmpdir();
      const sandbox = make(dir);
      await sandbox.writeText('a/b/c/d.txt', 'héllo\n');
      assert.equal(fs.readFileSync(path.join(dir, 'a/b/c/d.txt'), 'utf8'), 'héllo\n');
      assert.equal(await sandbox.readText('a/b/c/d.txt'), 'héllo\n');
      await sandbox.writeText('a/b/c/d.txt', 'x');
      assert.equal(fs.readFileSync(path.join(dir, 'a/b/c/d.txt'), 'utf8'), 'x');
      await sandbox.writeFile('empty', new Uint8Array(0));
      assert.equal(fs.statSync(path.join(dir, 'empty')).size, 0);
      assert.deepStrictEqual(await sandbox.readFile('empty'), new Uint8Array(0));
      await sandbox.writeFile('run.sh', new TextEncoder().encode('#!/bin/sh\necho ran\n'), 0o755);
      assert.equal(fs.statSync(path.join(dir, 'run.sh')).mode & 0o777, 0o755);
      // No temporary file is left beside them.
      assert.deepStrictEqual(fs.readdirSync(path.join(dir, 'a/b/c')), ['d.txt']);
    });

    it('removes files and symlinks, and trees only when asked', async () => {
      const dir = tmpdir();
      const sandbox = make(dir);
      fs.writeFileSync(path.join(dir, 'f'), 'x');
      fs.mkdirSync(path.join(dir, 'd/e'), { recursive: true });
      fs.writeFileSync(path.join(dir, 'd/e/g'), 'y');
      fs.symlinkSync('d', path.join(dir, 'link'));
      await sandbox.removeFile('f');
      assert.equal(fs.existsSync(path.join(dir, 'f')), false);
      await sandbox.removeFile('link');
      assert.equal(fs.existsSync(path.join(dir, 'link')), false);
      assert.equal(fs.existsSync(path.join(dir, 'd/e/g')), true);
      await assert.rejects(sandbox.removeFile('d'), HarvestError);
      assert.equal(fs.existsSync(path.join(dir, 'd/e/g')), true);
      await sandbox.removeTree('d');
      assert.equal(fs.existsSync(path.join(dir, 'd')), false);
    });

    it("refuses to remove '.', '..' and '' instead of the working directory or its parent", async () => {
      const dir = tmpdir();
      const box = path.join(dir, 'box');
      fs.mkdirSync(path.join(box, 'sub'), { recursive: true });
      fs.mkdirSync(path.join(dir, 'sibling'));
      fs.writeFileSync(path.join(dir, 'sibling', 'data'), 'precious');
      const sandbox = make(box);
      for (const p of ['..', '.', 'sub/..', 'sub/.']) {
        await assert.rejects(sandbox.removeTree(p), (e) => e instanceof HarvestError && e.exitCode === 2, p);
        await assert.rejects(sandbox.removeFile(p), HarvestError, p);
      }
      for (const op of ['removeTree', 'removeFile']) {
        const err = await sandbox[op]('').catch((e) => e);
        assert.ok(err instanceof HarvestError && err.exitCode === 3 && err.code === 'ENOENT', `${op}(''): ${err}`);
      }
      assert.equal(fs.readFileSync(path.join(dir, 'sibling', 'data'), 'utf8'), 'precious');
      assert.ok(fs.statSync(path.join(box, 'sub')).isDirectory());
      assert.equal(sandbox.resolvePath('a/../b'), `${box}/a/../b`);
      assert.equal(sandbox.resolvePath(''), box);
    });

    it('raises the SDK local environment errors for missing paths', async () => {
      const dir = tmpdir();
      fs.writeFileSync(path.join(dir, 'file'), 'x');
      const sandbox = make(dir);
      const reference = await localEnvironment();
      for (const p of ['missing', 'missing/child', 'file']) {
        await assert.rejects(sandbox.listFiles(p), SandboxPathNotFoundError, p);
        await assert.rejects(sandbox.listFiles(path.join(dir, p)), SandboxPathNotFoundError, p);
        await assert.rejects(reference.listFiles(path.join(dir, p)), SandboxPathNotFoundError, p);
      }
      const err = await sandbox.listFiles('missing').catch((e) => e);
      assert.equal(err.message, 'Path not found: missing');
      for (const op of ['readFile', 'removeFile']) {
        for (const p of ['missing', 'missing/child']) {
          const ours = await sandbox[op](p).catch((e) => e);
          const theirs = await reference[op](path.join(dir, p)).catch((e) => e);
          assert.ok(ours instanceof HarvestError, `${op} ${p}: ${ours}`);
          assert.equal(ours.code, 'ENOENT', `${op} ${p}`);
          assert.equal(ours.exitCode, 3);
          assert.match(ours.message, new RegExp(p));
          assert.equal(theirs.code, 'ENOENT');
        }
      }
      // A cwd that does not exist: harvest refuses to run, with the reason.
      await assert.rejects(sandbox.execute('true', { cwd: 'missing' }), (e) => e instanceof HarvestError && /missing/.test(e.message));
    });

    for (const [kind, why, status] of [
      ['missing', 'No such file or directory', 127],
      ['not executable', 'Permission denied', 126],
      ['under a file', 'Not a directory', 126],
    ]) {
      it(`raises a HarvestError naming a harvest that cannot start (${kind}), never ENOENT`, async () => {
        const dir = tmpdir();
        fs.writeFileSync(path.join(dir, 'f'), 'x');
        let harvest = '/nonexistent/harvest';
        if (kind !== 'missing') {
          harvest = path.join(dir, 'harvest');
          fs.writeFileSync(harvest, '#!/bin/sh\n', { mode: 0o644 });
          if (kind === 'under a file') harvest += '/harvest';
        }
        const what = exec ? `${harvest} through ${exec[0]}` : harvest;
        const broken = new HarvestSandbox({ workingDir: dir, harvest, exec });
        for (const [name, op] of Object.entries(everyOperation(broken))) {
          const err = await op().catch((e) => e);
          assert.ok(err instanceof HarvestError, `${name}: ${err}`);
          assert.ok(err.message.startsWith(`cannot start harvest (${what}): `), `${name}: ${err.message}`);
          assert.ok(err.message.includes(why), `${name}: ${err.message}`);
          assert.equal(err.code, undefined, name);
          assert.equal(err.exitCode, status, name);
        }
        assert.equal(fs.readFileSync(path.join(dir, 'f'), 'utf8'), 'x');
      });
    }

    it("raises harvest's own failure after the command ran (exit 125) with its reason and the result", async () => {
      const dir = tmpdir();
      // A --db that is not a SQLite database: the command runs, but what it produced cannot be
      // collected (harvest prints a result without the files and exits 125).
      const db = path.join(tmpdir(), 'garbage.db');
      fs.writeFileSync(db, Buffer.alloc(8192, 7));
      const sandbox = make(dir, { db, collect: { noHistory: true } });
      const err = await sandbox.execute('echo data > report.csv; echo done').catch((e) => e);
      assert.ok(err instanceof HarvestError, String(err));
      assert.equal(err.exitCode, 125);
      assert.match(err.message, /^harvest: collecting the produced files: .*garbage\.db: not a SQLite database$/);
      assert.equal(err.result.type, 'executionResult');
      assert.equal(err.result.exitCode, 0);
      assert.equal(err.result.stdout, 'done\n');
      assert.deepStrictEqual(err.result.outputFiles, []);
      assert.ok(fs.existsSync(path.join(dir, 'report.csv')));
      // Streaming: the chunks first, then the error instead of the result.
      const seen = [];
      const streamed = await (async () => {
        for await (const item of sandbox.executeStreaming('echo again > b.csv; echo chunk')) seen.push(item);
      })().catch((e) => e);
      assert.ok(streamed instanceof HarvestError, String(streamed));
      assert.equal(streamed.exitCode, 125);
      assert.deepStrictEqual(seen.map((c) => [c.type, c.data]), [['streamChunk', 'chunk\n']]);
      assert.equal(streamed.result.stdout, 'chunk\n');
      // A command's own exit status 125 is its result, not harvest's failure.
      const own = await make(dir).execute('echo x > c.txt; exit 125');
      assert.equal(own.exitCode, 125);
      assert.deepStrictEqual(own.outputFiles.map((f) => f.name), ['c.txt']);
    });

    it('refuses a path that is not valid UTF-8 instead of acting on another file', async () => {
      const dir = tmpdir();
      // r\xe9sum\xe9.txt (Latin-1 bytes), and a different file named with U+FFFD, which is what
      // Node would turn the lone surrogates of the first name into.
      fs.writeFileSync(Buffer.from(`${dir}/r\xe9sum\xe9.txt`, 'latin1'), 'latin-1 name\n');
      fs.writeFileSync(`${dir}/r\ufffdsum\ufffd.txt`, 'another file\n');
      fs.mkdirSync(Buffer.from(`${dir}/d\xff`, 'latin1'));
      const sandbox = make(dir);
      const names = (await sandbox.listFiles('.')).map((e) => e.name);
      const latin = names.find((n) => n.includes('\udce9'));
      assert.equal(latin, 'r\udce9sum\udce9.txt');
      const refused = (e) =>
        e instanceof TypeError && e.code === 'ERR_INVALID_ARG_VALUE' && /is not valid UTF-8/.test(e.message) &&
        /cannot be passed as a process argument from Node/.test(e.message);
      await assert.rejects(sandbox.readFile(latin), refused);
      await assert.rejects(sandbox.readText(path.join(dir, latin)), refused);
      await assert.rejects(sandbox.writeFile(latin, new Uint8Array([1])), refused);
      await assert.rejects(sandbox.removeFile(latin), refused);
      await assert.rejects(sandbox.listFiles('d\udcff'), refused);
      await assert.rejects(sandbox.removeTree('d\udcff'), refused);
      await assert.rejects(sandbox.execute('touch ran', { cwd: 'd\udcff' }), refused);
      // Neither file was touched.
      assert.equal(fs.readFileSync(`${dir}/r\ufffdsum\ufffd.txt`, 'utf8'), 'another file\n');
      assert.equal(fs.readFileSync(Buffer.from(`${dir}/r\xe9sum\xe9.txt`, 'latin1'), 'utf8'), 'latin-1 name\n');
      assert.equal(fs.readdirSync(Buffer.from(`${dir}/d\xff`, 'latin1')).length, 0);
      // A well-formed pair is UTF-8 as usual.
      await sandbox.writeText('🙂.txt', 'ok');
      assert.equal(await sandbox.readText('🙂.txt'), 'ok');
    });

    it('returns bytes that own their ArrayBuffer, not views into the shared Buffer pool', async () => {
      const dir = tmpdir();
      fs.writeFileSync(path.join(dir, 'secret.txt'), 'API_KEY=sk-very-secret\n');
      fs.writeFileSync(path.join(dir, 'public.txt'), 'hello\n');
      const sandbox = make(dir);
      const owns = (u) => u.constructor === Uint8Array && u.byteOffset === 0 && u.buffer.byteLength === u.byteLength;
      await sandbox.readFile('secret.txt');
      const pub = await sandbox.readFile('public.txt');
      assert.ok(owns(pub), `${pub.byteOffset} ${pub.buffer.byteLength}`);
      assert.equal(Buffer.from(pub.buffer).toString(), 'hello\n');
      assert.ok(owns(await sandbox.readFile(path.join(dir, 'secret.txt'))));
      const r = await sandbox.execute('cat secret.txt; echo tiny > t.txt; echo more > u.txt');
      assert.equal(r.outputFiles.length, 2);
      for (const f of r.outputFiles) {
        assert.ok(owns(f.content), f.name);
        assert.ok(!Buffer.from(f.content.buffer).toString('latin1').includes('sk-very-secret'), f.name);
      }
    });

    it('raises an error the caller catches for a file or result too large for one Buffer or string', async () => {
      // The real limits are 2 GiB and V8's string length; lowered here, the paths are the same:
      // past them a Buffer.concat or toString failing inside a stream handler would end the process.
      const dir = tmpdir();
      fs.writeFileSync(path.join(dir, 'big.txt'), 'y'.repeat(5000));
      fs.writeFileSync(path.join(dir, 'fits.txt'), 'z'.repeat(1000));
      const sandbox = make(dir);
      const saved = { ...limits };
      try {
        limits.readBytes = 1000;
        limits.lineBytes = 4096;
        const err = await sandbox.readFile('big.txt').catch((e) => e);
        assert.ok(err instanceof RangeError, String(err));
        assert.equal(err.code, 'ERR_FS_FILE_TOO_LARGE');
        assert.equal((await sandbox.readFile('fits.txt')).byteLength, 1000);
        // A produced file of 8,000 bytes: its result line is over 4,096; the chunk lines are not.
        const run = await sandbox.execute("head -c 8000 /dev/zero | tr '\\0' x > out.txt; echo hi").catch((e) => e);
        assert.ok(run instanceof HarvestError, String(run));
        assert.match(run.message, /the result is \d+ bytes of JSON, more than one JavaScript string holds \(4096\)/);
        limits.lineBytes = saved.lineBytes;
        const ok = await sandbox.execute("head -c 8000 /dev/zero | tr '\\0' x > out.txt; echo hi");
        assert.equal(ok.stdout, 'hi\n');
        assert.equal(ok.outputFiles[0].content.byteLength, 8000);
      } finally {
        Object.assign(limits, saved);
      }
    });

    it('reports a harvest killed by any signal as 128+N', async () => {
      const dir = tmpdir();
      for (const [sig, status] of [['ABRT', 134], ['SEGV', 139], ['USR1', 138], ['TERM', 143]]) {
        const harvest = path.join(dir, `die-${sig}.sh`);
        fs.writeFileSync(harvest, `#!/bin/sh\nkill -${sig} $$\n`, { mode: 0o755 });
        const sandbox = new HarvestSandbox({ workingDir: dir, harvest, exec });
        for (const [name, op] of [['listFiles', () => sandbox.listFiles('.')], ['readFile', () => sandbox.readFile('x')], ['execute', () => sandbox.execute('true')]]) {
          const err = await op().catch((e) => e);
          assert.ok(err instanceof HarvestError, `${sig} ${name}: ${err}`);
          assert.equal(err.exitCode, status, `${sig} ${name}`);
        }
      }
    });

    it('runs 16 executions at once', async () => {
      const dir = tmpdir();
      const sandbox = make(dir);
      for (let i = 0; i < 16; i++) fs.mkdirSync(path.join(dir, `d${i}`));
      const results = await Promise.all(
        Array.from({ length: 16 }, (_, i) => sandbox.execute(`echo ${i}; printf ${i} > f${i}.txt`, { cwd: `d${i}` })),
      );
      results.forEach((r, i) => {
        assert.equal(r.exitCode, 0);
        assert.equal(r.stdout, `${i}\n`);
        assert.deepStrictEqual(r.outputFiles.map((f) => [f.name, new TextDecoder().decode(f.content)]), [[`f${i}.txt`, String(i)]]);
      });
      assert.equal(new Set(results.map((r) => r.runId)).size, 16);
    });
  });
}
