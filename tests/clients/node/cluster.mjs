// Runs node-redis's cluster client (@redis/client createCluster, unchanged) against a cluster.
// Usage: node cluster.mjs <port of any node> [resp]   (resp: 2 or 3; both when omitted)
// Prints "ok <name>" / "FAIL <name>: <why>" lines and a summary; exits 1 on a failure.
// The same script passes against a 3-node redis-server 7.0.15 cluster (tests/cluster/test_node_cluster.py).
import assert from 'node:assert/strict';
import { check, finish } from './harness.mjs';
import { createCluster } from '@redis/client';

const port = Number(process.argv[2] ?? 7000);
const protocols = process.argv[3] ? [Number(process.argv[3])] : [2, 3];

async function suite(RESP) {
  const cluster = createCluster({ rootNodes: [{ url: `redis://127.0.0.1:${port}` }], RESP });
  cluster.on('error', (err) => console.log(`cluster error: ${err}`));
  await cluster.connect();
  const tag = `resp${RESP}`;
  await check(`[${tag}] set/get over every slot owner`, async () => {
    for (let i = 0; i < 200; i++) assert.equal(await cluster.set(`${tag}:k${i}`, `v${i}`), 'OK');
    for (let i = 0; i < 200; i++) assert.equal(await cluster.get(`${tag}:k${i}`), `v${i}`);
  });
  await check(`[${tag}] masters known`, async () => {
    assert.ok(cluster.masters.length >= 1);
  });
  await check(`[${tag}] hash tags: multi-key commands in one slot`, async () => {
    assert.equal(await cluster.mSet([`{${tag}}a`, '1', `{${tag}}b`, '2']), 'OK');
    assert.deepEqual(await cluster.mGet([`{${tag}}a`, `{${tag}}b`]), ['1', '2']);
  });
  await check(`[${tag}] MULTI on one slot`, async () => {
    const replies = await cluster.multi(`{${tag}}m`).set(`{${tag}}m`, '5').incr(`{${tag}}m`).exec();
    assert.deepEqual(replies, ['OK', 6]);
  });
  await check(`[${tag}] cross-slot refused`, async () => {
    const node = cluster.masters[0];
    const client = await cluster.nodeClient(node);
    await assert.rejects(client.sendCommand(['MSET', 'a', '1', 'b', '2']), /CROSSSLOT|MOVED/);
  });
  await check(`[${tag}] hashes and lists`, async () => {
    await cluster.hSet(`${tag}:h`, { f: 'v' });
    assert.deepEqual({ ...(await cluster.hGetAll(`${tag}:h`)) }, { f: 'v' });
    await cluster.rPush(`${tag}:l`, ['x', 'y']);
    assert.deepEqual(await cluster.lRange(`${tag}:l`, 0, -1), ['x', 'y']);
  });
  await cluster.close();
}

for (const RESP of protocols) await suite(RESP);
finish('ok');
