// node-redis's clientSideCache (RESP3, CLIENT TRACKING ON) against a server: the client becomes
// ready, a second GET is served from its cache, another client's write and a FLUSHALL invalidate it.
// Usage: node csc.mjs <port>. Prints "ok ..." lines and exits 1 on a failure (the same against Redis).
import assert from 'node:assert/strict';
import { createClient } from '@redis/client';

const port = Number(process.argv[2] ?? 6379);
const url = `redis://127.0.0.1:${port}`;
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function main() {
  const cached = createClient({ url, RESP: 3, clientSideCache: { ttl: 0, maxEntries: 0 } });
  const writer = createClient({ url });
  let errors = 0;
  cached.on('error', (err) => { errors += 1; console.log(`client error: ${err}`); });
  const ready = Promise.race([cached.connect(), sleep(5000).then(() => { throw new Error('never became ready'); })]);
  await ready;
  await writer.connect();
  console.log('ok ready');
  await writer.set('csc:k', '1');
  assert.equal(await cached.get('csc:k'), '1');
  assert.equal(await cached.get('csc:k'), '1');
  const stats = cached.clientSideCache.stats();
  assert.equal(stats.hitCount, 1, `hits ${stats.hitCount}`);
  console.log('ok served from the cache');
  await writer.set('csc:k', '2');
  for (let i = 0; i < 100 && cached.clientSideCache.size() > 0; i += 1) await sleep(10);
  assert.equal(await cached.get('csc:k'), '2');
  console.log('ok invalidated by a write');
  await writer.flushAll();
  for (let i = 0; i < 100 && cached.clientSideCache.size() > 0; i += 1) await sleep(10);
  assert.equal(await cached.get('csc:k'), null);
  console.log('ok invalidated by FLUSHALL');
  assert.equal(errors, 0);
  await cached.quit();
  await writer.quit();
}

main().catch((err) => { console.log(`FAIL ${err && err.stack || err}`); process.exit(1); });
