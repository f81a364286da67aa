/**
 * Integration-test plumbing shared by every package: real service endpoints, a fresh PostgreSQL
 * schema per test, a domain table to count effects in, a TCP proxy to cut connections, and a fake
 * payment provider (idempotency keys) for leased mode, and in-memory OpenTelemetry tracing.
 */
export { databaseUrl, requireService } from './services.js';
export { createTestDatabase, type TestDatabase, type Driver, DRIVERS, postgres, POSTGRES_JS_MAJOR } from './test-database.js';
export { startPostgresProxy, startTcpProxy, type TcpProxy } from './tcp-proxy.js';
export { uniqueName } from './unique-name.js';
export { waitFor } from './wait-for.js';
export { gate } from './gate.js';
export { breakNextRead } from './break-next-read.js';
export { useInMemoryTracing, type ConfigureTelemetry } from './in-memory-tracing.js';
export { quickStartOf, readmeSnippets, startQuickStart, withSearchPath, type ReadmeSnippet, type RunningQuickStart } from './readme.js';
export {
  createCharge,
  findCharge,
  ProviderError,
  startFakePaymentProvider,
  type Charge,
  type FakePaymentProvider,
  type FakePaymentProviderOptions,
  type ProviderRequest,
  type ProviderStats,
} from './fake-payment-provider.js';
