// harvest's HTML page in a real browser: Debian's chromium driven by playwright-core.
// usage: node page_test.mjs HARVEST_BINARY OUTPUT_DIR
// Makes a run that produces images, an SVG and an HTML file with scripts, a CSV, Markdown, a
// PDF, a binary and files with hostile names; renders `harvest run --format html` and
// `harvest history show ID --format html`; checks every image decodes, no script ran, the
// CSV table's cells, and that the page asked for nothing but data: URIs; saves screenshots
// at desktop and phone widths, light and dark, under OUTPUT_DIR/screenshots. Exits 1 on any
// failed check.
import { chromium } from 'playwright-core';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL, fileURLToPath } from 'node:url';

const [harvest, outDir] = process.argv.slice(2);
if (!harvest || !outDir) {
  console.error('usage: node page_test.mjs HARVEST_BINARY OUTPUT_DIR');
  process.exit(2);
}
const here = path.dirname(fileURLToPath(import.meta.url));
const failures = [];
function check(ok, what) {
  if (!ok) failures.push(what);
  console.log(`${ok ? 'ok  ' : 'FAIL'} ${what}`);
}

const work = fs.mkdtempSync(path.join(os.tmpdir(), 'harvest-page-'));
const tree = path.join(work, 'out');
fs.mkdirSync(tree);
const env = { ...process.env, HARVEST_DB: path.join(work, 'harvest.db') };
const runPage = execFileSync(harvest,
  ['run', '--format', 'html', '--label', 'plots <&> "nightly"', '--dir', tree, '--',
    '/usr/bin/python3', path.join(here, 'gen.py')],
  { env, maxBuffer: 1 << 28 });
const runs = JSON.parse(execFileSync(harvest, ['history', 'runs'], { env }));
const showPage = execFileSync(harvest,
  ['history', 'show', String(runs[0].run_id), '--format', 'html'], { env, maxBuffer: 1 << 28 });
fs.mkdirSync(path.join(outDir, 'screenshots'), { recursive: true });
const pages = { run: path.join(outDir, 'run.html'), show: path.join(outDir, 'show.html') };
fs.writeFileSync(pages.run, runPage);
fs.writeFileSync(pages.show, showPage);
for (const [name, file] of Object.entries(pages))
  check(!fs.readFileSync(file, 'latin1').toLowerCase().includes('<script'),
    `${name}: no "<script" anywhere in the page`);

