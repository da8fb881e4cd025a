// Runs node-redis (@redis/client, unchanged) against a server and checks the replies it decodes.
// Usage: node check.mjs <port> [resp]   (resp: 2 or 3; both when omitted)
// Prints one line per check ("ok <name>" / "FAIL <name>: <why>") and a summary; exits 1 on a failure.
// The same script passes against Debian's redis-server 7, which is how the expectations were checked.
import assert from 'node:assert/strict';
import { check, finish } from './harness.mjs';
import { createClient } from '@redis/client';

const port = Number(process.argv[2] ?? 6379);
const protocols = process.argv[3] ? [Number(process.argv[3])] : [2, 3];

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const entries = (obj) => Object.fromEntries(obj instanceof Map ? obj : Object.entries(obj));

async function suite(RESP) {
  const url = `redis://127.0.0.1:${port}`;
  const client = createClient({ url, RESP });
  client.on('error', (err) => console.log(`client error: ${err}`));
  await client.connect();
  await client.flushAll();
  const p = `resp${RESP}:`;

  await check(`${p}strings`, async () => {
    assert.equal(await client.set('s', 'v'), 'OK');
    assert.equal(await client.get('s'), 'v');
    assert.equal(await client.get('missing'), null);
    assert.equal(await client.set('s', 'w', { condition: 'NX' }), null);
    assert.equal(await client.append('s', 'x'), 2);
    assert.equal(await client.incrBy('n', 5), 5);
    assert.equal(await client.incrByFloat('f', 1.5), '1.5');
    assert.deepEqual(await client.mGet(['s', 'n', 'missing']), ['vx', '5', null]);
    assert.equal(await client.set('t', 'v', { expiration: { type: 'PX', value: 50000 } }), 'OK');
    const ttl = await client.pTTL('t');
    assert.ok(ttl > 40000 && ttl <= 50000, `pttl ${ttl}`);
    assert.equal(await client.getRange('s', 0, 0), 'v');
    assert.equal(await client.strLen('s'), 2);
  });

  await check(`${p}keys`, async () => {
    assert.equal(await client.exists(['s', 'n', 'missing']), 2);
    assert.equal(await client.type('s'), 'string');
    assert.equal(await client.expire('s', 100), 1);
    assert.equal(await client.ttl('s'), 100);
    assert.equal(await client.persist('s'), 1);
    assert.equal(await client.rename('s', 's2'), 'OK');
    const found = [];
    for await (const keys of client.scanIterator({ MATCH: 's*', COUNT: 10 })) found.push(...keys);
    assert.deepEqual(found.sort(), ['s2']);
    assert.equal(await client.del(['s2', 'n', 'f', 't']), 4);
    assert.equal(await client.dbSize(), 0);
  });

  await check(`${p}hashes`, async () => {
    assert.equal(await client.hSet('h', { a: '1', b: '2' }), 2);
    assert.deepEqual(entries(await client.hGetAll('h')), { a: '1', b: '2' });
    assert.equal(await client.hGet('h', 'a'), '1');
    assert.deepEqual(await client.hmGet('h', ['a', 'zz']), ['1', null]);
    assert.equal(await client.hIncrBy('h', 'a', 10), 11);
    assert.deepEqual((await client.hKeys('h')).sort(), ['a', 'b']);
    assert.equal(await client.hLen('h'), 2);
    assert.equal(await client.hExists('h', 'b'), 1);
    assert.equal(await client.hDel('h', ['a', 'b']), 2);
    assert.equal(await client.exists('h'), 0);
  });

  await check(`${p}lists`, async () => {
    assert.equal(await client.rPush('l', ['a', 'b', 'c']), 3);
    assert.equal(await client.lPush('l', 'z'), 4);
    assert.deepEqual(await client.lRange('l', 0, -1), ['z', 'a', 'b', 'c']);
    assert.equal(await client.lPop('l'), 'z');
    assert.deepEqual(await client.rPopCount('l', 2), ['c', 'b']);
    assert.equal(await client.lLen('l'), 1);
    assert.equal(await client.lPos('l', 'a'), 0);
    assert.equal(await client.lMove('l', 'l2', 'LEFT', 'RIGHT'), 'a');
    assert.equal(await client.exists('l'), 0);
  });

  await check(`${p}blocking pop`, async () => {
    const blocked = client.duplicate();
    await blocked.connect();
    const pending = blocked.blPop('bl', 5);
    await sleep(100);
    await client.rPush('bl', 'x');
    assert.deepEqual(await pending, { key: 'bl', element: 'x' });
    assert.equal(await blocked.blPop('bl', 0.1), null);
    blocked.destroy();
  });

  await check(`${p}sets`, async () => {
    assert.equal(await client.sAdd('a', ['1', '2', '3']), 3);
    await client.sAdd('b', ['2', '3', '4']);
    assert.deepEqual((await client.sInter(['a', 'b'])).sort(), ['2', '3']);
    assert.deepEqual((await client.sUnion(['a', 'b'])).sort(), ['1', '2', '3', '4']);
    assert.deepEqual((await client.sMembers('a')).sort(), ['1', '2', '3']);
    assert.equal(await client.sIsMember('a', '1'), 1);
    assert.deepEqual(await client.smIsMember('a', ['1', '9']), [1, 0]);
    assert.equal(await client.sCard('b'), 3);
  });

  await check(`${p}sorted sets`, async () => {
    assert.equal(await client.zAdd('z', [{ score: 1, value: 'a' }, { score: 2.5, value: 'b' }]), 2);
    assert.deepEqual(await client.zRange('z', 0, -1), ['a', 'b']);
    assert.deepEqual(await client.zRangeWithScores('z', 0, -1), [
      { value: 'a', score: 1 },
      { value: 'b', score: 2.5 },
    ]);
    assert.equal(await client.zScore('z', 'b'), 2.5);
    assert.equal(await client.zIncrBy('z', 1, 'a'), 2);
    assert.equal(await client.zRank('z', 'a'), 0);
    assert.deepEqual(await client.zPopMin('z'), { value: 'a', score: 2 });
    assert.equal(await client.zCount('z', '-inf', '+inf'), 1);
    assert.deepEqual(await client.zRangeByScore('z', 0, 10), ['b']);
  });

  await check(`${p}streams`, async () => {
    assert.equal(await client.xAdd('x', '1-1', { f: 'v1' }), '1-1');
    assert.equal(await client.xAdd('x', '*', { f: 'v2' }), (await client.xRevRange('x', '+', '-', { COUNT: 1 }))[0].id);
    const range = await client.xRange('x', '-', '+');
    assert.equal(range.length, 2);
    assert.deepEqual(entries(range[0].message), { f: 'v1' });
    assert.equal(await client.xLen('x'), 2);
    assert.equal(await client.xGroupCreate('x', 'g', '0'), 'OK');
    const read = await client.xReadGroup('g', 'c', { key: 'x', id: '>' }, { COUNT: 1 });
    const first = read instanceof Map || !Array.isArray(read) ? entries(read).x : read[0].messages;
    assert.equal(first[0].id, '1-1');
    assert.equal(await client.xAck('x', 'g', '1-1'), 1);
    const pending = await client.xPending('x', 'g');
    assert.equal(pending.pending, 0);
    const groups = await client.xInfoGroups('x');
    assert.equal(groups[0].name, 'g');
    assert.equal(groups[0]['last-delivered-id'], '1-1');
    assert.equal(await client.xTrim('x', 'MAXLEN', 0), 2);
  });

  await check(`${p}geo, hyperloglog, bitmaps, scans`, async () => {
    assert.equal(await client.geoAdd('geo', [
      { longitude: 13.361389, latitude: 38.115556, member: 'Palermo' },
      { longitude: 15.087269, latitude: 37.502669, member: 'Catania' },
    ]), 2);
    const dist = Number(await client.geoDist('geo', 'Palermo', 'Catania', 'km'));
    assert.ok(Math.abs(dist - 166.2742) < 0.001, `geodist ${dist}`);
    assert.deepEqual(await client.geoSearch('geo', { longitude: 15, latitude: 37 }, { radius: 100, unit: 'km' }), ['Catania']);
    assert.equal(await client.pfAdd('hll', ['a', 'b', 'c', 'a']), 1);
    assert.equal(await client.pfCount('hll'), 3);
    assert.equal(await client.setBit('bits', 7, 1), 0);
    assert.equal(await client.bitCount('bits'), 1);
    assert.equal(await client.getBit('bits', 7), 1);
    await client.hSet('hs', Object.fromEntries(Array.from({ length: 50 }, (_, i) => [`f${i}`, `${i}`])));
    let fields = 0;
    for await (const batch of client.hScanIterator('hs')) fields += batch.length;
    assert.equal(fields, 50);
    assert.equal(await client.copy('hll', 'hll2'), 1);
    assert.equal(await client.getDel('nothing'), null);
  });

  await check(`${p}transactions`, async () => {
    const replies = await client.multi().set('m', '1').incr('m').get('m').exec();
    assert.deepEqual(replies, ['OK', 2, '2']);
    const other = client.duplicate();
    await other.connect();
    await client.watch('m');
    await other.set('m', 'changed');
    await assert.rejects(client.multi().set('m', 'mine').exec(), (err) => err.constructor.name === 'WatchError');
    assert.equal(await client.get('m'), 'changed');
    other.destroy();
    await assert.rejects(client.multi().set('m', '1').lPush('m', 'x').exec(), (err) => {
      assert.deepEqual(err.errorIndexes, [1]);
      assert.equal(err.replies[0], 'OK');
      assert.match(String(err.replies[1]), /WRONGTYPE/);
      return true;
    });
  });

  await check(`${p}pipelines`, async () => {
    const many = await Promise.all(Array.from({ length: 200 }, (_, i) => client.set(`k${i}`, `${i}`)));
    assert.equal(many.filter((r) => r === 'OK').length, 200);
    const replies = await client.multi().get('k1').get('k199').incr('k2').execAsPipeline();
    assert.deepEqual(replies, ['1', '199', 3]);
  });

  await check(`${p}errors`, async () => {
    await assert.rejects(client.lPush('k1', 'x'), /^.*WRONGTYPE Operation against a key holding the wrong kind of value/);
    await assert.rejects(client.sendCommand(['NOSUCHCMD']), /ERR unknown command 'NOSUCHCMD'/);
    await assert.rejects(client.sendCommand(['INCRBY', 'k1', 'x']), /ERR value is not an integer or out of range/);
  });

  await check(`${p}lua`, async () => {
    assert.equal(await client.eval('return redis.call("SET", KEYS[1], ARGV[1])', { keys: ['lk'], arguments: ['lv'] }), 'OK');
    assert.equal(await client.eval('return redis.call("GET", KEYS[1])', { keys: ['lk'] }), 'lv');
    assert.deepEqual(await client.eval('return {1, 2, "three", {4}}'), [1, 2, 'three', [4]]);
    const sha = await client.scriptLoad('return ARGV[1]');
    assert.equal(await client.evalSha(sha, { arguments: ['back'] }), 'back');
    assert.deepEqual(await client.scriptExists(sha), [1]);
    await assert.rejects(client.eval('return redis.call("LPUSH", KEYS[1], "x")', { keys: ['lk'] }), /WRONGTYPE/);
  });

  await check(`${p}pubsub`, async () => {
    const subscriber = client.duplicate();
    await subscriber.connect();
    const got = [];
    await subscriber.subscribe('chan', (message, channel) => got.push([channel, message]));
    await subscriber.pSubscribe('pat.*', (message, channel) => got.push([channel, message]));
    assert.equal(await client.publish('chan', 'hello'), 1);
    assert.equal(await client.publish('pat.x', 'world'), 1);
    for (let i = 0; i < 50 && got.length < 2; i++) await sleep(20);
    assert.deepEqual(got, [['chan', 'hello'], ['pat.x', 'world']]);
    assert.deepEqual(await client.pubSubChannels(), ['chan']);
    assert.equal(await client.pubSubNumPat(), 1);
    await subscriber.unsubscribe('chan');
    await subscriber.pUnsubscribe('pat.*');
    assert.equal(await client.publish('chan', 'nobody'), 0);
    subscriber.destroy();
  });

  await check(`${p}server`, async () => {
    assert.equal(await client.ping(), 'PONG');
    assert.equal(await client.echo('hi'), 'hi');
    const info = await client.info('server');
    assert.match(String(info), /redis_version:\d+\.\d+/);
    const config = entries(await client.configGet('maxmemory-policy'));
    assert.ok('maxmemory-policy' in config);
    assert.equal(typeof (await client.clientId()), 'number');
    const time = await client.time();
    assert.ok(time instanceof Date || Array.isArray(time));
    const hello = await client.sendCommand(['HELLO', String(RESP)]);
    assert.equal(entries(RESP === 3 ? hello : pairs(hello)).proto, RESP);
  });

  if (RESP === 3) {
    await check(`${p}resp3 types`, async () => {
      await client.hSet('r3', { a: '1' });
      const map = await client.sendCommand(['HGETALL', 'r3']);
      assert.ok(!Array.isArray(map), 'a RESP3 map, not a flat array');
      const score = await client.sendCommand(['ZSCORE', 'z', 'b']);
      assert.equal(score, 2.5, 'a RESP3 double');
      const set = await client.sendCommand(['SMEMBERS', 'a']);
      assert.equal([...set].length, 3);
      assert.equal(await client.sendCommand(['GET', 'nothing']), null);
    });
  }

  await client.flushAll();
  client.destroy();
}

function pairs(flat) {
  const out = {};
  for (let i = 0; i + 1 < flat.length; i += 2) out[flat[i]] = flat[i + 1];
  return out;
}

for (const RESP of protocols) {
  await suite(RESP);
}
finish();
