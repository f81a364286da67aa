/**
 * `@inboxed/cli`: the `inboxed` command line. Run it with `npx inboxed --help`; this entry point
 * exposes the same program for tools and tests that want it in-process.
 *
 * @module
 */
export { CliErrorCodes } from './cli-errors.js';
export { parseDuration, parseSince } from './duration.js';
export { type ExitCode, ExitCodes, exitCodeFor } from './exit-codes.js';
export type { Io } from './output.js';
export { type RunOptions, run } from './program.js';