// A fresh profile (playwright passes it as --user-data-dir) in the test's temporary directory.
const browser = await chromium.launchPersistentContext(path.join(work, 'profile'), {
  executablePath: '/usr/bin/chromium',
  headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
try {
  for (const [name, file] of Object.entries(pages)) {
    const url = pathToFileURL(file).href;
    for (const [shot, width, scheme] of [['desktop-light', 1280, 'light'],
      ['desktop-dark', 1280, 'dark'], ['phone-light', 390, 'light'], ['phone-dark', 390, 'dark']]) {
      const page = await browser.newPage();
      await page.setViewportSize({ width, height: 900 });
      await page.emulateMedia({ colorScheme: scheme });
      const requests = [], errors = [];
      page.on('request', (r) => requests.push(r.url()));
      page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
      page.on('pageerror', (e) => errors.push(String(e)));
      await page.goto(url, { waitUntil: 'load' });
      // lazy images: scroll through the page so every one loads, then wait for each
      await page.evaluate(async () => {
        for (const img of document.images) {
          img.loading = 'eager';
          img.scrollIntoView();
          try { await img.decode(); } catch { /* counted below */ }
        }
        window.scrollTo(0, 0);
      });
      const tag = `${name} ${shot}`;
      if (shot === 'desktop-light') {
        const r = await page.evaluate(() => {
          const csp = document.querySelector('meta[http-equiv="Content-Security-Policy"]');
          const imgs = [...document.images].map((i) => [i.alt, i.complete && i.naturalWidth > 0,
            i.src.slice(0, 30)]);
          const art = (n) => [...document.querySelectorAll('article')].find(
            (a) => a.querySelector('h3').textContent === n);
          const csv = art('data.csv');
          const cells = csv ? [...csv.querySelectorAll('tr')].map(
            (tr) => [...tr.children].map((c) => c.textContent)) : null;
          const dl = (n) => { const a = art(n)?.querySelector('a[download]');
            return a ? [a.getAttribute('download'), a.href.slice(0, 37)] : null; };
          return {
            csp: csp && csp.content,
            scripts: document.querySelectorAll('script, iframe, object, embed').length,
            pwned: window.__pwned === undefined ? null : String(window.__pwned),
            imgs, cells,
            hostile: !!art('<img src=x onerror=alert(1)>.txt'),
            hostileText: art('<img src=x onerror=alert(1)>.txt')?.querySelector('pre')?.textContent,
            quoteName: !!art('sub/"quote\'&amp;.json'),
            label: document.querySelector('.kicker').textContent,
            stdout: document.querySelector('pre.term')?.textContent,
            stdoutHtml: document.querySelector('pre.term')?.innerHTML,
            md: art('notes.md')?.querySelector('pre')?.textContent,
            dls: { html: dl('page.html'), pdf: dl('report.pdf'), bin: dl('blob.bin') },
            hScroll: document.documentElement.scrollWidth > window.innerWidth,
          };
        });
        check(r.csp === "default-src 'none'; img-src data:; style-src 'unsafe-inline'",
          `${tag}: the CSP meta tag`);
        check(r.scripts === 0, `${tag}: no script, iframe, object or embed element`);
        check(r.imgs.length === 4, `${tag}: four images (png, jpeg, two svg): ${r.imgs.length}`);
        for (const [alt, ok, src] of r.imgs)
          check(ok && src.startsWith('data:image/'), `${tag}: image ${alt} decodes (${src})`);
        const want = [['name', 'comment', 'value'], ['Smith, John', 'said "hi"', '1'],
          ['multi\nline', 'a,b,c', '2'], ['plain', '<b>bold</b>', '3']];
        check(JSON.stringify(r.cells) === JSON.stringify(want),
          `${tag}: the CSV table's cells: ${JSON.stringify(r.cells)}`);
        check(r.hostile, `${tag}: the hostile name is text`);
        check(r.hostileText === "<script>top.__pwned = 'txt'</script>\n",
          `${tag}: a text file's markup is text`);
        check(r.quoteName, `${tag}: a name with quotes and an entity is shown as it is`);
        check(r.label.includes('plots <&> "nightly"'), `${tag}: the label: ${r.label}`);
        check(r.stdout === 'done: wrote 10 files <script>\n' &&
          r.stdoutHtml.includes('<span class="c2 b">done</span>'),
          `${tag}: ANSI colours rendered as spans: ${JSON.stringify(r.stdoutHtml)}`);
        check(r.md?.startsWith('# Results'), `${tag}: Markdown in <pre>`);
        for (const [k, v] of Object.entries(r.dls))
          check(v && v[1] === 'data:application/octet-stream;base64,',
            `${tag}: ${k} offered as a data: download ${JSON.stringify(v)}`);
      }
      const scroll = await page.evaluate(() =>
        document.documentElement.scrollWidth - window.innerWidth);
      check(scroll <= 0, `${tag}: no horizontal scrolling of the page (${scroll} px)`);
      const pwned = await page.evaluate(() => window.__pwned);
      check(pwned === undefined, `${tag}: no artifact's script ran (${pwned})`);
      check(errors.length === 0, `${tag}: no console errors ${JSON.stringify(errors)}`);
      const bad = requests.filter((u) => u !== url && !u.startsWith('data:'));
      check(bad.length === 0, `${tag}: no request but data: ${JSON.stringify(bad)}`);
      if (name === 'show')
        await page.screenshot({ path: path.join(outDir, 'screenshots', `${shot}.png`),
          fullPage: true });
      await page.close();
    }
  }
} finally {
  await browser.close();
  fs.rmSync(work, { recursive: true, force: true });
}
if (failures.length) {
  console.error(`page test: ${failures.length} check(s) failed`);
  process.exit(1);
}
console.log(`page test: all checks passed; screenshots in ${path.join(outDir, 'screenshots')}`);
