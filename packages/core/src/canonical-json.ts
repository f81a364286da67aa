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
  return write(value, { ancestors: [], keys: [] });
}

/**
 * Where the writer is: the objects it is inside (for cycles; a short array beats a Set at the
 * depths payloads have) and the key or index taken into each. The path of an error is built from
 * `keys` only when a value is refused, so a payload that is fine costs no path strings.
 */
interface Position {
  ancestors: object[];
  keys: (string | number)[];
}

function refuse(at: Position, what: string): never {
  const path = at.keys.map((key) => (typeof key === 'number' ? `[${key}]` : `.${key}`)).join('');
  throw new TypeError(`$${path}: ${what} has no JSON form; convert it first, or pass a fingerprint function`);
}

/** A short name of what an object is, for error messages. */
function kindOf(value: object): string {
  const name = (value as { constructor?: { name?: unknown } }).constructor?.name;
  return typeof name === 'string' && name !== '' ? `a ${name}` : 'an object with a custom prototype';
}

function write(value: unknown, at: Position): string {
  switch (typeof value) {
    case 'string':
      if (!isWellFormed(value)) refuse(at, 'a string with a lone surrogate');
      return JSON.stringify(value);
    case 'number':
      if (!Number.isFinite(value)) refuse(at, String(value));
      return JSON.stringify(value);
    case 'boolean':
      return value ? 'true' : 'false';
    case 'object':
      return value === null ? 'null' : writeObject(value, at);
    default:
      return refuse(at, typeof value === 'undefined' ? 'undefined' : `a ${typeof value}`);
  }
}

/** `write` of a member or item, with its key on the path while it is written. */
function writeAt(value: unknown, key: string | number, at: Position): string {
  at.keys.push(key);
  const text = write(value, at);
  at.keys.pop();
  return text;
}

function writeObject(value: object, at: Position): string {
  if (at.ancestors.includes(value)) refuse(at, 'a circular reference');
  at.ancestors.push(value);
  const toJSON = (value as { toJSON?: unknown }).toJSON;
  let text: string;
  if (typeof toJSON === 'function') {
    text = write(toJSON.call(value), at);
  } else if (Array.isArray(value)) {
    let items = '';
    for (let index = 0; index < value.length; index++) {
      if (!(index in value)) {
        at.keys.push(index);
        refuse(at, 'a hole in an array');
      }
      const item: unknown = value[index];
      items += `${index === 0 ? '' : ','}${item === undefined ? 'null' : writeAt(item, index, at)}`;
    }
    text = `[${items}]`;
  } else {
    const prototype: unknown = Object.getPrototypeOf(value);
    if (prototype !== Object.prototype && prototype !== null) refuse(at, kindOf(value));
    let members = '';
    for (const key of Object.keys(value).sort()) {
      const member: unknown = (value as Record<string, unknown>)[key];
      if (member === undefined) continue;
      if (!isWellFormed(key)) refuse(at, `the key ${JSON.stringify(key)} with a lone surrogate`);
      members += `${members === '' ? '' : ','}${JSON.stringify(key)}:${writeAt(member, key, at)}`;
    }
    text = `{${members}}`;
  }
  // Not in a finally: a refusal abandons the whole Position, which nothing reuses.
  at.ancestors.pop();
  return text;
}
