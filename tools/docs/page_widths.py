"""Every page of the built site at 1280 x 800 in headless Chromium: what scrolls sideways, what sticks out of the column.

    NO_MKDOCS_2_WARNING=1 python -m mkdocs build --strict -f tools/mkdocs.yml --site-dir site
    python -m tools.docs.page_widths site               # one line per page that scrolls; exit 1 when any does
    python -m tools.docs.page_widths site --columns     # also: how many monospace characters a code line may hold

Found on a page: the page itself wider than the window; a code block or table that scrolls inside itself (its
content wider than its box); anything in the article wider than the article's column. Drives Chromium through
the DevTools protocol (websockets, of the test extra); nothing is fetched, the pages are read as files.
`too_wide(html)` is the same check without a browser, from the built HTML and the widths measured here (what
tests/test_docs.py runs on the site it builds): code lines of at most CODE_COLUMNS characters (fewer inside a list
or an admonition), tables whose columns' narrowest widths fit the column.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
from html.parser import HTMLParser
from pathlib import Path

WIDTH, HEIGHT = 1280, 800
# Measured in Chromium at 1280 x 800 (--columns): a code block's line holds 80 characters of the monospace font
# (656 px at 8.2 px); each list or admonition around it takes about 30 px, 4 characters.
CODE_COLUMNS, NESTED = 80, 4
# A table scrolls when its columns' narrowest widths add up to more than TABLE_PX: Material gives every column at
# least 100 px (min-width 5rem), or 24 px of padding around the longest word a cell cannot break (about 6.5 px a
# character of text at the table's font, 7 px of a key name in code); its scroll box is 720 px, 32 px of padding.
TABLE_PX, COLUMN_MIN_PX, CELL_PAD_PX, TEXT_PX, CODE_PX = 688, 100, 24, 6.5, 7.0

# What one page holds that is too wide. Material wraps tables in .md-typeset__scrollwrap (overflow: auto) and code in
# <pre><code> (overflow: auto): their scrollWidth beyond their clientWidth is what a reader has to scroll.
MEASURE = """
(() => {
  const se = document.scrollingElement, article = document.querySelector('article.md-content__inner');
  const found = [];
  if (se.scrollWidth > innerWidth) found.push(`page ${se.scrollWidth} px wide in a ${innerWidth} px window`);
  if (!article) return found;
  const right = article.getBoundingClientRect().right + 1;
  const name = (el) => {
    const text = (el.innerText || '').trim().split('\\n').reduce((a, b) => (b.length > a.length ? b : a), '');
    return `${el.tagName.toLowerCase()} "${text.slice(0, 70)}"`;
  };
  // Tables: Material's scroll wrapper (it reaches 0.8rem past the column on purpose, its table padded by as much).
  for (const el of article.querySelectorAll('pre > code, .md-typeset__scrollwrap'))
    if (el.scrollWidth > el.clientWidth + 1) found.push(`${name(el)} scrolls: ${el.scrollWidth} px of content in ${el.clientWidth} px`);
  for (const el of article.querySelectorAll('img, svg, p, li, blockquote, .admonition, details')) {
    const box = el.getBoundingClientRect();
    if (box.width && box.right > right && !el.closest('pre, .md-typeset__scrollwrap'))
      found.push(`${name(el)} sticks out of the column by ${Math.round(box.right - right)} px`);
  }
  return found;
})()
"""

# How many characters of the code font one code block's line holds, and of the body font one table cell's line.
COLUMNS = """
(() => {
  const code = document.querySelector('article pre > code');
  if (!code) return null;
  const probe = document.createElement('span');
  probe.textContent = 'x'.repeat(200);
  code.appendChild(probe);
  const perChar = probe.getBoundingClientRect().width / 200;
  probe.remove();
  const style = getComputedStyle(code);
  const inner = code.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
  return {code_px: inner, char_px: perChar, characters: Math.floor(inner / perChar), font: style.fontFamily};
})()
"""


class _Widths(HTMLParser):
    """The article's code lines too long for their block and tables too wide for the column, from the built HTML."""

    NESTING = {"li", "blockquote", "details"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, bool]] = []  # (tag, whether it narrows a code block inside it)
        self.in_article = 0
        self.found: list[str] = []
        self.pre: list[str] | None = None
        self.table: list[list[list[tuple[str, str]]]] | None = None  # rows of cells of (text, in code) pieces
        self.code: list[bool] = []  # the open code spans: whether each is a key name (breaks only at <wbr>)

    def handle_starttag(self, tag, attrs):
        if tag in ("wbr", "br", "img", "hr", "input", "meta", "link"):
            if tag in ("wbr", "br") and self.table is not None and self.table[-1]:
                self.table[-1][-1].append(("\n", "text"))  # a break opportunity
            return
        classes = (dict(attrs).get("class") or "").split()
        narrows = tag in self.NESTING or (tag == "div" and "admonition" in classes)
        self.stack.append((tag, narrows))
        if tag == "article":
            self.in_article += 1
        if not self.in_article:
            return
        if tag == "pre":
            self.pre = []
        elif tag == "table":
            self.table = []
        elif tag == "tr" and self.table is not None:
            self.table.append([])
        elif tag in ("td", "th") and self.table is not None and self.table:
            self.table[-1].append([])
        elif tag == "code":
            self.code.append("key" in classes)

    def handle_endtag(self, tag):
        if all(open_tag != tag for open_tag, _ in self.stack):
            return  # a closing tag HTML lets stand alone (</p> after a list): nothing to close
        while self.stack:
            open_tag, _ = self.stack.pop()
            self._close(open_tag)
            if open_tag == tag:
                break

    def _close(self, tag):
        if tag == "article":
            self.in_article -= 1
        elif tag == "code" and self.code:
            self.code.pop()
        elif tag == "pre" and self.pre is not None:
            depth = sum(narrows for _, narrows in self.stack)
            limit = CODE_COLUMNS - NESTED * depth
            for line in "".join(self.pre).split("\n"):
                if len(line) > limit:
                    self.found.append(f"code line of {len(line)} characters (at most {limit} here): {line.strip()[:60]}")
            self.pre = None
        elif tag == "table" and self.table is not None:
            widths = table_widths(self.table)
            if sum(widths) > TABLE_PX:
                head = " | ".join("".join(t for t, _ in cell).strip()[:20] for cell in (self.table[0] if self.table else []))
                self.found.append(f"table of {len(widths)} columns at least {round(sum(widths))} px wide (at most {TABLE_PX}): {head}")
            self.table = None

    def handle_data(self, data):
        if self.pre is not None:
            self.pre.append(data)
        elif self.table is not None and self.table and self.table[-1]:
            self.table[-1][-1].append((data, "key" if self.code and self.code[-1] else "code" if self.code else "text"))


