// An Agent on the harvest sandbox, its tools invoked directly (no model is ever called): the
// SDK's vended shell and fileEditor, and the adapter's harvest_shell and harvest_code.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { Agent } from '@strands-agents/sdk';
import { makeShell } from '@strands-agents/sdk/vended-tools/shell';
import { fileEditor } from '@strands-agents/sdk/vended-tools/file-editor';
import { HarvestSandbox } from '../dist/index.js';
import { HARVEST, GIF, PNG, sdkVersion, tmpdir, u8 } from './helpers.js';

async function agentOn(dir) {
  const sandbox = new HarvestSandbox({ workingDir: dir, harvest: HARVEST, db: path.join(tmpdir(), 'h.db') });
  const agent = new Agent({ sandbox, tools: [makeShell(), fileEditor], printer: false });
  // What the first model call would do: registers the tools the sandbox vends (getTools()).
  await agent.initialize();
  return { sandbox, agent };
}

const text = (result) => result.content.filter((c) => c.type === 'textBlock').map((c) => c.text).join('');
const json = (result) => result.content.find((c) => c.type === 'jsonBlock')?.json;

describe('Agent with a HarvestSandbox', () => {
  it('routes the vended shell tool through harvest', async () => {
    const dir = tmpdir();
    const { agent, sandbox } = await agentOn(dir);
    assert.equal(agent.sandbox, sandbox);
    const r = await agent.tool.shell.invoke({ command: 'pwd; echo err >&2; exit 4' });
    assert.equal(r.status, 'success');
    // The tool gives the exit code and a timeout's partial output from SDK 1.19 on.
    const recent = sdkVersion() === '1.19.0';
    const expected = { output: `${dir}\n`, error: 'err\n', ...(recent ? { exit_code: 4 } : {}) };
    assert.deepStrictEqual(json(r), expected);
    const t = await agent.tool.shell.invoke({ command: 'echo partial; sleep 30', timeout: 1 });
    assert.equal(t.status, 'error');
    assert.match(text(t), /timed out after 1 seconds/);
    if (recent) assert.match(text(t), /"output":"partial\\n"/);
  });

  it('routes the vended fileEditor tool through harvest', async () => {
    const dir = tmpdir();
    const { agent } = await agentOn(dir);
    const file = path.join(dir, 'notes/todo.txt');
    const created = await agent.tool.fileEditor.invoke({ command: 'create', path: file, file_text: 'alpha\nbeta\n' });
    assert.equal(created.status, 'success', text(created));
    assert.equal(fs.readFileSync(file, 'utf8'), 'alpha\nbeta\n');
    const replaced = await agent.tool.fileEditor.invoke({ command: 'str_replace', path: file, old_str: 'beta', new_str: 'gamma' });
    assert.equal(replaced.status, 'success', text(replaced));
    assert.equal(fs.readFileSync(file, 'utf8'), 'alpha\ngamma\n');
    const inserted = await agent.tool.fileEditor.invoke({ command: 'insert', path: file, insert_line: 0, new_str: 'zero' });
    assert.equal(inserted.status, 'success', text(inserted));
    assert.equal(fs.readFileSync(file, 'utf8'), 'zero\nalpha\ngamma\n');
    const viewed = await agent.tool.fileEditor.invoke({ command: 'view', path: file });
    assert.equal(viewed.status, 'success', text(viewed));
    assert.match(text(viewed), /gamma/);
    const listing = await agent.tool.fileEditor.invoke({ command: 'view', path: dir });
    assert.equal(listing.status, 'success', text(listing));
    assert.match(text(listing), /todo\.txt/);
    // Missing paths: the tool relies on listFiles raising SandboxPathNotFoundError.
    const missing = await agent.tool.fileEditor.invoke({ command: 'view', path: path.join(dir, 'nope/x.txt') });
    assert.equal(missing.status, 'error');
    assert.match(text(missing), /does not exist/);
  });

  it("vends harvest_shell and harvest_code, whose results carry the produced files", async () => {
    const dir = tmpdir();
    const src = tmpdir();
    fs.writeFileSync(path.join(src, 'p.png'), PNG);
    fs.writeFileSync(path.join(src, 'g.gif'), GIF);
    const { agent, sandbox } = await agentOn(dir);
    assert.deepStrictEqual(sandbox.getTools().map((t) => t.name), ['harvest_shell', 'harvest_code']);
    const r = await agent.tool.harvest_shell.invoke({ command: `cp ${src}/p.png plot.png; cp ${src}/g.gif g.gif; printf 'a,b\\n' > t.csv; echo done` });
    assert.equal(r.status, 'success', text(r));
    const summary = JSON.parse(text(r));
    assert.equal(summary.exit_code, 0);
    assert.equal(summary.output, 'done\n');
    assert.deepStrictEqual(summary.output_files, [
      { name: 'g.gif', path: 'g.gif', mime_type: 'image/gif', size: GIF.length, shown: true },
      { name: 'plot.png', path: 'plot.png', mime_type: 'image/png', size: PNG.length, shown: true },
      { name: 't.csv', path: 't.csv', mime_type: 'text/csv', size: 4, shown: false },
    ]);
    const images = r.content.filter((c) => c.type === 'imageBlock');
    assert.deepStrictEqual(images.map((i) => i.format), ['gif', 'png']);
    assert.deepStrictEqual(images[0].source.bytes, u8(GIF));
    assert.deepStrictEqual(images[1].source.bytes, u8(PNG));

    // Named as images, but not images: a text file (typed image/png by its name) and a PNG
    // signature alone are described, never sent as image blocks a model would refuse.
    const fake = await agent.tool.harvest_shell.invoke({
      command: "echo 'hello world' > notes.png; head -c 8 plot.png > sig.png; rm g.gif plot.png t.csv",
    });
    assert.equal(fake.status, 'success', text(fake));
    const fs2 = JSON.parse(text(fake)).output_files;
    assert.deepStrictEqual(fs2.map((f) => [f.name, f.mime_type, f.shown]), [
      ['notes.png', 'image/png', false],
      ['sig.png', 'image/png', false],
    ]);
    assert.equal(fake.content.filter((c) => c.type === 'imageBlock').length, 0);

    const c = await agent.tool.harvest_code.invoke({ language: 'python3', code: "print('hi'); open('o.txt','w').write('x')" });
    assert.equal(c.status, 'success', text(c));
    const cs = JSON.parse(text(c));
    assert.equal(cs.output, 'hi\n');
    assert.deepStrictEqual(cs.output_files.map((f) => [f.name, f.mime_type, f.size]), [['o.txt', 'text/plain', 1]]);
    assert.equal(c.content.length, 1);

    const t = await agent.tool.harvest_shell.invoke({ command: 'echo partial; sleep 30', timeout: 1 });
    assert.equal(t.status, 'error');
    assert.match(text(t), /timed out/);
    assert.match(text(t), /"output":"partial\\n"/);
  });

  it('refuses a tool input the model got wrong, naming the field, and runs nothing', async () => {
    const dir = tmpdir();
    const { agent } = await agentOn(dir);
    const wrong = [
      ['harvest_shell', {}, /'command' must be a string/],
      ['harvest_shell', { command: 'touch ran', timeout: 'abc' }, /'timeout' must be a positive number/],
      ['harvest_shell', { command: 'touch ran', timeout: 0 }, /'timeout' must be a positive number/],
      ['harvest_shell', { command: 'touch ran', timeout: -1 }, /'timeout' must be a positive number/],
      ['harvest_code', { code: 'open("ran", "w")' }, /'language' must be a non-empty string/],
      ['harvest_code', { code: 'open("ran", "w")', language: '' }, /'language' must be a non-empty string/],
      ['harvest_code', { language: 'python3' }, /'code' must be a string/],
    ];
    for (const [tool, input, why] of wrong) {
      const r = await agent.tool[tool].invoke(input);
      assert.equal(r.status, 'error', `${tool} ${JSON.stringify(input)}: ${text(r)}`);
      assert.match(text(r), why);
    }
    assert.deepStrictEqual(fs.readdirSync(dir), []);
    const ok = await agent.tool.harvest_shell.invoke({ command: 'echo fine', timeout: 5 });
    assert.equal(ok.status, 'success', text(ok));
  });
});
