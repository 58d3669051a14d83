#!/usr/bin/env python3
"""Moves the head that nbconvert writes into every notebook page into shared files, and
compacts the pages' markup.

Usage: notebooks-assets.py DIR PAGE.html...

nbconvert's HTML export puts the same ~14k lines of JupyterLab CSS and the MathJax
configuration into the <head> of every page. This script cuts them out of each PAGE (in
place) into DIR/vendor/nbconvert.css (every <style> block of the head, in order: JupyterLab's
and nbconvert's styles, third-party code kept as it is) and DIR/vendor/nbconvert-mathjax.js
(nbconvert's MathJax configuration, run as a plain script after MathJax.js), and links the
page to them. It then compacts the page, which renders the same: outside <pre>, <script>,
<style> and <textarea>, where a run of white space that holds a line break renders as one
space, each such run becomes one space; inside <pre> each line break becomes the character
reference &#10;, which renders as the line break it was; and every cell starts a line. So a
page is one line per cell, and nbconvert's per-cell markup (dozens of short lines of nested
<div>s, the same in every cell and every page) no longer fills it. Every page must carry the same head (one nbconvert version): a page whose
styles or script differ from the first page's is an error naming both, and nothing is
written. A page that links the shared files already is left as it is. Files are written to a
temporary name and renamed.
"""
import os
import re
import sys

STYLE = re.compile(r'[ \t]*<style[^>]*>(.*?)</style>[ \t]*\n?', re.S)
MATHJAX_CONFIG = re.compile(r'[ \t]*<script type="text/x-mathjax-config">(.*?)</script>[ \t]*\n?', re.S)
KEEP = re.compile(r'(<(pre|script|style|textarea)\b.*?</\2>)', re.S | re.I)
BREAK = re.compile(r'[ \t\r]*\n\s*')
CELL = re.compile(r' ?(<div class="jp-Cell )')
CSS, JS = 'vendor/nbconvert.css', 'vendor/nbconvert-mathjax.js'
LINKS = f'<link rel="stylesheet" href="{CSS}">\n<script src="{JS}"></script>\n'


def split(path, text):
    """Returns (page without the shared head, css, js); css is None for a page done before."""
    end = text.find('</head>')
    if end < 0:
        raise SystemExit(f'notebooks-assets: {path}: no </head>')
    head, rest = text[:end], text[end:]
    if LINKS in head:
        return text, None, None
    css = ''.join(m.group(1).strip('\n') + '\n' for m in STYLE.finditer(head))
    js = ''.join(m.group(1).strip('\n') + '\n' for m in MATHJAX_CONFIG.finditer(head))
    if not css:
        raise SystemExit(f'notebooks-assets: {path}: no <style> in its head (not an nbconvert page?)')
    head = MATHJAX_CONFIG.sub('', STYLE.sub('', head))
    return compact(head + LINKS + rest), css, js


def compact(page):
    """Returns page with its line breaks folded as the module's documentation says."""
    parts = KEEP.split(page)
    out = []
    for i in range(0, len(parts), 3):
        out.append(CELL.sub(r'\n\1', BREAK.sub(' ', parts[i])))
        if i + 1 < len(parts):
            kept = parts[i + 1]
            if parts[i + 2].lower() == 'pre':
                kept = kept.replace('\n', '&#10;')
            out.append(kept)
    return ''.join(out).strip() + '\n'


def write(path, text):
    tmp = os.path.join(os.path.dirname(path), '.' + os.path.basename(path) + '.tmp')
    with open(tmp, 'w', encoding='utf-8') as f:
        f.write(text)
    os.replace(tmp, path)


def main(argv):
    if len(argv) < 3:
        raise SystemExit(__doc__)
    out, pages = argv[1], argv[2:]
    shared, first, done = None, None, []
    for p in pages:
        with open(p, encoding='utf-8') as f:
            page, css, js = split(p, f.read())
        if css is not None:
            if shared is None:
                shared, first = (css, js), p
            elif (css, js) != shared:
                raise SystemExit(f'notebooks-assets: the head of {p} differs from that of {first} (pages of two nbconvert versions?)')
        done.append((p, page))
    if shared is not None:
        os.makedirs(os.path.join(out, 'vendor'), exist_ok=True)
        write(os.path.join(out, CSS), shared[0])
        write(os.path.join(out, JS), shared[1])
    for p, page in done:
        write(p, page)


if __name__ == '__main__':
    main(sys.argv)
