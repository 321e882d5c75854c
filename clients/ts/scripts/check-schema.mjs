// Fails when src/schema.d.ts is not what `npm run generate` makes of
// api/openapi.yaml: regenerate and commit it after changing the API.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const dir = mkdtempSync(join(tmpdir(), "cairn-schema-"));
try {
  const fresh = join(dir, "schema.d.ts");
  execFileSync(
    process.execPath,
    [join(root, "node_modules/openapi-typescript/bin/cli.js"), join(root, "../../api/openapi.yaml"), "--output", fresh],
    { stdio: ["ignore", "ignore", "inherit"] },
  );
  if (readFileSync(fresh, "utf8") !== readFileSync(join(root, "src/schema.d.ts"), "utf8")) {
    console.error("clients/ts/src/schema.d.ts is stale: run `npm run generate` in clients/ts and commit it");
    process.exit(1);
  }
  console.log("src/schema.d.ts matches api/openapi.yaml");
} finally {
  rmSync(dir, { recursive: true, force: true });
}
