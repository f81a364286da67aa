import { isInboxError } from '@inboxed/core';
import { describe, expect, it } from 'vitest';
import { redactUrl, resolveDatabaseUrl } from './connect.js';

const resolve = (text: string) => resolveDatabaseUrl(text, {});

function codeOf(text: string): string | undefined {
  try {
    resolve(text);
    return undefined;
  } catch (error) {
    return isInboxError(error) ? error.code : 'not an InboxError';
  }
}

describe('resolveDatabaseUrl', () => {
  it('hands node-postgres the URL as given, and prints it with every password masked', () => {
    expect(resolve('postgres://app:s3cret@db.internal:5432/orders?sslmode=require')).toEqual({
      connectionString: 'postgres://app:s3cret@db.internal:5432/orders?sslmode=require',
      redacted: 'postgres://app:***@db.internal:5432/orders?sslmode=require',
    });
    // node-postgres also reads the password from the query string.
    expect(resolve('postgres://app@db:5432/orders?password=s3cret').redacted).toBe('postgres://app@db:5432/orders?password=***');
    expect(resolve('postgresql://app:one@db/orders?application_name=x&PassWord=two&sslpassword=three').redacted).toBe(
      'postgresql://app:***@db/orders?application_name=x&PassWord=***&sslpassword=***',
    );
    expect(resolve('postgres://app@db/orders?pass%77ord=s3cret').redacted).toBe('postgres://app@db/orders?pass%77ord=***');
  });

  it('accepts libpq URLs WHATWG URLs refuse: user info before an empty host, the host (a socket directory) as a query parameter', () => {
    const socket = 'postgres://postgres@/test?host=/var/run/postgresql';
    expect(resolve(socket)).toEqual({ connectionString: socket, redacted: socket });
    expect(resolve('postgres://app:s3cret@/test?host=/tmp&password=again').redacted).toBe('postgres://app:***@/test?host=/tmp&password=***');
    for (const accepted of [
      'postgres:///test?host=/var/run/postgresql&user=postgres',
      'postgres://%2Fvar%2Frun%2Fpostgresql/test',
      'postgres://postgres@/test?host=127.0.0.1&port=5432',
      'postgresql://u@[::1]:5432/db',
    ]) {
      expect(resolve(accepted).connectionString, accepted).toBe(accepted);
    }
  });

  it('refuses what is not a postgres:// URL, without printing it', () => {
    expect(codeOf('not a url')).toBe('DATABASE_URL_INVALID');
    expect(codeOf('mysql://x@y/z')).toBe('DATABASE_URL_INVALID');
    expect(codeOf('mysql://x@/z')).toBe('DATABASE_URL_INVALID');
    expect(codeOf('')).toBe('DATABASE_URL_MISSING');
    expect(() => resolve('http://u:s3cret@/x')).toThrow(/must start with postgres:\/\/ or postgresql:\/\/, not http:/);
    expect(() => resolve('s3cret')).toThrow(expect.objectContaining({ message: expect.not.stringContaining('s3cret') }));
  });
});

describe('redactUrl', () => {
  it('leaves a URL without passwords as it is', () => {
    expect(redactUrl(new URL('postgres://app@db:5432/orders?sslmode=require&host=/tmp'))).toBe('postgres://app@db:5432/orders?sslmode=require&host=/tmp');
  });
});
