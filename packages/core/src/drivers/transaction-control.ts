import { InboxError, InboxErrorCodes } from '../errors.js';

/**
 * Words that can start a statement ending the transaction; most statements hold none of them. A
 * keyword starts a statement only after a character that cannot continue an identifier, which is
 * all a word boundary asks (`endpoint`, `pending` and `send` do not count).
 */
const MAY_END = /\b(?:commit|rollback|end|abort|prepare)\b/i;

/** A dollar quote's opening tag (`$$`, `$body$`); `$1` is a parameter. */
const DOLLAR_TAG = /\$(?:[a-z_\u0080-\uffff][\w\u0080-\uffff]*)?\$/iy;

/** A character that continues an identifier: a quote or `$` right after one is not a literal's start. */
const IDENTIFIER_PART = /[\w$\u0080-\uffff]/;

/** Words and single punctuation characters, once literals and comments are out of the way. */
const TOKEN = /[a-z_\u0080-\uffff][\w$\u0080-\uffff]*|\S/gi;

/** Either newline character: the server ends a `--` comment at both. */
const NEWLINE = /[\n\r]/g;

/**
 * @internal The statement in `text` that would end the transaction it runs in (`COMMIT`, `END`,
 * `ROLLBACK` but not `ROLLBACK TO` a savepoint, `ABORT`, `PREPARE TRANSACTION`), as its first words;
 * undefined when there is none. Each statement of a multi-statement text is read; string literals
 * (also `E''` and dollar-quoted ones), quoted identifiers and comments are skipped, so a word inside
 * them is never taken for a statement. A plain string's backslash means one thing with
 * `standard_conforming_strings` on and another with it off (which a handler can set): the text is
 * read both ways, and refused if either finds such a statement.
 */
export function transactionEndingStatement(text: string): string | undefined {
  if (!MAY_END.test(text)) return undefined;
  return endingStatementIn(withoutLiterals(text, false)) ?? (text.includes('\\') ? endingStatementIn(withoutLiterals(text, true)) : undefined);
}

/**
 * The first statement ending the transaction among those separated by `;`. The one `;` that does
 * not separate statements is inside the `BEGIN ATOMIC ... END` body of `CREATE [OR REPLACE]
 * FUNCTION | PROCEDURE`, whose `END` then stands alone after a `;`: a lone `END` is taken for a
 * body's end only as many times as such bodies were opened before it, and for a `COMMIT` otherwise.
 */
function endingStatementIn(skeleton: string): string | undefined {
  let openBodies = 0;
  for (const statement of skeleton.split(';')) {
    const tokens = (statement.match(TOKEN) ?? []).map((token) => token.toLowerCase());
    if (tokens.length === 1 && tokens[0] === 'end' && openBodies > 0) {
      openBodies--;
      continue;
    }
    if (startsRoutine(tokens)) openBodies += atomicBodies(tokens);
    const [first = '', second = '', third = ''] = tokens;
    if (endsTransaction(first, second, third)) return tokens.slice(0, 3).join(' ').toUpperCase();
  }
  return undefined;
}

function endsTransaction(first: string, second: string, third: string): boolean {
  switch (first) {
    case 'commit':
    case 'end':
    case 'abort':
      return true;
    case 'rollback': {
      // ROLLBACK [WORK | TRANSACTION] TO [SAVEPOINT] name only undoes to a savepoint.
      const next = second === 'work' || second === 'transaction' ? third : second;
      return next !== 'to';
    }
    case 'prepare':
      return second === 'transaction';
    default:
      return false;
  }
}

/** `CREATE [OR REPLACE] FUNCTION | PROCEDURE`, from the statement's first tokens. */
function startsRoutine(tokens: string[]): boolean {
  if (tokens[0] !== 'create') return false;
  const kind = tokens[1] === 'or' && tokens[2] === 'replace' ? tokens[3] : tokens[1];
  return kind === 'function' || kind === 'procedure';
}

/** How many `BEGIN ATOMIC` outside parentheses a routine's tokens hold (a body opens one at most). */
function atomicBodies(tokens: string[]): number {
  let depth = 0;
  let bodies = 0;
  for (const [index, token] of tokens.entries()) {
    if (token === '(') depth++;
    else if (token === ')') depth = Math.max(0, depth - 1);
    else if (depth === 0 && token === 'begin' && tokens[index + 1] === 'atomic') bodies++;
  }
  return bodies;
}

/**
 * `text` with every literal, quoted identifier and comment replaced by a space; `backslashEscapes`
 * reads every string as `standard_conforming_strings = off` does.
 */
