// node-redis's own client-side-cache integration tests (packages/client/lib/client/cache.spec.ts,
// the "Basic Cache", "Pooled Cache" and "comprehensive stats" groups, test bodies unchanged) run
// against a given server with a minimal stand-in for node-redis's docker-based test-utils:
// testWithClient/testWithClientPool connect, FLUSHALL, run the body, FLUSHALL, destroy.
// Usage: node csc_suite.mjs <port>. Prints "ok"/"FAIL" per test; exits 1 on any failure.
import assert from 'node:assert';
import { once } from 'node:events';
import { createClient, createClientPool, BasicClientSideCache, BasicPooledClientSideCache } from '@redis/client';
import { REDIS_FLUSH_MODES } from '@redis/client/dist/lib/commands/FLUSHALL.js';

const port = Number(process.argv[2] ?? 6379);
const GLOBAL = { SERVERS: { OPEN: {} } };
const queue = [];
const path = [];
const describe = (name, body) => { path.push(name); body(); path.pop(); };
const register = (title, run) => queue.push({ title: [...path, title].join(' > '), run });
const testUtils = {
  testWithClient(title, fn, options) {
    register(title, async () => {
      const client = createClient({ ...options.clientOptions, socket: { host: '127.0.0.1', port } });
      await client.connect();
      try { await client.flushAll(); await fn(client); } finally {
        if (client.isOpen) { await client.flushAll(); client.destroy(); }
      }
    });
  },
  testWithClientPool(title, fn, options) {
    register(title, async () => {
      const pool = createClientPool({ ...options.clientOptions, socket: { host: '127.0.0.1', port } }, options.poolOptions);
      await pool.connect();
      try { await pool.flushAll(); await fn(pool); } finally {
        if (pool.isOpen) { await pool.flushAll(); pool.destroy(); }
      }
    });
  },
};

