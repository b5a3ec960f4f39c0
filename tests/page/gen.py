"""Writes the artifacts of the page test's run into the current directory (run by
/usr/bin/python3, which has Debian's matplotlib)."""
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

fig, ax = plt.subplots(figsize=(6, 3.2), dpi=100)
xs = list(range(20))
ax.plot(xs, [x * x for x in xs], marker="o", label="x²")
ax.plot(xs, [30 * x for x in xs], label="30x")
ax.set_title("growth")
ax.legend()
fig.tight_layout()
fig.savefig("plot.png")
fig.savefig("photo.jpg")
fig.savefig("chart.svg")
fig.savefig("report.pdf")

# An SVG whose script would set a flag on the page if it ever ran there.
with open("evil.svg", "w") as f:
    f.write('<svg xmlns="http://www.w3.org/2000/svg" width="120" height="40" '
            'onload="top.__pwned=\'svg-onload\'">'
            '<script>top.__pwned = "svg"; console.error("svg script ran")</script>'
            '<rect width="120" height="40" fill="#2f6fde"/></svg>')
# An HTML file with a script: offered as a download, never shown.
with open("page.html", "w") as f:
    f.write('<!DOCTYPE html><html><body><script>top.__pwned = "html";'
            'console.error("html script ran")</script><p>hi</p></body></html>')
# CSV: quoted commas, quotes and newlines.
with open("data.csv", "w", newline="") as f:
    f.write('name,comment,value\r\n'
            '"Smith, John","said ""hi""",1\r\n'
            '"multi\nline","a,b,c",2\r\n'
            'plain,<b>bold</b>,3\r\n')
with open("notes.md", "w") as f:
    f.write("# Results\n\nThe *plot* is in `plot.png`.\n\n- one\n- two <script>x</script>\n")
with open("blob.bin", "wb") as f:
    f.write(bytes(range(256)) * 16)
# Hostile names: markup in the name is text.
with open("<img src=x onerror=alert(1)>.txt", "w") as f:
    f.write("<script>top.__pwned = 'txt'</script>\n")
os.mkdir("sub")
with open("sub/\"quote'&amp;.json", "w") as f:
    f.write('{"a": [1, 2, 3], "b": "<script>"}\n')

print("\x1b[1;32mdone\x1b[0m: wrote \x1b[34m10\x1b[0m files <script>")
print("\x1b]0;title\x07a warning on \x1b[33mstderr\x1b[0m", file=sys.stderr)
