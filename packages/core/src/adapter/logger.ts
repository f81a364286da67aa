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
    const error = fields.err instanceof Error ? `${fields.err.name}: ${fields.err.message}` : '';
    process.stderr.write(`[inboxed] ${message ?? 'error'}${error === '' ? '' : ` ${error}`}\n`);
  },
};