describe('Client Side Cache', () => {
  describe('Basic Cache', () => {
    const csc = new BasicClientSideCache({ maxEntries: 10 });

    testUtils.testWithClient('Basic Cache Miss', async client => {
      csc.clear();

      await client.set("x", 1);
      await client.get("x");

      assert.equal(csc.stats().missCount, 1, "Cache Misses");
      assert.equal(csc.stats().hitCount, 0, "Cache Hits");
    }, {
      ...GLOBAL.SERVERS.OPEN,
      clientOptions: {
        RESP: 3,
        clientSideCache: csc
      }
    });

    testUtils.testWithClient('Basic Cache Hit', async client => {
      csc.clear();

      await client.set("x", 1);
      assert.equal(await client.get("x"), '1');
      assert.equal(await client.get("x"), '1');

      assert.equal(csc.stats().missCount, 1, "Cache Misses");
      assert.equal(csc.stats().hitCount, 1, "Cache Hits");
    }, {
      ...GLOBAL.SERVERS.OPEN,
      clientOptions: {
        RESP: 3,
        clientSideCache: csc
      }
    });

    testUtils.testWithClient('Max Cache Entries', async client => {
      csc.clear();

      await client.set('1', 1);
      assert.equal(await client.get('1'), '1');
      assert.equal(await client.get('2'), null);
      assert.equal(await client.get('3'), null);
      assert.equal(await client.get('4'), null);
      assert.equal(await client.get('5'), null);
      assert.equal(await client.get('6'), null);
      assert.equal(await client.get('7'), null);
      assert.equal(await client.get('8'), null);
      assert.equal(await client.get('9'), null);
      assert.equal(await client.get('10'), null);
      assert.equal(await client.get('11'), null);
      assert.equal(await client.get('1'), '1');

      assert.equal(csc.stats().missCount, 12, "Cache Misses");
      assert.equal(csc.stats().hitCount, 0, "Cache Hits");
    }, {
      ...GLOBAL.SERVERS.OPEN,
      clientOptions: {
        RESP: 3,
        clientSideCache: csc
      }
    });

    testUtils.testWithClient('LRU works correctly', async client => {
      csc.clear();

      await client.set('1', 1);
      assert.equal(await client.get('1'), '1');
      assert.equal(await client.get('2'), null);
      assert.equal(await client.get('3'), null);
      assert.equal(await client.get('4'), null);
      assert.equal(await client.get('5'), null);
      assert.equal(await client.get('1'), '1');
      assert.equal(await client.get('6'), null);
      assert.equal(await client.get('7'), null);
      assert.equal(await client.get('8'), null);
      assert.equal(await client.get('9'), null);
      assert.equal(await client.get('10'), null);
      assert.equal(await client.get('11'), null);
      assert.equal(await client.get('1'), '1');

      assert.equal(csc.stats().missCount, 11, "Cache Misses");
      assert.equal(csc.stats().hitCount, 2, "Cache Hits");
    }, {
      ...GLOBAL.SERVERS.OPEN,
      clientOptions: {
        RESP: 3,
        clientSideCache: csc
      }
    });

    testUtils.testWithClient('Basic Cache Clear', async client => {
      csc.clear();

      await client.set("x", 1);
      await client.get("x");
      csc.clear();
      await client.get("x");

      assert.equal(csc.stats().missCount, 1, "Cache Misses");
      assert.equal(csc.stats().hitCount, 0, "Cache Hits");
    }, {
      ...GLOBAL.SERVERS.OPEN,
      clientOptions: {
        RESP: 3,
        clientSideCache: csc
      }
    });

    testUtils.testWithClient('Null Invalidate acts as clear', async client => {
      csc.clear();

      await client.set("x", 1);
      await client.get("x");
      csc.invalidate(null);
      await client.get("x");

      assert.equal(2, csc.stats().missCount, "Cache Misses");
      assert.equal(0, csc.stats().hitCount, "Cache Hits");
    }, {
      ...GLOBAL.SERVERS.OPEN,
      clientOptions: {
        RESP: 3,
        clientSideCache: csc
      }
    });

    testUtils.testWithClient('flushdb causes an invalidate null', async client => {
      csc.clear();

      await client.set("x", 1);
      assert.equal(await client.get("x"), '1');
      await client.flushDb(REDIS_FLUSH_MODES.SYNC);
      assert.equal(await client.get("x"), null);

      assert.equal(csc.stats().missCount, 2, "Cache Misses");
      assert.equal(csc.stats().hitCount, 0, "Cache Hits");
    }, {
      ...GLOBAL.SERVERS.OPEN,
      clientOptions: {
        RESP: 3,
        clientSideCache: csc
      }
    });

    testUtils.testWithClient('Basic Cache Invalidate', async client => {
      csc.clear();

      await client.set("x", 1);
      assert.equal(await client.get("x"), '1', 'first get');
      await client.set("x", 2);
      assert.equal(await client.get("x"), '2', 'second get');
      await client.set("x", 3);
      assert.equal(await client.get("x"), '3', 'third get');

      assert.equal(csc.stats().missCount, 3, "Cache Misses");
      assert.equal(csc.stats().hitCount, 0, "Cache Hits");
    }, {
      ...GLOBAL.SERVERS.OPEN,
      clientOptions: {
        RESP: 3,
        clientSideCache: csc
      }
    });

    testUtils.testWithClient("Cached Replies Don't Mutate", async client => {
      csc.clear();

      await client.set("x", 1);
      await client.set('y', 2);
      const ret1 = await client.mGet(['x', 'y']);
      assert.deepEqual(ret1, ['1', '2'], 'first mGet');
      ret1[0] = '4';
      const ret2 = await client.mGet(['x', 'y']);
      assert.deepEqual(ret2, ['1', '2'], 'second mGet');
      ret2[0] = '8';
      const ret3 = await client.mGet(['x', 'y']);
      assert.deepEqual(ret3, ['1', '2'], 'third mGet');

      assert.equal(csc.stats().missCount, 1, "Cache Misses");
      assert.equal(csc.stats().hitCount, 2, "Cache Hits");
    }, {
      ...GLOBAL.SERVERS.OPEN,
      clientOptions: {
        RESP: 3,
        clientSideCache: csc
      }
    });

    testUtils.testWithClient("Cached cleared on disconnect", async client => {
      csc.clear();

      await client.set("x", 1);
      await client.set('y', 2);
      const ret1 = await client.mGet(['x', 'y']);
      assert.deepEqual(ret1, ['1', '2'], 'first mGet');

      assert.equal(csc.stats().missCount, 1, "first Cache Misses");
      assert.equal(csc.stats().hitCount, 0, "first Cache Hits");

      await client.close();

      await client.connect();

      const ret2 = await client.mGet(['x', 'y']);
      assert.deepEqual(ret2, ['1', '2'], 'second mGet');

      assert.equal(csc.stats().missCount, 1, "second Cache Misses");
      assert.equal(csc.stats().hitCount, 0, "second Cache Hits");
    }, {
      ...GLOBAL.SERVERS.OPEN,
      clientOptions: {
        RESP: 3,
        clientSideCache: csc
      }
    });
  });

  describe("Pooled Cache", () => {
    const csc = new BasicPooledClientSideCache();

    testUtils.testWithClient('Virtual Pool Disconnect', async client1 => {
      const client2 = client1.duplicate();
      await client2.connect()

      assert.equal(await client2.get("x"), null);
      assert.equal(await client1.get("x"), null);

      assert.equal(1, csc.stats().missCount, "Cache Misses");
      assert.equal(1, csc.stats().hitCount, "Cache Hits");

      await client2.close();

      assert.equal(await client1.get("x"), null);
      assert.equal(await client1.get("x"), null);

      assert.equal(2, csc.stats().missCount, "Cache Misses");
      assert.equal(2, csc.stats().hitCount, "Cache Hits");
    }, {
      ...GLOBAL.SERVERS.OPEN,
      clientOptions: {
        RESP: 3,
        clientSideCache: csc
      }
    });

    testUtils.testWithClientPool('Basic Cache Miss and Clear', async client => {
      csc.clear();

      await client.set("x", 1);
      assert.equal(await client.get("x"), '1');

      assert.equal(1, csc.stats().missCount, "Cache Misses");
      assert.equal(0, csc.stats().hitCount, "Cache Hits");
    }, {
      ...GLOBAL.SERVERS.OPEN,
      clientOptions: {
        RESP: 3,
      },
      poolOptions: {
        minimum: 5,
        maximum: 5,
        acquireTimeout: 0,
        cleanupDelay: 1,
        clientSideCache: csc
      }
    })

    testUtils.testWithClientPool('Basic Cache Hit', async client => {
      csc.clear();

      await client.set("x", 1);
      assert.equal(await client.get("x"), '1');
      assert.equal(await client.get("x"), '1');
      assert.equal(await client.get("x"), '1');

      assert.equal(csc.stats().missCount, 1, "Cache Misses");
      assert.equal(csc.stats().hitCount, 2, "Cache Hits");
    }, {
      ...GLOBAL.SERVERS.OPEN,
      clientOptions: {
        RESP: 3,
      },
      poolOptions: {
        minimum: 5,
        maximum: 5,
        acquireTimeout: 0,
        cleanupDelay: 1,
        clientSideCache: csc
      }
    })

    testUtils.testWithClientPool('Basic Cache Manually Invalidate', async client => {
      csc.clear();

      await client.set("x", 1);

      assert.equal(await client.get("x"), '1', 'first get');

      let p = once(csc, 'invalidate');
      await client.set("x", 2);
      await p;

      assert.equal(await client.get("x"), '2', 'second get');

      p = once(csc, 'invalidate');
      await client.set("x", 3);
      await p;

      assert.equal(await client.get("x"), '3');

      assert.equal(csc.stats().missCount, 3, "Cache Misses");
      assert.equal(csc.stats().hitCount, 0, "Cache Hits");
    }, {
      ...GLOBAL.SERVERS.OPEN,
      clientOptions: {
        RESP: 3,
      },
      poolOptions: {
        minimum: 5,
        maximum: 5,
        acquireTimeout: 0,
        cleanupDelay: 1,
        clientSideCache: csc
      }
    })

    testUtils.testWithClientPool('Basic Cache Invalidate via message', async client => {
      csc.clear();

      await client.set('x', 1);
      await client.set('y', 2);

      assert.deepEqual(await client.mGet(['x', 'y']), ['1', '2'], 'first mGet');

      assert.equal(csc.stats().missCount, 1, "Cache Misses");
      assert.equal(csc.stats().hitCount, 0, "Cache Hits");

      let p = once(csc, 'invalidate');
      await client.set("x", 3);
      let [i] = await p;

      assert.equal(i, 'x');

      assert.deepEqual(await client.mGet(['x', 'y']), ['3', '2'], 'second mGet');

      assert.equal(csc.stats().missCount, 2, "Cache Misses");
      assert.equal(csc.stats().hitCount, 0, "Cache Hits");

      p = once(csc, 'invalidate');
      await client.set("y", 4);
      [i] = await p;

      assert.equal(i, 'y');

      assert.deepEqual(await client.mGet(['x', 'y']), ['3', '4'], 'second mGet');

      assert.equal(csc.stats().missCount, 3, "Cache Misses");
      assert.equal(csc.stats().hitCount, 0, "Cache Hits");
    }, {
      ...GLOBAL.SERVERS.OPEN,
      clientOptions: {
        RESP: 3,
      },
      poolOptions: {
        minimum: 5,
        maximum: 5,
        acquireTimeout: 0,
        cleanupDelay: 1,
        clientSideCache: csc
      }
    })
  });
  describe('comprehensive stats', () => {
    const csc = new BasicClientSideCache({
      maxEntries: 2, // Small size to easily trigger evictions
    });

    testUtils.testWithClient('should reflect comprehensive cache operations in stats via BasicClientSideCache', async client => {

      // --- Phase 1: Initial misses and loads ---
      await client.set('keyA', 'valueA_1');
      assert.strictEqual(await client.get('keyA'), 'valueA_1', "Get keyA first time");
      assert.strictEqual(csc.stats().missCount, 1);
      assert.strictEqual(csc.stats().loadSuccessCount, 1);

      await client.set('keyB', 'valueB_1');
      assert.strictEqual(await client.get('keyB'), 'valueB_1', "Get keyB first time");
      assert.strictEqual(csc.stats().missCount, 2);
      assert.strictEqual(csc.stats().loadSuccessCount, 2);

      // --- Phase 2: Cache hits ---
      assert.strictEqual(await client.get('keyA'), 'valueA_1', "Get keyA second time (hit)");
      assert.strictEqual(csc.stats().hitCount, 1);

      assert.strictEqual(await client.get('keyB'), 'valueB_1', "Get keyB second time (hit)");
      assert.strictEqual(csc.stats().hitCount, 2);


      // --- Phase 3: Trigger evictions and more misses/loads ---
      await client.set('keyC', 'valueC_1');
      assert.strictEqual(await client.get('keyC'), 'valueC_1', "Get keyC first time (evicts keyA)");
      assert.strictEqual(csc.stats().missCount, 3);
      assert.strictEqual(csc.stats().loadSuccessCount, 3);
      assert.strictEqual(csc.stats().evictionCount, 1);


      assert.strictEqual(await client.get('keyA'), 'valueA_1', "Get keyA again (miss after eviction)");
      assert.strictEqual(csc.stats().missCount, 4);
      assert.strictEqual(csc.stats().loadSuccessCount, 4);
      assert.strictEqual(csc.stats().evictionCount, 2);


      // --- Phase 4: More hits ---
      assert.strictEqual(await client.get('keyC'), 'valueC_1', "Get keyC again (hit)");
      assert.strictEqual(csc.stats().hitCount, 3);

      // --- Phase 5: Update a key (results in invalidation, then miss/load on next GET) ---
      // Note: A SET operation on an existing cached key should invalidate it.
      // The invalidation itself isn't directly a "hit" or "miss" for stats,
      // but the *next* GET will be a miss.
      await client.set('keyA', 'valueA_2');
      assert.strictEqual(await client.get('keyA'), 'valueA_2', "Get keyA after SET (miss due to invalidation)");

      assert.strictEqual(csc.stats().hitCount, 3);
      assert.strictEqual(csc.stats().loadSuccessCount, 5);



      const stats = csc.stats()

      assert.strictEqual(stats.hitCount, 3, "Final hitCount");
      assert.strictEqual(stats.missCount, 5, "Final missCount");
      assert.strictEqual(stats.loadSuccessCount, 5, "Final loadSuccessCount");
      assert.strictEqual(stats.loadFailureCount, 0, "Final loadFailureCount (expected 0 for this test)");
      assert.strictEqual(stats.evictionCount, 2, "Final evictionCount");
      assert.ok(stats.totalLoadTime >= 0, "Final totalLoadTime should be non-negative");

      assert.strictEqual(stats.requestCount(), 8, "Final requestCount (5 misses + 3 hits)");
      assert.strictEqual(stats.hitRate(), 3 / 8, "Final hitRate");
      assert.strictEqual(stats.missRate(), 5 / 8, "Final missRate");

      assert.strictEqual(stats.loadCount(), 5, "Final loadCount (5 success + 0 failure)");
      assert.strictEqual(stats.loadFailureRate(), 0, "Final loadFailureRate (0 failures / 5 loads)");

      if (stats.loadCount() > 0) {
        assert.ok(stats.averageLoadPenalty() >= 0, "Final averageLoadPenalty should be non-negative");
        assert.strictEqual(stats.averageLoadPenalty(), stats.totalLoadTime / stats.loadCount(), "Average load penalty calculation");
      } else {
        assert.strictEqual(stats.averageLoadPenalty(), 0, "Final averageLoadPenalty should be 0 if no loads");
      }

    }, {
      ...GLOBAL.SERVERS.OPEN,
      clientOptions: {
        RESP: 3,
        clientSideCache: csc
      }
    });
  });
});

let failed = 0;
for (const { title, run } of queue) {
  try {
    await Promise.race([run(), new Promise((_, reject) => setTimeout(() => reject(new Error('timeout after 10 s')), 10000))]);
    console.log(`ok ${title}`);
  } catch (err) {
    failed += 1;
    console.log(`FAIL ${title}: ${err && err.message || err}`);
  }
}
console.log(`${queue.length - failed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
