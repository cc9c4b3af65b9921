// Validates a tools/list result (JSON on stdin) with the TypeScript SDK's own schema, as the
// clients built on it (Claude Desktop, the Inspector, VS Code) parse it: the 2025-06-18 shapes
// the SDK 1.32.2 speaks. Prints "ok" or the issues, one a line; exit 1 on any.
const { createRequire } = require("node:module");
const peers = createRequire(process.argv[2] + "/package.json");
const { ListToolsResultSchema } = peers("@modelcontextprotocol/sdk/types.js");
let input = "";
process.stdin.on("data", (d) => (input += d));
process.stdin.on("end", () => {
  const r = ListToolsResultSchema.safeParse(JSON.parse(input));
  if (r.success) {
    console.log("ok");
  } else {
    for (const i of r.error.issues) console.log(`${i.path.join(".")}: ${i.message}`);
    process.exit(1);
  }
});
