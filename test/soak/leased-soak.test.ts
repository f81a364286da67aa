import { type FakePaymentProvider, startFakePaymentProvider } from '@inboxed/test-support';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createHarness } from '../../packages/amqp/test/harness.js';
import { SOAK_MESSAGES, soak } from './broker-soak.js';

/** Lease of every claim; the handler takes close to it (provider latency + local work: 300-900 ms). */
const LEASE_MS = 1_000;
const PROVIDER_LATENCY_MS = [200, 500] as const;
const WORK_MS = '100-400';
/** Handler calls that pause 1.5 x LEASE_MS after the charge, ignoring their signal: completions the fence must refuse when a copy took over meanwhile. */
const STALL_SHARE = 0.03;
/** Charges whose response the provider drops (the worker cannot know it charged, fails, and retries with the same key). */
const LOST_RESPONSES = 0.03;

let provider: FakePaymentProvider;
beforeAll(async () => {
  provider = await startFakePaymentProvider({
    latencyMs: () => PROVIDER_LATENCY_MS[0] + Math.random() * (PROVIDER_LATENCY_MS[1] - PROVIDER_LATENCY_MS[0]),
    chargeAt: 0.5,
    loseResponses: LOST_RESPONSES,
  });
});
afterAll(async () => {
  await provider?.close();
});

const count = (output: string, pattern: RegExp) => output.match(pattern)?.length ?? 0;

/**
 * Half the broker soaks' size: each delivery here holds a lease for 300-900 ms of provider latency
 * and work, about a hundred times a transactional handler's, so half as many deliveries still span
 * as many kills and takeovers (about 20 SIGKILLs and 100+ takeovers at the CI size).
 */
const LEASED_SOAK_MESSAGES = Math.max(500, Math.round(SOAK_MESSAGES / 2));

it(`amqp leased soak: ${LEASED_SOAK_MESSAGES} deliveries, 3 leased workers killed at random, every payment charged exactly once`, async () => {
  let seen = { takeovers: 0, busy: 0, fenced: 0, found: 0, processedRows: 0 };
  const summary = await soak(createHarness, {
    mode: 'leased',
    messages: LEASED_SOAK_MESSAGES,
    conflicts: 0, // a conflict is dead-lettered; this soak asserts that nothing is
    consumer: 'amqp.leased-soak',
    env: { PROVIDER_URL: provider.url, LEASE_MS: String(LEASE_MS), WORK_MS, STALL_SHARE: String(STALL_SHARE) },
    async verify({ t, plan, workers }) {
      // Every inbox row completed (none left 'processing'), one per unique id.
      const statuses = await t.query<{ status: string; n: number }>(`select status, count(*)::int as n from "${t.schema}".inbox group by 1`);
      expect(statuses.map((s) => [s.status, Number(s.n)])).toEqual([['processed', plan.ids.length]]);
      // The provider charged every payment exactly once: per key, per payment reference, in total.
      const byReference = provider.chargesByReference();
      const wrong = plan.ids.filter((id) => byReference.get(id) !== 1).map((id) => `${id}: ${byReference.get(id) ?? 0}`);
      expect(wrong, 'payments not charged exactly once').toEqual([]);
      expect(provider.totalCharges()).toBe(plan.ids.length);
      const keys = new Set(provider.charges().map((c) => c.idempotencyKey));
      expect(keys.size).toBe(plan.ids.length);
      for (const key of keys) expect(provider.chargesFor(key!)).toBe(1);
      // Every stored result names the charge the provider made for its payment.
      const results = await t.query<{ message_id: string; result: string }>(`select message_id, result from "${t.schema}".inbox`);
      const chargeOf = new Map(provider.charges().map((c) => [c.reference, c.id]));
      expect(results.filter((r) => JSON.parse(r.result).chargeId !== chargeOf.get(r.message_id))).toEqual([]);
      const output = workers.map((w) => w.output()).join('\n');
      seen = {
        takeovers: count(output, /^handling \S+ token=\d+ takeover=true /gm),
        busy: count(output, /^settling busy /gm),
        fenced: count(output, /^fenced /gm),
        found: count(output, /^found /gm),
        processedRows: plan.ids.length,
      };
      // Kills with claims in flight leave leases to run out: copies meet them (busy) and take them over.
      expect(seen.takeovers).toBeGreaterThan(0);
      expect(seen.busy).toBeGreaterThan(0);
    },
  });
  expect(summary.deadLetters).toBe(0);
  const stats = provider.stats();
  process.stdout.write(
    `soak amqp leased: N=${summary.published} (${summary.unique} unique payments, ${summary.duplicates} duplicate deliveries = ` +
      `${Math.round((100 * summary.duplicates) / summary.published)}%), 3 workers, leaseMs=${LEASE_MS}, handler ~300-900 ms ` +
      `(${STALL_SHARE * 100}% stalled 1.5 x leaseMs), ${summary.kills} SIGKILLs, takeovers seen=${seen.takeovers} ` +
      `(${seen.found} found the earlier charge), busy outcomes=${seen.busy}, fenced completions=${seen.fenced}, ` +
      `charges=${provider.totalCharges()} (one per payment; ${stats.posts} POSTs, ${stats.replays} replayed by key, ` +
      `${stats.lostResponses} responses lost), inbox processed=${seen.processedRows}, dead letters=0, pending=0; ${summary.seconds.toFixed(0)} s\n`,
  );
});
