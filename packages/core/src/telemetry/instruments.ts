import type { Attributes, Counter, Gauge, Histogram, Meter, ObservableResult } from '@opentelemetry/api';
import { classifyDatabaseError } from '../database-errors.js';
import { OutcomeReasons, type InboxOutcome } from '../types.js';
import { currentMeterProvider, perProvider, SCOPE_NAME } from './api.js';
import { safely } from './guard.js';

/** Attribute names: OpenTelemetry's messaging semantic conventions where they exist, `inboxed.*` for the rest. */
export const Attr = {
  MESSAGING_SYSTEM: 'messaging.system',
  DESTINATION: 'messaging.destination.name',
  CONSUMER_GROUP: 'messaging.consumer.group.name',
  OPERATION_TYPE: 'messaging.operation.type',
  OPERATION_NAME: 'messaging.operation.name',
  MESSAGE_ID: 'messaging.message.id',
  BATCH_COUNT: 'messaging.batch.message_count',
  ERROR_TYPE: 'error.type',
  CONSUMER: 'inboxed.consumer',
  STATUS: 'inboxed.outcome.status',
  REASON: 'inboxed.outcome.reason',
  ATTEMPT: 'inboxed.attempt',
  FENCING_TOKEN: 'inboxed.fencing_token',
  TAKEOVER: 'inboxed.takeover',
  TRANSACTION_RESULT: 'inboxed.transaction.result',
  TRANSACTION_OPERATION: 'inboxed.transaction.operation',
  TRANSACTION_RUNS: 'inboxed.transaction.runs',
  CLAIM_RESULT: 'inboxed.claim.result',
} as const;

/** Histogram buckets in seconds for work that takes milliseconds to minutes (the semantic conventions' advice for messaging durations). */
const SECONDS_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10];

/** Reasons from a fixed set: recorded as an attribute. Business rejection reasons (free text) are not, to keep cardinality bounded. */
const STABLE_REASONS = new Set<string>([...Object.values(OutcomeReasons), 'unparseable-body']);

/** @internal The outcome's reason when it is one of the stable ones, else undefined. */
export function stableReason(outcome: InboxOutcome): string | undefined {
  return outcome.reason !== undefined && STABLE_REASONS.has(outcome.reason) ? outcome.reason : undefined;
}

/** @internal `error.type` of an outcome: the inboxed error code of a failed one (`retry`, `busy`, `dead-letter`, `conflict`). */
export function outcomeErrorType(outcome: InboxOutcome): string | undefined {
  if (outcome.status === 'processed' || outcome.status === 'duplicate' || outcome.status === 'rejected') return undefined;
  return outcome.error === undefined ? outcome.status : String(outcome.error.code);
}

/** @internal `error.type` of a thrown value: its code when it has a string one, else its class name. */
export function errorType(error: unknown): string {
  if (typeof error === 'object' && error !== null) {
    const code = (error as { code?: unknown }).code;
    if (typeof code === 'string' && code !== '') return code;
    const name = (error as { name?: unknown }).name;
    if (typeof name === 'string' && name !== '') return name;
  }
  return '_OTHER';
}

/** @internal Attributes without the undefined ones. */
export function defined(attributes: Record<string, string | number | boolean | undefined>): Attributes {
  const out: Attributes = {};
  for (const [key, value] of Object.entries(attributes)) if (value !== undefined) out[key] = value;
  return out;
}

/** Every instrument inboxed records; see the README's OpenTelemetry section. */
interface Instruments {
  processDuration: Histogram;
  consumedMessages: Counter;
  outcomes: Counter;
  retries: Counter;
  deadLetters: Counter;
  busy: Counter;
  takeovers: Counter;
  settleDuration: Histogram;
  handlerDuration: Histogram;
  transactionDuration: Histogram;
  transactionConflicts: Counter;
  claimDuration: Histogram;
  retentionDeleted: Counter;
  retentionOldestAge: Gauge | undefined;
}

/** Deliveries in flight per consumer, read when metrics are collected. */
const inFlightSources = new Set<{ ref: WeakRef<{ readonly size: number }>; attributes: Attributes }>();
const registered = new WeakSet<object>();

/**
 * @internal Reports `source.size` (an adapter's `InFlight`) as `inboxed.deliveries.in_flight` with
 * `attributes`, for as long as the source lives. Registering the same source again does nothing.
 */
export function registerInFlight(source: { readonly size: number }, attributes: Attributes): void {
  if (registered.has(source)) return;
  registered.add(source);
  inFlightSources.add({ ref: new WeakRef(source), attributes });
  safely(instruments, undefined); // so the observable exists before the first delivery
}

function observeInFlight(result: ObservableResult): void {
  for (const entry of inFlightSources) {
    const source = entry.ref.deref();
    if (source === undefined) inFlightSources.delete(entry);
    else safely(() => result.observe(source.size, entry.attributes), undefined);
  }
}

