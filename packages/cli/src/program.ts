import { readFileSync } from 'node:fs';
import { describeError, isInboxError } from '@inboxed/core';
import { Command, CommanderError, Option } from 'commander';
import { CliErrorCodes } from './cli-errors.js';
import { redactSecrets } from './connect.js';
import { deadLettersCommand } from './commands/dead-letters.js';
import { inspectCommand } from './commands/inspect.js';
import { migrateCommand } from './commands/migrate.js';
import { purgeCommand } from './commands/purge.js';
import { releaseCommand, requeueCommand } from './commands/repair.js';
import { statusCommand } from './commands/status.js';
import { type CommandContext, type GlobalOptions, withContext } from './context.js';
import { parseDuration, parsePositiveInteger, parseSince } from './duration.js';
import { ExitCodes, exitCodeFor } from './exit-codes.js';
import { type CommandOutput, escapeLines, type Io, processIo, toJson } from './output.js';

/** What {@link run} needs from its surroundings; the defaults are the real process's. */
export interface RunOptions {
  io?: Io;
  env?: NodeJS.ProcessEnv;
}

// package.json sits one level up from both src/ and dist/.
const VERSION = (JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }).version;

/**
 * Runs the `inboxed` command line on `argv` (without `node` and the script) and resolves to its exit
 * code; never throws and never calls `process.exit`, so it can run in-process (tests, other tools).
 */
export async function run(argv: readonly string[], options: RunOptions = {}): Promise<number> {
  const io = options.io ?? processIo;
  const env = options.env ?? process.env;
  let json = argv.includes('--json');
  let exitCode: number = ExitCodes.OK;

  const fail = (code: string, text: string): number => {
    const exit = exitCodeFor(code);
    // Usage errors quote the arguments as typed: a mistyped `--database_url=postgres://u:secret@h/db` must not print its password.
    const message = redactSecrets(text, argv);
    io.stderr(`inboxed: ${escapeLines(message)} [${code}]\n`);
    if (json) io.stdout(toJson({ error: { code, message, exitCode: exit } }));
    return exit;
  };

  const program = new Command('inboxed')
    .description('Inspect and repair an inboxed transactional inbox on PostgreSQL. Every repair is audited.')
    .version(VERSION)
    .exitOverride()
    .configureOutput({
      writeOut: (text) => io.stdout(text),
      // Usage errors are reported once, below, with their code.
      writeErr: (text) => io.stderr(text),
      outputError: () => {},
    })
    .showSuggestionAfterError(true)
    .addOption(new Option('--database-url <url>', 'PostgreSQL URL (default: $DATABASE_URL)'))
    .addOption(new Option('--schema <name>', "the inbox's schema (default: the connection's, usually public)"))
    .addOption(new Option('--table <name>', 'the inbox table name').default(undefined, 'inbox'))
    .addOption(new Option('--actor <name>', 'who is acting, written to the audit table (default: the OS user)'))
    .addOption(new Option('--json', 'print one JSON document on stdout instead of tables'));

  /** Wires a command's action: connect, run, print, remember the exit code. */
  const action =
    <A extends unknown[]>(body: (context: CommandContext, ...args: A) => Promise<CommandOutput>) =>
    async (...args: unknown[]) => {
      const command = args[args.length - 1] as Command;
      const globals = command.optsWithGlobals<GlobalOptions>();
      json = globals.json === true;
      const output = await withContext(globals, env, (context) => body(context, ...(args.slice(0, -1) as A)));
      // Human text is escaped once more as a whole (the commands escape stored text where they print it): no raw control reaches the terminal.
      io.stdout(json ? toJson(output.json) : `${escapeLines(output.text)}\n`);
      exitCode = output.exitCode;
    };

  program
    .command('migrate')
    .description('create or upgrade the inbox tables')
    .option('--check', 'apply nothing: list pending migrations and exit 1 when there are any')
    .action(action((context, options: { check?: boolean }) => migrateCommand(context, options)));

  program
    .command('status')
    .description('per consumer: rows by status, oldest open claim, failing messages, dead-letters, oldest completed row')
    .option('--consumer <name>', 'only this consumer')
    .action(action((context, options: { consumer?: string }) => statusCommand(context, options)));

  program
    .command('inspect')
    .description('everything recorded about one message: inbox row, attempts, dead-letters, repairs')
    .argument('<consumer>')
    .argument('<message-id>')
    .action(action((context, consumer: string, messageId: string) => inspectCommand(context, consumer, messageId)));

  program
    .command('release')
    .description('free a stuck leased claim and/or clear the attempts record; never marks anything succeeded')
    .argument('<consumer>')
    .argument('<message-id>')
    .requiredOption('--reason <text>', 'why (written to the audit table)')
    .action(action((context, consumer: string, messageId: string, options: { reason: string }) => releaseCommand(context, consumer, messageId, options)));

  program
    .command('dead-letters')
    .description('recorded dead-letters, newest first')
    .option('--consumer <name>', 'only this consumer')
    .option('--since <when>', 'only since a duration ago (2h, 7d) or an ISO date', (text) => parseSince(text))
    .option('--limit <n>', 'at most n (default 100)', (text) => parsePositiveInteger(text, '--limit'))
    .action(action((context, options: { consumer?: string; since?: Date; limit?: number }) => deadLettersCommand(context, options)));

  program
    .command('requeue')
    .description('give a message a fresh retry budget (replay it with the broker tools)')
    .argument('<consumer>')
    .argument('<message-id>')
    .requiredOption('--reason <text>', 'why (written to the audit table)')
    .action(action((context, consumer: string, messageId: string, options: { reason: string }) => requeueCommand(context, consumer, messageId, options)));

  program
    .command('purge')
    .description('delete completed rows older than a retention window, audited')
    .requiredOption('--older-than <duration>', 'retention window: 7d, 12h, 30m, 45s, 500ms', (text) => parseDuration(text, '--older-than'))
    .option('--consumer <name>', 'only this consumer')
    .option('--batch-size <n>', 'rows per delete statement (default 1000)', (text) => parsePositiveInteger(text, '--batch-size'))
    .option('--dry-run', 'count what would be deleted, delete nothing')
    .option('--reason <text>', 'why (written to the audit table)')
    .action(
      action((context, options: { olderThan: number; consumer?: string; batchSize?: number; dryRun?: boolean; reason?: string }) =>
        purgeCommand(context, { ...options, olderThanMs: options.olderThan }),
      ),
    );

  try {
    if (argv.length === 0) {
      io.stderr(program.helpInformation());
      return ExitCodes.USAGE;
    }
    await program.parseAsync([...argv], { from: 'user' });
    return exitCode;
  } catch (error) {
    if (error instanceof CommanderError) {
      if (error.code === 'commander.helpDisplayed' || error.code === 'commander.version' || error.code === 'commander.help') return ExitCodes.OK;
      return fail(CliErrorCodes.USAGE_ERROR, error.message.replace(/^error: /, ''));
    }
    if (isInboxError(error)) return fail(error.code, error.message);
    return fail('INTERNAL_ERROR', `unexpected failure: ${describeError(error)}`);
  }
}