def _unbreakable_px(pieces: list[tuple[str, str]]) -> float:
    """The widest run of a cell that cannot wrap. Material's code spans break anywhere (word-break: break-word), key
    names only at their <wbr> (extra.css); text at spaces and after a hyphen, never inside a word or a path."""
    widest, run = 0.0, 0.0
    for text, kind in pieces:
        for char in text:
            if char.isspace():
                widest, run = max(widest, run), 0.0
                continue
            run += TEXT_PX if kind == "text" else CODE_PX
            if kind == "code" or (kind == "text" and char == "-"):
                widest, run = max(widest, run), 0.0
    return max(widest, run)


def table_widths(rows: list[list[list[tuple[str, str]]]]) -> list[float]:
    """Each column's narrowest width in px as the browser lays it out."""
    columns: list[float] = []
    for row in rows:
        for number, cell in enumerate(row):
            need = max(COLUMN_MIN_PX, CELL_PAD_PX + _unbreakable_px(cell))
            if number < len(columns):
                columns[number] = max(columns[number], need)
            else:
                columns.append(need)
    return columns


def too_wide(html: str) -> list[str]:
    """What on one built page is wider than the content column at 1280 px (code lines, tables)."""
    parser = _Widths()
    start = html.find("<article")
    parser.feed(html[start : html.find("</article>", start) + len("</article>")] if start >= 0 else html)
    parser.close()
    return parser.found


