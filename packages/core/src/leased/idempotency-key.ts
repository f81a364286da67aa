import { createHash } from 'node:crypto';

/**
 * The idempotency key of one consumer's handling of one message: a UUID (RFC 9562 version 8, the
 * version for name-based custom hashes) made from SHA-256 of the consumer and the message id. The
 * same on every attempt, takeover, process and restart, different for another consumer of the same
 * message, and in the shape every provider's `Idempotency-Key` header accepts (36 characters).
 */
export function idempotencyKeyFor(consumer: string, messageId: string): string {
  // NUL cannot occur in either (both are validated), so the pair is encoded unambiguously.
  const hash = createHash('sha256').update(`inboxed:idempotency-key:v1\u0000${consumer}\u0000${messageId}`).digest();
  hash[6] = (hash[6]! & 0x0f) | 0x80; // version 8
  hash[8] = (hash[8]! & 0x3f) | 0x80; // RFC 9562 variant
  const hex = hash.subarray(0, 16).toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20, 32)}`;
}
