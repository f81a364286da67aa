import { randomBytes } from 'node:crypto';

/** A short, collision-free, identifier-safe name so parallel tests never share schemas, queues or topics. */
export function uniqueName(prefix: string): string {
  const clean = prefix
    .toLowerCase()
    .replace(/[^a-z0-9_]+/g, '_')
    .slice(0, 30);
  return `${clean}_${Date.now().toString(36)}_${randomBytes(3).toString('hex')}`;
}
