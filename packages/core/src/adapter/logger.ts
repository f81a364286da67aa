/**
 * The logger consumers write to: pino's call shape (`logger.warn({ queue }, 'reconnecting')`), so a
 * pino (or pino-compatible: bunyan, a child logger) instance works as is.
 */
export interface InboxLogger {
  debug(fields: Record<string, unknown>, message?: string): void;
  info(fields: Record<string, unknown>, message?: string): void;
  warn(fields: Record<string, unknown>, message?: string): void;
  error(fields: Record<string, unknown>, message?: string): void;
}

const silent = () => {};

/**
 * The default: silent, except `error`, which is used only for an `error` event nobody listens to
 * (errors are never swallowed) and writes one line to stderr.
 */
export const defaultLogger: InboxLogger = {
  debug: silent,
  info: silent,
  warn: silent,
  error(fields, message) {
    let error = '';
    try {
      if (fields.err instanceof Error) error = `${fields.err.name}: ${fields.err.message}`;
    } catch {
      error = '(an error whose text cannot be read)';
    }
    process.stderr.write(`[inboxed] ${message ?? 'error'}${error === '' ? '' : ` ${error}`}\n`);
  },
};

const LEVELS = ['debug', 'info', 'warn', 'error'] as const;

/**
 * @internal `logger` made unable to throw: a call that throws, or returns a promise that rejects,
 * is dropped, except that an `error` line then goes to the default logger's stderr line instead
 * (errors are never lost); the first failure of each logger is reported there once. A logger is a
 * bystander: a broken one must not reject `start()`, kill a poll loop or fail a settled delivery.
 * The default logger is returned as it is.
 */
export function safeLogger(logger: InboxLogger): InboxLogger {
  if (logger === defaultLogger) return logger;
  let reported = false;
  const failed = (level: (typeof LEVELS)[number], error: unknown, fields: Record<string, unknown>, message: string | undefined) => {
    if (!reported) {
      reported = true;
      defaultLogger.error(
        { err: error instanceof Error ? error : undefined },
        `the logger's ${level}() threw; its lines that fail are dropped (error lines come here)`,
      );
    }
    if (level === 'error') defaultLogger.error(fields, message);
  };
  const safe = {} as InboxLogger;
  for (const level of LEVELS) {
    safe[level] = (fields, message) => {
      try {
        const returned: unknown = (logger[level] as (...args: unknown[]) => unknown).call(logger, fields, message);
        if (typeof (returned as PromiseLike<unknown> | null)?.then === 'function') {
          (returned as PromiseLike<unknown>).then(undefined, (error: unknown) => failed(level, error, fields, message));
        }
      } catch (error) {
        failed(level, error, fields, message);
      }
    };
  }
  return safe;
}
