#!/usr/bin/env python3
"""Moves the head that nbconvert writes into every notebook page into shared files.

Usage: notebooks-assets.py DIR PAGE.html...

nbconvert's HTML export puts the same ~14k lines of JupyterLab CSS and the MathJax
configuration into the <head> of every page. This script cuts them out of each PAGE (in
place) into DIR/notebook.css (every <style> block of the head, in order) and DIR/notebook.js
(the MathJax configuration script, run as a plain script after MathJax.js), and links the
page to them. Every page must carry the same head (one nbconvert version): a page whose
styles or script differ from the first page's is an error naming both, and nothing is
written. A page that links the shared files already is left as it is. Files are written to a
temporary name and renamed.
"""
import os
import re
import sys

STYLE = re.compile(r'[ \t]*<style[^>]*>(.*?)</style>[ \t]*\n?', re.S)
MATHJAX_CONFIG = re.compile(r'[ \t]*<script type="text/x-mathjax-config">(.*?)</script>[ \t]*\n?', re.S)
LINKS = '<link rel="stylesheet" href="notebook.css">\n<script src="notebook.js"></script>\n'


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
    head = re.sub(r'\n[ \t]*(\n[ \t]*)+', '\n', MATHJAX_CONFIG.sub('', STYLE.sub('', head)))
    return head + LINKS + rest, css, js


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
        write(os.path.join(out, 'notebook.css'), shared[0])
        write(os.path.join(out, 'notebook.js'), shared[1])
    for p, page in done:
        write(p, page)


if __name__ == '__main__':
    main(sys.argv)