class Browser:
    """One headless Chromium, one tab, driven over the DevTools protocol."""

    def __init__(self, binary: str):
        self.profile = tempfile.mkdtemp(prefix="page-widths-")
        self.process = subprocess.Popen(
            [binary, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-port=0", f"--user-data-dir={self.profile}",
             f"--window-size={WIDTH},{HEIGHT}", "--hide-scrollbars", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        for line in self.process.stderr:
            if line.startswith("DevTools listening on "):
                self.url = line.split(" on ", 1)[1].strip()
                break
        else:
            raise RuntimeError(f"{binary} did not open its DevTools port")
        self.counter, self.session = 0, None

    async def open(self):
        import websockets

        self.socket = await websockets.connect(self.url, max_size=None)
        target = await self.call("Target.createTarget", url="about:blank")
        attached = await self.call("Target.attachToTarget", targetId=target["targetId"], flatten=True)
        self.session = attached["sessionId"]
        await self.call("Page.enable")
        await self.call("Emulation.setDeviceMetricsOverride", width=WIDTH, height=HEIGHT, deviceScaleFactor=1, mobile=False)

    async def call(self, method: str, **params):
        self.counter += 1
        message = {"id": self.counter, "method": method, "params": params}
        if self.session and not method.startswith("Target."):
            message["sessionId"] = self.session
        await self.socket.send(json.dumps(message))
        while True:
            reply = json.loads(await self.socket.recv())
            if reply.get("id") == self.counter:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]

    async def load(self, url: str):
        await self.call("Page.navigate", url=url)
        while True:  # the load event of this navigation (after the stylesheets and images)
            reply = json.loads(await self.socket.recv())
            if reply.get("method") == "Page.loadEventFired":
                return

    async def evaluate(self, script: str):
        """The script's value (a promise's, once it settles)."""
        result = await self.call("Runtime.evaluate", expression=script, returnByValue=True, awaitPromise=True)
        return result["result"].get("value")

    def close(self):
        self.process.terminate()
        self.process.wait(timeout=30)
        shutil.rmtree(self.profile, ignore_errors=True)


async def measure(site: Path, binary: str, columns: bool) -> dict:
    pages = sorted(site.rglob("index.html"))
    browser = Browser(binary)
    try:
        await browser.open()
        found, column = {}, None
        for page in pages:
            await browser.load(page.resolve().as_uri())
            await browser.evaluate("document.fonts.ready.then(() => true)")  # measured in the fonts it shows
            problems = await browser.evaluate(MEASURE)
            if problems:
                found[str(page.parent.relative_to(site)) or "."] = problems
            if columns and column is None:
                column = await browser.evaluate(COLUMNS)
        return {"pages": len(pages), "found": found, "column": column}
    finally:
        browser.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.docs.page_widths", description=__doc__.splitlines()[0])
    parser.add_argument("site", type=Path, help="the built site (mkdocs build --site-dir)")
    parser.add_argument("--columns", action="store_true", help="also print how many characters a code block's line holds")
    parser.add_argument("--chromium", default=os.environ.get("CHROMIUM", "chromium"), help="the browser (default: chromium on PATH)")
    args = parser.parse_args(argv)
    binary = shutil.which(args.chromium)
    if not (args.site / "index.html").is_file():
        print(f"error: {args.site}: no index.html (not a built site)", file=sys.stderr)
        print("hint: NO_MKDOCS_2_WARNING=1 python -m mkdocs build --strict -f tools/mkdocs.yml --site-dir site", file=sys.stderr)
        return 2
    if binary is None:
        print(f"error: {args.chromium}: no such browser on PATH", file=sys.stderr)
        print("hint: install Chromium, or name it with --chromium or CHROMIUM", file=sys.stderr)
        return 2
    try:
        result = asyncio.run(measure(args.site, binary, args.columns))
    except (OSError, RuntimeError) as exc:
        print(f"error: {binary}: the browser did not answer ({exc})", file=sys.stderr)
        print("hint: run it by hand with --headless --remote-debugging-port=0 to see why it does not start", file=sys.stderr)
        return 2
    for page, problems in result["found"].items():
        for problem in problems:
            print(f"{page}: {problem}")
    if result["column"]:
        print(f"column at {WIDTH} px: {json.dumps(result['column'])}")
    print(f"{len(result['found'])} of {result['pages']} pages scroll sideways at {WIDTH} x {HEIGHT}")
    return 1 if result["found"] else 0


if __name__ == "__main__":
    sys.exit(main())
