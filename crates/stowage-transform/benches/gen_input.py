#!/usr/bin/env python3
"""Generates the transform benchmark inputs (not committed: ~100 MB; deterministic).

    python3 gen_input.py DIR

writes into DIR:
  payload.pdf        37,500,000 bytes: PDF magic, a binary comment line, seeded random body, %%EOF
  payload.b64        its standard base64 (50,000,000 characters), the same string as in the JSON
  tableau_50mb.json  the incident's shape at 50 MB: a CallToolResult whose text block holds the
                     Tableau download_workbook JSON {"content": <base64>, "name", "format"}
  tableau_1mb.json   the same shape around a 786,000-byte PDF (~1 MB of JSON)
"""
import base64, json, os, random, sys

out = sys.argv[1] if len(sys.argv) > 1 else "/tmp/stowage-bench"
os.makedirs(out, exist_ok=True)


def pdf(n, seed):
    head = b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n"
    return head + random.Random(seed).randbytes(n - len(head) - 6) + b"%%EOF\n"


def tableau(b64):
    inner = json.dumps({"content": b64, "name": "Sales Dashboard", "format": "pdf"})
    return json.dumps({"content": [{"type": "text", "text": inner}], "isError": False})


big = pdf(37_500_000, 50)
b64 = base64.b64encode(big).decode()
open(os.path.join(out, "payload.pdf"), "wb").write(big)
open(os.path.join(out, "payload.b64"), "w").write(b64)
open(os.path.join(out, "tableau_50mb.json"), "w").write(tableau(b64))
small = pdf(786_000, 1)
open(os.path.join(out, "tableau_1mb.json"), "w").write(tableau(base64.b64encode(small).decode()))
for f in sorted(os.listdir(out)):
    if f.endswith((".json", ".pdf", ".b64")):
        print(f"{f}: {os.path.getsize(os.path.join(out, f)):,} bytes")