function createInstruments(meter: Meter): Instruments {
  const seconds = (name: string, description: string) =>
    meter.createHistogram(name, { description, unit: 's', advice: { explicitBucketBoundaries: SECONDS_BUCKETS } });
  meter
    .createObservableUpDownCounter('inboxed.deliveries.in_flight', {
      description: 'Deliveries a broker consumer is processing or settling now.',
      unit: '{delivery}',
    })
    .addCallback(observeInFlight);
  return {
    processDuration: seconds('messaging.process.duration', 'Duration of processing a delivery (a batch, for a batch processor) by the inbox processor.'),
    consumedMessages: meter.createCounter('messaging.client.consumed.messages', {
      description: 'Messages delivered to the inbox processor.',
      unit: '{message}',
    }),
    outcomes: meter.createCounter('inboxed.outcomes', { description: 'Deliveries settled with the broker, by outcome.', unit: '{outcome}' }),
    retries: meter.createCounter('inboxed.retries', { description: 'Deliveries settled as `retry` (redelivered later).', unit: '{delivery}' }),
    deadLetters: meter.createCounter('inboxed.dead_letters', {
      description: 'Deliveries dead-lettered (`dead-letter` and `conflict` outcomes).',
      unit: '{delivery}',
    }),
    busy: meter.createCounter('inboxed.busy', {
      description: "Leased mode: deliveries settled as `busy` (another worker's live lease).",
      unit: '{delivery}',
    }),
    takeovers: meter.createCounter('inboxed.takeovers', {
      description: 'Leased mode: claims that took over an expired lease.',
      unit: '{claim}',
    }),
    settleDuration: seconds('inboxed.settle.duration', 'From the outcome being decided to the delivery being settled with the broker.'),
    handlerDuration: seconds('inboxed.handler.duration', "Duration of the user's handler."),
    transactionDuration: seconds(
      'inboxed.transaction.duration',
      'Duration of an inbox transaction (claim, handler, completion check, commit; re-runs included).',
    ),
    transactionConflicts: meter.createCounter('inboxed.transaction.conflicts', {
      description: 'Serialization failures and deadlocks of inbox transactions (each one re-runs the transaction, or ends it as `transaction-conflict`).',
      unit: '{conflict}',
    }),
    claimDuration: seconds(
      'inboxed.claim.duration',
      "Duration of the claim statement, which includes waiting on a concurrent copy's row lock (up to lockTimeoutMs).",
    ),
    retentionDeleted: meter.createCounter('inboxed.retention.deleted_rows', { description: 'Inbox rows deleted by retention.', unit: '{row}' }),
    retentionOldestAge:
      typeof meter.createGauge === 'function'
        ? meter.createGauge('inboxed.retention.oldest_age', { description: 'Age of the oldest inbox row after a retention run.', unit: 's' })
        : undefined,
  };
}

/**
 * @internal The instruments of the current meter provider; undefined without `@opentelemetry/api`,
 * or while its meter is the API's no-op one (no SDK registered): every measurement would be dropped,
 * so the callers skip building attributes per delivery. A provider registered later is picked up
 * by `perProvider` (the provider changes), like any other.
 */
const instruments = perProvider(currentMeterProvider, (provider, otel, version) => {
  const meter = provider.getMeter(SCOPE_NAME, version);
  return meter === otel.createNoopMeter() ? undefined : createInstruments(meter);
});

/** @internal True when metrics are recorded: `@opentelemetry/api` is there and its meter is not the no-op one. */
export function recordingMetrics(): boolean {
  return safely(() => instruments() !== undefined, false);
}

/** @internal Attributes a broker consumer contributes to every measurement of its deliveries. */
export interface MessagingAttributes {
  system: string;
  destination?: string | undefined;
  consumerGroup?: string | undefined;
}

/** @internal The semantic-convention attributes of a consumer's deliveries: system, destination, consumer group. */
export function messagingAttributes(messaging: MessagingAttributes | undefined, destination?: string): Attributes {
  return defined({
    [Attr.MESSAGING_SYSTEM]: messaging?.system,
    [Attr.DESTINATION]: destination ?? messaging?.destination,
    [Attr.CONSUMER_GROUP]: messaging?.consumerGroup,
  });
}

/** @internal Records messages handed to the processor (`messaging.client.consumed.messages`). */
export function recordConsumed(count: number, attributes: Attributes): void {
  safely(() => instruments()?.consumedMessages.add(count, attributes), undefined);
}

/** @internal Records one process operation's duration (`messaging.process.duration`). */
export function recordProcessDuration(seconds: number, attributes: Attributes, errorTypeOf: string | undefined): void {
  safely(
    () => instruments()?.processDuration.record(seconds, errorTypeOf === undefined ? attributes : { ...attributes, [Attr.ERROR_TYPE]: errorTypeOf }),
    undefined,
  );
}

