import { describe, expect, it } from 'vitest';
import { fingerprintMessage, fingerprintValue } from './fingerprint.js';

const fp = (payload: unknown) => fingerprintValue(payload, 'auto');

describe('fingerprint', () => {
  it('ignores key order and insignificant whitespace (RFC 8785)', () => {
    expect(fp({ b: 1, a: { d: [1, 2], c: 'x' } })).toBe(fp(JSON.parse('{ "a" : {"c":"x","d":[1,2]}, "b":1 }')));
  });

  it('gives one spelling per number', () => {
    expect(fp({ n: 1.0 })).toBe(fp({ n: 1 }));
    expect(fp(JSON.parse('{"n":1e3}'))).toBe(fp({ n: 1000 }));
    expect(fp({ n: 0.1 + 0.2 })).not.toBe(fp({ n: 0.3 }));
  });

  it('treats undefined as absent, but null as a value', () => {
    expect(fp({ a: 1, b: undefined })).toBe(fp({ a: 1 }));
    expect(fp({ a: 1, b: null })).not.toBe(fp({ a: 1 }));
  });

  it('keeps array order and does not normalise Unicode', () => {
    expect(fp([1, 2])).not.toBe(fp([2, 1]));
    expect(fp({ name: 'caf\u00e9' })).not.toBe(fp({ name: 'cafe\u0301' }));
    expect(fp({ name: 'caf\u00e9' })).toBe(fp({ name: 'café' }));
  });

  it('hashes raw bytes for binary payloads', () => {
    expect(fp(Buffer.from('hello'))).toBe(fp(new Uint8Array(Buffer.from('hello'))));
    expect(fp(Buffer.from('hello'))).toBe('2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824');
    expect(fingerprintValue('hello', 'bytes')).toBe(fp(Buffer.from('hello')));
  });

  it('rejects values JSON cannot express', () => {
    expect(() => fp({ n: 1n })).toThrow();
    expect(() => fp({ n: Number.NaN })).toThrow();
    expect(() => fp(undefined)).toThrow();
    expect(() => fingerprintValue({}, 'bytes')).toThrow();
  });

  it('can be turned off or narrowed with a function', () => {
    expect(fingerprintMessage({ id: 'a', payload: { x: 1 } }, false)).toBeNull();
    const onlyAmount = (m: { payload: unknown }) => (m.payload as { amount: number }).amount;
    expect(fingerprintMessage({ id: 'a', payload: { amount: 5, trace: 'a' } }, onlyAmount)).toBe(fingerprintMessage({ id: 'a', payload: { amount: 5, trace: 'b' } }, onlyAmount));
  });
});
