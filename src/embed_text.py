#!/usr/bin/env python3
"""Writes a C header defining one string constant with a text file's content,
so that data files travel inside the binaries (no path to find at run time,
in the build tree or installed): the default owner rules in libtensorleak.so,
the HTML report's style sheet, SVG pattern and script in the CLI.

    embed_text.py INPUT OUTPUT NAME"""
import sys

src, out, name = sys.argv[1], sys.argv[2], sys.argv[3]
with open(src, "rb") as f:
    data = f.read()
with open(out, "w") as f:
    f.write(f"/* Generated from {src.split('/')[-1]} by embed_text.py. */\n")
    f.write(f"static const char {name}[] =\n")
    for line in data.splitlines(keepends=True):
        esc = "".join(c if 32 <= ord(c) < 127 and c not in '"\\?' else "\\%03o" % ord(c)
                      for c in line.decode("utf-8", "replace"))
        f.write(f'    "{esc}"\n')
    f.write("    \"\";\n")
