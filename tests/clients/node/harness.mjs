// The check harness the node scripts share: one "ok <name>" / "FAIL <name>: <why>" line per check,
// then a summary line; the process exits 1 when any check failed.
export const results = { ok: 0, failed: 0 };

export async function check(name, fn) {
  try {
    await fn();
    results.ok += 1;
    console.log(`ok ${name}`);
  } catch (err) {
    results.failed += 1;
    console.log(`FAIL ${name}: ${(err && err.stack) || err}`.split('\n').slice(0, 6).join('\n'));
  }
}

export function finish(okWord = 'passed') {
  console.log(`summary: ${results.ok} ${okWord}, ${results.failed} failed`);
  process.exit(results.failed ? 1 : 0);
}
