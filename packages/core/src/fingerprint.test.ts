import canonicalize from 'canonicalize';
import { describe, expect, it } from 'vitest';
import { canonicalJson } from './canonical-json.js';
import { fingerprintMessage, fingerprintValue } from './fingerprint.js';

/** A deterministic pseudo-random JSON value: nested objects and arrays, awkward strings and numbers. */
function randomJson(seed: number) {
  let state = seed;
  const next = () => {
    state = (state * 1103515245 + 12345) % 2147483648;
    return state / 2147483648;
  };
  const pick = <T>(items: readonly T[]): T => items[Math.floor(next() * items.length)]!;
  const strings = [
    '',
    'a',
    'é',
    'e\u0301',
    '\u{1F600}',
    '"quoted"',
    'back\\slash',
    'line\nbreak',
    '\u0000nul',
    '\u007f',
    '\u2028',
    '10',
    '1',
    'a-b',
    'B',
    'b',
    '\uFFFF',
  ];
  const numbers = [0, -0, 1, -1, 0.1, 1e21, 1e-7, 123456789012345680000, 5e-324, Number.MAX_SAFE_INTEGER, 2 ** 53 + 2, 1 / 3, -1.5e300];
  const value = (depth: number): unknown => {
    const roll = next();
    if (depth > 3 || roll < 0.45) {
      return pick<() => unknown>([() => pick(numbers), () => pick(strings), () => next() < 0.5, () => null, () => Math.floor(next() * 1e6) / 100])();
    }
    if (roll < 0.7) return Array.from({ length: Math.floor(next() * 4) }, () => value(depth + 1));
    const object: Record<string, unknown> = {};
    for (let i = Math.floor(next() * 5); i > 0; i--) object[pick(strings) + pick(['', 'x', '2'])] = value(depth + 1);
    return object;
  };
  return value(0);
}

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

  it('is byte-identical to canonicalize 4 (what 0.1 stored) on every value JSON can express', () => {
    for (let seed = 1; seed <= 3000; seed++) {
      const value = randomJson(seed);
      expect(canonicalJson(value)).toBe(canonicalize(value));
    }
    const stored = {
      order: { id: 'o-1', amountCents: 1299, items: [{ sku: 'a', qty: 2 }], note: 'café ☕ \u{1F600}' },
      when: new Date('2026-01-01T00:00:00.000Z'),
      n: [1e21, 1e-7, -0, 0.1],
      gone: undefined,
    };
    // Computed with inboxed 0.1 (canonicalize 4): a changed fingerprint would turn every stored row into a conflict.
    expect(fp(stored)).toBe('6f2180b0d37ca2ff3a778b961116d887c97522b1d81c6041276825563b710f42');
  });

  it.each([
    ['a Map', { items: new Map([['a', 1]]) }],
    ['a Set', { tags: new Set(['a']) }],
    [
      'a class instance without toJSON',
      {
        order: new (class Order {
          constructor(readonly id = 1) {}
        })(),
      },
    ],
    ['a nested ArrayBuffer', { file: new ArrayBuffer(4) }],
    ['a nested typed array', { file: new Uint8Array([1, 2]) }],
    ['a RegExp', { pattern: /a/ }],
    ['an Error', { error: new Error('x') }],
    ['a boxed string', { name: new String('x') }],
    ['Infinity', { n: Number.POSITIVE_INFINITY }],
    ['a function value', { f: () => 1 }],
    ['a symbol value', { s: Symbol('x') }],
    // biome-ignore lint/suspicious/noSparseArray: the hole is the point of the case.
    ['a hole in an array', { list: [1, , 3] }],
    ['a function in an array', { list: [() => 1] }],
    ['a lone surrogate in a key', { '\uD800': 1 }],
    [
      'a cycle',
      (() => {
        const a: Record<string, unknown> = {};
        a.self = a;
        return a;
      })(),
    ],
  ])('refuses %s instead of letting it collapse into another payload', (_label, payload) => {
    expect(() => fp(payload)).toThrow(/no JSON form/);
  });

  it('names the path of the refused value, and forgets the path of members that were fine', () => {
    expect(() => fp({ a: { ok: [1, 2] }, order: { items: [{ sku: 'x' }, { tags: new Set() }] } })).toThrow(
      /^\$\.order\.items\[1\]\.tags: a Set has no JSON form/,
    );
    // biome-ignore lint/suspicious/noSparseArray: the hole is the point of the case.
    expect(() => fp({ list: [[1], [1, , 3]] })).toThrow(/^\$\.list\[1\]\[1\]: a hole in an array/);
    const shared = { x: 1 };
    expect(canonicalJson({ a: shared, b: [shared, shared] })).toBe('{"a":{"x":1},"b":[{"x":1},{"x":1}]}');
  });

  it('gives binary payloads of every kind their bytes, and keeps different bytes apart', () => {
    const hello = Buffer.from('hello');
    expect(fp(new Uint8Array(hello).buffer)).toBe(fp(hello));
    expect(fp(new DataView(new Uint8Array(hello).buffer))).toBe(fp(hello));
    expect(fp(new Int16Array([1, 2]))).not.toBe(fp(new Int16Array([1, 3])));
    expect(fp(new ArrayBuffer(2))).not.toBe(fp(new ArrayBuffer(3)));
    // A Buffer inside JSON has its own JSON form ({ type, data }); other binary inside JSON has none.
    expect(fp({ file: Buffer.from('a') })).not.toBe(fp({ file: Buffer.from('b') }));
    expect(() => fingerprintValue(new Uint8Array([1]), 'json')).toThrow(/no JSON form/);
  });

  it('can be turned off or narrowed with a function', () => {
    expect(fingerprintMessage({ id: 'a', payload: { x: 1 } }, false)).toBeNull();
    const onlyAmount = (m: { payload: unknown }) => (m.payload as { amount: number }).amount;
    expect(fingerprintMessage({ id: 'a', payload: { amount: 5, trace: 'a' } }, onlyAmount)).toBe(
      fingerprintMessage({ id: 'a', payload: { amount: 5, trace: 'b' } }, onlyAmount),
    );
  });
});
