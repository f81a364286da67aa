import { isWellFormed } from './unicode.js';

/**
 * RFC 8785 (JSON Canonicalization Scheme) text of a value, byte for byte what the `canonicalize`
 * package (v4, used by inboxed 0.1) produces for every value JSON can express, so fingerprints stored
 * by earlier releases still match. Unlike it, this refuses every value that has no JSON form of its
 * own instead of letting it collapse into the same text as a different value:
 *
 * - `Map`, `Set`, `WeakMap`, `RegExp`, `Error`, typed arrays, `ArrayBuffer`, `DataView`, boxed
 *   primitives and class instances without `toJSON` (all of them would become `{}` or an object of
 *   indices);
 * - `NaN`, `Infinity`, `BigInt`, lone surrogates in strings or keys;
 * - functions and symbols as values, and holes in arrays;
 * - cycles.
 *
 * JSON's own rules still apply: `toJSON()` is honoured (`Date` becomes its ISO string, `Buffer` its
 * `{ type, data }`), a property whose value is `undefined` is absent, and `undefined` in an array is
 * `null`. Keys are sorted by UTF-16 code units; numbers use ECMAScript's shortest round-trip form.
 *
 * @throws TypeError naming the path of the first value that has no JSON form.
 */
export function canonicalJson(value: unknown): string {
  return write(value, '$', new Set());
}

function refuse(path: string, what: string): never {
  throw new TypeError(`${path}: ${what} has no JSON form; convert it first, or pass a fingerprint function`);
}

/** A short name of what an object is, for error messages. */
function kindOf(value: object): string {
  const name = (value as { constructor?: { name?: unknown } }).constructor?.name;
  return typeof name === 'string' && name !== '' ? `a ${name}` : 'an object with a custom prototype';
}

function write(value: unknown, path: string, seen: Set<object>): string {
  switch (typeof value) {
    case 'string':
      if (!isWellFormed(value)) refuse(path, 'a string with a lone surrogate');
      return JSON.stringify(value);
    case 'number':
      if (!Number.isFinite(value)) refuse(path, String(value));
      return JSON.stringify(value);
    case 'boolean':
      return value ? 'true' : 'false';
    case 'object':
      return value === null ? 'null' : writeObject(value, path, seen);
    default:
      return refuse(path, typeof value === 'undefined' ? 'undefined' : `a ${typeof value}`);
  }
}

function writeObject(value: object, path: string, seen: Set<object>): string {
  if (seen.has(value)) refuse(path, 'a circular reference');
  seen.add(value);
  try {
    const toJSON = (value as { toJSON?: unknown }).toJSON;
    if (typeof toJSON === 'function') return write(toJSON.call(value), path, seen);
    if (Array.isArray(value)) {
      const items: string[] = [];
      for (let index = 0; index < value.length; index++) {
        if (!(index in value)) refuse(`${path}[${index}]`, 'a hole in an array');
        const item: unknown = value[index];
        items.push(item === undefined ? 'null' : write(item, `${path}[${index}]`, seen));
      }
      return `[${items.join(',')}]`;
    }
    const prototype: unknown = Object.getPrototypeOf(value);
    if (prototype !== Object.prototype && prototype !== null) refuse(path, kindOf(value));
    const members: string[] = [];
    for (const key of Object.keys(value).sort()) {
      const member: unknown = (value as Record<string, unknown>)[key];
      if (member === undefined) continue;
      if (!isWellFormed(key)) refuse(path, `the key ${JSON.stringify(key)} with a lone surrogate`);
      members.push(`${JSON.stringify(key)}:${write(member, `${path}.${key}`, seen)}`);
    }
    return `{${members.join(',')}}`;
  } finally {
    seen.delete(value);
  }
}