function withoutLiterals(text: string, backslashEscapes: boolean): string {
  let out = '';
  let i = 0;
  while (i < text.length) {
    const char = text[i]!;
    const next = text[i + 1];
    const startsToken = i === 0 || !IDENTIFIER_PART.test(text[i - 1]!);
    let end = i + 1;
    if (char === '-' && next === '-') {
      NEWLINE.lastIndex = i;
      end = NEWLINE.exec(text)?.index ?? text.length;
    } else if (char === '/' && next === '*') {
      end = blockCommentEnd(text, i);
    } else if (char === "'") {
      // E'...' takes backslash escapes: the E is a token of its own right before the quote.
      const escapes = backslashEscapes || (i > 0 && (text[i - 1] === 'e' || text[i - 1] === 'E') && (i === 1 || !IDENTIFIER_PART.test(text[i - 2]!)));
      end = quotedEnd(text, i, "'", escapes);
    } else if (char === '"') {
      end = quotedEnd(text, i, '"', false);
    } else if (char === '$' && startsToken) {
      DOLLAR_TAG.lastIndex = i;
      const tag = DOLLAR_TAG.exec(text)?.[0];
      if (tag !== undefined) {
        const close = text.indexOf(tag, i + tag.length);
        end = close === -1 ? text.length : close + tag.length;
      }
    } else {
      out += char;
      i++;
      continue;
    }
    out += ' ';
    i = end;
  }
  return out;
}

/** The index after the quoted literal or identifier that starts at `start` (a doubled quote is one). */
function quotedEnd(text: string, start: number, quote: string, backslashEscapes: boolean): number {
  let i = start + 1;
  while (i < text.length) {
    const char = text[i];
    if (backslashEscapes && char === '\\') {
      i += 2;
    } else if (char === quote) {
      if (text[i + 1] !== quote) return i + 1;
      i += 2;
    } else {
      i++;
    }
  }
  return text.length;
}

/** The index after the block comment that starts at `start`; they nest. */
function blockCommentEnd(text: string, start: number): number {
  let depth = 0;
  let i = start;
  while (i < text.length) {
    if (text[i] === '/' && text[i + 1] === '*') {
      depth++;
      i += 2;
    } else if (text[i] === '*' && text[i + 1] === '/') {
      depth--;
      i += 2;
      if (depth === 0) return i;
    } else {
      i++;
    }
  }
  return text.length;
}

/**
 * @internal The refusal of a statement the handler sent to end its own transaction. On postgres-js
 * it would not only end it: once the server reports no transaction, postgres-js hands the connection
 * back to the pool, to the next delivery's `begin`, while inboxed's check and COMMIT are still to
 * come on it (they would run, or wait for ever, inside that other delivery's transaction). So it is
 * refused on every driver before it is sent, and the attempt fails even if the handler caught this.
 */
function endingRefused(statement: string): InboxError {
  return new InboxError(
    InboxErrorCodes.TRANSACTION_ENDED,
    `the handler sent ${statement} through its tx: refused. inboxed ends the transaction itself (throw to roll back, or use tx.transaction() for a savepoint)`,
    { details: { statement } },
  );
}

/**
 * @internal The refusal of a cursor or stream on the handler's `tx`: one the handler left open would
 * hold the connection, and inboxed's check and COMMIT would wait behind it for ever.
 */
export function streamRefused(what: string): InboxError {
  return new InboxError(
    InboxErrorCodes.UNSUPPORTED_QUERY,
    `the handler sent ${what} through its tx: refused, since one left open would hold the inbox transaction's connection. Read in pages (LIMIT, or keyset), or outside the inbox transaction`,
    { details: { query: what } },
  );
}

/**
 * @internal The refusal of a statement the handler sent through its `tx` after it returned (an
 * un-awaited query, a timer): its transaction is over, and the connection may already serve the next
 * delivery, whose transaction would take the statement in.
 */
export function lateStatementRefused(): InboxError {
  return new InboxError(
    InboxErrorCodes.TRANSACTION_ENDED,
    "a statement was sent through the handler's tx after the handler returned; its transaction is over (await every statement inside the handler)",
  );
}

/**
 * @internal What the handler's `tx` lets through, on every driver: nothing once it is closed, and
 * never a statement ending the transaction (see {@link endingRefused}), whose refusal is kept so
 * that it fails the attempt even if the handler caught it.
 */
export class StatementGate {
  closed = false;
  /** The first statement refused for ending the transaction. */
  refusal: InboxError | undefined;

  /** The refusal for `query` (a text, or a query object carrying one), or undefined to send it. */
  check(query: unknown): InboxError | undefined {
    if (this.closed) return lateStatementRefused();
    const text = typeof query === 'string' ? query : (query as { text?: unknown } | null)?.text;
    const ending = typeof text === 'string' ? transactionEndingStatement(text) : undefined;
    if (ending === undefined) return undefined;
    const refused = endingRefused(ending);
    this.refusal ??= refused;
    return refused;
  }
}
