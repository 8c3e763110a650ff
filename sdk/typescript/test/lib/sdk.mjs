// The SDK under test: the package ctest built ($SBX_TS_SDK_DIR, see CMakeLists.txt), else
// this checkout's dist/ (after `npm run build`).
import { existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

export const pkgDir = process.env.SBX_TS_SDK_DIR
  ? resolve(process.env.SBX_TS_SDK_DIR)
  : resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const entry = join(pkgDir, "dist/index.js");
if (!existsSync(entry)) {
  console.error(`sdk.mjs: ${entry} is missing: run 'npm run build' (or run through ctest)`);
  process.exit(1);
}
export const sdk = await import(pathToFileURL(entry).href);

/** Skips the whole file (CTest reports it skipped: SKIP_RETURN_CODE 77). */
export function skipFile(why) {
  console.log(`skip: ${why}`);
  process.exit(77);
}

/** Waits until check() answers something truthy (polling), or fails after ms. */
export async function until(check, ms = 10000, what = "the condition") {
  const end = Date.now() + ms;
  for (;;) {
    const v = await check();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
