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

describe('transactionEndingStatement, read the way the server reads', () => {
  it.each([
    ['-- a comment\rcommit', 'COMMIT'],
    ['select 1 -- x\r; commit', 'COMMIT'],
    // With standard_conforming_strings off, the backslash escapes the quote: the string ends later.
    ["select '\\''; commit; --'", 'COMMIT'],
    // With it on, the backslash is a character and the string ends at the second quote.
    ["select 'a\\'; commit; --'", 'COMMIT'],
    ['create function f() returns int language sql begin atomic select 1; end; end', 'END'],
    ['create function f() returns int language sql begin atomic select 1 as case; end; end', 'END'],
    ['select begin atomic from t; end', 'END'],
    ['create function f() returns table (begin atomic) language sql return 1; end', 'END'],
    ['create function begin() returns int language sql return 1; commit', 'COMMIT'],
  ])('%j ends the transaction (%s)', (text, statement) => {
    expect(transactionEndingStatement(text)).toBe(statement);
  });

  it.each([
    'create function f() returns int language sql begin atomic select 1; end',
    'CREATE OR REPLACE PROCEDURE p() LANGUAGE sql BEGIN ATOMIC insert into t values (1); insert into t values (2); END',
    'create function f() returns int language sql begin atomic select case when true then 1 end; end',
    'create function f() returns int language sql begin atomic select 1; end; create function g() returns int language sql begin atomic select 2; end',
  ])('%j does not', (text) => {
    expect(transactionEndingStatement(text)).toBeUndefined();
  });

  it('reads a megabyte of literals and comments (one pass per reading; a quadratic one would time the test out)', () => {
    const text = `select ${"'x', -- end\r\n/* commit */ ".repeat(40_000)}1`;
    expect(transactionEndingStatement(text)).toBeUndefined();
    expect(transactionEndingStatement(`${text}; commit`)).toBe('COMMIT');
  });
});
