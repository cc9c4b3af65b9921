"""A FastMCP 4.1.2 server with tools that take file bytes the ways published servers do,
declaring nothing for Stowage: blob chaining must find them from their schemas alone
(tests/chaining_auto.rs). Every call appends one JSON line to LOG (what the tool received,
hashed, never the bytes), so the test can tell a refused call never reached it.

Usage: chaining_auto_server.py LOG PDF
"""
import base64
import hashlib
import json
import sys
import urllib.request
from typing import Annotated

from fastmcp import FastMCP
from fastmcp.utilities.types import File
from pydantic import BaseModel, Field

LOG, PDF = sys.argv[1], sys.argv[2]
mcp = FastMCP("chain-targets")


def log(tool, **fields):
    with open(LOG, "a") as f:
        f.write(json.dumps({"tool": tool, **fields}) + "\n")


def received(tool, data, **fields):
    log(tool, size=len(data), sha256=hashlib.sha256(data).hexdigest(), **fields)
    return f"{tool} got {len(data)} bytes"


class Attachment(BaseModel):
    filename: str = ""
    content_base64: str


@mcp.tool
def make_pdf() -> File:
    """A report, as a PDF file."""
    log("make_pdf")
    with open(PDF, "rb") as f:
        return File(data=f.read(), format="pdf", name="report")


@mcp.tool
def upload_file(content_base64: str, mime_type: str = "") -> str:
    """Uploads a file."""
    return received("upload_file", base64.b64decode(content_base64, validate=True), mime_type=mime_type)


@mcp.tool
def ocr(image: Annotated[str, Field(json_schema_extra={"contentEncoding": "base64"})]) -> str:
    """Reads the text of a scanned page."""
    return received("ocr", base64.b64decode(image, validate=True))


@mcp.tool
def archive(blob: Annotated[str, Field(json_schema_extra={"format": "byte"})]) -> str:
    """Archives a blob."""
    return received("archive", base64.b64decode(blob, validate=True))


@mcp.tool
def send(to: str, attachments: list[Attachment]) -> str:
    """Sends a message with attachments."""
    for a in attachments:
        received("send", base64.b64decode(a.content_base64, validate=True), filename=a.filename, to=to)
    return f"sent {len(attachments)} attachment(s) to {to}"


@mcp.tool
def transcribe(audio_url: str) -> str:
    """Transcribes the audio at a URL."""
    with urllib.request.urlopen(audio_url, timeout=20) as r:
        return received("transcribe", r.read())


@mcp.tool
def note(title: str, content: str) -> str:
    """Keeps a note: free text."""
    log("note", content=content)
    return "noted"


@mcp.tool
def stamp(pdf_base64: Annotated[str, Field(max_length=64)]) -> str:
    """Stamps a tiny PDF."""
    return received("stamp", base64.b64decode(pdf_base64))


@mcp.tool
def avatar(image_base64: Annotated[str, Field(json_schema_extra={"contentMediaType": "image/png"})]) -> str:
    """Sets an avatar (PNG only)."""
    return received("avatar", base64.b64decode(image_base64))


if __name__ == "__main__":
    mcp.run(show_banner=False)
