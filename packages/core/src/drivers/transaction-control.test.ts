import { describe, expect, it } from 'vitest';
import { transactionEndingStatement } from './transaction-control.js';

describe('transactionEndingStatement', () => {
  it.each([
    ['commit', 'COMMIT'],
    ['  COMMIT;', 'COMMIT'],
    ['commit and chain', 'COMMIT AND CHAIN'],
    ['end', 'END'],
    ['END TRANSACTION', 'END TRANSACTION'],
    ['abort', 'ABORT'],
    ['rollback', 'ROLLBACK'],
    ['Rollback Work', 'ROLLBACK WORK'],
    ['rollback and chain', 'ROLLBACK AND CHAIN'],
    ["prepare transaction 'x'", 'PREPARE TRANSACTION'],
    ['select 1; commit', 'COMMIT'],
    ['/* first */ rollback', 'ROLLBACK'],
    ['-- a comment\nrollback', 'ROLLBACK'],
    ['/* nested /* comment */ still */ commit', 'COMMIT'],
    ["select 'a;b'; end", 'END'],
    ['insert into t values (1);\n\tCOMMIT; begin', 'COMMIT'],
  ])('%j ends the transaction (%s)', (text, statement) => {
    expect(transactionEndingStatement(text)).toBe(statement);
  });

  it.each([
    'select 1',
    'rollback to savepoint sp1',
    'rollback to sp1',
    'ROLLBACK TRANSACTION TO SAVEPOINT s0',
    'release savepoint sp1',
    'savepoint sp1',
    'prepare q as select 1',
    'begin',
    'insert into "weekend" ("endpoint", "pending") values ($1, $2)',
    "select 'x; commit'",
    "select E'it\\'s; rollback'",
    "select 'it''s; rollback'",
    'select "a;commit" from t',
    'select $$; commit$$',
    'select $body$ ; rollback ; $body$',
    'select 1 -- ; commit',
    'select 1 /* ; commit */',
    'select a$b from t; select $1::text',
    'do $$ begin perform 1; end $$',
    'update t set ended = true where id = $1',
  ])('%j does not', (text) => {
    expect(transactionEndingStatement(text)).toBeUndefined();
  });
});
