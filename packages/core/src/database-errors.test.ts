import { describe, expect, it } from 'vitest';
import { classifyDatabaseError } from './database-errors.js';

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
});