/** @internal Records a settled delivery: its outcome, the status counters, takeovers, and how long settling took. */
export function recordSettled(outcome: InboxOutcome, messaging: Attributes, settleSeconds: number): void {
  safely(() => settled(outcome, messaging, settleSeconds), undefined);
}

function settled(outcome: InboxOutcome, messaging: Attributes, settleSeconds: number): void {
  const meters = instruments();
  if (meters === undefined) return;
  const attributes: Attributes = {
    ...messaging,
    ...defined({
      [Attr.CONSUMER]: outcome.consumer,
      [Attr.STATUS]: outcome.status,
      [Attr.REASON]: stableReason(outcome),
      [Attr.ERROR_TYPE]: outcomeErrorType(outcome),
    }),
  };
  meters.outcomes.add(1, attributes);
  if (outcome.status === 'retry') meters.retries.add(1, attributes);
  else if (outcome.status === 'busy') meters.busy.add(1, attributes);
  else if (outcome.status === 'dead-letter' || outcome.status === 'conflict') meters.deadLetters.add(1, attributes);
  if (outcome.takeover === true) meters.takeovers.add(1, { ...messaging, [Attr.CONSUMER]: outcome.consumer });
  meters.settleDuration.record(Math.max(0, settleSeconds), { ...messaging, [Attr.CONSUMER]: outcome.consumer, [Attr.STATUS]: outcome.status });
}

/** @internal Records a handler call (`inboxed.handler.duration`), with `error.type` when it threw or timed out. */
export function recordHandler(consumer: string, seconds: number, error: { thrown: unknown } | undefined): void {
  safely(
    () =>
      instruments()?.handlerDuration.record(
        seconds,
        defined({ [Attr.CONSUMER]: consumer, [Attr.ERROR_TYPE]: error === undefined ? undefined : errorType(error.thrown) }),
      ),
    undefined,
  );
}

/** @internal Records one inbox transaction (`inboxed.transaction.duration`) and its conflicts. */
export function recordTransaction(consumer: string, operation: string, seconds: number, result: string, conflicts: number): void {
  safely(() => {
    const meters = instruments();
    if (meters === undefined) return;
    meters.transactionDuration.record(seconds, { [Attr.CONSUMER]: consumer, [Attr.TRANSACTION_OPERATION]: operation, [Attr.TRANSACTION_RESULT]: result });
    if (conflicts > 0) meters.transactionConflicts.add(conflicts, { [Attr.CONSUMER]: consumer });
  }, undefined);
}

/**
 * @internal Records a claim statement (`inboxed.claim.duration`): `claimed` (every row new to this
 * consumer), `known` (some already there), `busy` (leased: a live lease), `lock_timeout` (waited
 * `lockTimeoutMs` on a concurrent copy) or `failed`.
 */
export function recordClaim(consumer: string, seconds: number, result: 'claimed' | 'known' | 'busy' | 'lock_timeout' | 'failed'): void {
  safely(() => instruments()?.claimDuration.record(seconds, { [Attr.CONSUMER]: consumer, [Attr.CLAIM_RESULT]: result }), undefined);
}

/** @internal Records the claim statement of an inbox transaction that started at `started` (`performance.now()`), by what it returned or threw. */
export function recordClaimOf(consumer: string, started: number, rows: number, result: { claimed: number } | { error: unknown }): void {
  if (rows === 0) return; // leased mode's completion claims nothing
  const seconds = (performance.now() - started) / 1000;
  safely(() => {
    if ('error' in result) recordClaim(consumer, seconds, classifyDatabaseError(result.error) === 'lock-timeout' ? 'lock_timeout' : 'failed');
    else recordClaim(consumer, seconds, result.claimed === rows ? 'claimed' : 'known');
  }, undefined);
}

/** What one retention run found; see {@link recordRetentionRun}. */
export interface RetentionMeasurement {
  /** Inbox rows deleted. */
  deleted: number;
  /** Age of the oldest inbox row left, in ms, when known. */
  oldestAgeMs?: number | undefined;
  /** The consumer whose rows were purged; undefined for every consumer. */
  consumer?: string | undefined;
}

/**
 * @internal Records a retention run (called by `purgeInbox`): `inboxed.retention.deleted_rows` (counter) and, when `oldestAgeMs` is
 * given, `inboxed.retention.oldest_age` (gauge, in s), with `inboxed.consumer` when the run was
 * scoped to one consumer. A no-op without OpenTelemetry.
 */
export function recordRetentionRun(run: RetentionMeasurement): void {
  safely(() => {
    const meters = instruments();
    if (meters === undefined) return;
    const attributes = defined({ [Attr.CONSUMER]: run.consumer });
    meters.retentionDeleted.add(run.deleted, attributes);
    if (run.oldestAgeMs !== undefined && Number.isFinite(run.oldestAgeMs)) meters.retentionOldestAge?.record(Math.max(0, run.oldestAgeMs) / 1000, attributes);
  }, undefined);
}
