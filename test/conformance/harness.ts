import type { AnyInboxProcessor, InboxOutcome } from '@inboxed/core';
import type { InboxConsumer } from '@inboxed/core/adapter';

/** A message as a test publishes it. */
export interface PublishedMessage {
  /** The producer's message id, put where the broker's consumer looks first; none when undefined. */
  id?: string;
  /** A JSON payload (the default body). */
  payload?: unknown;
  /** A raw body instead of `payload` (e.g. text that is not JSON), published as JSON content. */
  body?: string;
}

/** A message found in the dead-letter target, with the reason headers every adapter writes. */
export interface DeadLetter {
  /** `x-inboxed-message-id`. */
  id: string | undefined;
  /** `x-inboxed-reason`. */
  reason: string | undefined;
  /** `x-inboxed-error-code`. */
  errorCode: string | undefined;
  /** The original body, as published. */
  body: string;
}

/** Broker-specific settings a test may ask of the consumer it creates. */
export interface ConsumerSettings {
  stopTimeoutMs?: number;
}

/**
 * What the conformance suite and the soak need from a broker, implemented once per adapter in
 * `packages/<broker>/test/harness.ts` (`createHarness()` and `createWorkerConsumer()`). Everything
 * runs against the real broker; one harness serves one test (its own queue/topic names).
 */
export interface BrokerHarness {
  readonly broker: 'amqp' | 'kafka' | 'sqs';
  /** Creates this test's destination: the queue/topic, and its retry and dead-letter targets. */
  setup(): Promise<void>;
  /** Deletes what `setup()` created and closes the harness's own connections. */
  teardown(): Promise<void>;
  /** Publishes, in order. */
  publish(messages: PublishedMessage[]): Promise<void>;
  /**
   * An in-process consumer of the destination, with settings that keep tests fast (retry delays of
   * about a second or less, short polls); not started.
   */
  createConsumer(handler: AnyInboxProcessor, settings?: ConsumerSettings): InboxConsumer;
  /** Deliveries not yet settled (ready, in flight, waiting to be retried); 0 once all are consumed. */
  pending(): Promise<number>;
  /** Everything in the dead-letter target so far (reads do not consume it). */
  deadLetters(): Promise<DeadLetter[]>;
  /** Environment for the shared worker process (`test/conformance/worker.ts`) to consume the destination. */
  workerEnv(): Record<string, string>;
}

/** What each adapter's `packages/<broker>/test/harness.ts` exports. */
export interface HarnessModule {
  createHarness(): BrokerHarness;
  /**
   * The consumer the shared worker process runs, built from the environment `workerEnv()` gave
   * (plus the worker's own: DATABASE_URL, SCHEMA, ...). `beforeSettle` is the adapter's test hook
   * between commit and settle.
   */
  createWorkerConsumer(env: NodeJS.ProcessEnv, handler: AnyInboxProcessor, beforeSettle: (outcome: InboxOutcome) => void | Promise<void>): InboxConsumer;
}
