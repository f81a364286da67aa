import { databaseUrl } from '@inboxed/test-support';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { quoteLiteral } from './node-postgres.js';

// The node-postgres path inlines ids and sources as literals. Whatever the text, the server must
// read back exactly that text, with standard_conforming_strings on (the default) and off.
const hostile = ['plain-id', "o'brien", "''", 'back\\slash', "\\'; drop table x; --", "E'x'", 'ünïcödé ✓ 𝄞', '$$dollar$$', '"double"', 'tab\tnew\nline', ''];

describe.each(['on', 'off'])('quoteLiteral with standard_conforming_strings %s', (setting) => {
  let client: pg.Client;
  beforeAll(async () => {
    client = new pg.Client({ connectionString: databaseUrl() });
    await client.connect();
    await client.query(`set standard_conforming_strings = ${setting}`);
    await client.query('set escape_string_warning = off');
  });
  afterAll(() => client.end());

  it.each(hostile)('reads back %j exactly', async (text) => {
    const { rows } = await client.query(`select ${quoteLiteral(client, text)}::text as value`);
    expect(rows[0].value).toBe(text);
  });

  it('takes the short way only for text without a quote or backslash', () => {
    expect(quoteLiteral(client, 'm-1')).toBe("'m-1'");
    expect(quoteLiteral(client, "o'brien")).toBe(client.escapeLiteral("o'brien"));
    expect(quoteLiteral(client, 'a\\b')).toBe(client.escapeLiteral('a\\b'));
  });
});
