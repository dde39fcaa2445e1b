// bench-compare's pg-boss harness: a burn-down of no-op jobs on pg-boss (the version pinned in
// package.json), so that skiplock's `bench throughput` can be set beside it in the same run on the
// same server. make bench-compare installs it (npm ci) and runs it.
//
//   node burn.js --dsn URL --jobs 100000 --batch 1000 --concurrency 4
//
// It uses the schema pgboss_bench and deletes its queue first: point it at a database of its own.
// It inserts the jobs (boss.insert, 1,000 per call), then starts `work` with --batch jobs per fetch
// and --concurrency local workers (burst fetching on, 0.5 s poll), and times from there until the
// database shows every job completed (committed completions, as skiplock's bench counts them). It
// prints one JSON line. pg-boss 12 declares Node >= 22; the driver records the Node that ran it.
'use strict';
const { PgBoss } = require('pg-boss');
const { Client } = require('pg');

function args() {
  const a = { dsn: '', jobs: 100000, batch: 1000, concurrency: 4, timeout: 600 };
  const v = process.argv.slice(2);
  for (let i = 0; i < v.length; i += 2) {
    const k = v[i].replace(/^--?/, '');
    if (!(k in a)) throw new Error('unknown flag ' + v[i]);
    a[k] = typeof a[k] === 'number' ? Number(v[i + 1]) : v[i + 1];
  }
  if (!a.dsn) throw new Error('--dsn is required');
  return a;
}

async function main() {
  const a = args();
  const version = require('pg-boss/package.json').version;
  const boss = new PgBoss({ connectionString: a.dsn, schema: 'pgboss_bench', max: a.concurrency + 4,
    supervise: true, schedule: false });
  boss.on('error', (e) => console.error('pg-boss error:', e.message));
  await boss.start();
  const q = 'noop';
  await boss.deleteQueue(q).catch(() => {});
  await boss.createQueue(q);
  for (let done = 0; done < a.jobs; done += 1000) {
    const jobs = [];
    for (let i = 0; i < Math.min(1000, a.jobs - done); i++) jobs.push({ data: {} });
    await boss.insert(q, jobs);
  }
  const db = new Client({ connectionString: a.dsn });
  await db.connect();
  const completed = async () => Number((await db.query(
    "SELECT count(*) FROM pgboss_bench.job WHERE name = $1 AND state = 'completed'", [q])).rows[0].count);
  const t0 = Date.now();
  await boss.work(q, { batchSize: a.batch, localConcurrency: a.concurrency, pollingIntervalSeconds: 0.5,
    burstWhenBatchFull: true }, async () => {});
  while ((await completed()) < a.jobs) {
    if (Date.now() - t0 > a.timeout * 1000) throw new Error(`not done after ${a.timeout} s`);
    await new Promise((r) => setTimeout(r, 20));
  }
  const s = (Date.now() - t0) / 1000;
  console.log(JSON.stringify({ tool: 'pg-boss', version, node: process.version, jobs: a.jobs, batch: a.batch,
    concurrency: a.concurrency, seconds: s, jobs_per_s: a.jobs / s }));
  await db.end();
  await boss.stop({ graceful: false, wait: true });
}

main().catch((e) => { console.error(e); process.exit(1); });
