import { describe, expect, it } from 'vitest';
import { escapeLines, escapeText, quote, renderFields, renderTable } from './output.js';

// What a terminal acts on: C0 controls, DEL, C1 controls, U+2028/2029, bidi embeddings, overrides and isolates.
// biome-ignore lint/suspicious/noControlCharactersInRegex: the characters the output must never hold.
const UNSAFE = /[\u0000-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]/;
const HOSTILE = '\u001b[2J\u001b]0;pwned\u0007\r';

describe('human output escapes what a terminal would interpret', () => {
  it('escapes every C0 and C1 control, DEL, the line separators and the bidi controls as visible text', () => {
    expect(escapeText(HOSTILE)).toBe('\\x1b[2J\\x1b]0;pwned\\x07\\r');
    expect(escapeText('a\nb\tc\u0000d\u007fe\u0085f\u009bg')).toBe('a\\nb\\tc\\x00d\\x7fe\\x85f\\x9bg');
    expect(escapeText('\u2028\u2029\u202a\u202e\u2066\u2069')).toBe('\\u2028\\u2029\\u202a\\u202e\\u2066\\u2069');
    for (let code = 0; code <= 0x2069; code++) expect(escapeText(String.fromCharCode(code)), code.toString(16)).not.toMatch(UNSAFE);
    // Everything else is printed as it is.
    expect(escapeText('order-42 é 注文 \u200b \u202f ~')).toBe('order-42 é 注文 \u200b \u202f ~');
  });

  it('renderTable and renderFields escape every cell and value, so rows stay rows and columns stay aligned', () => {
    const table = renderTable(
      ['MESSAGE', 'DESTINATION'],
      [
        [`order-1${HOSTILE}`, 'amqp:dlq\nFAKE ROW'],
        ['order-2', '\u202eqld:pqma'],
      ],
    );
    for (const line of table.split('\n')) expect(line).not.toMatch(UNSAFE);
    expect(table.split('\n')).toEqual([
      `${'MESSAGE'.padEnd(32)}  DESTINATION`,
      'order-1\\x1b[2J\\x1b]0;pwned\\x07\\r  amqp:dlq\\nFAKE ROW',
      `${'order-2'.padEnd(32)}  \\u202eqld:pqma`,
    ]);
    const fields = renderFields([
      ['last error', `boom${HOSTILE}\nline 2`],
      ['code', 'HANDLER_FAILED'],
    ]);
    expect(fields).toBe('last error: boom\\x1b[2J\\x1b]0;pwned\\x07\\r\\nline 2\ncode:       HANDLER_FAILED');
  });

  it('quote() and escapeLines() leave nothing raw either', () => {
    expect(quote(`a${HOSTILE}\u0085\u202e`)).toBe('"a\\u001b[2J\\u001b]0;pwned\\u0007\\r\\x85\\u202e"');
    expect(escapeLines(`line 1${HOSTILE}\nline 2\t.`)).toBe('line 1\\x1b[2J\\x1b]0;pwned\\x07\\r\nline 2\\t.');
  });
});
