import { describe, expect, it } from 'vitest';
import { classifyDatabaseError, isInFailedTransaction, isTransactionTimeout } from './database-errors.js';

const withCode = (code: string) => Object.assign(new Error('x'), { code });

describe('classifyDatabaseError', () => {
  it.each([
    ['40001', 'transient-conflict'],
    ['40P01', 'transient-conflict'],
    ['55P03', 'lock-timeout'],
    ['08006', 'unavailable'],
    ['57P01', 'unavailable'],
    ['53300', 'unavailable'],
    ['57014', 'unavailable'],
    ['ECONNREFUSED', 'unavailable'],
    ['CONNECTION_CLOSED', 'unavailable'],
    ['QUEUE_TIMEOUT', 'unavailable'],
  ])('code %s is %s', (code, kind) => {
    expect(classifyDatabaseError(withCode(code))).toBe(kind);
  });

  it('looks through Drizzle-style cause chains and AggregateErrors', () => {
    const wrapped = new Error('Failed query: insert ...', { cause: withCode('40P01') });
    expect(classifyDatabaseError(wrapped)).toBe('transient-conflict');
    expect(classifyDatabaseError(new AggregateError([withCode('ECONNREFUSED')]))).toBe('unavailable');
    expect(classifyDatabaseError(new Error('Connection terminated unexpectedly'))).toBe('unavailable');
  });

  it('a standby refusing READ WRITE is unavailable; other unsupported features are not', () => {
    const standby = Object.assign(new Error('cannot set transaction read-write mode during recovery'), { code: '0A000' });
    expect(classifyDatabaseError(standby)).toBe('unavailable');
    expect(classifyDatabaseError(withCode('0A000'))).toBeUndefined();
  });

  it('leaves handler and constraint errors alone', () => {
    expect(classifyDatabaseError(withCode('23505'))).toBeUndefined();
    expect(classifyDatabaseError(new TypeError('x is undefined'))).toBeUndefined();
    expect(classifyDatabaseError('a string')).toBeUndefined();
  });

  it('an aborted transaction is 25P02, or postgres-js 4 saying COMMIT was answered with ROLLBACK', () => {
    expect(isInFailedTransaction(withCode('25P02'))).toBe(true);
    expect(isInFailedTransaction(new Error('Failed query: commit', { cause: withCode('TRANSACTION_ROLLED_BACK') }))).toBe(true);
    expect(isInFailedTransaction(withCode('23505'))).toBe(false);
  });

  it("the session ended for the handler's transaction time is 25P03 or 25P04, nothing else", () => {
    expect(isTransactionTimeout(withCode('25P03'))).toBe(true);
    expect(isTransactionTimeout(new Error('Failed query', { cause: withCode('25P04') }))).toBe(true);
    expect(isTransactionTimeout(withCode('57P01'))).toBe(false);
  });
});
